// The NPU GEMM's tile policy below the loop tree: from the kernel's stage and operand boxes (the
// polyhedral core's tiles) to the tiles the GEMM emitter (compiler/emit_npu/gemm.cc) carries
// out — each rounded up to the cube's fractal, shrunk to divide the (padded) sizes and to fit the
// levels of the isa::NpuMachine — and the pipeline depth: which levels double-buffer, how many K
// chunks the L1 ring holds and how many of them are computed block by block so that the write-back
// overlaps the cube (from a timeline model of the machine's rates), how many chunks are peeled
// before the chunk loop, and the L0A / L0B ring sizes.
//
// Input: GemmRequest (sizes padded to the fractal, the boxes, output type, the fused epilogue's UB
// needs). Output: GemmPlan with notes for --explain, or a FitFailure naming the level that no tile
// fits (bytes, capacity). Never throws for a user's input. plan_gemm_tails (below) chooses the
// stage tiles over the cores for a GEMM whose edge tiles are clipped (tails in place) and plans them
// with plan_gemm.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/tile/fit.h"
#include "isa/base/dtype.h"
#include "isa/npu_machine.h"

namespace tessel::tile {

struct GemmRequest {
  int64_t M = 0, N = 0, K = 0;          // padded to the cube's fractal
  int64_t box_m = 0, box_n = 0, box_k = 0;    // stage boxes (accumulator m x n, A's stage k)
  int64_t box_m0 = 0, box_n0 = 0, box_k0 = 0; // operand boxes (A's m x k, B's n)
  DType out = DType::F32;
  DType operand = DType::F16;  // the cube shape used (isa::NpuMachine::cube): f16, or i8 (16x16x32, i32 accumulation)
  int64_t unit_m = 0, unit_n = 0;  // tiles of M / N also multiples of these (i8 transposes move 32-row pairs)
  bool int_out = false;      // i8 operands on the f16 cube: the f32 accumulator converted to i32 on UB
  bool has_epilogue = false;
  std::function<int64_t(int64_t rows)> epilogue_ub_bytes;  // UB regions of the epilogue for a block of `rows`
  int64_t epilogue_loads = 0;  // tensors the epilogue reads from GM (a DMA each per 16-column block)
};

struct GemmPlan {
  int64_t tm = 0, tn = 0, tk = 0;     // stage (L1 / L0C) tile
  int64_t tm0 = 0, tn0 = 0, tk0 = 0;  // operand (L0A / L0B) tile
  bool double_l1 = true, double_l0 = true, double_ub = true;
  int64_t l1_slots = 2;      // K chunks in flight in L1 (a ring; 2 = ping-pong)
  int64_t tail_chunks = 1;   // the last chunks, computed block by block so the write-back overlaps the cube
  int64_t l0a_slots = 2, l0b_slots = 2;  // operand tiles in flight in L0A / L0B (rings)
  int64_t peeled = 1;        // chunks computed before the chunk loop (in straight-line code)
  std::vector<std::string> notes;
};

struct GemmPlanResult {
  std::optional<GemmPlan> plan;
  std::optional<FitFailure> no_fit;
};

GemmPlanResult plan_gemm(const GemmRequest& request, const isa::NpuMachine& machine);

// The largest multiple of `unit` that is <= limit and divides n (n a multiple of unit): the stage
// and operand tiles plan_gemm takes for sizes that are multiples of the cube's shape (a box of 64
// over M = 784 = 49 x 16 gives 16).
int64_t dividing_tile(int64_t n, int64_t limit, int64_t unit);
// M, N and K whole multiples of the cube's unit um x un x uk (each > 0): plan_gemm then runs
// dividing tiles (the tile policy and the analytic model both ask).
inline bool whole_units(int64_t M, int64_t N, int64_t K, int64_t um, int64_t un, int64_t uk) {
  return um > 0 && un > 0 && uk > 0 && M % um == 0 && N % un == 0 && K % uk == 0;
}

// Tails in place (compiler/emit_npu/gemm.cc, GemmSetup::in_place): a GEMM of the user's sizes whose
// edge tiles are computed whole — their reads past the sizes land in guards, K's columns past K
// are zeros — and written back clipped, so the sizes are padded to the tiles instead of the tiles
// shrunk to divide the sizes. The stage tile (tm x tn, the K chunk tk) is chosen over the machine's
// cores: for every split of M, N and K into tiles of whole fractals, a model of one core's time
// (its tiles' GM loads at the core's rate or its cube time, whichever is longer, wave after wave,
// plus the first chunk's load, the last chunk's compute and the last write-back) and of the chip's
// (every tile's GM bytes at the shared rate); the best few are planned by plan_gemm (operand tiles,
// buffering, rings) and the one whose plan the model prices lowest is kept. A user's tile spec
// (`keep_boxes`) keeps the request's stage boxes, the sizes padded to them.
struct GemmTailRequest {
  GemmRequest gemm;   // M, N, K: the user's sizes (not padded); the boxes as for plan_gemm
  int64_t batch = 1;  // independent GEMMs, each tiled alike
  bool keep_boxes = false;
  // An operand stored K-major is loaded by whole rows of its tiles: B [k][n] needs tn <= N, A [k][m]
  // needs tm0 <= M (its rows are that long). 0: no such bound.
  int64_t most_tn = 0, most_tm0 = 0;
  // How the operands are stored, for the model's GM granules: A [k][m] / B [k][n] (K-major) or not,
  // and the element strides of A's, B's and C's rows.
  bool a_k_major = false, b_k_major = false;
  int64_t a_stride = 0, b_stride = 0, c_stride = 0;
};

struct GemmTailPlan {
  GemmPlan plan;
  int64_t M = 0, N = 0, K = 0;  // the sizes padded to the plan's tiles
  double model_cycles = 0;      // the model's time for it
};

struct GemmTailPlanResult {
  std::optional<GemmTailPlan> plan;
  std::optional<FitFailure> no_fit;
};

GemmTailPlanResult plan_gemm_tails(const GemmTailRequest& request, const isa::NpuMachine& machine);

}  // namespace tessel::tile
