// The epilogue of a TensorCore kernel (CUTLASS 3's "collective epilogue"): from the accumulators
// the main loop leaves (mainloop.h) to the kernel's outputs in global memory.
//
// Input: a TcKernel (tc_kernel.h) after its main loop. Output: CUDA text closing the kernel, in
// one of these shapes:
//   - a plain dense output with no K split: accumulators stored straight to global memory
//     (store_matrix_sync, or 64-bit stores of the m16n8 layout, evict-first with /cs);
//   - otherwise accumulators -> shared memory (one tile per K slice), then the split-K reduction
//     across blocks when the tile has one (cluster: distributed shared memory; last block: global
//     scratch + a per-tile counter; atomic: atomicAdd into the output, whose zeroing kernel is
//     appended to the text and its launch to `before`), then the fused element-wise statements
//     per element and the global stores.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/emit_cuda/tc_kernel.h"

namespace tessel::emit_cuda {

void emit_epilogue(const TcKernel& t, std::vector<Launch>* before);

struct ColumnValues {
  std::map<const ir::Expr*, std::string> local;  // fused-statement subtree -> the C expression of its value
};

// One output element: the fused element-wise statements on its accumulator value `v_` and the
// global stores, with its M / N indices in locals `ov_<var>` and its batch indices in `bv_<var>`.
// Shared by the epilogue above (values from shared memory) and the register epilogue of the
// persistent kernel (kernel_wgmma_ws.h). `streaming`: evict-first stores (__stcs).
// `columns`: subtrees already evaluated for the element's column (emit_column_values).
// `store_slot` (non-empty): each output's value goes to the caller's array sv_<tensor>[store_slot]
// instead of global memory (the caller stores the vector; element_outputs names the arrays).
void emit_element(const TcKernel& t, const std::string& pad, bool streaming, const ColumnValues* columns = nullptr,
                  const std::string& store_slot = "");
// The global outputs emit_element stores: the anchor's output if global, then each fused
// statement's output that is global, with their dtypes.
std::vector<std::pair<std::string, DType>> element_outputs(const TcKernel& t);

// The fused statements' column-only subexpressions (every tensor read indexed by N and batch dims
// only, e.g. a batch norm's gamma[k] * rsqrt(var[k] + eps)), evaluated into locals hv<i>_ for the
// columns first_column + q, q in [0, columns) (an array indexed by q_ when columns > 1; a column
// past N holds 0), for an element loop whose threads each keep to those columns. Emitted at `pad`;
// adds a line to the explanation. Empty when the statements have none.
ColumnValues emit_column_values(const TcKernel& t, const std::string& pad, const std::string& first_column, int columns);

// The epilogue of the persistent kernel, from the wgmma accumulators (acc_, m16n8 layout per
// warp) of the tile at (m0_, n0_), batch bz_: 64-bit stores for a plain output, else emit_element
// per element (bounds-checked). No shared memory and no barrier.
// With TcConfig::tma_store (a plain f32 output): 32-column chunks of each consumer warpgroup's rows
// through a 128-byte-swizzled double buffer (Es_) and a tensor-map store per chunk, issued by the
// warpgroup's first thread (it waits for the buffer's previous store to have read it; the kernel's
// consumers wait for all their stores before exiting).
void register_epilogue(const TcKernel& t, const std::string& pad);
// The output's tensor map of the TMA stores ({N, M[, batch]}, box {32, wm}, 128-byte swizzle) and
// the store helper (tessel_tma_store2 / 3: one copy and its bulk group).
TensorMapSpec output_store_map(const TcKernel& t);
void emit_tma_store_helpers(const TcKernel& t);

}  // namespace tessel::emit_cuda
