#include "compiler/emit_cuda/simt_gemm_policy.h"

#include <algorithm>
#include <cmath>

#include "compiler/emit_cuda/operand_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// Policy weights of the ranking model (not hardware facts): the threads per SM that keep its FMA
// lanes busy with a register tile's independent FMAs in flight, and the cost of one K slice's
// barrier and shared round trip relative to one FMA per lane.
constexpr int kBusyThreadsPerSm = 128;
// issue slots of one 16-byte copy (address, guard, cp.async) and of a K slice's fixed work
constexpr double kInstructionsPerCopy = 12;
constexpr double kSliceInstructions = 40;
constexpr double kSliceInstructionsPerWarp = 20;  // the barrier's wait grows with the block's warps
// operand bytes the L2 delivers per SM while its FMA lanes do one cycle's work, relative to the
// lanes (policy weight fitted to the H100 sweep in docs/results/gpu_f32_gemm.md: tiles under 32x32
// lose to their L2 traffic there)
constexpr double kL2BytesPerLaneCycle = 46.0 / 128.0;
constexpr double kSliceLatency = 400.0;
// TF32 mma.sync did about 3x the MACs of the FMA kernel per cycle on an H100 (128x128 tiles, 2048^3;
// policy weight, ranking only)
constexpr double kTf32Speedup = 3.0;
// accumulators a thread may keep (the rest of its 255 registers hold fragments and addresses)
constexpr int kMaxAccumulatorsPerThread = 128;
constexpr int kMaxStages = 4;
// registers per thread under __launch_bounds__(threads, 2) that hold an 8x8 tile, its fragments
// and addresses without spilling (ptxas, sm_90: 128, no spills)
constexpr int64_t kRegistersForTwoBlocks = 128;

struct Shape {
  int bm, bn, bk, tm, tn;
};

// The plans considered, biggest first. SIMT: thread tiles 8x8 (FMAs per shared load 4) down to
// 4x4 for small problems; TF32: warp tiles of m16n8k8 fragments.
constexpr Shape kSimtShapes[] = {
    {128, 128, 16, 8, 8}, {128, 64, 16, 8, 8}, {64, 128, 16, 8, 8}, {64, 64, 16, 8, 8}, {64, 64, 16, 4, 4},
    {64, 32, 16, 4, 4},   {32, 64, 16, 4, 4},  {32, 32, 16, 4, 4},
};  // one-warp blocks (16x32, 32x16) were never the fastest in the H100 sweep (docs/results/gpu_f32_gemm.md)
constexpr Shape kTf32Shapes[] = {
    {128, 128, 32, 64, 32}, {128, 64, 32, 64, 32}, {64, 128, 32, 32, 64}, {64, 64, 32, 32, 32},
    {64, 32, 32, 32, 16},   {32, 64, 32, 16, 32},  {32, 32, 32, 16, 16},
};

bool supported_acc(DType t) { return t == DType::F32 || t == DType::I32; }

}  // namespace

std::string simt_gemm_obstacle(const Contraction& c, const isa::GpuMachine& m, bool tf32) {
  if (c.a.dtype != c.b.dtype)
    return std::string("operands of different dtypes (") + std::string(dtype_name(c.a.dtype)) + ", " + std::string(dtype_name(c.b.dtype)) + ")";
  if (tf32) {
    if (c.in_type != DType::F32 || c.acc_type != DType::F32)
      return "TF32 takes f32 -> f32 contractions, this one is " + std::string(dtype_name(c.in_type)) + " -> " + std::string(dtype_name(c.acc_type));
    if (!m.mma_sync) return m.arch + " has no mma.sync (TF32 mma.sync.m16n8k8 needs sm_80 or newer)";
    return "";
  }
  if (!supported_acc(c.acc_type))
    return "accumulator dtype " + std::string(dtype_name(c.acc_type)) + " (the register-blocked SIMT contraction accumulates f32 or i32)";
  if (c.acc_type == DType::I32 && dtype_is_float(c.in_type)) return "float operands with an i32 accumulator";
  return "";
}

