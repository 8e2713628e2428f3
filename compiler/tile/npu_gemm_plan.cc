#include "compiler/tile/npu_gemm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessel::tile {
namespace {

using npu::Buffer;

// Policy bounds (code size and ring depth): at most this many chunks in straight-line code before
// the chunk loop, at most this many operand tiles in an L0A / L0B ring.
// not hardware: code-size bound
constexpr int64_t kMostPeeledChunks = 16;
constexpr int64_t kMostOperandRing = 4;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t align_to(int64_t x, int64_t a) { return round_up(x, a); }

// The largest multiple of `unit` that is <= limit and divides n (n a multiple of unit).
int64_t dividing_tile(int64_t n, int64_t limit, int64_t unit) {
  for (int64_t t = std::max(unit, limit / unit * unit); t >= unit; t -= unit)
    if (n % t == 0) return t;
  return unit;
}

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
  if (auto no_fit = overflow(g, m, in)) return {std::nullopt, no_fit};
  g.double_l1 = 2 * align_to((g.tm * g.tk + g.tk * g.tn) * ib, l1_align) <= m.capacity(Buffer::L1);
  g.double_l0 = 2 * align_to(g.tm0 * g.tk0 * ib, m.operand_alignment()) <= m.capacity(Buffer::L0A) && 2 * align_to(g.tk0 * g.tn0 * ib, m.operand_alignment()) <= m.capacity(Buffer::L0B);
  const int64_t moved = g.tm0 * g.tn0 * (in.has_epilogue ? acc : eo), extra = in.has_epilogue ? in.epilogue_ub_bytes(g.tm0) : 0;
  if (align_to(moved, m.alignment(Buffer::UB)) + extra > m.capacity(Buffer::UB))
    return {std::nullopt, tile::FitFailure{isa::Role::Vector, m.buffer(Buffer::UB).level_name, m.target_name,
                                           align_to(moved, m.alignment(Buffer::UB)) + extra, m.capacity(Buffer::UB),
                                           fmt::format("one {}x{} accumulator block {} + the epilogue's regions {}", g.tm0, g.tn0,
                                                       align_to(moved, m.alignment(Buffer::UB)), extra),
                                           false}};
  g.double_ub = 2 * align_to(moved, m.alignment(Buffer::UB)) + extra <= m.capacity(Buffer::UB);
  g.notes.push_back(fmt::format("stage tile {}x{}x{} (L1 {}, L0C), operand tile {}x{}x{} (L0A/L0B {}), UB {}", g.tm, g.tn,
                              g.tk, g.double_l1 ? "double-buffered" : "single", g.tm0, g.tn0, g.tk0,
                              g.double_l0 ? "double-buffered" : "single", g.double_ub ? "double-buffered" : "single"));
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
  return {g, std::nullopt};
}

}  // namespace tessel::tile
