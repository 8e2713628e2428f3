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

}  // namespace tessel::emit_cuda