int simt_operand_pad(const SimtGemmPlan& plan, bool k_inner, int tile_outer, int eb) {
  // 16 bytes keeps rows aligned for 16-byte copies; TF32 fragments read 8 rows of 4 lanes of an
  // outer-inner tile: rows 8 elements (32 B) apart mod 32 banks make those reads conflict-free
  if (plan.tf32 && !k_inner && tile_outer % 32 == 0) return 8;
  return std::max(1, 16 / eb);
}

int64_t simt_plan_shared_bytes(const Contraction& c, const SimtGemmPlan& plan, const isa::GpuMachine& m) {
  const int eb = elem_bytes(c.in_type);
  const OperandPlan pa = plan_operand(c.a, c, c.sizes, c.m, c.k, plan.bm, plan.bk, c.size_m(), m);
  const OperandPlan pb = plan_operand(c.b, c, c.sizes, c.n, c.k, plan.bn, plan.bk, c.size_n(), m);
  auto stage = [&](const OperandPlan& p) {
    const int pad = simt_operand_pad(plan, p.k_inner, p.tile_outer, eb);
    return int64_t(p.k_inner ? p.tile_outer : p.bk) * ((p.k_inner ? p.bk : p.tile_outer) + pad);
  };
  const int64_t bytes = int64_t(plan.stages) * (stage(pa) + stage(pb)) * eb;
  return (bytes + 127) / 128 * 128;
}

std::string simt_plan_obstacle(const Contraction& c, const SimtGemmPlan& g, const isa::GpuMachine& m) {
  const std::string kind = g.tf32 ? "warp tile" : "thread tile";
  if (g.bm <= 0 || g.bn <= 0 || g.bk <= 0 || g.tm <= 0 || g.tn <= 0) return "tile sizes must be positive";
  if (g.bm % g.tm || g.bn % g.tn)
    return "the block tile " + S(g.bm) + "x" + S(g.bn) + " is not a multiple of the " + kind + " " + S(g.tm) + "x" + S(g.tn);
  if (g.stages < 2 || g.stages > kMaxStages) return "stages must be 2 to " + S(kMaxStages) + " (double buffering or deeper)";
  if (g.tf32) {
    if (!m.mma_sync) return m.arch + " has no mma.sync (TF32 needs sm_80 or newer)";
    if (g.tm % 16 || g.tn % 8) return "the TF32 warp tile must be a multiple of the m16n8 fragment";
    if (g.bk % 8) return "bk must be a multiple of 8 (the m16n8k8 TF32 step)";
    if ((g.tm / 16) * (g.tn / 8) * 4 > kMaxAccumulatorsPerThread) return "the warp tile needs more than " + S(kMaxAccumulatorsPerThread) + " accumulators per thread";
  } else {
    if (g.tm % 4 || g.tn % 4) return "the thread tile must be a multiple of 4 (16-byte shared loads of 4 elements)";
    if (g.bk % 4) return "bk must be a multiple of 4";
    if (g.tm * g.tn > kMaxAccumulatorsPerThread) return "a thread tile of more than " + S(kMaxAccumulatorsPerThread) + " accumulators";
  }
  const int threads = g.threads(int(m.warp_size));
  if (threads % int(m.warp_size)) return S(threads) + " threads is not a whole number of " + S(m.warp_size) + "-thread warps";
  if (threads > int(m.max_threads_per_block)) return S(threads) + " threads per block (the machine allows " + S(m.max_threads_per_block) + ")";
  if (!g.tf32 && (threads / int(m.warp_size)) > 0 && g.bm % (threads / int(m.warp_size)))
    return "the block tile's rows " + S(g.bm) + " do not split over its " + S(threads / int(m.warp_size)) + " warps";
  const std::string why = simt_gemm_obstacle(c, m, g.tf32);
  if (!why.empty()) return why;
  const int64_t smem = simt_plan_shared_bytes(c, g, m);
  if (smem > int64_t(m.shared_bytes_per_block_optin))
    return S(g.stages) + " stages need " + S(smem) + " B of shared memory (" + m.arch + " allows " + S(m.shared_bytes_per_block_optin) + " per block)";
  if (c.size_batch() > 65535) return "more than 65535 batch indices (grid z)";
  return "";
}

