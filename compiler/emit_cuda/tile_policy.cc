#include "compiler/emit_cuda/tile_policy.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "compiler/emit_cuda/operand_plan.h"
#include "compiler/emit_cuda/repack_plan.h"
#include "compiler/emit_cuda/tile_scheduler.h"
#include "compiler/emit_cuda/tma_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

using isa::GpuFeature;

constexpr int kMaxWarpsPerBlock = 16;           // policy: larger blocks measured no faster
constexpr int kMaxFragmentsPerWarp = 16;        // policy: accumulator registers per thread
constexpr int kMaxWarpgroupsPerBlock = 3;
constexpr int kMaxWarpgroupTilesM = 2;          // m64 tiles per warpgroup
constexpr int kWgmmaBk = 64;                    // one 128-byte swizzled row of f16 per K tile
constexpr int kAccumulatorBytes = 4;            // f32 / s32 accumulators

int64_t shared_epilogue_bytes(const TcConfig& g, int k_slices) {
  return int64_t(k_slices) * g.bm * (g.bn + kAccumulatorRowPad) * kAccumulatorBytes;
}

std::string over_budget(const isa::GpuMachine& m, int64_t pipe, int64_t epi) {
  if (std::max(pipe, epi) + kStaticSharedBytes > int64_t(m.shared_bytes_per_block_optin)) return "shared memory over the " + m.arch + " budget";
  return "";
}

// The wgmma-specific rules (sm_90a: warpgroups, swizzled operands, bk = 64).
std::string wgmma_obstacle(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  const bool tf32 = tf32_wgmma_operand(c.in_type);
  if (!m.wgmma || !(warp_mma_operand(c.in_type) || tf32)) return "wgmma tiles need sm_90 (compiled for sm_90a) and f16 or bf16 operands";
  if (tf32 && !g.tma_ws()) return "f32 (TF32) wgmma tiles run on the persistent TMA kernel (/ws)";
  if (g.k_split != 1 || (g.k_blocks != 1 && !g.tma_ws())) return "wgmma tiles take no K split and no mma.sync";
  if (g.tma_ws()) {
    if (!m.has(GpuFeature::TensorMaps)) return "the persistent TMA kernel (/ws) needs tensor maps (sm_90)";
    if (g.issue != CopyIssue::after_mma || g.keep_operands || g.reduce != SplitKReduce::last_block)
      return "the persistent TMA kernel (/ws) takes none of /wgd /cf /el /bc /cl /red";
    if (g.k_blocks != 1) return "the persistent TMA kernel (/ws) splits K by stream-K (/sk), not /kb";
  }
  if (g.store == OutputStore::evict_first && !direct_store(c, g) && !g.tma_ws()) return "streaming stores need a plain output (or the persistent kernel's register epilogue)";
  if (g.keep_operands && g.store != OutputStore::evict_first) return "evict-last operand copies go with evict-first output stores";
  const int wgm = m.wgmma->m;
  const int row = kSwizzleRowBytes / elem_bytes(c.in_type);  // one 128-byte swizzled row per K tile: 64 x 16 bits, 32 x f32
  if (g.bk != row || g.wm % wgm || g.wn != g.bn || g.bn > m.wgmma->n || g.wm / wgm > kMaxWarpgroupTilesM)
    return "wgmma tiles need bk = " + S(row) + ", wm = 64 or 128, wn = bn <= 256";
  if (g.stages < (g.tma_ws() ? 2 : 3)) return "wgmma tiles need at least 3 stages (one MMA group stays in flight; 2 with /ws)";
  if (g.warps() > kMaxWarpgroupsPerBlock * int(m.warps_per_warpgroup)) return "wgmma tiles take at most 3 warpgroups";
  const OperandPlan a = plan_operand(c.a, c, c.sizes, c.m, c.k, g.bm, g.bk, c.size_m(), m, true);
  const OperandPlan b = plan_operand(c.b, c, c.sizes, c.n, c.k, g.bn, g.bk, c.size_n(), m, true);
  if (a.vec == 1 || b.vec == 1) return "wgmma tiles need 16-byte loads of both operands";
  if (tf32 && (!a.k_inner || !b.k_inner))  // PTX: imm-trans-a / -b exist for .f16 / .bf16 only
    return "wgmma .tf32 reads both operands K-major (no transposed form): an M- or N-contiguous operand is read from its K-major copy (/rp)";
  if ((!a.k_inner && g.wm % kWgmmaBk) || (!b.k_inner && g.bn % kWgmmaBk)) return "wgmma: an M- or N-contiguous operand needs tiles of 64";
  if (g.tma_ws()) {
    const bool mc = g.schedule == WsSchedule::multicast;
    const TmaPlan ta = tma_plan(a, c, m), tb = tma_plan(b, c, m, mc ? 2 : 1);
    if (!ta.ok) return "TMA for " + c.a.tensor + ": " + ta.why;
    if (!tb.ok) return "TMA for " + c.b.tensor + ": " + tb.why;
    if (mc && ta.m_segment > 0) return "TMA multicast (/mc) pairs M tiles; a blocked window's tiles are cut per output row";
  }
  const int64_t pipe = int64_t(g.stages) * (g.bm + g.bn) * g.bk * elem_bytes(c.in_type) + kSwizzleAlignBytes + ws_epilogue_bytes(c, g);
  // the persistent kernel's epilogue runs from the registers (its staging chunks are in `pipe`)
  const int64_t epi = direct_store(c, g) || g.tma_ws() ? 0 : shared_epilogue_bytes(g, 1) + kSwizzleAlignBytes;
  return over_budget(m, pipe, epi);
}

