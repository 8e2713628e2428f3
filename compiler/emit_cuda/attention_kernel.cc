#include "compiler/emit_cuda/attention_kernel.h"

#include <algorithm>

#include "compiler/emit_cuda/attention_mma.h"
#include "compiler/emit_cuda/attention_pieces.h"
#include "compiler/emit_cuda/attention_simt.h"
#include "compiler/emit_cuda/attention_wgmma.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// Policy: keys are split over blocks when the blocks of a plan would not give every SM this many
// blocks (mma: 2 resident blocks of 4-8 warps; SIMT: 8 blocks of 4 warps), as long as each split
// keeps at least kMinKeyBlocksPerSplit key blocks (the partials' round trip through scratch and
// the combine launch are worth it only for long key ranges); at most kMaxKeySplits.
constexpr int kMmaBlocksPerSm = 2, kSimtBlocksPerSm = 8;
constexpr int kMinKeyBlocksPerSplit = 4, kMaxKeySplits = 64;
constexpr int kSimtKeyBlock = 32;        // one key a lane
constexpr int kSimtMaxBlocksPerSm = 32;  // grid-stride beyond
constexpr int kCombineThreads = 256;     // attention_pieces.h combine_kernel
constexpr int kCombineBlocksPerSm = 8;   // grid-stride beyond

std::string N(int64_t v) { return std::to_string(v); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of a plan before any key split, and the key blocks a query row walks.
int64_t unsplit_blocks(const kernel::Attention& a, const AttentionPlan& p) {
  if (p.shape == AttentionShape::MmaFlash) return ceil_div(a.query.extent, p.query_block) * a.size_batch();
  return ceil_div(a.query.extent * a.size_batch(), p.warps);
}

int choose_key_splits(const kernel::Attention& a, const AttentionPlan& p, const isa::GpuMachine& m) {
  const int64_t want = int64_t(m.sm_count) * (p.shape == AttentionShape::MmaFlash ? kMmaBlocksPerSm : kSimtBlocksPerSm);
  const int64_t blocks = unsplit_blocks(a, p);
  if (blocks >= want) return 1;
  const int64_t by_keys = ceil_div(a.key.extent, p.key_block) / kMinKeyBlocksPerSplit;
  // whole waves: at most `want` blocks (one more split would start a second, mostly idle wave)
  const int64_t splits = std::min<int64_t>({want / blocks, by_keys, kMaxKeySplits});
  return splits >= 2 ? int(splits) : 1;
}

std::string explain_line(const kernel::Attention& a, const AttentionPlan& p, const std::string& why_not_tc) {
  std::string s = "fused attention (online softmax, " + a.name + "): ";
  if (p.shape == AttentionShape::MmaFlash) {
    s += "mma.sync flash kernel " + N(p.query_block) + "x" + N(p.key_block) + " (" +
         (p.key_warps ? N(p.warps) + " warps sharing the 16 query rows, " + N(p.key_block / p.warps) +
                            " keys of each block a warp, their states merged in shared memory at the end"
                      : N(p.warps) + " warps of 16 query rows") +
         "), K / V " +
         (p.stages == 2 ? "double-buffered" : N(p.stages) + "-buffered") + " by 16-byte cp.async into padded rows (ldmatrix " +
         "conflict-free), Q fragments " + (p.q_in_registers ? "kept in registers" : "read by ldmatrix per key block") +
         ", P reused from the S accumulators as the A operand of P V; " + N(attention_mma_shared_bytes(a, p)) + " B of shared memory";
  } else {
    s += "SIMT online kernel, one warp a query row (" + N(p.warps) + " a block), one key a lane: TensorCores not used: " + why_not_tc;
  }
  if (a.causal_offset) s += "; causal: key blocks above the diagonal skipped";
  return s;
}

// The combine launch of a key-split plan and its scratch (attention_pieces.h's partial layout).
void emit_combine(const kernel::Kernel& k, const kernel::Attention& a, const AttentionPlan& plan, const isa::GpuMachine& m,
                  std::ostringstream& os, CudaProgram& p) {
  os << attention::combine_kernel(k, a, plan.key_splits, "tessel_attention_combine");
  p.scratch_bytes = uint64_t(attention::partial_bytes(a, plan.key_splits));
  Launch c;
  c.kernel = "tessel_attention_combine";
  const int64_t elements = a.size_batch() * a.query.extent * attention::value_elements(a);
  c.grid[0] = unsigned(std::min<int64_t>(ceil_div(elements, kCombineThreads), int64_t(m.sm_count) * kCombineBlocksPerSm));
  c.block = kCombineThreads;
  p.launches.push_back(c);
  p.explain.push_back("keys split over " + N(plan.key_splits) + " blocks per query block (" + N(unsplit_blocks(a, plan)) +
                      " blocks unsplit for " + N(m.sm_count) + " SMs): each writes its rows' partial maximum, sum and context to " +
                      N(int64_t(p.scratch_bytes)) + " B of scratch; a second launch merges them");
}

}  // namespace

