// SIMT code shape of the CUDA emitter: a direct walk of the kernel IR (see emit_cuda.h).
// Each top-level group of the kernel body becomes one __global__ function: its perfectly nested
// ParallelCores loops are the grid (a grid-stride loop over their flattened trip count, at most one
// wave of resident blocks); every buffer of the group lives in dynamic shared memory (global
// scratch, per block, when the budget is exceeded), except boxes that need no staging (below).
// Control flow runs uniformly in the block; copies and matmul fragments are shared out over the
// block's threads. Block-wide barriers separate every copy, fragment and compute nest.
//
// How the parallel loops map (issue 35), all from the kernel IR's marks and the machine model:
//   - grid: the ParallelCores loops (block tiles). Block: 256 threads, or, where a group has
//     fewer block tiles than the machine has SMs, doubled up to the machine's block limit while a
//     thread keeps at least 4 elements of the group's largest box.
//   - a nest whose outer loops are marked parallel (and rebind no buffer) is flattened over the
//     block's threads, innermost loop fastest (consecutive threads, consecutive elements); a thread
//     runs 4 or 2 iterations of the innermost loop per decoding where the counts allow (its
//     register tile), neighbours still touching neighbouring elements.
//   - a reduction nest: its output loops go to groups of G threads, all its reduced loops
//     flattened over the group's lanes (where their bounds read no reduced variable); G is a warp,
//     doubled while the outputs still give every group of the block one, and cut to keep at least
//     4 reduced elements per lane (G = 1 for a short reduction such as a 3-tap window: a thread per
//     output, no shuffles); a column reduction takes a thread per output. Lanes combine by xor
//     shuffles, then across warps in order through shared memory (deterministic, reassociated).
//     A reduction too long for one block is split into two phases by poly::split_reductions.
//   - copy-in boxes of inputs read only by compute statements along the tensor's contiguous dim
//     with the threads' innermost index are not staged: the statements read global memory (zero
//     outside the tensor, as the copy would fill); copy-out boxes written only element-wise with
//     the output's last index innermost are written straight to global. A transpose's input keeps
//     its coalescing copy. Inside a sequential loop whose body is one reduction nest that keeps
//     each output on one thread in every iteration, the barrier goes after the loop.
#pragma once

#include <cstdint>
#include <sstream>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"

namespace tessel::emit_cuda {

// Appends the group kernels to `os` and their launches to `launches`; grows `scratch_bytes`.
// `finalise`: groups that qualify run in the previous group's last-arriving blocks (simt_finalise.h).
void emit_simt(const kernel::Kernel& k, const isa::GpuMachine& m, std::ostringstream& os, std::vector<Launch>& launches,
               uint64_t& scratch_bytes, bool finalise = false);

// The kernel parameter list shared by every generated kernel: one pointer per Kernel::tensors
// entry, then the scratch pointer.
std::string kernel_parameters(const kernel::Kernel& k);

}  // namespace tessel::emit_cuda