// The rules of the variants (split-K across blocks, mma.sync, clusters, store and copy flavours).
std::string variant_obstacle(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  if (g.mma == MmaKind::mma_sync && (!m.mma_sync || !warp_mma_operand(c.in_type) || g.k_split != 1 || g.k_blocks != 1))
    return "mma.sync tiles need sm_80+, f16 or bf16 operands and no K split";
  if (g.reduce == SplitKReduce::atomic && (g.k_blocks < 2 || !c.plain_output)) return "atomic split-K needs k_blocks > 1 and a plain output";
  if (g.reduce == SplitKReduce::cluster && (!m.has(GpuFeature::ThreadBlockClusters) || g.k_blocks < 2 || g.k_blocks > int(m.cluster_max_blocks)))
    return "cluster split-K needs sm_90+ and 2..8 blocks per tile";
  if (g.k_blocks > 1 && (g.k_blocks - 1) * k_tiles_per_block(c, g) >= k_tiles(c, g))
    return "split-K over " + S(g.k_blocks) + " blocks leaves a block without K tiles";
  if (g.warps() > kMaxWarpsPerBlock) return "more than 16 warps per block";
  if (g.store == OutputStore::evict_first && g.mma == MmaKind::wmma) return "streaming stores are for the wgmma and mma.sync accumulators";
  if (g.keep_operands && !g.wgmma()) return "evict-last operand copies are for wgmma tiles";
  if (g.issue == CopyIssue::before_mma && !g.wgmma()) return "copies before the MMA issue are a wgmma variant";
  if (g.schedule == WsSchedule::stream_k && !g.tma_ws()) return "stream-K (/sk) is a variant of the persistent TMA kernel (/ws)";
  if (g.schedule == WsSchedule::pingpong && (!g.tma_ws() || g.bm != g.wm)) return "ping-pong consumers (/pp) need /ws, bm = wm (a tile per warpgroup) and no /sk";
  if (g.schedule == WsSchedule::multicast && (!g.tma_ws() || !m.has(GpuFeature::ThreadBlockClusters) || m.cluster_max_blocks < 2))
    return "TMA multicast (/mc) needs /ws without /sk or /pp, and thread-block clusters (sm_90)";
  if (g.store == OutputStore::tma) {
    if (!g.tma_ws()) return "TMA stores (/ts) are an epilogue of the persistent TMA kernel (/ws), without /cs";
    // the TMA unit clips the tails: unlike the register stores, any M
    if (!c.plain_output && !tma_store_fused(c)) return "TMA stores (/ts) need a plain f32 output or one dense f16 / bf16 / f32 output of the fused statements";
    if (c.plain_output && c.acc_type != DType::F32) return "TMA stores (/ts) of a plain output need f32 accumulators";
    if (g.bn % (2 * kTmaStoreChunkColumns)) return "TMA stores (/ts) need bn a multiple of 64 (pairs of 32-column chunks)";
    const int ob = c.plain_output ? kAccumulatorBytes : dtype_bytes(c.stored_outputs[0].second);
    if ((c.size_n() * ob) % kTmaAlignBytes) return "TMA stores (/ts): output rows not a multiple of 16 bytes";
    if (c.batch.size() > 1) return "TMA stores (/ts): at most one batch dim";
  }
  if (g.loader == OperandLoader::bulk) {
    if (!m.has(GpuFeature::BulkCopy) || g.wgmma() || g.k_blocks != 1)
      return "bulk operand copies need sm_90+, WMMA or mma.sync tiles and no split-K across blocks";
    const OperandPlan a = plan_operand(c.a, c, c.sizes, c.m, c.k, g.bm, g.bk, c.size_m(), m);
    const OperandPlan b = plan_operand(c.b, c, c.sizes, c.n, c.k, g.bn, g.bk, c.size_n(), m);
    const BulkPlan ba = bulk_plan(a, c, m), bb = bulk_plan(b, c, m);
    if (!ba.ok && !bb.ok) return "bulk operand copies: neither operand qualifies (A: " + ba.why + "; B: " + bb.why + ")";
  }
  return "";
}

}  // namespace

const char* name(MmaKind k) {
  switch (k) {
    case MmaKind::wmma: return "wmma";
    case MmaKind::mma_sync: return "mma.sync";
    case MmaKind::wgmma: return "wgmma";
  }
  return "?";
}
const char* name(OperandLoader k) {
  switch (k) {
    case OperandLoader::cp_async: return "cp.async";
    case OperandLoader::bulk: return "bulk";
    case OperandLoader::tma_ws: return "tma-ws";
  }
  return "?";
}
const char* name(SplitKReduce k) {
  switch (k) {
    case SplitKReduce::last_block: return "last-block";
    case SplitKReduce::atomic: return "atomic";
    case SplitKReduce::cluster: return "cluster";
  }
  return "?";
}
const char* name(CopyIssue k) {
  switch (k) {
    case CopyIssue::after_mma: return "after-mma";
    case CopyIssue::before_mma: return "before-mma";
    case CopyIssue::deep: return "deep";
  }
  return "?";
}
const char* name(WsSchedule k) {
  switch (k) {
    case WsSchedule::grouped: return "grouped";
    case WsSchedule::stream_k: return "stream-k";
    case WsSchedule::pingpong: return "ping-pong";
    case WsSchedule::multicast: return "multicast";
  }
  return "?";
}
const char* name(OutputStore k) {
  switch (k) {
    case OutputStore::plain: return "plain";
    case OutputStore::evict_first: return "evict-first";
    case OutputStore::tma: return "tma";
  }
  return "?";
}

std::string TcConfig::to_string() const {
  auto flag = [](bool on, const char* text) { return std::string(on ? text : ""); };
  const bool cp_wgmma = wgmma() && !tma_ws();
  return S(bm) + "x" + S(bn) + "x" + S(bk) + "/" + S(wm) + "x" + S(wn) + "/ks" + S(k_split) + "/st" + S(stages) +
         (k_blocks > 1 ? "/kb" + S(k_blocks) : "") + flag(mma == MmaKind::mma_sync, "/mma") + flag(reduce == SplitKReduce::atomic, "/red") +
         flag(reduce == SplitKReduce::cluster, "/cl") + (cp_wgmma ? (issue == CopyIssue::deep ? "/wgd" : "/wg") : "") +
         flag(store == OutputStore::evict_first, "/cs") + flag(keep_operands, "/el") + flag(issue == CopyIssue::before_mma, "/cf") +
         flag(loader == OperandLoader::bulk, "/bc") + flag(tma_ws(), "/ws") + flag(schedule == WsSchedule::stream_k, "/sk") +
         flag(schedule == WsSchedule::pingpong, "/pp") + flag(schedule == WsSchedule::multicast, "/mc") + flag(repack, "/rp") +
         flag(store == OutputStore::tma, "/ts");
}