int simt_min_blocks_per_sm(const Contraction& c, const SimtGemmPlan& g, const isa::GpuMachine& m) {
  const int64_t threads = g.threads(int(m.warp_size));
  const bool smem_twice = 2 * (simt_plan_shared_bytes(c, g, m) + int64_t(m.shared_bytes_reserved_per_block)) <= int64_t(m.shared_bytes_per_sm);
  const bool regs_twice = 2 * threads * kRegistersForTwoBlocks <= int64_t(m.registers_per_sm);
  return smem_twice && regs_twice ? 2 : 1;
}

double simt_plan_cost(const Contraction& c, const SimtGemmPlan& g, const isa::GpuMachine& m) {
  const int threads = g.threads(int(m.warp_size));
  const int64_t blocks = ((c.size_m() + g.bm - 1) / g.bm) * ((c.size_n() + g.bn - 1) / g.bn) * c.size_batch();
  const int64_t kp = (c.size_k() + g.bk - 1) / g.bk * g.bk;
  // resident blocks per SM: shared memory, registers (accumulators + fragments + ~32 for addresses)
  const int64_t smem = simt_plan_shared_bytes(c, g, m) + int64_t(m.shared_bytes_reserved_per_block);
  const int regs = g.tf32 ? (g.tm / 16) * (g.tn / 8) * 4 + (g.tm / 16) * 4 + (g.tn / 8) * 2 + 40 : g.tm * g.tn + 4 * (g.tm + g.tn) + 32;
  const int bounded_regs = simt_min_blocks_per_sm(c, g, m) == 2 ? std::min<int>(regs, kRegistersForTwoBlocks) : std::min(regs, 255);
  int64_t occ = std::min<int64_t>(int64_t(m.shared_bytes_per_sm) / std::max<int64_t>(smem, 1),
                                  int64_t(m.registers_per_sm) / (int64_t(bounded_regs) * threads));
  occ = std::max<int64_t>(occ, 1);
  const int64_t sms = std::max<int64_t>(m.sm_count, 1);
  const int64_t waves = (blocks + sms * occ - 1) / (sms * occ);
  const int64_t sharing = std::min<int64_t>(occ, (blocks + sms - 1) / sms);  // blocks an SM runs at once
  const double busy = std::min(1.0, double(threads * sharing) / kBusyThreadsPerSm);
  // the share of a thread's issue slots per K slice that are FMAs: its tile's FMAs against its
  // 16-byte shared reads, its copies of the slice (address arithmetic included) and the slice's
  // barrier and pointer updates
  const double fmas = double(g.tm) * g.tn * g.bk;
  const double reads = g.tf32 ? 0 : double(g.tm + g.tn) * g.bk / 4;
  const double copies = double(g.bm + g.bn) * g.bk / 4 / threads * kInstructionsPerCopy;
  const double eff = g.tf32 ? kTf32Speedup * std::min(1.0, double(g.tm * g.tn) / double(g.tm + g.tn) / 10.7)
                            : fmas / (fmas + reads + copies + kSliceInstructions + kSliceInstructionsPerWarp * threads / double(m.warp_size));
  const double per_wave = double(g.bm) * g.bn * double(kp) * double(sharing) / (eff * busy);
  const double lanes = double(4 * m.warp_size);
  const double compute = double(waves) * per_wave / lanes;
  // every block reads its bm x K and K x bn operand panels through the L2
  const double l2_bytes = double(c.size_m()) * double(c.size_n()) * double(kp) * double(c.size_batch()) *
                          (1.0 / g.bm + 1.0 / g.bn) * elem_bytes(c.in_type);
  const double l2 = l2_bytes / double(sms) / (kL2BytesPerLaneCycle * lanes);
  return std::max(compute, l2) + double(kp / g.bk) * kSliceLatency * double(waves);
}

