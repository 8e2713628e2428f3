#include "compiler/tile/npu_gemm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

namespace tessel::tile {

int64_t dividing_tile(int64_t n, int64_t limit, int64_t unit) {
  for (int64_t t = std::max(unit, limit / unit * unit); t >= unit; t -= unit)
    if (n % t == 0) return t;
  return unit;
}

namespace {

using npu::Buffer;

// Policy bounds (code size and ring depth): at most this many chunks in straight-line code before
// the chunk loop, at most this many operand tiles in an L0A / L0B ring.
// not hardware: code-size bound
constexpr int64_t kMostPeeledChunks = 16;
constexpr int64_t kMostOperandRing = 4;
// not hardware: code-size bound (the chunk loop is unrolled once per L1 slot)
constexpr int64_t kMostL1Ring = 8;
// as GemmLoop's (compiler/emit_npu/gemm.cc): the epilogue's UB sets at most
constexpr int64_t kMostEpilogueSets = 8;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t align_to(int64_t x, int64_t a) { return round_up(x, a); }


// The first level that even the shrunk tiles overflow.
std::optional<FitFailure> overflow(const GemmPlan& g, const isa::NpuMachine& m, const GemmRequest& in) {
  const int64_t ib = dtype_bytes(m.cube(in.operand).a), acc = dtype_bytes(m.cube(in.operand).acc);
  auto fail = [&](Buffer b, int64_t need, std::string parts) {
    return FitFailure{npu::buffer_role(b), m.buffer(b).level_name, m.target_name, need, m.capacity(b),
                      fmt::format("no tile of the {}x{}x{} GEMM fits: {}", in.M, in.N, in.K, parts), false};
  };
  if (g.tm * g.tn * acc > m.capacity(Buffer::L0C))
    return fail(Buffer::L0C, g.tm * g.tn * acc, fmt::format("accumulator {}x{} x {}", g.tm, g.tn, acc));
  if ((g.tm * g.tk + g.tk * g.tn) * ib > m.capacity(Buffer::L1))
    return fail(Buffer::L1, (g.tm * g.tk + g.tk * g.tn) * ib, fmt::format("A {}x{} + B {}x{} x {}", g.tm, g.tk, g.tk, g.tn, ib));
  if (g.tm0 * g.tk0 * ib > m.capacity(Buffer::L0A))
    return fail(Buffer::L0A, g.tm0 * g.tk0 * ib, fmt::format("A operand tile {}x{} x {}", g.tm0, g.tk0, ib));
  if (g.tk0 * g.tn0 * ib > m.capacity(Buffer::L0B))
    return fail(Buffer::L0B, g.tk0 * g.tn0 * ib, fmt::format("B operand tile {}x{} x {}", g.tk0, g.tn0, ib));
  return std::nullopt;
}

// Policy bound: the stage tiles the tail planner hands to plan_gemm (the model's best first).
// not hardware: planning time
constexpr size_t kTailPlansTried = 8;
// Policy weight: the model's time grows by this fraction when every core but one idles.
// not hardware: a tie-breaker within the model's error
constexpr double kIdleCoreWeight = 0.15;
// Policy weight: the model's time grows by this fraction per doubling of the K stage past 8
// fractals (ResNet-50's 196x256x512 with its epilogue on davinci-910: 256 deep modelled 2 %
// faster than 128, ran 4 % slower; on davinci-310, 512 deep modelled 14 % faster, ran 5 % slower).
// not hardware: the model's error on the first chunk's fill and the deeper L1 slots
constexpr double kDeeperKStageWeight = 0.10;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An operand tile of a stage tile (`tile`, in whole units): the largest divisor within the box;
// where that collapses (a divisor under half the box: 80 in 16s with a 64 box gives 16) the
// largest divisor within `most` (what fits its operand buffer twice).
int64_t operand_tile(int64_t tile, int64_t box, int64_t unit, int64_t most) {
  const int64_t b = round_up(std::max<int64_t>(box, 1), unit), t0 = dividing_tile(tile, b, unit);
  if (2 * t0 >= std::min(tile, b)) return t0;
  return dividing_tile(tile, std::max(unit, most / unit * unit), unit);
}

// The tile sizes that split `size` into t tiles of whole units, t = 1, 2, ... (each once).
std::vector<int64_t> splits(int64_t size, int64_t unit) {
  std::set<int64_t> out;
  for (int64_t t = 1; t <= ceil_div(size, unit); ++t) out.insert(round_up(ceil_div(size, t), unit));
  return {out.begin(), out.end()};
}

// The tail planner's model of a GEMM in stage tiles tm x tn x tk (operand tiles tm0 x tn0 x tk0;
// GemmTailRequest): cycles. GM moves whole granules, so each DMA row is priced at the granules it
// touches (a row of the user's tensors starts anywhere in a granule unless its stride is whole
// granules). Every core moves its bytes at its path's rate or its share of the chip's. One core
// runs its waves of tiles one after the other (a tile loop's tiles hardly overlap), each up to its
// last chunk the longest of its loads (two chunks in the L1 ring: a chunk's load waits for the
// chunk two back, so it takes at least half the read latency plus its transfer), its MTE1 loads,
// its cube time and its instructions' dispatch. The last chunk is followed block by block as
// GemmLoop emits it: its DMAs in block order (A's row block with the first block column, then each
// block column's B), a block computed once its data is in and the cube is free (its operand tiles'
// MTE1 loads and mmads, piece by piece), moved (and its epilogue run) once the vector unit is free,
// written back once MTE3 is; the last block column block by column block. The chip moves every
// tile's bytes at the shared rate. Near ties (the chip's bytes bind): more cores, fewer
// instructions.
struct TailModel {
  const GemmTailRequest& t;
  const isa::NpuMachine& m;