TcConfig TcConfig::parse(const std::string& text) {
  // "BMxBNxBK/WMxWN/ksK/stS" then any of /kbN /mma /red /cl /wg /wgd /cs /el /cf /bc /ws /sk /pp /mc /rp /ts (to_string's form)
  auto fail = [&](const std::string& why) -> TcConfig {
    throw UserError("GPU tiles '" + text + "': " + why + " (expected BMxBNxBK/WMxWN/ksK/stS[/kbN][/mma][/red][/cl][/wg|/wgd][/cs][/el][/cf][/bc][/ws][/sk][/pp][/mc][/rp][/ts], "
                    "as `tessel compile --explain` prints them)");
  };
  auto split = [](const std::string& s, char sep) {
    std::vector<std::string> out;
    for (size_t at = 0; at <= s.size();) {
      const size_t end = std::min(s.find(sep, at), s.size());
      out.push_back(s.substr(at, end - at));
      at = end + 1;
    }
    return out;
  };
  const std::vector<std::string> parts = split(text, '/');
  auto number = [&](const std::string& s, const char* what) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) fail(std::string("bad ") + what + " '" + s + "'");
    return std::stoi(s);
  };
  auto dims = [&](const std::string& s, size_t n, const char* what) {
    std::vector<int> v;
    for (const auto& part : split(s, 'x')) v.push_back(number(part, what));
    if (v.size() != n) fail(std::string(what) + " needs " + std::to_string(n) + " sizes");
    return v;
  };
  if (parts.size() < 4) fail("too few fields");
  TcConfig g;
  const auto b = dims(parts[0], 3, "block tile"), w = dims(parts[1], 2, "warp tile");
  g.bm = b[0], g.bn = b[1], g.bk = b[2], g.wm = w[0], g.wn = w[1];
  if (parts[2].rfind("ks", 0) != 0) fail("third field must be ksN");
  g.k_split = number(parts[2].substr(2), "k split");
  if (parts[3].rfind("st", 0) != 0) fail("fourth field must be stN");
  g.stages = number(parts[3].substr(2), "stages");
  // a field choosing a value of an enum that an earlier field chose otherwise is refused by name
  std::string chosen[6];  // the field that chose each enum: main loop, copy, reduce, issue, schedule, store
  auto choose = [&](auto& slot, auto value, int which, const char* what, const std::string& f) {
    if (!chosen[which].empty() && slot != value)
      fail("'/" + chosen[which] + "' and '/" + f + "' are two choices of the " + what + " (" + name(slot) + ", " + name(value) + "); give one");
    slot = value;
    if (chosen[which].empty()) chosen[which] = f;
  };
  for (size_t i = 4; i < parts.size(); ++i) {
    const std::string& f = parts[i];
    if (f.rfind("kb", 0) == 0) g.k_blocks = number(f.substr(2), "k blocks");
    else if (f == "mma") choose(g.mma, MmaKind::mma_sync, 0, "main-loop instructions", f);
    else if (f == "red") choose(g.reduce, SplitKReduce::atomic, 2, "split-K reduction", f);
    else if (f == "cl") choose(g.reduce, SplitKReduce::cluster, 2, "split-K reduction", f);
    else if (f == "wg") choose(g.mma, MmaKind::wgmma, 0, "main-loop instructions", f);
    else if (f == "wgd") choose(g.mma, MmaKind::wgmma, 0, "main-loop instructions", f), choose(g.issue, CopyIssue::deep, 3, "copy issue", f);
    else if (f == "cs") choose(g.store, OutputStore::evict_first, 5, "output store", f);
    else if (f == "el") g.keep_operands = true;
    else if (f == "cf") choose(g.issue, CopyIssue::before_mma, 3, "copy issue", f);
    else if (f == "bc") choose(g.loader, OperandLoader::bulk, 1, "operand loader", f);
    else if (f == "ws") choose(g.mma, MmaKind::wgmma, 0, "main-loop instructions", f), choose(g.loader, OperandLoader::tma_ws, 1, "operand loader", f);
    else if (f == "sk") choose(g.schedule, WsSchedule::stream_k, 4, "persistent schedule", f);
    else if (f == "pp") choose(g.schedule, WsSchedule::pingpong, 4, "persistent schedule", f);
    else if (f == "mc") choose(g.schedule, WsSchedule::multicast, 4, "persistent schedule", f);
    else if (f == "rp") g.repack = true;
    else if (f == "ts") choose(g.store, OutputStore::tma, 5, "output store", f);
    else fail("unknown field '" + f + "'");
  }
  if (g.to_string() != text) fail("fields out of order or repeated (this reads as " + g.to_string() + ")");
  return g;
}

int64_t ws_epilogue_bytes(const Contraction& c, const TcConfig& g) {
  const int consumers = g.schedule == WsSchedule::pingpong ? 2 : g.bm / g.wm;
  if (g.tma_ws() && g.store == OutputStore::tma && c.plain_output) return int64_t(consumers) * 2 * g.wm * kTmaStoreChunkColumns * kAccumulatorBytes;
  if (!g.tma_ws() || direct_store(c, g)) return 0;
  const int64_t staged = int64_t(consumers) * g.wm * (kStagedChunkColumns + kAccumulatorRowPad) * kAccumulatorBytes;
  if (g.store != OutputStore::tma || !tma_store_fused(c)) return staged;
  // then each consumer warpgroup's chunk of the fused output, which the TMA unit stores
  return staged + int64_t(consumers) * g.wm * kStagedChunkColumns * dtype_bytes(c.stored_outputs[0].second);
}

bool tma_store_fused(const Contraction& c) {
  const DType t = c.stored_outputs.empty() ? DType::F32 : c.stored_outputs[0].second;
  return !c.plain_output && c.dense_output && c.stored_outputs.size() == 1 && (t == DType::F16 || t == DType::BF16 || t == DType::F32) &&
         c.size_n() % 4 == 0;
}

bool direct_store(const Contraction& c, const TcConfig& g) {
  return c.plain_output && g.k_split == 1 && g.k_blocks == 1 && c.size_m() % 16 == 0 && c.size_n() % 16 == 0;
}

int64_t k_tiles(const Contraction& c, const TcConfig& g) { return (c.size_k() + g.bk - 1) / g.bk; }
int64_t k_tiles_per_block(const Contraction& c, const TcConfig& g) { return (k_tiles(c, g) + g.k_blocks - 1) / g.k_blocks; }
int64_t m_segment(const Contraction& c, const TcConfig& g) {
  BlockedWindow v;
  // a repacked kernel reads copies, never a blocked window (repack_plan.h refuses a narrow copy)
  if (!g.tma_ws() || g.repack || !blocked_window(c.a, c.m, c.k, c.sizes, v).empty()) return 0;
  return v.Q * v.NI;
}

