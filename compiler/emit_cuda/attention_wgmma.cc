#include "compiler/emit_cuda/attention_wgmma.h"

#include <functional>
#include <set>

#include <fmt/format.h>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/kernel_wgmma_ws.h"
#include "compiler/emit_cuda/operand_plan.h"
#include "compiler/emit_cuda/tma_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

std::string elem_type(DType t) { return t == DType::BF16 ? "__nv_bfloat16" : storage_type(t); }

std::string store(DType t, const std::string& value) {
  if (t == DType::BF16) return "__float2bfloat16_rn(" + value + ")";
  return store_value(t, value);
}

// A value rounded to a 16-bit float type the way a store and a load would.
std::string rounded(DType t, const std::string& v) {
  if (t == DType::F16) return "tessel_r16(" + v + ")";
  if (t == DType::BF16) return "__bfloat162float(__float2bfloat16_rn(" + v + "))";
  return v;
}

std::string role_var(const std::string& role) { return "r_" + role; }

// Element offset `base + sum coeff * r_var` over the roles, with `fixed` roles given as other text.
std::string offset(const kernel::AttentionOperand& o, const std::map<std::string, std::string>& fixed = {}) {
  std::string s = num(o.base) + "LL";
  for (const auto& [v, c] : o.coeff) {
    auto it = fixed.find(v);
    s += " + " + num(c) + "LL * (long long)(" + (it == fixed.end() ? role_var(v) : it->second) + ")";
  }
  return s;
}

// wgmma helper: D (m64 x n, f32) += A (smem descriptor or 4 registers) * B (smem descriptor).
// `overwrite`: scale-d 0, D = A * B (the first MMA of a sum: no zeroed accumulators); the name ends in z.
void wgmma_helper(std::ostringstream& os, int n, bool a_regs, int trans_b, const std::string& ab, bool overwrite = false) {
  const int nreg = n / 2;
  const char* scale_d = overwrite ? "0" : "1";
  os << "static __device__ __forceinline__ void tessel_att_wgmma_n" << n << (a_regs ? "_ra" : "_sa") << trans_b << (overwrite ? "z" : "")
     << "(float* d, " << (a_regs ? "const unsigned* a" : "unsigned long long da") << ", unsigned long long db) {\n"
     << "  asm volatile(\"wgmma.mma_async.sync.aligned.m64n" << n << "k16.f32." << ab << "." << ab << " {";
  for (int r = 0; r < nreg; ++r) os << (r ? ", " : "") << "%" << r;
  if (a_regs)
    os << "}, {%" << nreg << ", %" << nreg + 1 << ", %" << nreg + 2 << ", %" << nreg + 3 << "}, %" << nreg + 4 << ", " << scale_d << ", 1, 1, "
       << trans_b << ";\\n\"\n    : ";
  else
    os << "}, %" << nreg << ", %" << nreg + 1 << ", " << scale_d << ", 1, 1, 0, " << trans_b << ";\\n\"\n    : ";
  for (int r = 0; r < nreg; ++r) os << (r ? ", " : "") << "\"+f\"(d[" << r << "])";
  if (a_regs) os << "\n    : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db));\n}\n";
  else os << "\n    : \"l\"(da), \"l\"(db));\n}\n";
}

// The tensor map of an attention operand (Q, K or V): dims {head or value (contiguous), rows
// (query or key), the batch indices it depends on}, a box of 64 columns (128 bytes: one swizzle
// row) by `rows_per_box` rows, 128-byte swizzle: one copy fills one slab of the kernel's shared
// layout. Rows past the end are zero-filled by the TMA unit. `why` says when TMA cannot fetch it.
TensorMapSpec operand_map(const kernel::AttentionOperand& o, const std::string& col_var, int64_t cols, const std::string& row_var,
                          int64_t rows, const std::vector<kernel::ContractionDim>& batch, int rows_per_box, std::vector<std::string>& coords,
                          std::string& why) {
  TensorMapSpec t;
  t.tensor = o.tensor;
  t.dtype = o.dtype;
  t.base = o.base;
  t.swizzle_bytes = kSwizzleRowBytes;
  const int64_t eb = dtype_bytes(o.dtype);
  t.dims = {uint64_t(cols), uint64_t(rows)};
  t.strides = {uint64_t(o.stride(row_var) * eb)};
  t.box = {uint32_t(kSwizzleRowBytes / eb), uint32_t(rows_per_box)};
  coords.clear();
  for (const auto& b : batch) {
    if (!o.coeff.count(b.var)) continue;  // K / V shared across this index (multi-query)
    t.dims.push_back(uint64_t(b.extent));
    t.strides.push_back(uint64_t(o.stride(b.var) * eb));
    t.box.push_back(1);
    coords.push_back(role_var(b.var));
  }
  why.clear();
  if (o.stride(col_var) != 1) why = o.tensor + "'s columns are not contiguous";
  if (t.dims.size() > size_t(kTmaMaxRank)) why = o.tensor + " has more than " + num(kTmaMaxRank - 2) + " batch indices";
  if ((o.base * eb) % kTmaAlignBytes) why = o.tensor + "'s origin is not " + num(kTmaAlignBytes) + "-byte aligned";
  for (uint64_t st : t.strides)
    if (st % kTmaAlignBytes || st >= (uint64_t(1) << 40)) why = "a stride of " + o.tensor + " (" + num(int64_t(st)) + " B) is not a multiple of 16 B below 2^40";
  for (uint64_t d : t.dims)
    if (d >= (uint64_t(1) << 31)) why = "an extent of " + o.tensor + " is 2^31 or more";
  return t;
}

}  // namespace

std::string attention_wgmma_obstacle(const kernel::Kernel& k, const kernel::Attention& a, const isa::GpuMachine& m) {
  (void)k;
  if (!m.wgmma || m.compute_capability < 90) return "no warpgroup MMA on " + m.arch;
  if (!(a.q.dtype == a.k.dtype && a.k.dtype == a.v.dtype && (a.q.dtype == DType::F16 || a.q.dtype == DType::BF16)))
    return "Q, K, V are not all f16 or all bf16";
  if (a.head.size() != 1 || a.value.size() != 1) return "several head or value indices";
  const int64_t d = a.head[0].extent, e = a.value[0].extent;
  if ((d != 64 && d != 128) || (e != 64 && e != 128)) return "head and value dims must be 64 or 128 (" + num(d) + ", " + num(e) + ")";
  if (a.q.stride(a.head[0].var) != 1 || a.k.stride(a.head[0].var) != 1 || a.v.stride(a.value[0].var) != 1)
    return "the head / value index is not the innermost (unit-stride) dimension of Q, K, V";
  for (const auto* o : {&a.q, &a.k, &a.v}) {
    if (o->base % 8) return "an operand's origin is not 16-byte aligned";
    for (const auto& [v, c] : o->coeff)
      if (c % 8 && c != 1) return "a row stride of " + o->tensor + " is not a multiple of 8 elements";
  }
  if (a.score_type != DType::F32 || a.sum_type != DType::F32 || a.context_type != DType::F32) return "accumulators not f32";
  if (a.query.extent < 64) return "fewer than 64 query rows (the split-key kernel serves decode shapes)";
  return "";
}

std::string attention_tma_obstacle(const kernel::Attention& a, const isa::GpuMachine& m) {
  if (!m.has(isa::GpuFeature::TensorMaps)) return "no tensor maps (TMA) on " + m.arch;
  std::vector<std::string> coords;
  std::string why;
  operand_map(a.q, a.head[0].var, a.head[0].extent, a.query.var, a.query.extent, a.batch, 64, coords, why);
  if (why.empty()) operand_map(a.k, a.head[0].var, a.head[0].extent, a.key.var, a.key.extent, a.batch, kAttentionKeyBlock, coords, why);
  if (why.empty()) operand_map(a.v, a.value[0].var, a.value[0].extent, a.key.var, a.key.extent, a.batch, kAttentionKeyBlock, coords, why);
  return why;
}

std::string WgmmaAttentionPlan::to_string() const {
  std::string s = "attention/wgmma/" + num(64 * warpgroups) + "x" + num(kAttentionKeyBlock) + "/";
  s += copies == AttentionCopies::CpAsync ? "cpasync" : copies == AttentionCopies::TmaProducer ? "tma" : "tma/pingpong";
  if (heavy_first) s += "/heavy";
  if (lazy_rescale) s += "/lazy";
  if (persistent) s += "/persistent";
  if (dynamic) s += "/dynamic";
  if (occupancy > 1) s += "/occ" + num(occupancy);
  return s;
}

