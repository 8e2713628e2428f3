// The copy kernels of operand repacking (repack_plan.h): one memory-bound kernel per copied
// operand, launched before the main kernel of the program.
//
// Input: the kernel (its tensors are every kernel's parameters), one OperandCopy and the GPU
// machine model (SM count for the grid). Output: the CUDA text of the copy kernel and its launch.
// Each thread moves `move_bytes` at a time (16 where the innermost run allows) in the copy's
// order, so the stores of a warp are contiguous; the loads are runs of the source's innermost
// dim, which the copy keeps innermost (32 B for a blocked layout: whole sectors). Four moves per
// thread are in flight (loads first, then stores); the grid is a grid-stride loop of at most
// kRepackBlocksPerSm blocks per SM. Offsets are 32-bit where the tensor allows. A copy whose
// innermost dim moves (an NCHW input to NHWC) is a tiled transpose instead: kRepackTile x
// kRepackTile tiles of the plane of the two innermost dims through shared memory (rows padded by
// one element), read along the source's innermost dim and written along the copy's.
#pragma once

#include <sstream>
#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/repack_plan.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

inline constexpr unsigned kRepackThreads = 256;
inline constexpr int kRepackUnroll = 4;
inline constexpr int64_t kRepackBlocksPerSm = 8;
inline constexpr int64_t kRepackTile = 32;

Launch emit_repack_kernel(const kernel::Kernel& k, const OperandCopy& cp, const std::string& name, const isa::GpuMachine& m,
                          std::ostringstream& os);

}  // namespace tessel::emit_cuda