int64_t m_tiles(const Contraction& c, const TcConfig& g) {
  const int64_t seg = m_segment(c, g);
  if (seg > 0) return c.size_m() / seg * ((seg + g.bm - 1) / g.bm);
  return (c.size_m() + g.bm - 1) / g.bm;
}

int64_t output_tiles(const Contraction& c, const TcConfig& g) {
  return c.size_batch() * m_tiles(c, g) * ((c.size_n() + g.bn - 1) / g.bn);
}

namespace {

// split-K and stream-K scratch (before any operand copies)
uint64_t counter_scratch_bytes(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  if (g.tma_ws() && g.schedule == WsSchedule::stream_k) {  // a counter per stream-K tile, two partial tiles per block (its first and last range piece)
    const PersistentSplit p = persistent_split(c, g, m);
    if (p.sk_tiles == 0) return 0;
    return uint64_t(split_counter_bytes(p.sk_tiles) + p.blocks * 2 * int64_t(g.bm) * g.bn * 4);
  }
  if (g.k_blocks <= 1 || g.reduce != SplitKReduce::last_block) return 0;
  const int64_t tiles = split_k_tiles(tile_schedule(c, g, m));
  return uint64_t(split_counter_bytes(tiles) + tiles * g.k_blocks * g.bm * g.bn * 4);
}

}  // namespace

uint64_t repack_scratch_offset(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  return (counter_scratch_bytes(c, g, m) + kCopyAlignBytes - 1) / kCopyAlignBytes * kCopyAlignBytes;
}

uint64_t tc_scratch_bytes(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  if (!g.repack) return counter_scratch_bytes(c, g, m);
  const RepackPlan r = plan_repack(c, g, m, repack_scratch_offset(c, g, m));
  return r.ok ? r.scratch_end : 0;
}

std::string config_obstacle(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m) {
  if (g.repack) {  // the rules apply to the contraction the kernel reads (the copies)
    const RepackPlan r = plan_repack(c, g, m, 0);
    if (!r.ok) return "operand copies (/rp): " + r.why;
    TcConfig plain = g;
    plain.repack = false;
    return config_obstacle(r.contraction, plain, m);
  }
  if (tf32_wgmma_operand(c.in_type) && !g.wgmma()) return "f32 contractions on the TensorCores (TF32) take the wgmma main loop (sm_90a) only";
  const isa::GpuMmaShape f = m.wmma;
  if (g.bm % f.m || g.bn % f.n || g.wm % f.m || g.wn % f.n || g.bk % f.k) return "tile sizes must be multiples of 16";
  if (g.bm % g.wm || g.bn % g.wn) return "the warp tile must divide the block tile";
  if (g.k_split < 1 || g.bk % (f.k * g.k_split)) return "bk must be a multiple of 16 * k_split";
  if (g.stages < 2) return "at least 2 shared-memory stages";
  if (g.k_blocks < 1) return "k_blocks must be at least 1";
  if (std::string why = variant_obstacle(c, g, m); !why.empty()) return why;
  if (g.wgmma()) return wgmma_obstacle(c, g, m);
  if ((g.wm / f.m) * (g.wn / f.n) > kMaxFragmentsPerWarp) return "more than 16 accumulator fragments per warp";
  const int eb = elem_bytes(c.in_type), vec = int(m.vector_access_bytes) / eb;
  const int64_t a = std::max<int64_t>(int64_t(g.bm) * (g.bk + vec), int64_t(g.bk) * (g.bm + vec));
  const int64_t b = std::max<int64_t>(int64_t(g.bn) * (g.bk + vec), int64_t(g.bk) * (g.bn + vec));
  const int64_t pipe = g.stages * (a + b) * eb;
  const int64_t epi = direct_store(c, g) ? 0 : shared_epilogue_bytes(g, g.k_split);
  return over_budget(m, pipe, epi);
}

std::string config_obstacle(const Contraction& c, const TcConfig& cfg, const std::string& arch) {
  return config_obstacle(c, cfg, isa::stock_gpu_machine(arch));
}

namespace {

// The candidates of one contraction on one machine, collected in measured order, then ranked.
struct CandidateList {
  const Contraction& c;
  const isa::GpuMachine& m;
  int sms = 0;  // SMs for split-K across blocks and the ranking; 0: no split-K across blocks
  int64_t M = c.size_m(), N = c.size_n(), K = c.size_k(), B = c.size_batch();
  std::vector<TcConfig> out;

  void add(const TcConfig& g) {
    if (config_obstacle(c, g, m).empty()) out.push_back(g);
  }
  // legal as it is, or reading copies of the operands (/rp)
  bool fits(TcConfig x) const {
    if (config_obstacle(c, x, m).empty()) return true;
    x.repack = true;
    return config_obstacle(c, x, m).empty();
  }
  // a persistent-kernel tile, each variant also reading copies of the operands that the TMA unit
  // cannot read in 128-byte rows in their own layout (repack_plan.h; legal only where one is)
  void add_ws(TcConfig g) {
    auto with_copies = [&](TcConfig x) {
      add(x);
      x.repack = true;
      add(x);
    };
    // the same tile with TMA stores: first for a plain output (the fastest of every square and
    // BERT GEMM on an H200: 4096x3072x768 1.18x cuBLAS against 1.04x with evict-first register
    // stores, docs/results/bench_gpu_gemm_tma_store_h200.txt); after the register stores for
    // a fused output, whose output chunk costs a stage (conv+bn+relu 193.6 against 178.3 us, H200,
    // docs/results/bench_gpu_fused_tma_store_h200.json)
    TcConfig s = g;
    s.store = OutputStore::tma;
    while (s.stages > 3 && !fits(s)) --s.stages;  // room for the store buffers
    const bool ts = g.store == OutputStore::evict_first && g.schedule != WsSchedule::stream_k && g.schedule != WsSchedule::multicast;
    if (ts && c.plain_output) with_copies(s);
    with_copies(g);
    if (ts && !c.plain_output) with_copies(s);
  }
  // f32 read as TF32 (sm_90a; the caller's --tf32): the persistent TMA kernel's tiles of the f16
  // list with 32-deep K tiles (the same 128-byte rows, so the same bytes per stage and the same
  // stage counts), evict-first register stores or TMA stores, stream-K where the tiles are not
  // whole waves; an operand that is not K-contiguous is read from its K-major copy (/rp)
  void tf32_tiles() {
    if (!m.wgmma || !m.has(GpuFeature::TensorMaps) || M < 64 || N < 64 || K < 32) return;
    const int bk = kSwizzleRowBytes / elem_bytes(c.in_type);
    for (TcConfig g : std::initializer_list<TcConfig>{{128, 256, bk, 64, 256, 1, 4},
                                                      {256, 128, bk, 128, 128, 1, 4},
                                                      {128, 192, bk, 64, 192, 1, 5},
                                                      {128, 128, bk, 64, 128, 1, 6},
                                                      {128, 128, bk, 128, 128, 1, 6},  // ping-pong: a tile per consumer
                                                      {128, 64, bk, 64, 64, 1, 8},
                                                      {64, 256, bk, 64, 256, 1, 5}}) {
      g.mma = MmaKind::wgmma, g.loader = OperandLoader::tma_ws;
      const WsSchedule base = g.bm == g.wm ? WsSchedule::pingpong : WsSchedule::grouped;
      g.schedule = base;
      while (g.stages > 3 && !fits(g)) --g.stages;
      for (bool sk : {false, true}) {
        if (sk && (output_tiles(c, g) % m.sm_count == 0 || base == WsSchedule::pingpong)) continue;
        g.schedule = sk ? WsSchedule::stream_k : base;
        g.store = OutputStore::evict_first;
        add_ws(g);
      }
    }
  }
  int round_frag(int64_t v) const { return int((v + m.wmma.k - 1) / m.wmma.k * m.wmma.k); }

