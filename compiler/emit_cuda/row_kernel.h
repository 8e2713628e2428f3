// Row kernels: a SIMT code shape for row programs (softmax, layer norm, RMS norm, bias + GELU on
// rows, row sums), where the SIMT walk of the loop tree stages every row in shared memory and
// separates each statement by a block-wide barrier. Here one row lives in the registers of a group
// of T threads for the whole program: the row's inputs are read once with 16-byte vector loads,
// every statement runs on the registers in program order (a reduction over the row combines the
// group's values by warp shuffles, and across warps through shared memory), and outputs are written
// once with vector stores. Global memory sees each input element read once and each output element
// written once.
//
// A kernel is a row program when, on the kernel IR's function at its sizes (no user tile spec, no
// floor division):
//   - every statement writes either a row tensor [M] through its row index (a reduction over one
//     index of extent N, or a row-wise scalar statement) or a matrix [M, N] through (row, col)
//     element-wise, with index ranges starting at 0 and covering the tensor;
//   - every read is of a matrix [M, N] at (row, col-or-reduced index), a row tensor [M] at row, a
//     column vector [N] at the col-or-reduced index, or a scalar tensor; a tensor some statement
//     writes is read only after that statement and only in its own shape;
//   - every tensor is f16 or f32, and N fits the registers: at most 32 elements of a matrix per
//     thread with T <= 1024 threads per row (T the smallest power of two from 32 with N / T <= E,
//     E = 16 or 32 elements per thread, fewer for few rows: see analyze in row_kernel.cc).
// The order of each row reduction is fixed (deterministic): a thread's elements in order, then the
// xor butterfly over the warp, then the warps of the group in order; float sums are reassociated
// (the reassociation tolerance of compiler/emit_c/run_c.h applies). Results do not depend on the
// grid size. An f32 division whose divisor is a row value (softmax's E / Den, a mean's sum / N) is
// a multiplication by the divisor's reciprocal, computed once per row: within 1.5 ulp of f32 of
// the correctly rounded quotient (the interpreter divides), inside the outputs' comparison
// tolerance.
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"

namespace tessel::emit_cuda {

struct RowKernelPlan {
  int64_t rows = 0, cols = 0;  // M, N
  int threads_per_row = 32;    // T: a power of two, a warp to the block limit
  int rows_per_block = 8;      // max(1, 256 / T)
  int vec = 8;                 // elements of a vector slot (a 16-byte access of the narrowest matrix)
  int slots = 0;               // vector slots per thread: ceil(N / (T * vec))
  uint32_t sm_count = 0;       // the machine's SMs (grid caps)
  // the machine model's numbers the layout and the code use (isa::GpuMachine): lanes of a warp (the
  // shuffles and per-warp partials), the most threads of a block, the widest access of a thread
  int warp_size = 32, max_threads = 1024, vector_bytes = 16;
  // A block per row whose reductions wait at block barriers: the grid is capped at
  // `blocks_per_sm` blocks per SM, each walking several rows with the next row's inputs loaded
  // before the current row's statements (`prefetch`). 0 / false: a block per `rows_per_block` rows.
  int blocks_per_sm = 0;
  bool prefetch = false;
  std::string explain;         // one line for --explain
};

// The plan when `k` is a row program (see above), else nullopt and the reason in `why_not`.
// `m` gives the SM count (small row counts take more threads per row).
std::optional<RowKernelPlan> plan_row_kernel(const kernel::Kernel& k, const isa::GpuMachine& m, std::string* why_not);

// Appends the row kernel and its launch.
void emit_row_kernel(const kernel::Kernel& k, const RowKernelPlan& plan, std::ostringstream& os, std::vector<Launch>& launches);

}  // namespace tessel::emit_cuda
