// The launch builder of a TensorCore kernel: its __global__ signature and its launches.
//
// Input: a TcKernel (tc_kernel.h) and the machine model it carries (warp size, shared memory per
// SM and reserved per block). Output: the signature line (cluster dims for cluster split-K,
// __launch_bounds__ with 2 blocks per SM for wgmma tiles whose shared memory and accumulators fit
// twice), the main launch (grid = output tiles x K blocks x batch, block = warps x warp size,
// dynamic shared bytes) and the launch of the output-zeroing kernel of atomic split-K.
#pragma once

#include <string>

#include "compiler/emit_cuda/tc_kernel.h"

namespace tessel::emit_cuda {

// Threads of the output-zeroing kernel (atomic split-K) and its largest grid (grid-stride loop).
inline constexpr unsigned kZeroKernelThreads = 256;
inline constexpr int64_t kZeroKernelMaxBlocks = 1024;

// Blocks per SM the kernel asks for in __launch_bounds__ (wgmma tiles only; 1 otherwise).
int min_blocks_per_sm(const TcKernel& t);
// `extern "C" __global__ void ... name(params) {`
void emit_kernel_signature(const TcKernel& t);
Launch main_launch(const TcKernel& t);
Launch zero_output_launch(const TcKernel& t, const std::string& kernel);

}  // namespace tessel::emit_cuda