  // large problems (many 128x128 output tiles): wgmma, then mma.sync, then WMMA tiles
  void large_tiles() {
    const int64_t tiles128 = B * ((M + 127) / 128) * ((N + 127) / 128);
    if (M >= 256 && N >= 256 && K >= 256 && tiles128 >= 64) {
      if (m.wgmma && warp_mma_operand(c.in_type) && m.has(GpuFeature::TensorMaps)) {
        // the persistent warp-specialised TMA kernel (kernel_wgmma_ws.h): 2 consumer warpgroups
        // 128x192: 4096-row problems with N = 768 have 128 tiles of it, one wave on 132 SMs
        for (TcConfig g : std::initializer_list<TcConfig>{{128, 256, 64, 64, 256, 1, 4},
                                                          {256, 128, 64, 128, 128, 1, 4},
                                                          {128, 192, 64, 64, 192, 1, 5},
                                                          {128, 128, 64, 64, 128, 1, 6},
                                                          {128, 64, 64, 64, 64, 1, 8},
                                                          {128, 128, 64, 128, 128, 1, 6},    // ping-pong: a tile per consumer
                                                          {64, 256, 64, 64, 256, 1, 5}}) {
          g.mma = MmaKind::wgmma, g.loader = OperandLoader::tma_ws;
          const WsSchedule base = g.bm == g.wm ? WsSchedule::pingpong : WsSchedule::grouped;
          g.schedule = base;
          // room for the epilogue staging: stages come off only while the tile is over the budget,
          // as itself or reading operand copies (an operand the TMA unit cannot read in place is
          // not a reason to shorten the ring)
          while (g.stages > 3 && !fits(g)) --g.stages;
          for (bool sk : {false, true}) {  // stream-K for the last waves where the tiles are not whole waves
            if (sk && (output_tiles(c, g) % m.sm_count == 0 || base == WsSchedule::pingpong)) continue;
            g.schedule = sk ? WsSchedule::stream_k : base;
            g.store = OutputStore::evict_first;  // evict-first stores first (measured 1.1-1.8x faster on an H200: the output leaves the operands in L2)
            add_ws(g);
            g.store = OutputStore::plain;
            add_ws(g);
          }
          if (base != WsSchedule::pingpong) {  // B multicast across a 2-block cluster
            g.schedule = WsSchedule::multicast;
            g.store = OutputStore::evict_first;
            add_ws(g);
            g.store = OutputStore::plain;
          }
          g.schedule = base;
        }
      }
      if (m.wgmma && warp_mma_operand(c.in_type)) {  // warpgroup MMA (sm_90a)
        // measured on an H200 (bench gpu): 128x256 and 256x128 with 4 stages fastest, 128x256/wg/cs
        // on 4096^3, 256x128/wg/cs/cf on the seed conv; /wgd keeps one more copy in flight for a
        // second barrier per K tile (slower)
        for (TcConfig g : std::initializer_list<TcConfig>{{128, 256, 64, 64, 256, 1, 4},
                                                          {256, 128, 64, 128, 128, 1, 4},
                                                          {128, 128, 64, 64, 128, 1, 6},
                                                          {128, 128, 64, 64, 128, 1, 3}}) {
          g.mma = MmaKind::wgmma;
          if (direct_store(c, g)) {  // evict-first output stores (measured +10 % on 4096^3, +17 % on the seed conv) first
            g.store = OutputStore::evict_first;
            add(g);
            g.issue = CopyIssue::before_mma;  // copies issued before the MMAs of the K tile (-9 % on the seed conv)
            add(g);
            g.issue = CopyIssue::deep;
            add(g);
            g.store = OutputStore::plain, g.issue = CopyIssue::after_mma;
          }
          add(g);
          g.issue = CopyIssue::deep;
          add(g);
        }
        TcConfig g3{192, 256, 64, 64, 256, 1, 4};  // 3 warpgroups: fewer L2 bytes per flop, but spills today
        g3.mma = MmaKind::wgmma;
        add(g3);
      }
      add({128, 256, 64, 64, 64, 1, 3});  // the fastest measured for 4096^3 on an H200 (bench gpu)
      if (m.mma_sync && warp_mma_operand(c.in_type)) {  // ldmatrix + mma.sync: as fast (+-3%) on an H200
        for (TcConfig g : std::initializer_list<TcConfig>{{128, 256, 32, 64, 64, 1, 4},
                                                          {128, 256, 64, 64, 64, 1, 3},
                                                          {256, 128, 32, 64, 64, 1, 4},
                                                          {128, 128, 32, 64, 64, 1, 4},
                                                          {128, 128, 32, 32, 64, 1, 4},
                                                          {128, 256, 64, 64, 64, 1, 4}}) {
          g.mma = MmaKind::mma_sync;
          add(g);
        }
      }
      add({128, 256, 32, 64, 64, 1, 4});
      add({128, 128, 32, 32, 64, 1, 4});  // 8 warps of 32x64, two blocks per SM: more warps to hide latency
      add({128, 256, 32, 32, 64, 1, 4});  // 16 warps of 32x64
      add({128, 128, 64, 32, 64, 1, 3});
      add({128, 256, 64, 64, 64, 1, 4});  // 208 KiB: sm_90's opt-in shared memory
      add({128, 256, 64, 32, 64, 1, 3});
      add({256, 128, 32, 64, 64, 1, 4});
      add({128, 128, 32, 64, 64, 1, 4});
      add({128, 256, 32, 64, 64, 1, 3});
      add({128, 128, 64, 64, 64, 1, 3});
      add({128, 128, 32, 64, 64, 1, 2});  // pre-Ampere shared-memory budgets
    } else if (M >= 256 && N >= 64 && K >= 256 && m.wgmma && warp_mma_operand(c.in_type) && m.has(GpuFeature::TensorMaps)) {
      // narrow outputs (64 <= N < 256, or too few 128x128 tiles): a ResNet's 3x3 convolutions with
      // 64 or 128 output channels over M = batch x rows x columns. The persistent TMA kernel's
      // 128-row tiles as wide as N allows, where they still make 64 tiles; without them the
      // 16-row WMMA tiles won (40-50 TFLOP/s on the H200, ResNet-50 batch 32)
      for (TcConfig g : std::initializer_list<TcConfig>{{128, 128, 64, 64, 128, 1, 6}, {128, 64, 64, 64, 64, 1, 8}}) {
        g.mma = MmaKind::wgmma, g.loader = OperandLoader::tma_ws;
        if (g.bn > N || output_tiles(c, g) < 64) continue;
        while (g.stages > 3 && !fits(g)) --g.stages;
        g.store = OutputStore::evict_first;
        add_ws(g);
        g.store = OutputStore::plain;
        add_ws(g);
      }
    }
  }