namespace {

// Policy: three consumer warpgroups (192 rows) for a value dim of 64 where the blocks still fill
// the SMs; with a causal mask only where the last query block's padding wastes at most
// 1/kTallWaste of the rows. Measured on an H200 (PyTorch SDPA 159 / 106 us in the same run):
// d64 1k tokens x 256 heads 231 -> 215 us with 192 rows (8 -> 6 blocks of rows, 1/8 padding), causal
// 173 -> 184 us (the diagonal blocks' masked half grows with the tile); 4k and 16k tokens 192 rows
// 1.08-1.12x faster than 128.
constexpr int64_t kTallWaste = 16;
// Key blocks a block walks at most for a sequence to count as short (1k keys); at 4k keys (32) the
// persistent kernel (dynamic claims) measured no faster than the plain one, d64 and d128.
constexpr int64_t kShortKeyBlocks = 8;

// Copies as the kernel resolves Auto: TMA with ping-pong where the maps are legal (measured on an
// H200: 3-8 % faster than without on every prefill shape, 1.2-1.6x faster than cp.async).
AttentionCopies resolved(AttentionCopies c, int warpgroups, const kernel::Attention& a, const isa::GpuMachine& m) {
  if (c != AttentionCopies::Auto) return c;
  if (!attention_tma_obstacle(a, m).empty()) return AttentionCopies::CpAsync;
  return warpgroups >= 2 ? AttentionCopies::TmaPingPong : AttentionCopies::TmaProducer;
}

// The folded exponent fmaf(s, c log2 e, -m log2 e) takes row maxima |m| below this (2^20): there
// rounding m log2 e to f32 moves the exponent by at most 2^-4, no more than the definition's own f32
// rounding of the scaled scores s * c near m moves it. At or above it the scores are scaled first
// and the exponent is (s * c - m) log2 e as the definition reads, exact (2^0) for the row's maximum.
constexpr int64_t kFoldedMaximumBound = int64_t(1) << 20;

// Shared bytes kept out of one block's dynamic shared memory: with one block an SM, the slack the
// opt-in limit has always been given; with several, the static shared memory (the mbarriers: ptxas
// reports 1 KiB for the TMA kernels, the dynamic array's 1024-byte alignment included).
constexpr int64_t kOneBlockSharedSlack = 1024, kStaticSharedBytes = 1024;
// Registers a consumer thread needs beyond its S (BK/2), O (E/2) and packed P (BK/4) accumulators:
// row maxima, sums, addresses, loop state (the 192-row layout's 160 for a value dim of 64 compiles
// without spills); the producer's after setmaxnreg when several blocks share an SM.
constexpr int kConsumerOverheadRegisters = 32, kSharedProducerRegisters = 24;

// A block's resources on `m`: the ring slots of K / V (TMA) or its two buffers (cp.async), its
// dynamic shared bytes and the registers after setmaxnreg (cp.async: at entry); `why` says what
// does not fit when `plan.occupancy` blocks share an SM.
struct BlockResources {
  int slots = 2, producer_regs = kProducerRegisters, consumer_regs = kConsumerRegisters;
  int64_t smem = 0;
  std::string why;
};

BlockResources block_resources(const WgmmaAttentionPlan& plan, AttentionCopies copies, const kernel::Attention& a, const isa::GpuMachine& m) {
  BlockResources r;
  const bool ws = copies == AttentionCopies::TmaProducer || copies == AttentionCopies::TmaPingPong;
  const int64_t D = a.head[0].extent, E = a.value[0].extent, BK = kAttentionKeyBlock, wg = m.threads_per_warpgroup();
  const int64_t q_bytes = 64 * plan.warpgroups * D * 2, kv_bytes = BK * (D + E) * 2;
  const int occ = std::max(plan.occupancy, 1);
  if (occ == 1) {  // the opt-in limit, up to 4 slots; registers as the warpgroups share them
    if (ws)
      while (r.slots < 4 && q_bytes + (r.slots + 1) * kv_bytes + kSwizzleAlignBytes <= int64_t(m.shared_bytes_per_block_optin) - kOneBlockSharedSlack)
        ++r.slots;
    r.producer_regs = plan.warpgroups == 3 ? 24 : kProducerRegisters;
    r.consumer_regs = plan.warpgroups == 3 ? 160 : kConsumerRegisters;
    r.smem = q_bytes + r.slots * kv_bytes + kSwizzleAlignBytes;
    return r;
  }
  // an SM's share: shared memory less its reserve for each block, the register file at entry
  const int64_t budget = std::min<int64_t>(int64_t(m.shared_bytes_per_sm) / occ - int64_t(m.shared_bytes_reserved_per_block),
                                           int64_t(m.shared_bytes_per_block_optin)) - kStaticSharedBytes;
  const int64_t threads = (plan.warpgroups + (ws ? 1 : 0)) * wg;
  const int64_t entry = std::min<int64_t>(255, int64_t(m.registers_per_sm) / (threads * occ)) / 8 * 8;
  const int64_t need = BK / 2 + E / 2 + BK / 4 + kConsumerOverheadRegisters;
  r.producer_regs = kSharedProducerRegisters;
  r.consumer_regs = int(ws ? std::min<int64_t>(kConsumerRegisters, (entry * threads - r.producer_regs * wg) / (plan.warpgroups * wg) / 8 * 8) : entry);
  if (r.consumer_regs < need)
    r.why = num(occ) + " blocks of " + num(threads) + " threads an SM leave " + num(r.consumer_regs) + " registers a consumer thread, under the " +
            num(need) + " its S, O and P accumulators need";
  if (ws) {
    r.slots = 1;
    while (r.slots < 4 && q_bytes + (r.slots + 1) * kv_bytes + kSwizzleAlignBytes <= budget) ++r.slots;
  }
  r.smem = q_bytes + r.slots * kv_bytes + kSwizzleAlignBytes;
  if (r.why.empty() && r.smem > budget)
    r.why = num(occ) + " blocks an SM leave " + num(budget) + " B of shared memory a block, under the " + num(r.smem) + " B of Q and " +
            (ws ? std::string("one K / V slot") : std::string("two K / V buffers"));
  return r;
}

}  // namespace

std::string attention_wgmma_occupancy_obstacle(const WgmmaAttentionPlan& plan, const kernel::Attention& a, const isa::GpuMachine& m) {
  return block_resources(plan, resolved(plan.copies, plan.warpgroups, a, m), a, m).why;
}

WgmmaAttentionPlan plan_attention_wgmma(const kernel::Attention& a, const isa::GpuMachine& m) {
  WgmmaAttentionPlan p;
  auto blocks = [&](int rows) { return (a.query.extent + rows - 1) / rows * a.size_batch(); };
  const int64_t padded3 = (a.query.extent + 191) / 192 * 192;
  // two warpgroups a block (K / V tiles shared by 128 rows) when that still fills the SMs, else one
  // (short sequences, few heads: twice the blocks); three for a value dim of 64 (less K / V traffic
  // and fewer blocks for the same exponentials)
  p.warpgroups = blocks(128) >= int64_t(m.sm_count) ? kAttentionWarpgroups : 1;
  if (a.value[0].extent == 64 && blocks(192) >= int64_t(m.sm_count) &&
      (!a.causal_offset || (padded3 - a.query.extent) * kTallWaste <= a.query.extent))
    p.warpgroups = 3;
  p.copies = resolved(AttentionCopies::Auto, p.warpgroups, a, m);
  p.heavy_first = a.causal_offset.has_value();
  p.lazy_rescale = true;
  // short sequences (a block walks at most kShortKeyBlocks key blocks): a block's Q load, first
  // copies and epilogue are a large part of its time; overlap them with other tiles' MMAs where that
  // measured faster on an H200 (1k tokens x 256 batch points, same run as PyTorch SDPA):
  //  - causal, value dim 64: two 64-row blocks an SM (/occ2), 174.4 -> 154.5 us (the 128-row default;
  //    the dynamic persistent 128-row kernel 160.6, cp.async /occ3 183.3);
  //  - no mask, value dim 128: the persistent 128-row kernel walking a batch point's query blocks in
  //    order, 335.8 -> 313.7 us (dynamic claims 321.9, /occ2 360.6: twice the K / V bytes from L2).
  // Not taken: 4k tokens (persistent 1.00x there), value dim 64 without a mask (/occ2 213.3 and the
  // 128-row persistent 214.3 vs 214.5 us), causal value dim 128 (/occ2 242.0 vs 239.0).
  const int64_t key_blocks = (a.key.extent + kAttentionKeyBlock - 1) / kAttentionKeyBlock;
  if (key_blocks <= kShortKeyBlocks && p.copies != AttentionCopies::CpAsync) {
    WgmmaAttentionPlan two = p;
    two.warpgroups = 1, two.occupancy = 2, two.copies = resolved(AttentionCopies::Auto, 1, a, m);
    if (a.causal_offset && a.value[0].extent == 64 && blocks(64) >= 2 * int64_t(m.sm_count) && attention_wgmma_occupancy_obstacle(two, a, m).empty())
      return two;
    if (!a.causal_offset && a.value[0].extent == 128 && p.warpgroups == 2 && blocks(128) >= 2 * int64_t(m.sm_count)) p.persistent = true;
  }
  return p;
}