std::vector<SimtGemmPlan> simt_gemm_candidates(const Contraction& c, const isa::GpuMachine& m, bool tf32) {
  std::vector<SimtGemmPlan> out;
  if (!simt_gemm_obstacle(c, m, tf32).empty()) return out;
  const bool async = m.has(isa::GpuFeature::CpAsync);
  for (const Shape& s : tf32 ? std::vector<Shape>(std::begin(kTf32Shapes), std::end(kTf32Shapes))
                             : std::vector<Shape>(std::begin(kSimtShapes), std::end(kSimtShapes))) {
    SimtGemmPlan g;
    g.bm = s.bm, g.bn = s.bn, g.bk = s.bk, g.tm = s.tm, g.tn = s.tn, g.tf32 = tf32;
    // copies 2 K slices ahead with cp.async; synchronous loads gain nothing from a third buffer
    g.stages = async ? 3 : 2;
    if (!simt_plan_obstacle(c, g, m).empty()) g.stages = 2;
    if (simt_plan_obstacle(c, g, m).empty()) out.push_back(g);
  }
  // cheapest first; at equal cost more blocks first (each fetches less before its first FMA, so a
  // latency-bound problem finishes sooner), then the list's order
  auto blocks = [&](const SimtGemmPlan& g) { return ((c.size_m() + g.bm - 1) / g.bm) * ((c.size_n() + g.bn - 1) / g.bn); };
  std::stable_sort(out.begin(), out.end(), [&](const SimtGemmPlan& x, const SimtGemmPlan& y) {
    const double cx = simt_plan_cost(c, x, m), cy = simt_plan_cost(c, y, m);
    if (cx < cy * (1 - 1e-9)) return true;
    if (cy < cx * (1 - 1e-9)) return false;
    return blocks(x) > blocks(y);
  });
  return out;
}

std::string SimtGemmPlan::to_string() const {
  return S(bm) + "x" + S(bn) + "x" + S(bk) + "/" + S(tm) + "x" + S(tn) + "/st" + S(stages) + (tf32 ? "/tf32" : "/simt");
}

bool SimtGemmPlan::is_plan_text(const std::string& text) {
  auto ends = [&](const std::string& tail) { return text.size() > tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0; };
  return ends("/simt") || ends("/tf32");
}

SimtGemmPlan SimtGemmPlan::parse(const std::string& text) {
  auto fail = [&](const std::string& why) -> SimtGemmPlan {
    throw UserError("SIMT contraction plan '" + text + "': " + why +
                    " (expected BMxBNxBK/TMxTN/stS/simt with a thread tile, or BMxBNxBK/WMxWN/stS/tf32 with a warp tile, as `tessel compile --explain` prints them)");
  };
  std::vector<std::string> parts;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find('/', at), text.size());
    parts.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  if (parts.size() != 4) fail("needs four fields");
  auto number = [&](const std::string& s, const char* what) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) fail(std::string("bad ") + what + " '" + s + "'");
    return std::stoi(s);
  };
  auto dims = [&](const std::string& s, size_t n, const char* what) {
    std::vector<int> v;
    for (size_t at = 0; at <= s.size();) {
      const size_t end = std::min(s.find('x', at), s.size());
      v.push_back(number(s.substr(at, end - at), what));
      at = end + 1;
    }
    if (v.size() != n) fail(std::string(what) + " needs " + S(int64_t(n)) + " sizes");
    return v;
  };
  SimtGemmPlan g;
  if (parts[3] == "tf32") g.tf32 = true;
  else if (parts[3] != "simt") fail("the last field must be simt or tf32");
  const auto b = dims(parts[0], 3, "block tile"), t = dims(parts[1], 2, g.tf32 ? "warp tile" : "thread tile");
  g.bm = b[0], g.bn = b[1], g.bk = b[2], g.tm = t[0], g.tn = t[1];
  if (parts[2].rfind("st", 0) != 0) fail("third field must be stN");
  g.stages = number(parts[2].substr(2), "stages");
  return g;
}

}  // namespace tessel::emit_cuda
