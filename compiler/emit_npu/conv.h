// NPU mapping of an NHWC convolution (Y[n,p,q,k] += Xp[n,p+r,q+s,c] * Wt[r,s,c,k] with Xp the
// zero-padded X, stride 1) as an implicit GEMM through img2col: the image's feature map goes to L1
// as C1HWC0 (MTE2, one strided copy per 16 channels), the geometry is set once (set_fmatrix),
// load3d (MTE1) writes the im2col rows of a pixel block for one 16-channel slice (all kernel
// positions) into L0A, the weights of that slice go GM -> L1 (one dma_in_nz per kernel position)
// -> L0B, mmad accumulates over the slices in L0C, and mov_l0c / dma_out write the valid pixels.
// Jobs (image, block of output channels) are spread over the cores. Part of compiler/emit_npu.
#pragma once

#include "compiler/emit_npu/emit_npu.h"

namespace tessel::emit_npu {

// True when the kernel's function is that convolution (then emit_conv maps it).
bool is_nhwc_convolution(const kernel::Kernel& kernel);
NpuKernel emit_conv(const kernel::Kernel& kernel, const isa::Hierarchy& target);

// Depthwise NHWC convolution (a padding statement, Acc(n,p,q,c) += X(..,c) * Wt(r,s,c), element-wise
// statements after it) on the vector unit: pixels as rows of one f32 repeat (C <= 64), the whole
// tensors in UB, one vmul + vadd per output row and kernel position (r then s ascending, padding
// terms skipped), the epilogue over all pixels; one core.
bool is_depthwise_convolution(const kernel::Kernel& kernel);
NpuKernel emit_depthwise(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
