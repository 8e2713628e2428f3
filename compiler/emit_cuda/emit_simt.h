// SIMT code shape of the CUDA emitter: a direct walk of the kernel IR (see emit_cuda.h).
// Each top-level group of the kernel body becomes one __global__ function: its perfectly nested
// ParallelCores loops are the grid (a grid-stride loop over their flattened trip count); every
// buffer of the group lives in dynamic shared memory (global scratch, per block, when the budget is
// exceeded). Control flow runs uniformly in the block; copies and matmul fragments are shared out
// over the block's threads; a loop nest of compute statements whose outer loops write disjoint
// outputs (no reduction index) is flattened over the threads; a reduction runs sequentially.
// Block-wide barriers separate every copy, fragment and compute nest.
#pragma once

#include <cstdint>
#include <sstream>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"

namespace tessel::emit_cuda {

// Appends the group kernels to `os` and their launches to `launches`; grows `scratch_bytes`.
void emit_simt(const kernel::Kernel& k, const isa::GpuMachine& m, std::ostringstream& os, std::vector<Launch>& launches,
               uint64_t& scratch_bytes);

// The kernel parameter list shared by every generated kernel: one pointer per Kernel::tensors
// entry, then the scratch pointer.
std::string kernel_parameters(const kernel::Kernel& k);

}  // namespace tessel::emit_cuda