  // mid-size problems with a long K (fewer than 64 output tiles of 128x128, K >= 512: a BERT
  // projection of 512 tokens, 512x768x768, has 24): the persistent TMA kernel on 128x64 and
  // 128x128 tiles, with stream-K spreading the K iterations of the tiles over every SM. They are
  // ranked after the best small split-K tiles (rank(): 1.45 with stream-K), so `--autotune` and the shortlist time
  // them; the first candidate stays the measured default of these shapes.
  void mid_ws_tiles() {
    const int64_t tiles128 = B * ((M + 127) / 128) * ((N + 127) / 128);
    if (!(M >= 128 && N >= 128 && K >= 512 && tiles128 < 64)) return;
    if (!m.wgmma || !warp_mma_operand(c.in_type) || !m.has(GpuFeature::TensorMaps)) return;
    for (TcConfig g : std::initializer_list<TcConfig>{{128, 64, 64, 64, 64, 1, 8}, {128, 128, 64, 64, 128, 1, 6}}) {
      g.mma = MmaKind::wgmma, g.loader = OperandLoader::tma_ws;
      while (g.stages > 3 && !fits(g)) --g.stages;
      for (bool sk : {true, false}) {
        g.schedule = sk ? WsSchedule::stream_k : WsSchedule::grouped;
        g.store = OutputStore::evict_first;
        add_ws(g);
      }
    }
  }
  static bool is_mid_ws(const TcConfig& g) { return g.tma_ws() && g.bm == 128 && (g.bn == 64 || g.bn == 128); }

  // medium problems with a short K (K <= 256; sizes need not be multiples of 16): enough 64x64
  // output tiles for every SM, too few K tiles for the K split of the skinny tiles to pay. Measured
  // on an H100 (scripts/gpu_tile_sweep.sh: `tessel run --gpu-tiles`, CUDA graphs): 1000x1000x200 in all four majorness
  // cases 5.3-5.9 us with 64x64x32 (32x32 warps) or 64x128x32 against 10.6-11.2 us for the
  // skinny 16x64x128/ks8 (cuBLAS 4.9 us); 777x555x129 6.7 vs 12.5 us; 2000x1000x256 8.3 us with
  // 64x128x32 against 10.4 us for the 128x256 warpgroup tile (64 blocks on 132 SMs).
  bool medium_problem() const {
    const int64_t blocks64 = B * ((M + 63) / 64) * ((N + 63) / 64);
    const bool plain_gemm = c.m.size() == 1 && c.n.size() == 1 && c.k.size() == 1;  // convolutions: not measured
    return plain_gemm && K <= 256 && sms > 0 && blocks64 * 2 >= sms;
  }
  static bool is_medium(const TcConfig& g) {
    return g.bm == 64 && (g.bn == 64 || g.bn == 128) && g.bk <= 64 && g.k_split == 1 && g.k_blocks == 1 && !g.wgmma() && g.loader != OperandLoader::bulk;
  }
  void medium_tiles() {
    if (!medium_problem()) return;
    for (TcConfig g : std::initializer_list<TcConfig>{{64, 64, 32, 32, 32, 1, 4},
                                                      {64, 128, 32, 32, 64, 1, 4},
                                                      {64, 64, 64, 32, 32, 1, 3}}) {
      if (m.mma_sync && warp_mma_operand(c.in_type)) {
        g.mma = MmaKind::mma_sync;
        add(g);
        g.mma = MmaKind::wmma;
      }
      add(g);
    }
    // the persistent TMA kernel with small tiles (measured with the others, ranked after the medium tiles)
    if (m.wgmma && warp_mma_operand(c.in_type) && m.has(GpuFeature::TensorMaps) && M >= 128 && N >= 64)
      for (TcConfig g : std::initializer_list<TcConfig>{{128, 64, 64, 64, 64, 1, 4}, {128, 128, 64, 64, 128, 1, 4}, {64, 128, 64, 64, 128, 1, 4}}) {
        g.mma = MmaKind::wgmma, g.loader = OperandLoader::tma_ws;
        g.schedule = g.bm == g.wm ? WsSchedule::pingpong : WsSchedule::grouped;
        g.store = direct_store(c, g) ? OutputStore::evict_first : OutputStore::plain;
        add(g);
      }
  }