std::string AttentionPlan::to_string() const {
  std::string s = shape == AttentionShape::MmaFlash ? "attention/mma/" + N(query_block) + "x" + N(key_block) + "/w" + N(warps) + "/st" + N(stages)
                                                    : "attention/simt/w" + N(warps);
  if (key_warps) s += "/kw";
  if (key_splits > 1) s += "/ks" + N(key_splits);
  return s;
}

bool AttentionPlan::is_plan_text(const std::string& text) { return text.rfind("attention/", 0) == 0; }

AttentionPlan AttentionPlan::parse(const std::string& text) {
  auto bad = [&](const std::string& what) {
    return UserError("attention plan '" + text + "': " + what +
                     " (the form attention/mma/128x64/w8/st2, attention/mma/16x64/w4/st3/kw or attention/simt/w4, optionally /ksN)");
  };
  std::vector<std::string> parts;
  for (size_t at = 0; at <= text.size();) {
    const size_t slash = text.find('/', at);
    parts.push_back(text.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  if (parts.size() < 3 || parts[0] != "attention") throw bad("not an attention plan");
  auto number = [&](const std::string& field, size_t prefix) {
    const std::string digits = field.substr(prefix);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) throw bad("bad field '" + field + "'");
    return std::stoi(digits);
  };
  AttentionPlan p;
  size_t next = 2;
  if (parts[1] == "mma") {
    p.shape = AttentionShape::MmaFlash;
    const size_t x = parts[2].find('x');
    if (x == std::string::npos) throw bad("bad tile '" + parts[2] + "'");
    p.query_block = number(parts[2].substr(0, x), 0);
    p.key_block = number(parts[2].substr(x + 1), 0);
    next = 3;
  } else if (parts[1] == "simt") {
    p.shape = AttentionShape::Simt;
    p.query_block = 1;
    p.key_block = kSimtKeyBlock;
  } else {
    throw bad("unknown kernel '" + parts[1] + "'");
  }
  for (; next < parts.size(); ++next) {
    const std::string& f = parts[next];
    if (f.rfind("w", 0) == 0) p.warps = number(f, 1);
    else if (f.rfind("st", 0) == 0) p.stages = number(f, 2);
    else if (f == "kw" && p.shape == AttentionShape::MmaFlash) p.key_warps = true;
    else if (f.rfind("ks", 0) == 0) p.key_splits = number(f, 2);
    else throw bad("unknown field '" + f + "'");
  }
  if (p.shape == AttentionShape::MmaFlash && p.key_warps && (p.query_block != 16 || p.warps <= 0 || p.key_block % (16 * p.warps) || p.stages < 2))
    throw bad("an mma plan with /kw takes 16 query rows, a key block of 16 keys a warp (a multiple of 16 x warps), at least 2 stages");
  if (p.shape == AttentionShape::MmaFlash && !p.key_warps && (p.query_block != 16 * p.warps || p.key_block % 16 || p.key_block <= 0 || p.stages < 2))
    throw bad("an mma plan takes 16 query rows a warp, key blocks a multiple of 16, at least 2 stages");
  if (p.warps <= 0 || p.key_splits <= 0) throw bad("warps and key splits must be positive");
  return p;
}

AttentionPlan plan_attention(const kernel::Attention& a, const isa::GpuMachine& m, std::string* why_not_tensor_cores) {
  AttentionPlan p;
  std::string why = attention_mma_obstacle(a, m);
  if (why.empty()) {
    p = attention_mma_plan(a, m);
    if (attention_mma_shared_bytes(a, p) > int64_t(m.shared_bytes_per_block_optin))
      why = "the mma.sync kernel's " + N(attention_mma_shared_bytes(a, p)) + " B of shared memory exceed " + m.arch + "'s " +
            N(int64_t(m.shared_bytes_per_block_optin)) + " B";
  }
  if (!why.empty()) {
    p = AttentionPlan{};
    p.shape = AttentionShape::Simt;
    p.query_block = 1;
    p.key_block = kSimtKeyBlock;
    p.warps = kAttentionSimtWarps;
  }
  p.key_splits = choose_key_splits(a, p, m);
  if (why_not_tensor_cores) *why_not_tensor_cores = why;
  return p;
}

void emit_attention_program(const kernel::Kernel& k, const kernel::Attention& a, const CudaOptions& options, const isa::GpuMachine& m,
                            std::ostringstream& os, CudaProgram& p) {
  if (options.plan_required && (options.config || options.simt_plan))
    throw UserError(k.name + ": the fused attention kernel (online softmax) takes no contraction plan (" +
                    (options.config ? options.config->to_string() : options.simt_plan->to_string()) +
                    "); its tiles follow from the head dims and the machine (--explain says which), or --no-online-softmax "
                    "compiles the statements unfused");
  // a plan the user gave (--tile attention/...; Kernel::gpu_plan): carried out, or refused with the reason
  const std::string& given = k.gpu_plan;
  const bool given_wgmma = given.rfind("attention/wgmma/", 0) == 0;
  const std::string no_wgmma = attention_wgmma_obstacle(k, a, m);
  if (given_wgmma) {
    if (!no_wgmma.empty()) throw UserError(k.name + ": plan " + given + " cannot run on " + m.arch + ": " + no_wgmma);
    emit_attention_wgmma(k, a, m, os, p, parse_attention_wgmma(given, a, m));
    p.explain.push_back("  plan " + given + " (given)");
    p.source = os.str();
    return;
  }
  // sm_90a: the warpgroup MMA kernel (attention_wgmma.h) where it applies
  if (given.empty() && no_wgmma.empty()) {
    emit_attention_wgmma(k, a, m, os, p, plan_attention_wgmma(a, m));
    p.source = os.str();
    return;
  }
  std::string why;
  AttentionPlan plan = plan_attention(a, m, &why);
  if (!given.empty()) {
    plan = AttentionPlan::parse(given);
    if (plan.shape == AttentionShape::MmaFlash) {
      std::string no = attention_mma_obstacle(a, m);
      if (no.empty() && attention_mma_shared_bytes(a, plan) > int64_t(m.shared_bytes_per_block_optin))
        no = "its " + N(attention_mma_shared_bytes(a, plan)) + " B of shared memory exceed " + m.arch + "'s " +
             N(int64_t(m.shared_bytes_per_block_optin)) + " B";
      if (!no.empty()) throw UserError(k.name + ": plan " + given + " cannot run on " + m.arch + ": " + no);
    }
    const int64_t key_blocks = (a.key.extent + plan.key_block - 1) / plan.key_block;
    if (plan.key_splits > key_blocks)
      throw UserError(k.name + ": plan " + given + " splits the keys " + N(plan.key_splits) + " ways, but there are " + N(key_blocks) +
                      " key blocks of " + N(plan.key_block));
    why = "plan " + given + " given";
  }
  os << attention::helpers();
  const int64_t max_blocks = int64_t(m.sm_count) * kSimtMaxBlocksPerSm;
  Launch main = plan.shape == AttentionShape::MmaFlash ? emit_attention_mma(k, a, plan, "tessel_attention_mma", os)
                                                       : emit_attention_simt(k, a, plan, "tessel_attention_simt", max_blocks, os);
  p.launches.push_back(main);
  p.explain.push_back(explain_line(a, plan, why));
  if (!given.empty()) p.explain.push_back("  plan " + given + " (given)");
  if (m.wgmma) p.explain.push_back("fused attention: the wgmma kernel not used: " + (no_wgmma.empty() ? "another plan was given" : no_wgmma));
  if (plan.key_splits > 1) emit_combine(k, a, plan, m, os, p);
  p.arch = m.arch;
  p.tensor_cores = plan.shape == AttentionShape::MmaFlash;
  p.plan = plan.to_string();
  p.flops = a.effective_flops();
  p.source = os.str();
}

}  // namespace tessel::emit_cuda
