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

#include <vector>

#include "compiler/emit_cuda/tc_kernel.h"

namespace tessel::emit_cuda {

void emit_epilogue(const TcKernel& t, std::vector<Launch>* before);

// One output element: the fused element-wise statements on its accumulator value `v_` and the
// global stores, with its M / N indices in locals `ov_<var>` and its batch indices in `bv_<var>`.
// Shared by the epilogue above (values from shared memory) and the register epilogue of the
// persistent kernel (kernel_wgmma_ws.h). `streaming`: evict-first stores (__stcs).
void emit_element(const TcKernel& t, const std::string& pad, bool streaming);

// The epilogue of the persistent kernel, from the wgmma accumulators (acc_, m16n8 layout per
// warp) of the tile at (m0_, n0_), batch bz_: 64-bit stores for a plain output, else emit_element
// per element (bounds-checked). No shared memory and no barrier.
void register_epilogue(const TcKernel& t, const std::string& pad);

}  // namespace tessel::emit_cuda