  // GM bytes of `rows` DMA rows of `bytes` each, rows `stride` bytes apart
  double granules(int64_t rows, int64_t bytes, int64_t stride) const {
    const int64_t g = std::max<int64_t>(1, m.granularity(Buffer::GM));
    const bool aligned = stride % g == 0 && bytes % g == 0;
    return double(rows) * double(aligned ? bytes : ceil_div(bytes + g - 1, g) * g);
  }
  double rate(Buffer from, Buffer to) const { return std::max(1.0, m.path(from, to).bandwidth_bytes_per_cycle); }

  double operator()(int64_t tm, int64_t tn, int64_t tk, int64_t tm0, int64_t tn0, int64_t tk0) const {
    const GemmRequest& in = t.gemm;
    const isa::CubeShape& cube = m.cube(in.operand);
    const int64_t ib = dtype_bytes(cube.a), eo = dtype_bytes(in.out), acc = dtype_bytes(cube.acc);
    const int64_t K = round_up(in.K, tk), chunks = K / tk;
    const int64_t tiles = t.batch * ceil_div(in.M, tm) * ceil_div(in.N, tn);
    const int64_t cores = std::max<int64_t>(1, std::min<int64_t>(m.cores, tiles)), waves = ceil_div(tiles, cores);
    const double read_latency = m.path(Buffer::GM, Buffer::L1).latency_cycles;
    const double chip_bw = m.gm_shared_bandwidth_bytes_per_cycle > 0 ? m.gm_shared_bandwidth_bytes_per_cycle
                                                                    : rate(Buffer::GM, Buffer::L1) * m.cores;
    const double in_bw = std::min(rate(Buffer::GM, Buffer::L1), chip_bw / double(cores));
    const double out_bw = std::min(rate(Buffer::UB, Buffer::GM), chip_bw / double(cores));
    const double to_l0a = rate(Buffer::L1, Buffer::L0A), to_l0b = rate(Buffer::L1, Buffer::L0B);
    // one tile's GM bytes as its DMAs move them
    const double a_in = t.a_k_major ? granules(K * (tm / tm0), tm0 * ib, t.a_stride * ib) : granules(tm * (K / tk0), tk0 * ib, t.a_stride * ib);
    const double b_in = t.b_k_major ? granules(K, tn * ib, t.b_stride * ib) : granules(tn * (K / tk0), tk0 * ib, t.b_stride * ib);
    const double tile_in = a_in + b_in, tile_out = granules(tm * (tn / cube.n0), cube.n0 * eo, t.c_stride * eo);
    const int64_t bm = tm / tm0, bn = tn / tn0, pieces = tk / tk0;
    const double instructions = double(chunks * pieces * (2 * bm + bn + 2 * bm * bn));
    const double dispatch = instructions * (m.scalar_cycles + 2 * m.set_flag_cycles);
    const double chunk_in = tile_in / double(chunks) / in_bw;
    const double loads = double(chunks) * std::max(chunk_in, (chunk_in + read_latency) / 2);
    // a chunk's compute in piece order: A's operand tiles once, B's once per row of blocks
    const double cube_chunk = double((tm / cube.m0) * (tn / cube.n0) * (tk / cube.k0) * cube.cycles);
    const double mte1_chunk = double(tm * tk * ib) / to_l0a + double(bm * tn * tk * ib) / to_l0b;
    double per_tile = std::max({loads, double(chunks) * mte1_chunk, double(chunks) * cube_chunk + dispatch / 2, dispatch});
    // the last chunk, block by block
    const double a_block = a_in / double(chunks * bm) / in_bw, b_block = b_in / double(chunks * bn) / in_bw;
    const double mte1_piece = double(tm0 * tk0 * ib) / to_l0a + double(tk0 * tn0 * ib) / to_l0b;
    const double cube_piece = double((tm0 / cube.m0) * (tn0 / cube.n0) * (tk0 / cube.k0) * cube.cycles);
    const double compute_block = double(pieces) * std::max(mte1_piece, cube_piece) + std::min(mte1_piece, cube_piece);
    double move_block = double(tm0 * tn0 * acc) / rate(Buffer::L0C, Buffer::UB) + m.path(Buffer::L0C, Buffer::UB).latency_cycles;
    if (in.has_epilogue && in.epilogue_ub_bytes) {  // per column block about one vector instruction per two of its regions
      const int64_t region = cube.m0 * cube.n0 * acc;
      const double regions = double(std::max<int64_t>(1, (in.epilogue_ub_bytes(cube.m0) - m.vector_bytes_per_repeat) / region));
      const double repeats = double(ceil_div(tm0 * cube.n0 * acc, m.vector_bytes_per_repeat));
      move_block += double(tn0 / cube.n0) * regions / 2 * repeats;
      // Its GM loads: queued ahead of the cube where a core runs one tile whose column blocks all
      // have a UB set (GemmLoop::queue_epilogue_loads); else each column block's loads are issued
      // with its vector work, a block or two ahead (the scalar stalls on the full vector queue),
      // so each waits about half a GM read (davinci-310's 196 x 128 -> 512 + residual in 16-row
      // blocks: 144 cycles per column block, 29,941 in all, against 15,593 in 112-row blocks).
      const int64_t ub_block = align_to(tm0 * tn0 * acc, m.alignment(Buffer::UB));
      const int64_t free = m.capacity(Buffer::UB) - 2 * ub_block, set = align_to(in.epilogue_ub_bytes(tm0), m.alignment(Buffer::UB));
      const int64_t sets = std::clamp<int64_t>(set > 0 ? free / set : 1, 1, kMostEpilogueSets);
      if (in.epilogue_loads > 0 && (waves > 1 || bm * bn * (tn0 / cube.n0) > sets))
        move_block = std::max(move_block, double(tn0 / cube.n0) * read_latency / 2);
    }
    const double write_block = tile_out / double(bm * bn) / out_bw;
    per_tile = std::max({per_tile, double(bm * bn) * move_block, tile_out / out_bw});  // V and MTE3 of a tile
    double dma = loads - chunk_in;  // the last chunk's DMAs start
    double cube_free = read_latency + double(chunks - 1) * std::max(mte1_chunk, cube_chunk), vector_free = 0, written = 0;
    for (int64_t j = 0; j < bn; ++j)
      for (int64_t i = 0; i < bm; ++i) {
        if (j == 0) dma += a_block;
        if (i == 0) dma += b_block;
        const double in_place = dma + read_latency;
        const bool by_columns = i == bm - 1 && j == bn - 1 && tn0 > cube.n0;
        const int64_t parts = by_columns ? tn0 / cube.n0 : 1;
        for (int64_t c = 0; c < parts; ++c) {
          cube_free = std::max(cube_free, in_place) + compute_block / double(parts);
          vector_free = std::max(vector_free, cube_free) + move_block / double(parts);
          written = std::max(written, vector_free) + write_block / double(parts);
        }
      }
    // a core's tiles one after the other: a tile loop's tiles hardly overlap (each waits for its
    // data, the next one's loads wait for the ring)
    const double core = double(waves) * std::max(per_tile, written + m.path(Buffer::UB, Buffer::GM).latency_cycles);
    const double chip = read_latency + double(tiles) * (tile_in + tile_out) / chip_bw + m.path(Buffer::UB, Buffer::GM).latency_cycles;
    // near ties: fewer instructions, more cores (each core's own pipes and rates: the model's
    // shared rate does not see them overlap)
    const double idle = double(m.cores - cores) / double(std::max(1, m.cores));
    const double deeper = std::max(0.0, std::log2(double(tk) / double(8 * cube.k0)));  // not hardware: 8 fractals, as the tile policy's K box
    return std::max(core, chip) * (1 + kIdleCoreWeight * idle) * (1 + kDeeperKStageWeight * deeper) + 0.01 * double(waves) * dispatch;
  }
};

}  // namespace

GemmTailPlanResult plan_gemm_tails(const GemmTailRequest& t, const isa::NpuMachine& m) {
  const GemmRequest& in = t.gemm;
  const isa::CubeShape& cube = m.cube(in.operand);
  const int64_t mu = std::max<int64_t>(cube.m0, in.unit_m), nu = std::max<int64_t>(cube.n0, in.unit_n), ku = cube.k0;
  const int64_t ib = dtype_bytes(cube.a), acc = dtype_bytes(cube.acc);
  auto box = [](int64_t b, int64_t size, int64_t unit) { return round_up(std::clamp<int64_t>(b, 1, size), unit); };
  // Stage tiles: a user's boxes, or every split of M and N; K in as few chunks as the box allows, as
  // even as whole fractals make them, and (no user's boxes) as few as K stages of 8, 16 and 32
  // fractals allow: the model weighs each chunk's read latency against the deeper L1 slots.
  std::vector<int64_t> tms{box(in.box_m, in.M, mu)}, tns{box(in.box_n, in.N, nu)};
  std::vector<int64_t> tks{box(in.box_k, in.K, ku)};
  if (!t.keep_boxes) {  // (tiles whose accumulator, one unit wide, overflows L0C left out)
    tms = splits(in.M, mu), tns = splits(in.N, nu);
    std::erase_if(tms, [&](int64_t tm) { return tm > mu && tm * nu * acc > m.capacity(Buffer::L0C); });
    std::erase_if(tns, [&](int64_t tn) { return tn > nu && mu * tn * acc > m.capacity(Buffer::L0C); });
    for (int64_t f : {8, 16, 32}) tks.push_back(box(f * ku, in.K, ku));  // not hardware: K stages weighed
    for (int64_t& tk : tks) tk = round_up(ceil_div(in.K, ceil_div(in.K, tk)), ku);
    std::sort(tks.begin(), tks.end());
    tks.erase(std::unique(tks.begin(), tks.end()), tks.end());
  }
  if (t.most_tn) {  // whole tile rows of B [k][n]
    for (int64_t& tn : tns) tn = std::min(tn, std::max(nu, t.most_tn / nu * nu));
    std::sort(tns.begin(), tns.end());
    tns.erase(std::unique(tns.begin(), tns.end()), tns.end());
  }
  // Operand tiles: a user's boxes, else the boxes as far as the stage tile divides into them
  // (operand_tile); an A [k][m] tile's rows at most M.
  auto operand_tiles = [&](int64_t tm, int64_t tn, int64_t tk) -> std::array<int64_t, 3> {
    const int64_t l0a = m.capacity(Buffer::L0A) / 2, l0b = m.capacity(Buffer::L0B) / 2;
    std::array<int64_t, 3> b{dividing_tile(tm, round_up(std::max<int64_t>(in.box_m0, 1), mu), mu),
                             dividing_tile(tn, round_up(std::max<int64_t>(in.box_n0, 1), nu), nu),
                             dividing_tile(tk, round_up(std::max<int64_t>(in.box_k0, 1), ku), ku)};
    if (!t.keep_boxes) {
      b[0] = operand_tile(tm, in.box_m0, mu, l0a / (ku * ib));
      b[1] = operand_tile(tn, in.box_n0, nu, l0b / (ku * ib));
      b[2] = operand_tile(tk, in.box_k0, ku, std::min(l0a / (b[0] * ib), l0b / (b[1] * ib)));
    }
    if (t.most_tm0 && b[0] > t.most_tm0) b[0] = dividing_tile(tm, std::max(mu, t.most_tm0 / mu * mu), mu);
    return b;
  };
  // choosing, also the deepest K that fits: wider rows for the DMAs of an operand stored K-minor
  auto operand_options = [&](int64_t tm, int64_t tn, int64_t tk) {
    std::vector<std::array<int64_t, 3>> out{operand_tiles(tm, tn, tk)};
    const auto [tm0, tn0, tk0] = out[0];
    const int64_t deepest = dividing_tile(tk, std::min(m.capacity(Buffer::L0A) / (2 * tm0 * ib), m.capacity(Buffer::L0B) / (2 * tn0 * ib)), ku);
    if (!t.keep_boxes && deepest > tk0) out.push_back({tm0, tn0, deepest});
    return out;
  };
  // The stage tiles that fit L0C and, double-buffered, L1, by the model (the smallest always).
  const TailModel model{t, m};
  std::vector<std::pair<double, std::array<int64_t, 6>>> ranked;
  for (int64_t tk : tks)
    for (int64_t tm : tms)
      for (int64_t tn : tns) {
        const bool fits = tm * tn * acc <= m.capacity(Buffer::L0C) && 2 * (tm + tn) * tk * ib <= m.capacity(Buffer::L1);
        if (!fits && !t.keep_boxes && !(tm == mu && tn == nu && tk == tks[0])) continue;
        for (const auto& [tm0, tn0, tk0] : operand_options(tm, tn, tk))
          ranked.push_back({model(tm, tn, tk, tm0, tn0, tk0), {tm, tn, tm0, tn0, tk0, tk}});
      }
  std::sort(ranked.begin(), ranked.end());
  GemmTailPlanResult out;
  for (size_t i = 0; i < ranked.size() && i < kTailPlansTried; ++i) {
    const auto [tm, tn, tm0, tn0, tk0, tk] = ranked[i].second;
    GemmRequest r = in;
    r.M = round_up(in.M, tm), r.N = round_up(in.N, tn), r.K = round_up(in.K, tk);
    r.box_m = tm, r.box_n = tn, r.box_k = tk, r.box_m0 = tm0, r.box_n0 = tn0, r.box_k0 = tk0;
    GemmPlanResult planned = plan_gemm(r, m);
    if (planned.no_fit) {
      if (!out.no_fit) out.no_fit = planned.no_fit;
      continue;
    }
    const GemmPlan& p = *planned.plan;
    const double cycles = model(p.tm, p.tn, p.tk, p.tm0, p.tn0, p.tk0);
    if (out.plan && cycles >= out.plan->model_cycles) continue;
    out.plan = GemmTailPlan{p, round_up(in.M, p.tm), round_up(in.N, p.tn), round_up(in.K, p.tk), cycles};
  }
  if (out.plan) {
    out.no_fit.reset();
    const GemmTailPlan& p = *out.plan;
    out.plan->plan.notes.push_back(fmt::format("tails in place: {}x{}x{} in {} stage tiles of {}x{}x{} over {}x{}x{} (model {:.0f} cycles)",
                                               in.M, in.N, in.K, t.batch * (p.M / p.plan.tm) * (p.N / p.plan.tn), p.plan.tm,
                                               p.plan.tn, p.plan.tk, p.M, p.N, p.K, p.model_cycles));
  }
  return out;
}

namespace {

// The last `tail_chunks` K chunks and the L1 ring (GemmPlan::tail_chunks, l1_slots) of a plan whose
// tiles and buffering are chosen.
void choose_tail_chunks(GemmPlan& g, const GemmRequest& in, const isa::NpuMachine& m) {
  const isa::CubeShape& cube = m.cube(in.operand);
  const int64_t m0 = cube.m0, n0 = cube.n0, k0 = cube.k0;
  const int64_t ib = dtype_bytes(cube.a), acc = dtype_bytes(cube.acc), l1_align = m.alignment(Buffer::L1);
  const int64_t eo = dtype_bytes(in.out);
  // The last `tail_chunks` K chunks are computed one accumulator block (tm0 x tn0) at a time, so that
  // each block's write-back (mov_l0c to UB, dma_out to GM) runs while the cube computes the next
  // block. They must all be in L1 at once while the next chunk loads: an L1 ring of tail_chunks + 1
  // slots. Block by block, A and B operand tiles are loaded once per mmad (not A once per row of
  // blocks), so MTE1 may bound it: the count minimises a model of the time from the description's
  // numbers — chunks - L chunks in order (the slower of cube and MTE1), then per block the slower of
  // its L chunks' compute and its write-back, plus the last block's write-back; or, where the GM
  // loads are slower, those plus what follows the last chunk's first DMA (load_bound).
  const int64_t chunks = in.K / g.tk;
  const int64_t blocks = (g.tm / g.tm0) * (g.tn / g.tn0), pieces = g.tk / g.tk0;
  const int64_t slot = align_to((g.tm * g.tk + g.tk * g.tn) * ib, l1_align);
  g.l1_slots = g.double_l1 ? 2 : 1;
  g.tail_chunks = 1;
  if (g.double_l1 && m.path(Buffer::L0C, Buffer::UB).bandwidth_bytes_per_cycle > 0 && m.path(Buffer::UB, Buffer::GM).bandwidth_bytes_per_cycle > 0 && m.path(Buffer::L1, Buffer::L0A).bandwidth_bytes_per_cycle > 0 && m.path(Buffer::L1, Buffer::L0B).bandwidth_bytes_per_cycle > 0 && blocks > 1) {
    auto cycles = [](double bytes, double bw) { return static_cast<int64_t>(std::ceil(bytes / bw)); };
    const int64_t block = g.tm0 * g.tn0;
    const int64_t em = in.has_epilogue || in.int_out ? acc : eo;
    const int64_t write_back = std::max(cycles(block * em, m.path(Buffer::L0C, Buffer::UB).bandwidth_bytes_per_cycle), cycles(block * eo, m.path(Buffer::UB, Buffer::GM).bandwidth_bytes_per_cycle));
    // MTE1 per load2d: its bytes plus the wait and set of its flags.
    const int64_t load_a = cycles(g.tm0 * g.tk0 * ib, m.path(Buffer::L1, Buffer::L0A).bandwidth_bytes_per_cycle) + 2 * m.set_flag_cycles;
    const int64_t load_b = cycles(g.tk0 * g.tn0 * ib, m.path(Buffer::L1, Buffer::L0B).bandwidth_bytes_per_cycle) + 2 * m.set_flag_cycles;
    const int64_t cube_block = (g.tm0 / m0) * (g.tn0 / n0) * (g.tk / k0) * cube.cycles;  // one block, one chunk
    const int64_t in_order = std::max(blocks * cube_block, pieces * (g.tm / g.tm0) * (load_a + (g.tn / g.tn0) * load_b));
    const int64_t by_block = std::max(cube_block, pieces * (load_a + load_b));
    const int64_t most = std::max<int64_t>(1, std::min(chunks, m.capacity(Buffer::L1) / slot - 1));
    // The model, in cycles from the first DMA: the chunks before the tail end after their compute
    // (cube-bound) or after their loads plus one chunk's compute (GM-bound); then block by block: a
    // block computes once the cube is free and its data is in (the last chunk's DMAs come in block
    // order: A row block, B column block), its move to UB and write-back follow (the last block's
    // move one 16-column block at a time).
    const int64_t load = m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle > 0 ? cycles(slot, m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle) : 0, lat = m.path(Buffer::GM, Buffer::L1).latency_cycles;
    const int64_t move = cycles(block * em, m.path(Buffer::L0C, Buffer::UB).bandwidth_bytes_per_cycle), out = cycles(block * eo, m.path(Buffer::UB, Buffer::GM).bandwidth_bytes_per_cycle);
    auto model = [&](int64_t l) {
      int64_t cube_free = std::max(lat + (chunks - l) * in_order, chunks > l ? lat + (chunks - l) * load + in_order : lat);
      int64_t written = 0;
      for (int64_t j = 0; j < g.tn / g.tn0; ++j)
        for (int64_t i = 0; i < g.tm / g.tm0; ++i) {
          const int64_t bytes = (j == 0 ? (i + 1) * g.tm0 : g.tm) * g.tk * ib + (j + 1) * g.tk * g.tn0 * ib;
          const int64_t data = load > 0 ? lat + (chunks - 1) * load + cycles(bytes, m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle) : 0;
          const int64_t begin = std::max(cube_free, data), columns = g.tn0 / n0;
          cube_free = begin + l * by_block;
          if (j == g.tn / g.tn0 - 1 && i == g.tm / g.tm0 - 1) {  // the last block: column block by column block
            for (int64_t jj = 0; jj < columns; ++jj)
              written = std::max(written, begin + l * by_block * (jj + 1) / columns + move / columns + m.path(Buffer::L0C, Buffer::UB).latency_cycles) +
                        out / columns;
          } else {
            written = std::max(written, cube_free + move / columns + m.path(Buffer::L0C, Buffer::UB).latency_cycles) + out;
          }
        }
      return written;
    };
    // The smallest L within 0.5 % of the model's best: every further chunk by blocks costs MTE1 and
    // flag hand-offs that the model only estimates.
    std::vector<int64_t> t(most + 1, 0);
    for (int64_t l = 1; l <= most; ++l) t[l] = model(l);
    const int64_t best = *std::min_element(t.begin() + 1, t.end());
    for (int64_t l = most; l >= 1; --l)
      if (200 * t[l] <= 201 * best) g.tail_chunks = l;
    g.l1_slots = g.tail_chunks + 1;
    g.notes.push_back(fmt::format("last {} K chunk(s) block by block: a {}x{} block's write-back {} cycles vs its compute {} "
                                "cycles per chunk; L1 ring of {} chunks",
                                g.tail_chunks, g.tm0, g.tn0, write_back, by_block, g.l1_slots));
  }
}

// The L1 ring's depth (GemmPlan::l1_slots) past what the block-by-block tail needs. The load of
// chunk c + S - 1 goes into the slot chunk c - 1 frees, so it is issued about when chunk c - 1's
// compute ends and must land (its copy and the GM read latency) before chunk c + S - 2's ends: S - 1
// chunk periods (the slower of a chunk's copy and its compute). With two slots, a GEMM whose chunk
// copies take about the latency left MTE2 idle every other chunk (ResNet-50's 49 x 1024 -> 256 on
// davinci-910: chunk 2's copy waited 67 cycles for chunk 0's slot, the last chunk's copies each
// for a read). The ring is deepened to the smallest S that covers it, within K's chunks, L1 and a
// bound on the unrolled chunk loop.
void choose_l1_ring(GemmPlan& g, const GemmRequest& in, const isa::NpuMachine& m) {
  const int64_t chunks = in.K / g.tk;
  const double rate = m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle;
  if (!g.double_l1 || chunks <= g.l1_slots || rate <= 0) return;
  const isa::CubeShape& cube = m.cube(in.operand);
  const int64_t ib = dtype_bytes(cube.a);
  const int64_t slot = align_to((g.tm * g.tk + g.tk * g.tn) * ib, m.alignment(Buffer::L1));
  const double load = std::ceil(double(slot) / rate), latency = m.path(Buffer::GM, Buffer::L1).latency_cycles;
  const double compute = double((g.tm / cube.m0) * (g.tn / cube.n0) * (g.tk / cube.k0) * cube.cycles);
  const double period = std::max(load, compute), round_trip = load + latency;
  const int64_t most = std::min({chunks, m.capacity(Buffer::L1) / slot, kMostL1Ring});
  int64_t depth = g.l1_slots;
  while (depth < most && double(depth - 1) * period < round_trip) ++depth;
  if (depth == g.l1_slots) return;
  g.notes.push_back(fmt::format("L1 ring of {} chunks (was {}): a chunk's copy {:.0f} + GM latency {:.0f} cycles vs {:.0f} per chunk",
                                depth, g.l1_slots, load, latency, period));
  g.l1_slots = depth;
}

// The peeled chunks and the operand rings (GemmPlan::peeled, l0a_slots, l0b_slots).
void choose_peel_and_rings(GemmPlan& g, const GemmRequest& in, const isa::NpuMachine& m) {
  const isa::CubeShape& cube = m.cube(in.operand);
  const int64_t m0 = cube.m0, n0 = cube.n0, k0 = cube.k0;
  const int64_t ib = dtype_bytes(cube.a);
  const int64_t slot = align_to((g.tm * g.tk + g.tk * g.tn) * ib, m.alignment(Buffer::L1));
  // The chunk loop's first iterations compute chunks loaded before it, so the loop waits for all of
  // them at its entry: peel chunks until those loads are done by then (the cube being faster than
  // the loads: every chunk computed gains compute - load cycles on them). At most 16 (code size).
  if (g.double_l1) {
    const int64_t compute = (g.tm / m0) * (g.tn / n0) * (g.tk / k0) * cube.cycles;
    const int64_t load = m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle > 0 ? static_cast<int64_t>(std::ceil(slot / m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle)) : compute;
    const int64_t ahead = g.l1_slots - 1;
    // Loads at least as slow as the cube: the cube never gains on them, the entry wait always costs
    // (ahead - 1) loads: peel as many as the bound allows.
    g.peeled = compute > load ? std::clamp<int64_t>((m.path(Buffer::GM, Buffer::L1).latency_cycles + ahead * load + compute - load - 1) / (compute - load), 1,
                                          kMostPeeledChunks)
                              : kMostPeeledChunks;
  }
  // Operand tiles: rings of up to 4 tiles so that the MTE1 loads run ahead of the cube by more than
  // one (their latency hidden where the cube and MTE1 are equally busy: the block-by-block tail);
  // the number divides the loads of one loop body (every unrolled address the same each iteration).
  auto ring = [&](int64_t cap, int64_t tile, int64_t per_body) {
    int64_t n = std::min<int64_t>(kMostOperandRing, cap / align_to(tile, m.operand_alignment()));
    while (n > 2 && per_body % n) --n;
    return n;
  };
  const int64_t a_per_chunk = (g.tk / g.tk0) * (g.tm / g.tm0);
  if (g.double_l0) {
    g.l0a_slots = ring(m.capacity(Buffer::L0A), g.tm0 * g.tk0 * ib, g.l1_slots * a_per_chunk);
    g.l0b_slots = ring(m.capacity(Buffer::L0B), g.tk0 * g.tn0 * ib, g.l1_slots * a_per_chunk * (g.tn / g.tn0));
  } else {
    g.l0a_slots = g.l0b_slots = 1;
  }
}

}  // namespace

GemmPlanResult plan_gemm(const GemmRequest& in, const isa::NpuMachine& m) {
  const isa::CubeShape& cube = m.cube(in.operand);
  const int64_t m0 = cube.m0, n0 = cube.n0, k0 = cube.k0;
  const int64_t ib = dtype_bytes(cube.a), acc = dtype_bytes(cube.acc), l1_align = m.alignment(Buffer::L1);
  // Tiles are multiples of the fractal, or of the request's larger units (an i8 transpose's pairs).
  const int64_t mu = std::max(m0, in.unit_m), nu = std::max(n0, in.unit_n), ku = k0;
  GemmPlan g;
  g.tm = dividing_tile(in.M, round_up(in.box_m, mu), mu);
  g.tn = dividing_tile(in.N, round_up(in.box_n, nu), nu);
  g.tk = dividing_tile(in.K, round_up(in.box_k, ku), ku);
  g.tm0 = dividing_tile(g.tm, round_up(in.box_m0, mu), mu);
  g.tk0 = dividing_tile(g.tk, round_up(in.box_k0, ku), ku);
  g.tn0 = dividing_tile(g.tn, round_up(in.box_n0, nu), nu);
  const int64_t eo = dtype_bytes(in.out);
  // Fit single buffers first (shrinking the stage tile), then decide on double buffering.
  while (g.tm * g.tn * acc > m.capacity(Buffer::L0C) && g.tm > mu) g.tm = dividing_tile(in.M, g.tm / 2, mu);
  while (g.tn * g.tm * acc > m.capacity(Buffer::L0C) && g.tn > nu) g.tn = dividing_tile(in.N, g.tn / 2, nu);
  while ((g.tm * g.tk + g.tk * g.tn) * ib > m.capacity(Buffer::L1) && g.tk > ku) g.tk = dividing_tile(in.K, g.tk / 2, ku);
  g.tm0 = dividing_tile(g.tm, g.tm0, mu);
  g.tn0 = dividing_tile(g.tn, g.tn0, nu);
  g.tk0 = dividing_tile(g.tk, g.tk0, ku);
  while (g.tm0 * g.tk0 * ib > m.capacity(Buffer::L0A) && g.tk0 > ku) g.tk0 = dividing_tile(g.tk, g.tk0 / 2, ku);
  while (g.tk0 * g.tn0 * ib > m.capacity(Buffer::L0B) && g.tn0 > nu) g.tn0 = dividing_tile(g.tn, g.tn0 / 2, nu);
  while (g.tm0 * g.tn0 * eo > m.capacity(Buffer::UB) && g.tm0 > mu) g.tm0 = dividing_tile(g.tm, g.tm0 / 2, mu);
  // The fused epilogue's UB regions grow with the block's rows: fewer rows per operand tile before a
  // refusal, which would send the whole kernel to the general vector lowering (a GEMM + tanh-GELU of
  // 128 x 768 x 3072 on a 128 KiB UB: 2.7 M cycles there).
  auto block_ub = [&] { return align_to(g.tm0 * g.tn0 * (in.has_epilogue ? acc : eo), m.alignment(Buffer::UB)); };
  auto epilogue_ub = [&] { return in.has_epilogue ? in.epilogue_ub_bytes(g.tm0) : int64_t{0}; };
  while (in.has_epilogue && block_ub() + epilogue_ub() > m.capacity(Buffer::UB) && g.tm0 > mu) g.tm0 = dividing_tile(g.tm, g.tm0 / 2, mu);
  if (auto no_fit = overflow(g, m, in)) return {std::nullopt, no_fit};
  g.double_l1 = 2 * align_to((g.tm * g.tk + g.tk * g.tn) * ib, l1_align) <= m.capacity(Buffer::L1);
  g.double_l0 = 2 * align_to(g.tm0 * g.tk0 * ib, m.operand_alignment()) <= m.capacity(Buffer::L0A) && 2 * align_to(g.tk0 * g.tn0 * ib, m.operand_alignment()) <= m.capacity(Buffer::L0B);
  const int64_t block = block_ub(), extra = epilogue_ub();
  if (block + extra > m.capacity(Buffer::UB))
    return {std::nullopt, tile::FitFailure{isa::Role::Vector, m.buffer(Buffer::UB).level_name, m.target_name, block + extra,
                                           m.capacity(Buffer::UB),
                                           fmt::format("one {}x{} accumulator block {} + the epilogue's regions {}", g.tm0, g.tn0, block, extra),
                                           false}};
  g.double_ub = 2 * block + extra <= m.capacity(Buffer::UB);
  g.notes.push_back(fmt::format("stage tile {}x{}x{} (L1 {}, L0C), operand tile {}x{}x{} (L0A/L0B {}), UB {}", g.tm, g.tn,
                              g.tk, g.double_l1 ? "double-buffered" : "single", g.tm0, g.tn0, g.tk0,
                              g.double_l0 ? "double-buffered" : "single", g.double_ub ? "double-buffered" : "single"));
  choose_tail_chunks(g, in, m);
  choose_l1_ring(g, in, m);
  choose_peel_and_rings(g, in, m);
  return {g, std::nullopt};
}

}  // namespace tessel::tile