  // skinny and small problems: few output tiles, so the K range of a tile is split over warps
  void skinny_tiles() {
    for (int bn : {64, 32, 16, 128}) {
      if (bn > round_frag(N) && bn != std::min(128, round_frag(N))) continue;
      for (int bm : {16, 32, 64}) {
        for (int bk : {128, 64, 256, 512}) {
          if (bk == 512 && K > 512) continue;
          const int bkk = int(std::min<int64_t>(bk, round_frag(K)));
          TcConfig g;
          g.bm = bm;
          g.bn = std::min(bn, round_frag(N));
          g.bk = bkk;
          g.wm = std::min(bm, 32);
          g.wn = std::min(g.bn, 64);
          const int wtiles = (g.bm / g.wm) * (g.bn / g.wn);
          g.k_split = std::max(1, std::min(8 / wtiles, g.bk / m.wmma.k));
          const int64_t kt = (K + g.bk - 1) / g.bk;
          // latency-bound: every K tile in flight from the prologue when they fit
          g.stages = int(std::max<int64_t>(2, std::min<int64_t>(6, kt + 1)));
          if (!config_obstacle(c, g, m).empty()) g.stages = int(std::max<int64_t>(2, std::min<int64_t>(4, kt)));
          add(g);
          if (g.k_split >= 4 && bkk <= 128) {  // fewer warps: less to reduce, shorter launch
            g.k_split /= 2;
            add(g);
          }
        }
      }
    }
  }

  // split-K across blocks: a problem with fewer output tiles than SMs is latency-bound; K is split
  // so that about one (or two) blocks per SM each stream a slice of K, at least 2 K tiles of 64 per
  // slice where K allows (fewer, longer slices amortise the partial-tile round trip through L2)
  void split_k_across_blocks() {
    if (sms <= 0) return;
    std::vector<TcConfig> split;
    for (const TcConfig& g0 : out) {
      if (g0.bm >= 128) continue;
      const int64_t tiles = output_tiles(c, g0);
      if (tiles * 2 > sms) continue;  // at least half the SMs idle without a split
      for (int bk : {64, 32, 128}) {
        TcConfig g = g0;
        g.bk = int(std::min<int64_t>(bk, round_frag(K)));
        g.k_split = std::max(1, std::min(g0.k_split, g.bk / m.wmma.k));
        for (int waves : {1, 2}) {
          int64_t kb = std::min<int64_t>((int64_t(sms) * waves + tiles - 1) / tiles, k_tiles(c, g));
          kb = std::min<int64_t>(kb, 8);
          while (kb > 1 && (kb - 1) * ((k_tiles(c, g) + kb - 1) / kb) >= k_tiles(c, g)) --kb;
          if (kb < 2) continue;
          g.k_blocks = int(kb);
          g.stages = int(std::max<int64_t>(2, std::min<int64_t>(6, k_tiles_per_block(c, g) + 1)));
          if (!config_obstacle(c, g, m).empty()) g.stages = 2;
          if (config_obstacle(c, g, m).empty()) split.push_back(g);
          g.reduce = SplitKReduce::atomic;
          if (config_obstacle(c, g, m).empty()) split.push_back(g);
          g.reduce = SplitKReduce::cluster;
          if (config_obstacle(c, g, m).empty()) split.push_back(g);
          g.reduce = SplitKReduce::last_block;
        }
      }
    }
    out.insert(out.end(), split.begin(), split.end());
  }
  // sm_90: the latency-bound tiles again with bulk operand copies (cp.async.bulk + mbarrier). On an
  // H200 a load-only kernel fetches a skinny GEMM's tiles faster through the copy engine (64 KiB per
  // block: 2.0 vs 2.6 us per call in a CUDA graph), but in the whole kernel only 16x16x512 on
  // 512x16x512 gained (2.03 vs 2.09 us with PDL) and row copies of 256 B lost badly (32 per
  // stage: 6.2 us): measured, ranked after the cp.async tiles
  void bulk_copies() {
    if (!m.has(GpuFeature::BulkCopy) || sms <= 0) return;
    std::vector<TcConfig> bulk;
    for (TcConfig g : out) {
      if (g.wgmma() || g.k_blocks != 1 || output_tiles(c, g) > 2 * sms) continue;
      g.loader = OperandLoader::bulk;
      if (config_obstacle(c, g, m).empty()) bulk.push_back(g);
    }
    out.insert(out.end(), bulk.begin(), bulk.end());
  }

  void distinct() {  // several base candidates map to one split-K variant
    std::set<std::string> seen;
    std::vector<TcConfig> uniq;
    for (const auto& g : out)
      if (seen.insert(g.to_string()).second) uniq.push_back(g);
    out = std::move(uniq);
  }

  // Elements per load of A and of B at a 16x16x32 tile (1: gathered element by element).
  std::pair<int, int> operand_vectors() const {
    const int t = int(m.wmma.m), bk = 2 * int(m.wmma.k);
    return {plan_operand(c.a, c, c.sizes, c.m, c.k, t, bk, c.size_m(), m).vec,
            plan_operand(c.b, c, c.sizes, c.n, c.k, t, bk, c.size_n(), m).vec};
  }