WgmmaAttentionPlan parse_attention_wgmma(const std::string& text, const kernel::Attention& a, const isa::GpuMachine& m) {
  auto bad = [&](const std::string& why) {
    return UserError("attention plan '" + text + "': " + why +
                     " (the wgmma kernel takes 64x128, 128x128 or 192x128 (query rows x keys a block), then optionally /tma (a TMA "
                     "producer warpgroup), /tma/pingpong (its two consumer warpgroups taking turns) or /cpasync (every "
                     "thread copies), then /heavy (query blocks longest first), /lazy (rescale only where a row maximum grew), /persistent (a block an SM walks the tiles), /dynamic (its tiles claimed from a counter), "
                     "/occ2, /occ3 or /occ4 (blocks resident on an SM))");
  };
  std::vector<std::string> f;
  for (size_t at = std::string("attention/wgmma/").size(); at <= text.size();) {
    const size_t slash = text.find('/', at);
    f.push_back(text.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  WgmmaAttentionPlan p;
  if (f.empty() || (f[0] != "64x128" && f[0] != "128x128" && f[0] != "192x128")) throw bad("bad tile '" + (f.empty() ? "" : f[0]) + "'");
  p.warpgroups = f[0] == "64x128" ? 1 : f[0] == "128x128" ? 2 : 3;
  size_t i = 1;
  if (i < f.size() && f[i] == "cpasync") p.copies = AttentionCopies::CpAsync, ++i;
  else if (i < f.size() && f[i] == "tma") {
    ++i;
    p.copies = AttentionCopies::TmaProducer;
    if (i < f.size() && f[i] == "pingpong") p.copies = AttentionCopies::TmaPingPong, ++i;
  }
  for (; i < f.size(); ++i) {
    if (f[i] == "heavy") p.heavy_first = true;
    else if (f[i] == "lazy") p.lazy_rescale = true;
    else if (f[i] == "persistent") p.persistent = true;
    else if (f[i] == "dynamic") p.dynamic = true;
    else if (f[i].size() == 4 && f[i].rfind("occ", 0) == 0 && f[i][3] >= '2' && f[i][3] <= '4') p.occupancy = f[i][3] - '0';
    else throw bad("unknown field '" + f[i] + "'");
  }
  if (p.copies == AttentionCopies::TmaPingPong && p.warpgroups < 2)
    throw UserError(text + ": ping-pong takes two consumer warpgroups or more (128x128, 192x128)");
  if (p.warpgroups == 3 && a.value[0].extent != 64)
    throw UserError(text + ": 192 query rows (three consumer warpgroups of 160 registers) take a value dim of 64, not " +
                    num(a.value[0].extent));
  if (p.copies == AttentionCopies::TmaProducer || p.copies == AttentionCopies::TmaPingPong)
    if (const std::string no_tma = attention_tma_obstacle(a, m); !no_tma.empty()) throw UserError(text + " cannot run on " + m.arch + ": " + no_tma);
  p.copies = resolved(p.copies, p.warpgroups, a, m);
  if (p.persistent && p.copies == AttentionCopies::CpAsync) throw UserError(text + ": a persistent kernel takes TMA copies (a producer warpgroup)");
  if (p.dynamic && !p.persistent) throw UserError(text + ": /dynamic claims the tiles of a persistent kernel (give /persistent/dynamic)");
  if (p.persistent && p.occupancy > 1) throw UserError(text + ": a persistent kernel runs one block an SM (no /occ)");
  if (const std::string why = attention_wgmma_occupancy_obstacle(p, a, m); !why.empty()) throw UserError(text + " cannot run on " + m.arch + ": " + why);
  return p;
}

namespace {

// The kernel's text, piece by piece in the order it is printed; the members are the plan every
// piece reads (tiles, copy scheme, shared-memory layout, tensor maps).
class WgmmaAttention {
 public:
  WgmmaAttention(const kernel::Kernel& k, const kernel::Attention& a, const isa::GpuMachine& m, std::ostringstream& os,
                 const WgmmaAttentionPlan& plan)
      : k(k), a(a), m(m), os(os), D(int(a.head[0].extent)), E(int(a.value[0].extent)), plan(plan) {
    const AttentionCopies copies = resolved(plan.copies, plan.warpgroups, a, m);
    this->plan.copies = copies;
    ws = copies == AttentionCopies::TmaProducer || copies == AttentionCopies::TmaPingPong;
    NWG = plan.warpgroups;
    TESSEL_CHECK(NWG >= 1 && NWG <= 3 && (NWG < 3 || E == 64), "wgmma attention: bad warpgroup count");
    BQ = 64 * NWG;
    NT = (NWG + (ws ? 1 : 0)) * int(m.threads_per_warpgroup());
    // setmaxnreg: the producer's registers to the consumers (four warpgroups: 24 / 160; several
    // blocks an SM: their share of the register file); the ring of K / V slots in a block's share
    const BlockResources res = block_resources(this->plan, copies, a, m);
    TESSEL_CHECK(res.why.empty(), "wgmma attention: " + res.why);
    producer_regs = res.producer_regs;
    consumer_regs = res.consumer_regs;
    // ping-pong: the consumer warpgroups take turns issuing their MMAs (named barriers 1..NWG in a
    // ring), so one's softmax runs while another's MMAs use the tensor cores
    pingpong = copies == AttentionCopies::TmaPingPong && NWG >= 2;
    // persistent: one block an SM walks the tiles; the producer loads the next tile's Q and K / V
    // while the consumers finish the last one (its epilogue, its last P V)
    persistent = plan.persistent && ws;
    dynamic = persistent && plan.dynamic;
    wg_threads = int(m.threads_per_warpgroup());
    wpg = int(m.warps_per_warpgroup);
    ab = a.q.dtype == DType::BF16 ? "bf16" : "f16";
    et = elem_type(a.q.dtype);
    Sq = a.query.extent;
    T = a.key.extent;
    I = role_var(a.query.var), J = role_var(a.key.var), dv = a.head[0].var, ev = a.value[0].var;
    // shared memory: Q [D/64 slabs][BQ rows][128 B], K and V [ring slots][slabs][BK rows][128 B]
    q_bytes = BQ * D * 2, k_bytes = BK * D * 2, v_bytes = BK * E * 2;
    // warp-specialised: the ring of K and V slots (as many as fit, 2 to 4; 1 to 4 with several blocks an SM)
    ST = res.slots;
    smem = int(res.smem);
    TESSEL_CHECK(smem == q_bytes + ST * (k_bytes + v_bytes) + kSwizzleAlignBytes, "wgmma attention: shared layout");
    NB = ws ? ST : 2;
    std::string why_map;
    tq = operand_map(a.q, dv, D, a.query.var, a.query.extent, a.batch, BQ, qc, why_map);
    tk = operand_map(a.k, dv, D, a.key.var, T, a.batch, BK, kc, why_map);
    tv = operand_map(a.v, ev, E, a.key.var, T, a.batch, BK, vc, why_map);
    name = "tessel_attention_" + k.name;
    qs = a.q.stride(a.query.var), ks = a.k.stride(a.key.var), vs = a.v.stride(a.key.var);
  }

  void emit(CudaProgram& p) {
    device_helpers();
    kernel_head();
    if (!persistent) {
      tile_origin("");
      key_range();
    }
    if (ws) producer();
    else first_copies();
    accumulators();
    loop_head();
    scores();
    softmax();
    loop_tail();
    last_pv();
    epilogue();
    launch(p);
  }

 private:
  const kernel::Kernel& k;
  const kernel::Attention& a;
  const isa::GpuMachine& m;
  std::ostringstream& os;
  const int D, E, BK = kAttentionKeyBlock;
  WgmmaAttentionPlan plan;
  bool ws = false, pingpong = false, persistent = false, dynamic = false;
  int producer_regs = kProducerRegisters, consumer_regs = kConsumerRegisters;
  int NWG = 1, BQ = 64, NT = 128, wg_threads = 128, wpg = 4, ST = 2, NB = 2;
  int q_bytes = 0, k_bytes = 0, v_bytes = 0, smem = 0;
  int64_t Sq = 0, T = 0, qs = 0, ks = 0, vs = 0;
  std::string ab, et, I, J, dv, ev, name;
  std::vector<std::string> qc, kc, vc;  // the maps' batch coordinates
  TensorMapSpec tq, tk, tv;

  void device_helpers() {
    os << "#include <cuda_bf16.h>\n";
    os << "#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#error \"the wgmma attention kernel must be compiled for sm_90a\"\n#endif\n";
    os << R"(static __device__ __forceinline__ void tessel_att_cp16(void* smem, const void* gmem, bool pred) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 16 : 0));
}
static __device__ __forceinline__ unsigned long long tessel_att_desc(const void* p, unsigned lbo) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);  /* 128-byte swizzle, 8-row groups 1024 B apart */
  return (unsigned long long)((a & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | (64ull << 32) | (1ull << 62);
}
static __device__ __forceinline__ void tessel_att_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
/* 2^x in one MUFU op: results below 2^-126 flushed to 0 (a probability that small is below f16's and
   the sum's resolution), 2^-inf = 0 */
static __device__ __forceinline__ float tessel_att_ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
)";
    os << "static __device__ __forceinline__ unsigned tessel_att_pack(float lo, float hi) {\n";
    if (ab == "bf16")
      os << "  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);\n  return *(unsigned*)&v;\n}\n";
    else
      os << "  __half2 v = __floats2half2_rn(lo, hi);\n  return *(unsigned*)&v;\n}\n";
    wgmma_helper(os, BK, false, 0, ab);        // S = Q K^T: A, B K-major in shared memory
    wgmma_helper(os, BK, false, 0, ab, true);  // its first k step: S = Q K^T (no zeroing)
    wgmma_helper(os, E, true, 1, ab);    // O += P V: P in registers, V N-major
    if (ws) tma_helpers();
  }

  void tma_helpers() {
    os << "struct __align__(64) tessel_att_tmap { unsigned long long v[16]; };  /* a CUtensorMap (__grid_constant__) */\n";
    os << R"(static __device__ __forceinline__ void tessel_att_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(count));
}
static __device__ __forceinline__ void tessel_att_mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void tessel_att_mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}
static __device__ __forceinline__ void tessel_att_mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nTESSEL_ATT_WAIT_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra TESSEL_ATT_WAIT_%=;\n}\n"
               ::"r"((unsigned)__cvta_generic_to_shared(bar)), "r"(parity) : "memory");
}
)";
    std::set<size_t> ranks = {tq.dims.size(), tk.dims.size(), tv.dims.size()};
    for (size_t r : ranks) {
      os << "static __device__ __forceinline__ void tessel_att_tma" << r << "(void* dst, const tessel_att_tmap* map, unsigned long long* bar";
      for (size_t i = 0; i < r; ++i) os << ", int c" << i;
      os << ") {\n  asm volatile(\"cp.async.bulk.tensor." << r << "d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {";
      for (size_t i = 0; i < r; ++i) os << (i ? ", " : "") << "%" << i + 3;
      os << "}], [%2];\\n\"\n               ::\"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(map), \"r\"((unsigned)__cvta_generic_to_shared(bar))";
      for (size_t i = 0; i < r; ++i) os << ", \"r\"(c" << i << ")";
      os << " : \"memory\");\n}\n";
    }
  }

  // the signature (the kernel's tensors as parameters, in Kernel::tensors order), the shared
  // memory's regions, the thread's roles, its batch point and the operands' batch origins
  void kernel_head() {
    std::string params;
    for (const auto& t : k.tensors) {
      const bool out = t.kind == ir::TensorKind::Output;
      params += (params.empty() ? "" : ", ") + std::string(out ? "" : "const ") + elem_type(t.dtype) + "* __restrict__ t_" + t.name;
    }
    if (ws)
      params += ", char* scratch_, const __grid_constant__ tessel_att_tmap tmq_, const __grid_constant__ tessel_att_tmap tmk_, "
                "const __grid_constant__ tessel_att_tmap tmv_";
    else
      params += ", char* scratch_";
    os << "extern \"C\" __global__ void __launch_bounds__(" << NT << ", " << std::max(plan.occupancy, 1) << ") " << name << "(" << params << ") {\n";
    os << "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n";
    os << "  unsigned char* sm_ = (unsigned char*)(((unsigned long long)smem_raw_ + 1023) & ~1023ull);\n";
    os << "  unsigned char* sq_ = sm_;\n";
    // buffer b of K and of V (computed: an array of pointers indexed by the block's parity lives in local memory)
    os << "  auto sk_ = [&](int b_) { return sm_ + " << q_bytes << " + b_ * " << k_bytes + v_bytes << "; };\n";
    os << "  auto sv_ = [&](int b_) { return sm_ + " << q_bytes + k_bytes << " + b_ * " << k_bytes + v_bytes << "; };\n";
    if (ws)  // warpgroup 0 the producer, the consumers' rows from warpgroup 1 on
      os << "  const int tid_ = threadIdx.x, wgi_ = __shfl_sync(0xffffffffu, tid_ / " << wg_threads << ", 0), wg_ = wgi_ - 1, warp_ = (tid_ % "
         << wg_threads << ") / 32, lane_ = tid_ % 32, t4_ = lane_ % 4;\n";
    else
      os << "  const int tid_ = threadIdx.x, wg_ = tid_ / " << wg_threads << ", warp_ = (tid_ % " << wg_threads
         << ") / 32, lane_ = tid_ % 32, t4_ = lane_ % 4;\n";
    os << "  (void)scratch_;\n";
  }

  // the query block's first row q0_ and its batch point (the role variables, the operands' origins):
  // from blockIdx, or (persistent) from the tile index `tile`, query blocks of a batch point
  // adjacent (K / V shared in L2) or, heavy-first, the last query block of every batch point first
  void tile_origin(const std::string& tile) {
    const int64_t nq = (Sq + BQ - 1) / BQ, nbatch = a.size_batch();
    std::string qb = plan.heavy_first ? "(gridDim.x - 1 - blockIdx.x)" : "blockIdx.x", flat = "blockIdx.y";
    if (!tile.empty() && dynamic) {  // claimed in order: the query blocks of a batch point adjacent, heavy-first reversed
      qb = plan.heavy_first ? "(" + num(nq - 1) + " - " + tile + " % " + num(nq) + ")" : "(" + tile + " % " + num(nq) + ")";
      flat = "(" + tile + " / " + num(nq) + ")";
    } else if (!tile.empty()) {
      qb = plan.heavy_first ? "(" + num(nq - 1) + " - " + tile + " / " + num(nbatch) + ")" : "(" + tile + " % " + num(nq) + ")";
      flat = plan.heavy_first ? "(" + tile + " % " + num(nbatch) + ")" : "(" + tile + " / " + num(nq) + ")";
    }
    // heavy-first: the last query blocks (causal: the most key blocks) start first
    os << "  const long long q0_ = (long long)" << qb << " * " << BQ << ";\n";
    os << "  long long rest_ = " << flat << ";\n";
    for (size_t b = a.batch.size(); b-- > 0;)
      os << "  const long long " << role_var(a.batch[b].var) << " = rest_ % " << a.batch[b].extent << "LL; rest_ /= " << a.batch[b].extent << "LL;\n";
    os << "  (void)rest_;\n";
    const std::map<std::string, std::string> zero_rows = {{a.query.var, "0"}, {a.key.var, "0"}, {dv, "0"}, {ev, "0"}};
    os << "  const " << et << "* qb_ = t_" << a.q.tensor << " + (" << offset(a.q, zero_rows) << ");\n";
    os << "  const " << et << "* kb_ = t_" << a.k.tensor << " + (" << offset(a.k, zero_rows) << ");\n";
    os << "  const " << et << "* vb_ = t_" << a.v.tensor << " + (" << offset(a.v, zero_rows) << ");\n";
  }

  // a tile of R rows x C columns (16-byte chunks) into 64-column slabs of R x 128 B, swizzled
  void tile_copy(const std::string& dst, const std::string& src, int rows, int cols, const std::string& row0, const std::string& limit,
                 int64_t row_stride) {
    const int chunks = rows * cols / 8, per_row = cols / 8;
    os << "    #pragma unroll\n    for (int c_ = tid_; c_ < " << chunks << "; c_ += " << NT << ") {\n"
       << "      const int row_ = c_ / " << per_row << ", q_ = c_ % " << per_row << ";\n"
       << "      const long long g_ = " << row0 << " + row_;\n"
       << "      const bool ok_ = g_ < " << limit << ";\n"
       << "      tessel_att_cp16(" << dst << " + (q_ / 8) * " << rows * kSwizzleRowBytes << " + row_ * " << kSwizzleRowBytes
       << " + (((q_ % 8) ^ (row_ % 8)) * 16), " << src << " + (ok_ ? g_ : 0) * " << row_stride << "LL + q_ * 8, ok_);\n"
       << "    }\n";
  }

  // the key blocks this query block needs (causal: none wholly above the diagonal)
  void key_range() {
    if (a.causal_offset)
      os << "  const long long kend_ = q0_ + " << BQ << " + " << *a.causal_offset << "LL < " << T << "LL ? q0_ + " << BQ << " + "
         << *a.causal_offset << "LL : " << T << "LL;\n";
    else
      os << "  const long long kend_ = " << T << "LL;\n";
    os << "  const int nblocks_ = (int)((kend_ + " << BK - 1 << ") / " << BK << ");\n";
  }

  // warp-specialised: the slots' barriers, then the producer warpgroup's copies; the consumers'
  // part opens here (closed after the epilogue)
  void producer() {
    // slots: kfull_/vfull_ complete when a block's bytes have landed (the producer's arrival and
    // the copies' bytes), kempty_/vempty_ when every consumer warp is done reading the slot
    os << "  __shared__ __align__(8) unsigned long long qbar_, qempty_, kfull_[" << ST << "], kempty_[" << ST << "], vfull_[" << ST << "], vempty_["
       << ST << "];\n";
    if (dynamic) os << "  __shared__ int tile_s_;  /* the tile the producer fetches Q for (published by qbar_) */\n";
    os << "  if (tid_ == 0) {\n    tessel_att_mbar_init(&qbar_, 1); tessel_att_mbar_init(&qempty_, " << NWG * wpg << ");\n    #pragma unroll\n    for (int s_ = 0; s_ < " << ST << "; ++s_) {\n"
       << "      tessel_att_mbar_init(kfull_ + s_, 1); tessel_att_mbar_init(vfull_ + s_, 1);\n"
       << "      tessel_att_mbar_init(kempty_ + s_, " << NWG * wpg << "); tessel_att_mbar_init(vempty_ + s_, " << NWG * wpg << ");\n    }\n"
       << "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");  /* visible to the TMA unit */\n  }\n";
    os << "  __syncthreads();\n";
    auto coords = [&](const std::vector<std::string>& c) {
      std::string s;
      for (const auto& x : c) s += ", (int)" + x;
      return s;
    };
    os << "  if (wgi_ == 0) {  /* the producer: one thread issues every copy */\n";
    os << "    asm volatile(\"setmaxnreg.dec.sync.aligned.u32 " << producer_regs << ";\\n\");\n";
    os << "    if (tid_ == 0) {\n";
    if (dynamic) {  // tiles claimed from a global counter (the next one a tile ahead), passed to the consumers with Q
      os << "      unsigned* count_ = (unsigned*)scratch_;  /* [0] tiles claimed past the first wave, [1] blocks done */\n";
      os << "      int it0_ = 0, tc_ = 0, next_ = (int)gridDim.x + (int)atomicAdd(count_, 1u);\n";
      os << "      for (int tile_ = blockIdx.x;; ++tc_) {\n";
      os << "      if (tc_ > 0) tessel_att_mbar_wait(&qempty_, (tc_ - 1) & 1);  /* the last tile's S MMAs are done with Q (and its index) */\n";
      os << "      tile_s_ = tile_;\n";
      os << "      if (tile_ >= " << tiles() << ") { tessel_att_mbar_arrive(&qbar_); break; }  /* no more tiles: the consumers stop */\n";
      tile_origin("tile_");
      key_range();
    } else if (persistent) {  // tile by tile; the ring's position it0_ + jb_ runs on across tiles
      os << "      int it0_ = 0, tc_ = 0;\n      for (int tile_ = blockIdx.x; tile_ < " << tiles() << "; tile_ += gridDim.x, ++tc_) {\n";
      tile_origin("tile_");
      key_range();
      os << "      if (tc_ > 0) tessel_att_mbar_wait(&qempty_, (tc_ - 1) & 1);  /* the last tile's S MMAs are done with Q */\n";
    } else {
      os << "      const int it0_ = 0;\n";
    }
    os << "      tessel_att_mbar_expect(&qbar_, " << q_bytes << "u);\n";
    for (int sl = 0; sl < D / 64; ++sl)
      os << "      tessel_att_tma" << tq.dims.size() << "(sq_ + " << sl * BQ * kSwizzleRowBytes << ", &tmq_, &qbar_, " << sl * 64 << ", (int)q0_"
         << coords(qc) << ");\n";
    os << "      for (int jb_ = 0; jb_ < nblocks_; ++jb_) {\n";
    os << "        const int s_ = (it0_ + jb_) % " << ST << ";\n        const unsigned ph_ = ((it0_ + jb_) / " << ST << ") & 1;\n";
    os << "        tessel_att_mbar_wait(kempty_ + s_, ph_ ^ 1);  /* a fresh slot passes */\n";
    os << "        tessel_att_mbar_expect(kfull_ + s_, " << k_bytes << "u);\n";
    for (int sl = 0; sl < D / 64; ++sl)
      os << "        tessel_att_tma" << tk.dims.size() << "(sk_(s_) + " << sl * BK * kSwizzleRowBytes << ", &tmk_, kfull_ + s_, " << sl * 64
         << ", jb_ * " << BK << coords(kc) << ");\n";
    // V_j into slot s_ (phase ph_) once the consumers are done with the block it held
    auto v_copy = [&](const std::string& pad, const std::string& jb) {
      os << pad << "tessel_att_mbar_wait(vempty_ + s_, ph_ ^ 1);\n";
      os << pad << "tessel_att_mbar_expect(vfull_ + s_, " << v_bytes << "u);\n";
      for (int sl = 0; sl < E / 64; ++sl)
        os << pad << "tessel_att_tma" << tv.dims.size() << "(sv_(s_) + " << sl * BK * kSwizzleRowBytes << ", &tmv_, vfull_ + s_, " << sl * 64
           << ", " << jb << " * " << BK << coords(vc) << ");\n";
    };
    if (ST > 1) {
      v_copy("        ", "jb_");
      os << "      }\n";
    } else {
      // one slot: V_j is free only after P V_(j-1), late in block j, while K_j's slot frees after S_j;
      // K_(j+1) goes first so that it lands during block j's softmax
      os << "        if (jb_ > 0) {\n          const int s_ = (it0_ + jb_ - 1) % " << ST << ";\n          const unsigned ph_ = ((it0_ + jb_ - 1) / " << ST
         << ") & 1;\n";
      v_copy("          ", "(jb_ - 1)");
      os << "        }\n      }\n";
      os << "      if (nblocks_ > 0) {\n        const int s_ = (it0_ + nblocks_ - 1) % " << ST << ";\n        const unsigned ph_ = ((it0_ + nblocks_ - 1) / "
         << ST << ") & 1;\n";
      v_copy("        ", "(nblocks_ - 1)");
      os << "      }\n";
    }
    if (dynamic)
      os << "      it0_ += nblocks_;\n      tile_ = next_;\n      if (next_ < " << tiles() << ") next_ = (int)gridDim.x + (int)atomicAdd(count_, 1u);\n      }\n"
         << "      /* the last block done resets the counters for the next launch (every block's last claim is behind it) */\n"
         << "      if (atomicAdd(count_ + 1, 1u) == gridDim.x - 1) { atomicExch(count_, 0u); atomicExch(count_ + 1, 0u); }\n";
    else if (persistent) os << "      it0_ += nblocks_;\n      }\n";
    os << "    }\n  } else {\n";
    os << "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 " << consumer_regs << ";\\n\");\n";
    if (dynamic) {
      os << "  int it0_ = 0, tc_ = 0;\n  for (;; ++tc_) {\n";
      os << "  tessel_att_mbar_wait(&qbar_, tc_ & 1);\n";
      // every lane's read of the index before its warp's lane 0 frees Q (and the index) on qempty_
      os << "  const int tile_ = tile_s_;\n  __syncwarp();\n  if (tile_ >= " << tiles() << ") break;\n";
      tile_origin("tile_");
      key_range();
      os << "  if (nblocks_ == 0 && lane_ == 0) tessel_att_mbar_arrive(&qempty_);\n";
    } else if (persistent) {
      os << "  int it0_ = 0, tc_ = 0;\n  for (int tile_ = blockIdx.x; tile_ < " << tiles() << "; tile_ += gridDim.x, ++tc_) {\n";
      tile_origin("tile_");
      key_range();
      os << "  tessel_att_mbar_wait(&qbar_, tc_ & 1);\n";
      // no key block: Q is not read
      os << "  if (nblocks_ == 0 && lane_ == 0) tessel_att_mbar_arrive(&qempty_);\n";
    } else {
      os << "  const int it0_ = 0;\n  tessel_att_mbar_wait(&qbar_, 0);\n";
    }
    if (pingpong)  // warpgroup 0 issues first (the last one's turn before it); none without key blocks
      os << "  if (wg_ == " << NWG - 1 << " && nblocks_ > 0) asm volatile(\"bar.arrive 1, " << 2 * wg_threads << ";\\n\" ::: \"memory\");\n";
  }

  // cp.async: group 0 = {Q, K_0}; the group of iteration j = {K_(j+1), V_j}; iteration j reads K_j
  // and V_(j-1), so waiting for all groups but the newest is enough, and two buffers of each suffice
  void first_copies() {
    os << "  {  /* Q once, and the first K block */\n";
    tile_copy("sq_", "qb_", BQ, D, "q0_", num(Sq) + "LL", qs);
    tile_copy("sk_(0)", "kb_", BK, D, "0LL", "kend_", ks);
    os << "    asm volatile(\"cp.async.commit_group;\\n\" ::);\n  }\n";
    os << "  const int it0_ = 0;  /* the buffers' position (as the TMA ring's, which runs on across persistent tiles) */\n";
  }

  // registers: S accumulators, O accumulators, running max / sum of the two rows a thread holds,
  // the probabilities of this block and of the previous one (read by its P V MMAs in flight)
  void accumulators() {
    os << "  float s_[" << BK / 2 << "], o_[" << E / 2 << "];\n";
    os << "  unsigned pp_[" << BK / 16 << "][4];\n";
    os << "  #pragma unroll\n  for (int x_ = 0; x_ < " << E / 2 << "; ++x_) o_[x_] = 0.f;\n";
    // defined once; each block's first S MMA overwrites them
    os << "  #pragma unroll\n  for (int x_ = 0; x_ < " << BK / 2 << "; ++x_) s_[x_] = 0.f;\n";
    os << "  float m_[2] = {-TESSEL_INF, -TESSEL_INF}, l_[2] = {0.f, 0.f};\n";
    os << "  const float kLog2e_ = 1.4426950408889634f;\n";
    if (const ir::Expr* c = scale_step()) {
      kernel::AttentionExpr x = a.steps.back();
      x.expr = c;
      x.type = DType::F32;
      os << "  const float scale_ = " << value_of(x, {}) << ";  /* the scale step's factor */\n";
      os << "  const bool fold_ = scale_ > 0.f && scale_ < TESSEL_INF;\n";
      os << "  const float scl2_ = scale_ * kLog2e_;\n";
    }
    os << "  const long long row_[2] = {q0_ + wg_ * 64 + warp_ * 16 + lane_ / 4, q0_ + wg_ * 64 + warp_ * 16 + lane_ / 4 + 8};\n";
  }

  void pv_mmas(const std::string& pad, const std::string& vbuf) {
    os << pad << "#pragma unroll\n" << pad << "for (int kk_ = 0; kk_ < " << BK / 16 << "; ++kk_)\n"
       << pad << "  tessel_att_wgmma_n" << E << "_ra1(o_, pp_[kk_], tessel_att_desc(" << vbuf << " + kk_ * 16 * " << kSwizzleRowBytes
       << ", " << BK * kSwizzleRowBytes << "));\n";
    os << pad << "asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n";
    // the MMAs in flight own the accumulators and P's registers until their wait: nothing the compiler
    // schedules may read or reuse them before it (the fences on both sides pin them)
    os << pad << "#pragma unroll\n" << pad << "for (int x_ = 0; x_ < " << E / 2 << "; ++x_) tessel_att_fence_operand(o_[x_]);\n";
    os << pad << "#pragma unroll\n" << pad << "for (int kk_ = 0; kk_ < " << BK / 16 << "; ++kk_)\n" << pad << "#pragma unroll\n" << pad
       << "for (int x_ = 0; x_ < 4; ++x_) asm volatile(\"\" : \"+r\"(pp_[kk_][x_])::\"memory\");\n";
  }

  // a key block's copies (or its wait), S_j = Q K_j^T, then O += P_(j-1) V_(j-1): both in flight
  // while the softmax of S_j runs
  void loop_head() {
    os << "  for (int jb_ = 0; jb_ < nblocks_; ++jb_) {\n";
    os << "    const int buf_ = (it0_ + jb_) % " << NB << ", pbuf_ = (it0_ + jb_ + " << NB - 1 << ") % " << NB << ";\n";
    if (ws) {
      os << "    tessel_att_mbar_wait(kfull_ + buf_, ((it0_ + jb_) / " << NB << ") & 1);  /* K_j has landed */\n";
    } else {
      std::ostringstream tmp;
      std::swap(tmp, os);
      os << "    if (jb_ + 1 < nblocks_) {\n";
      tile_copy("sk_(buf_ ^ 1)", "kb_", BK, D, "(long long)(jb_ + 1) * " + num(BK), "kend_", ks);
      os << "    }\n";
      tile_copy("sv_(buf_)", "vb_", BK, E, "(long long)jb_ * " + num(BK), "kend_", vs);
      std::swap(tmp, os);
      os << tmp.str();
      os << "    asm volatile(\"cp.async.commit_group;\\n\" ::);\n";
      os << "    asm volatile(\"cp.async.wait_group 1;\\n\" ::: \"memory\");\n";
      os << "    __syncthreads();\n    asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n";
    }
    os << "    const long long j0_ = (long long)jb_ * " << BK << ";\n";
    if (pingpong) os << "    asm volatile(\"bar.sync %0, " << 2 * wg_threads << ";\\n\" :: \"r\"(1 + wg_) : \"memory\");  /* this warpgroup's turn */\n";
    os << "    asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n";
    os << "    #pragma unroll\n    for (int x_ = 0; x_ < " << BK / 2 << "; ++x_) tessel_att_fence_operand(s_[x_]);\n";
    os << "    #pragma unroll\n    for (int x_ = 0; x_ < " << E / 2 << "; ++x_) tessel_att_fence_operand(o_[x_]);\n";
    os << "    #pragma unroll\n    for (int kk_ = 0; kk_ < " << D / 16 << "; ++kk_) {\n"
       << "      const unsigned char* qa_ = sq_ + (kk_ / 4) * " << BQ * kSwizzleRowBytes << " + wg_ * 64 * " << kSwizzleRowBytes
       << " + (kk_ % 4) * 32;\n"
       << "      const unsigned char* kbp_ = sk_(buf_) + (kk_ / 4) * " << BK * kSwizzleRowBytes << " + (kk_ % 4) * 32;\n"
       << "      if (kk_ == 0) tessel_att_wgmma_n" << BK << "_sa0z(s_, tessel_att_desc(qa_, 16), tessel_att_desc(kbp_, 16));\n"
       << "      else tessel_att_wgmma_n" << BK << "_sa0(s_, tessel_att_desc(qa_, 16), tessel_att_desc(kbp_, 16));\n    }\n";
    os << "    asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n";
    os << "    if (jb_ > 0) {\n";
    if (ws) os << "      tessel_att_mbar_wait(vfull_ + pbuf_, ((it0_ + jb_ - 1) / " << NB << ") & 1);  /* V_(j-1) has landed */\n";
    pv_mmas("      ", "sv_(pbuf_)");
    // the next warpgroup's turn (the last one skips its last: warpgroup 0 syncs once per block)
    const std::string next_turn = fmt::format(
        "      if (wg_ != {} || jb_ + 1 < nblocks_) asm volatile(\"bar.arrive %0, {};\\n\" :: \"r\"(1 + (wg_ + 1) % {}) : \"memory\");\n",
        NWG - 1, 2 * wg_threads, NWG);
    if (pingpong)
      os << next_turn;
    os << "      asm volatile(\"wgmma.wait_group.sync.aligned 1;\\n\" ::: \"memory\");\n";
    os << "    } else {\n";
    if (pingpong)
      os << next_turn;
    os << "      asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n    }\n";
    if (ws) os << "    if (lane_ == 0) tessel_att_mbar_arrive(kempty_ + buf_);  /* S_j done: K_j's slot is free */\n";
    if (persistent) os << "    if (jb_ + 1 == nblocks_ && lane_ == 0) tessel_att_mbar_arrive(&qempty_);  /* the tile's last S: Q is free */\n";
    os << "    #pragma unroll\n    for (int x_ = 0; x_ < " << BK / 2 << "; ++x_) tessel_att_fence_operand(s_[x_]);\n";
  }

  // a record expression (a step on the score, the epilogue) as C, `running` naming its inputs
  std::string value_of(const kernel::AttentionExpr& x, const std::map<std::string, std::string>& running) const {
    ValueContext ctx;
    ctx.sizes = &k.sizes;
    ctx.affine = [&](const ir::AffineExpr& e) {
      int64_t c = e.constant;
      for (const auto& [pn, pc] : e.param_coeffs) c += pc * k.sizes.at(pn);
      std::string s = "(" + num(c) + "LL";
      for (const auto& [n, cf] : e.index_coeffs) s += " + " + num(cf) + "LL * " + role_var(x.rename.at(n));
      return s + ")";
    };
    ctx.access = [&](const ir::Expr& acc) -> std::string {
      if (auto it = x.inputs.find(acc.name); it != x.inputs.end()) return running.at(it->second);
      const kernel::GlobalTensor* t = k.find_tensor(acc.name);
      TESSEL_CHECK(t, "attention kernel: no tensor " + acc.name);
      std::string lin = "0LL";
      for (size_t d = 0; d < acc.indices.size(); ++d) lin = "(" + lin + " * " + num(t->shape[d]) + "LL + " + ctx.affine(acc.indices[d]) + ")";
      return "t_" + acc.name + "[" + lin + "]";
    };
    return rounded(x.type, value_expr(*x.expr, ctx));
  }

  void score_loop(const std::vector<kernel::AttentionExpr>& steps, bool key_end) {
    os << "      #pragma unroll\n      for (int c_ = 0; c_ < " << BK / 8 << "; ++c_)\n      #pragma unroll\n      for (int h_ = 0; h_ < 4; ++h_) {\n";
    os << "        const int " << I << " = (int)row_[h_ / 2];\n";
    os << "        const int " << J << " = (int)j0_ + c_ * 8 + t4_ * 2 + (h_ % 2);\n";
    os << "        (void)" << I << "; (void)" << J << ";\n";
    os << "        float v0_ = s_[c_ * 4 + h_];\n";
    std::string cur = "v0_";
    for (size_t n = 0; n < steps.size(); ++n) {
      os << "        const float v" << n + 1 << "_ = " << value_of(steps[n], {{"score", cur}}) << ";\n";
      cur = "v" + num(n + 1) + "_";
    }
    if (key_end) os << "        const float x_ = " << J << " < " << T << " ? " << cur << " : -TESSEL_INF;\n";
    else os << "        const float x_ = " << cur << ";\n";
    // fmaxf: a NaN score makes the row's sum NaN, so every output of the row is NaN as in the definition
    os << "        s_[c_ * 4 + h_] = x_;\n        bm_[h_ / 2] = fmaxf(bm_[h_ / 2], x_);\n      }\n";
  }

  // the steps on each score, keys past the end masked. Blocks wholly inside the keys and (causal)
  // wholly below the diagonal for this warp's 16 rows take a lean path: no key-end test, the
  // mask's kept branch alone
  void scores() {
    std::vector<kernel::AttentionExpr> lean = a.steps;
    if (a.causal_offset && !lean.empty() && lean.back().expr->kind == ir::ExprKind::Apply && lean.back().expr->op == ir::Op::Select)
      lean.back().expr = lean.back().expr->args[1].get();
    os << "    float bm_[2] = {-TESSEL_INF, -TESSEL_INF};\n";
    os << "    const bool lean_ = j0_ + " << BK << " <= " << T << "LL"
       << (a.causal_offset ? " && j0_ + " + num(BK - 1) + " <= q0_ + wg_ * 64 + warp_ * 16 + " + num(*a.causal_offset) + "LL" : std::string())
       << ";\n";
    if (scale_step()) {
      // the scale folded into the exponent: the row maximum of the raw scores, scaled after (exact:
      // rounding a product by c > 0 keeps the order)
      os << "    const bool raw_ = lean_ && fold_;\n";
      os << "    if (raw_) {\n      #pragma unroll\n      for (int x_ = 0; x_ < " << BK / 2 << "; ++x_) bm_[(x_ / 2) % 2] = fmaxf(bm_[(x_ / 2) % 2], s_[x_]);\n";
      os << "      bm_[0] *= scale_; bm_[1] *= scale_;\n    } else ";
    } else {
      os << "    const bool raw_ = false;\n    ";
    }
    os << "if (lean_) {\n";
    score_loop(lean, false);
    os << "    } else {\n";
    score_loop(a.steps, true);
    os << "    }\n";
  }

  // The factor c of a scale step `score * c` (c an expression of sizes and constants, f32), the only
  // step on a block without masking; null if the steps are anything else.
  const ir::Expr* scale_step() const {
    if (a.steps.empty() || a.steps.back().type != DType::F32) return nullptr;
    const kernel::AttentionExpr& st = a.steps.back();
    const ir::Expr* e = st.expr;
    if (a.causal_offset) {
      if (e->kind != ir::ExprKind::Apply || e->op != ir::Op::Select) return nullptr;
      e = e->args[1].get();
    }
    if (a.steps.size() != 1 || e->kind != ir::ExprKind::Apply || e->op != ir::Op::Mul || e->type != DType::F32) return nullptr;
    auto is_score = [&](const ir::Expr* x) {
      if (x->kind == ir::ExprKind::Apply && x->op == ir::Op::Cast && x->type == DType::F32) x = x->args[0].get();
      if (x->kind != ir::ExprKind::Access || x->type != DType::F32) return false;
      auto it = st.inputs.find(x->name);
      return it != st.inputs.end() && it->second == "score";
    };
    std::function<bool(const ir::Expr*)> constant = [&](const ir::Expr* x) {
      if (x->kind == ir::ExprKind::Constant || x->kind == ir::ExprKind::SizeParam) return true;
      if (x->kind != ir::ExprKind::Apply) return false;
      for (const auto& y : x->args)
        if (!constant(y.get())) return false;
      return true;
    };
    if (is_score(e->args[0].get()) && constant(e->args[1].get())) return e->args[1].get();
    if (is_score(e->args[1].get()) && constant(e->args[0].get())) return e->args[0].get();
    return nullptr;
  }

  // row max across the quad, the rescale factor, exponentials (exp2 of a scaled difference): the
  // exponent as (s - m) * log2(e), the difference first, exact where a masked row's logits all
  // equal m (a fused s * log2(e) - m * log2(e) is off by m's rounding: exp2 of +-1e23 for -1e30 logits)
  void softmax() {
    os << "    float corr_[2], mu_[2];\n";
    os << "    #pragma unroll\n    for (int r_ = 0; r_ < 2; ++r_) {\n"
       << "      bm_[r_] = fmaxf(bm_[r_], __shfl_xor_sync(0xffffffffu, bm_[r_], 1));\n"
       << "      bm_[r_] = fmaxf(bm_[r_], __shfl_xor_sync(0xffffffffu, bm_[r_], 2));\n"
       << "      const float mn_ = fmaxf(m_[r_], bm_[r_]);\n"
       << "      mu_[r_] = mn_ == -TESSEL_INF ? 0.f : mn_;  /* a row masked so far: no -inf - -inf */\n"
       << "      corr_[r_] = tessel_att_ex2((m_[r_] - mu_[r_]) * kLog2e_);\n"
       << "      m_[r_] = mn_;\n      l_[r_] *= corr_[r_];\n    }\n";
    // the probabilities in place of the scores (P V of the previous block may still read pp_)
    // raw scores: one FMA, s * (c log2 e) - m log2 e, where m log2 e's rounding (|m| 2^-24) is as small
    // as the scaled score's own; for huge maxima (|m| >= 2^20) the scores are scaled first
    const std::string sum = "      s_[c_ * 4 + h_] = pv_;\n      l_[h_ / 2] += pv_;\n    }\n";
    const std::string loop = "    #pragma unroll\n    for (int c_ = 0; c_ < " + num(BK / 8) + "; ++c_)\n    #pragma unroll\n    for (int h_ = 0; h_ < 4; ++h_) {\n";
    if (scale_step()) {
      os << "    if (raw_ && fabsf(mu_[0]) < " << kFoldedMaximumBound << ".f && fabsf(mu_[1]) < " << kFoldedMaximumBound << ".f) {\n";
      os << "    const float nm_[2] = {-mu_[0] * kLog2e_, -mu_[1] * kLog2e_};\n" << loop
         << "      const float pv_ = " << rounded(a.prob_type, "tessel_att_ex2(fmaf(s_[c_ * 4 + h_], scl2_, nm_[h_ / 2]))") << ";\n" << sum;
      os << "    } else {\n";
      os << "    if (raw_) {\n      #pragma unroll\n      for (int x_ = 0; x_ < " << BK / 2 << "; ++x_) s_[x_] *= scale_;\n    }\n";
    }
    os << loop << "      const float pv_ = " << rounded(a.prob_type, "tessel_att_ex2((s_[c_ * 4 + h_] - mu_[h_ / 2]) * kLog2e_)") << ";\n" << sum;
    if (scale_step()) os << "    }\n";
  }

  // the previous block's P V done: rescale the context, pack this block's P for its P V MMAs
  void loop_tail() {
    os << "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n";
    if (ws) os << "    if (jb_ > 0 && lane_ == 0) tessel_att_mbar_arrive(vempty_ + pbuf_);  /* P V_(j-1) done: V_(j-1)'s slot is free */\n";
    os << "    #pragma unroll\n    for (int x_ = 0; x_ < " << E / 2 << "; ++x_) tessel_att_fence_operand(o_[x_]);\n";
    os << "    #pragma unroll\n    for (int kk_ = 0; kk_ < " << BK / 16 << "; ++kk_)\n    #pragma unroll\n    for (int x_ = 0; x_ < 4; ++x_) "
          "asm volatile(\"\" : \"+r\"(pp_[kk_][x_])::\"memory\");\n";
    // lazy: only where a row maximum of the warp grew (a warp-uniform branch), never on the first block (O is 0)
    os << (plan.lazy_rescale ? "    if (jb_ > 0 && __any_sync(0xffffffffu, corr_[0] != 1.f || corr_[1] != 1.f)) {\n" : "    {\n");
    os << "    #pragma unroll\n    for (int c_ = 0; c_ < " << E / 8 << "; ++c_) {\n"
       << "      o_[c_ * 4 + 0] *= corr_[0]; o_[c_ * 4 + 1] *= corr_[0]; o_[c_ * 4 + 2] *= corr_[1]; o_[c_ * 4 + 3] *= corr_[1];\n    }\n    }\n";
    os << "    #pragma unroll\n    for (int c_ = 0; c_ < " << BK / 8 << "; ++c_) {\n"
       << "      pp_[c_ / 2][(c_ % 2) * 2 + 0] = tessel_att_pack(s_[c_ * 4 + 0], s_[c_ * 4 + 1]);\n"
       << "      pp_[c_ / 2][(c_ % 2) * 2 + 1] = tessel_att_pack(s_[c_ * 4 + 2], s_[c_ * 4 + 3]);\n    }\n";
    if (!ws) os << "    __syncthreads();  /* every warpgroup is done with K_j and V_(j-1) before they are refilled */\n";
    os << "  }\n";
  }

  // the last block's P V
  void last_pv() {
    if (ws) {
      os << "  if (nblocks_ > 0) {\n";
      os << "    tessel_att_mbar_wait(vfull_ + (it0_ + nblocks_ - 1) % " << NB << ", ((it0_ + nblocks_ - 1) / " << NB << ") & 1);\n";
    } else {
      os << "  asm volatile(\"cp.async.wait_group 0;\\n\" ::: \"memory\");\n";
      os << "  __syncthreads();\n  asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");\n";
      os << "  if (nblocks_ > 0) {\n";
    }
    os << "    asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n";
    os << "    #pragma unroll\n    for (int x_ = 0; x_ < " << E / 2 << "; ++x_) tessel_att_fence_operand(o_[x_]);\n";
    pv_mmas("    ", "sv_((it0_ + nblocks_ - 1) % " + num(NB) + ")");
    os << "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n";
    os << "    #pragma unroll\n    for (int x_ = 0; x_ < " << E / 2 << "; ++x_) tessel_att_fence_operand(o_[x_]);\n  }\n";
  }

  void epilogue() {
    os << "  #pragma unroll\n  for (int r_ = 0; r_ < 2; ++r_) {\n"
       << "    l_[r_] += __shfl_xor_sync(0xffffffffu, l_[r_], 1);\n    l_[r_] += __shfl_xor_sync(0xffffffffu, l_[r_], 2);\n  }\n";
    os << "  #pragma unroll\n  for (int c_ = 0; c_ < " << E / 8 << "; ++c_)\n  #pragma unroll\n  for (int h_ = 0; h_ < 4; ++h_) {\n";
    os << "    const long long " << I << " = row_[h_ / 2];\n";
    os << "    if (" << I << " >= " << Sq << "LL) continue;\n";
    os << "    const long long " << role_var(ev) << " = c_ * 8 + t4_ * 2 + (h_ % 2);\n";
    os << "    const float l_row_ = l_[h_ / 2];\n";
    const std::string o = a.normalise_first ? "(o_[c_ * 4 + h_] / l_row_)" : "o_[c_ * 4 + h_]";
    const std::string result = a.epilogue.expr ? value_of(a.epilogue, {{"O", o}, {"Z", "l_row_"}}) : o;
    os << "    t_" << a.out.tensor << "[" << offset(a.out) << "] = " << store(a.out.dtype, result) << ";\n  }\n";
    // persistent: the last V slot is released here (the loop releases V_(j-1) at block j)
    if (persistent) os << "  if (nblocks_ > 0 && lane_ == 0) tessel_att_mbar_arrive(vempty_ + (it0_ + nblocks_ - 1) % " << NB << ");\n"
                       << "  it0_ += nblocks_;\n  }  /* tiles */\n";
    if (ws) os << "  }  /* consumers */\n";
    os << "}\n";
  }

  // persistent: the (query block, batch point) tiles
  std::string tiles() const { return num((Sq + BQ - 1) / BQ * a.size_batch()); }

  void launch(CudaProgram& p) const {
    Launch l;
    l.kernel = name;
    l.grid[0] = unsigned((Sq + BQ - 1) / BQ);
    l.grid[1] = unsigned(a.size_batch());
    if (persistent) {
      l.grid[0] = unsigned(std::min<int64_t>((Sq + BQ - 1) / BQ * a.size_batch(), int64_t(m.sm_count)));
      l.grid[1] = 1;
    }
    l.block = unsigned(NT);
    l.dynamic_shared_bytes = uint32_t(smem);
    if (ws) l.tensor_maps = {tq, tk, tv};
    if (dynamic) p.scratch_bytes = std::max<uint64_t>(p.scratch_bytes, 2 * sizeof(unsigned));  // the tile counters (zeroed once, reset by the last block)
    p.launches.push_back(l);
    p.arch = m.arch + "a";
    p.tensor_cores = true;
    p.flops = a.effective_flops();
    p.plan = plan.to_string();
    p.explain.push_back(fmt::format(
        "fused attention (online softmax, {}): wgmma kernel, {} query rows a block ({} warpgroups of 64), key blocks of {}; "
        "S = Q Kᵀ by wgmma.m64n{}k16 from 128-byte-swizzled shared memory, P in registers, O += P V by wgmma.m64n{}k16 "
        "(V N-major); the softmax of a block overlaps the P V MMAs of the one before; {}{}; {} B of shared memory",
        a.name, BQ, NWG, BK, BK, E,
        ws ? fmt::format("K / V in a ring of {} slots filled by a TMA producer warpgroup (full / empty mbarriers, no block barrier "
                         "in the loop; setmaxnreg {} / {}){}",
                         ST, producer_regs, consumer_regs,
                         pingpong ? fmt::format("; the {} consumer warpgroups take turns issuing their MMAs (ping-pong)", NWG) : "")
           : std::string("K / V double-buffered by cp.async"),
        a.causal_offset ? "; causal blocks above the diagonal skipped" : "", smem));
    if (plan.heavy_first) p.explain.push_back("  query blocks in reverse order: the ones with the most key blocks start first");
    if (persistent) p.explain.push_back("  persistent: one block an SM walks the tiles, the producer fetching the next tile's Q and K / V during the last one's epilogue");
    if (dynamic) p.explain.push_back("  dynamic: each block claims its next tile from a counter in scratch (query blocks of a batch point in order), the producer passing it on with Q");
    if (plan.lazy_rescale) p.explain.push_back("  the context rescaled only where a row maximum of the warp grew");
    if (plan.occupancy > 1)
      p.explain.push_back(fmt::format("  {} blocks resident an SM, one's first copies and epilogue overlapping another's MMAs: {} registers a consumer "
                                      "thread, {} K / V slot(s), {} B of shared memory a block",
                                      plan.occupancy, consumer_regs, ws ? ST : 2, smem));
    if (scale_step()) p.explain.push_back("  the scale step folded into the exponent's FMA on blocks without masking");
  }
};

}  // namespace

void emit_attention_wgmma(const kernel::Kernel& k, const kernel::Attention& a, const isa::GpuMachine& m, std::ostringstream& os,
                          CudaProgram& p, const WgmmaAttentionPlan& plan) {
  WgmmaAttention(k, a, m, os, plan).emit(p);
}

}  // namespace tessel::emit_cuda