  // order the small-problem candidates: enough blocks to cover the SMs first, then larger tiles
  void rank() {
    const double sm_f = sms > 0 ? double(sms) : double(m.sm_count);
    // A convolution whose operands are both gathered element by element (no 16-byte loads: NCHW /
    // NCDHW windows, whose K index q + s is not aligned): each element costs address arithmetic,
    // so the most blocks and warps win. H200, docs/results/gpu_default_tiles_h200.txt:
    // conv3d NCDHW 32x2048x864 16x16x128/ks8 7.6 us against 64x32x256/ks4 (the blocks-per-SM rule
    // of the GEMM measurements) 61.4 us; stride-2 NCHW 128x392x1152 10.1 against 23.0 us.
    const auto [va, vb] = operand_vectors();
    const bool plain_gemm = c.m.size() == 1 && c.n.size() == 1 && c.k.size() == 1;
    const bool gathered = !plain_gemm && va == 1 && vb == 1, vectors = va > 1 && vb > 1;
    std::stable_sort(out.begin(), out.end(), [&](const TcConfig& x, const TcConfig& y) {
      auto score = [&](const TcConfig& g) {
        const int64_t blocks = output_tiles(c, g) * g.k_blocks;
        if (gathered && g.k_blocks == 1 && !g.tma_ws()) {
          // small tiles, K over 8 warps, 128-deep K tiles; tiles leaving SMs idle last
          const double occupancy = std::min<double>(double(blocks), sm_f) / sm_f;
          return 1.0 + (g.bm >= 128 ? 5.0 : 0.0) + 0.25 * std::log2(double(g.bm) * g.bn / 256.0) +
                 0.3 * std::abs(std::log2(g.k_split / 8.0)) + (g.bk == 128 ? 0.0 : 0.2) + (1.0 - occupancy) * 4;
        }
        if (medium_problem()) {
          // the medium tiles first: 64x128 when it still fills every SM, else 64x64; WMMA before
          // mma.sync (the 1000x1000x200 GEMMs, `scripts/gpu_tile_candidates.sh` on an H100 and an
          // H200: WMMA 3-5 % faster for tn and nn, within 1 % for nt); 32-deep K tiles
          if (is_medium(g)) {
            const bool wide_fills = B * ((M + 63) / 64) * ((N + 127) / 128) >= int64_t(sm_f);
            return 0.5 + ((g.bn == 128) == wide_fills ? 0.0 : 0.1) + (g.mma == MmaKind::mma_sync ? 0.05 : 0.0) +
                   (g.bk == 32 ? 0.0 : 0.02);
          }
          if (g.bm >= 128 && blocks < int64_t(sm_f)) return 0.8;  // big tiles that leave SMs idle
        }
        // the blocked-window TMA kernel (32-byte-swizzled maps) after the cp.async wgmma tiles:
        // measured 463 us against /wg's 427 us on the blocked seed convolution (H100); the same
        // tiles over operand copies (/rp, added right after each /ws tile, so first among equals)
        // measured 189-197 us for the best four against /wg's 431 us (H200,
        // docs/results/bench_gpu_conv_blocked_h200.json)
        if (g.bm >= 128 && g.tma_ws() && m_segment(c, g) > 0) return blocks >= 64 ? 0.05 : 10.0;
        if (is_mid_ws(g) && blocks < 64 && K >= 512) return blocks < 8 ? 10.0 : g.schedule == WsSchedule::stream_k ? 1.45 : 1.5;
        if (g.bm >= 128) return blocks >= 64 ? 0.0 : 10.0;
        const double occupancy = std::min<double>(double(blocks), sm_f) / sm_f;
        // split-K blocks: measured slower than K split over the warps of one block on an H200 in
        // the CUDA-graph harness (README: one more dependent round trip per call than the ~1 us it
        // saves), so they follow the unsplit tiles: cluster reduction first, global ones last;
        // among them 16-row tiles (more output tiles, fewer splits) and 64-deep K tiles
        if (g.k_blocks > 1)
          return (g.reduce == SplitKReduce::cluster ? 5.0 : 9.0) + (1.0 - occupancy) * 4 + (g.bk == 64 ? 0 : 0.2) + (g.bm == 16 ? 0 : 0.1) + (blocks > 2 * sm_f ? 0.3 : 0);
        // unsplit small tiles, from the H200 bench (bench_h200.json: the fastest of up to 40 measured
        // candidates on each seed GEMM): K split over 4 warps, about 4 K tiles, and about one block
        // per two SMs (64 on 132 SMs: fewer leave SMs idle, more re-read the shared operand) won
        // on every shape, squarer tiles on ties; the first candidate is then the measured best or
        // within 1 % of it
        // (with 16-byte operand loads also past two blocks per SM: an NHWC 3x3 convolution
        // 1568x64x576 ran 16x16x128/ks8 in 6.6 us, 32x32x128/ks4 in 3.7 us, H200,
        // docs/results/gpu_default_tiles_h200.txt)
        if (sms > 0 && (blocks <= 2 * sm_f || vectors))
          return 1.0 + 0.5 * std::abs(std::log2(double(blocks) / (sm_f / 2))) + 0.3 * std::abs(std::log2(g.k_split / 4.0)) +
                 0.3 * std::abs(std::log2(double(k_tiles(c, g)) / 4.0)) + 0.05 * std::abs(std::log2(double(g.bm) / g.bn)) +
                 (g.loader == OperandLoader::bulk ? 0.6 : 0.0);
        return 1.0 + (1.0 - occupancy) * 4 + (g.bk == 128 ? 0 : 0.5) + (g.bn == std::min<int64_t>(N, 64) ? 0 : 0.3) + (g.loader == OperandLoader::bulk ? 0.6 : 0.0);
      };
      return score(x) < score(y);
    });
    out.erase(std::unique(out.begin(), out.end(),
                          [](const TcConfig& x, const TcConfig& y) { return x.to_string() == y.to_string(); }),
              out.end());
  }
};

std::vector<TcConfig> candidates(const Contraction& c, const isa::GpuMachine& m, int sms) {
  CandidateList l{c, m, sms};
  if (tf32_wgmma_operand(c.in_type)) {  // f32 reaches the TensorCores only as TF32 on the wgmma main loop
    l.tf32_tiles();
    l.distinct();
    l.rank();
    return l.out;
  }
  l.large_tiles();
  l.mid_ws_tiles();
  l.medium_tiles();
  l.skinny_tiles();
  l.split_k_across_blocks();
  l.bulk_copies();
  l.distinct();
  l.rank();
  return l.out;
}

}  // namespace

std::vector<TcConfig> tc_candidates(const Contraction& c, const isa::GpuMachine& m, bool split_k_across_blocks) {
  return candidates(c, m, split_k_across_blocks ? int(m.sm_count) : 0);
}

std::vector<TcConfig> tc_shortlist(const std::vector<TcConfig>& ranked, size_t n, size_t head) {
  auto family = [](const TcConfig& g) {
    const int kind = g.tma_ws() ? 3 : int(g.mma);  // wmma, mma.sync, cp.async wgmma, persistent TMA
    return std::make_tuple(g.bm, g.bn, g.wm, g.wn, g.k_split, kind, g.schedule == WsSchedule::pingpong, g.k_blocks > 1);
  };
  std::vector<TcConfig> out;
  std::set<decltype(family(ranked.front()))> seen;
  for (size_t i = 0; i < ranked.size() && i < head && out.size() < n; ++i) {
    out.push_back(ranked[i]);
    seen.insert(family(ranked[i]));
  }
  for (size_t i = head; i < ranked.size() && out.size() < n; ++i)
    if (seen.insert(family(ranked[i])).second) out.push_back(ranked[i]);
  return out;
}

std::vector<TcConfig> tc_candidates(const Contraction& c, const std::string& arch, int sm_count) {
  return candidates(c, isa::stock_gpu_machine(arch), sm_count);
}

}  // namespace tessel::emit_cuda
