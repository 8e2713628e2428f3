// NPU mapping of a convolution (Y[n,p,q,k] += Xp[n, sh p + dh r, sw q + dw s, c] * Wt[r,s,c,k] with Xp the
// zero-padded X) as an implicit GEMM through img2col, in NHWC, NCHW and the blocked seed layout
// [N/16, H, W, C/16, 16, 16]: per core one tile of output channels whose weights stay in L1 (loaded
// once, [c1][kernel position][16-column block] fractals), per image the feature map to L1 as C1HWC0
// (MTE2, one strided copy per 16 channels; two images ping-pong), the geometry set once
// (set_fmatrix, strides and dilations included), per 16-channel slice and group of kernel
// positions the weights L1 -> L0B (load2d) and per pixel block load3d (img2col) -> L0A, mmad
// accumulating in L0C (two images ping-pong), mov_l0c / dma_out of the valid pixels.
// Feature maps (or accumulators) larger than L1 (L0C) run in bands of output rows: each band loads
// its input window (band rows x stride + (R - 1) x dilation halo rows, overlapping its neighbours'),
// with its own set_fmatrix (zero rows only at the image's real border); bands ping-pong in L1 / L0C.
// A fused epilogue (conv + bn + relu) is a ConvEpilogue (conv_epilogue.h): per-channel values once
// per channel tile, per column block only the accumulator's operations, and its write-back trails
// the next image's first slice pairs so the vector unit works while the cube computes.
// Fewer input channels than 16 (NHWC, output channels a multiple of 16) fold the window's columns
// into the channels instead (conv_fold.h: R x round_up(S C, 16) K values, no copies).
// NCHW and channel counts not multiples of 16 go through NHWC scratch copies: per core (each core
// copies the images it reads, its channel tile's weights and its results; no core reads another's)
// where one core's work outweighs the copies' GM round trips, else on one core. The user's tile
// spec (Kernel::user_tile), when given, is read by the NPU convolution tile policy
// (compiler/tile/npu_conv_plan.h), which sets the output-channel tile (outer k), the pixel block
// (inner p x q) and the kernel positions per L0 step (inner r x s); README "Tile spec -> plan".
// Part of compiler/emit_npu.
#pragma once

#include <optional>
#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "compiler/tile/npu_conv_plan.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// True when the kernel's matched contraction (Kernel::contraction, recorded by the core's pass
// "contraction") is that convolution in one of those layouts (then emit_conv maps it): X is the
// operand with a dimension combining an output and a reduction index (`p + r - 1`, the padding
// statement folded in), which gives the stride, dilation and pad; the anchor's output index names
// say the layout.
bool is_nhwc_convolution(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// The tile policy's view of it (compiler/tile/npu_conv_plan.h), nullopt when it is not one.
std::optional<tile::ConvGeometry> conv_geometry(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// The plan emit_conv carries out for `spec` (null: the policy's own choice), with the fused
// epilogue's UB needs and checks; the kernel must be a convolution (is_nhwc_convolution).
tile::ConvPlanResult plan_convolution(const kernel::Kernel& kernel, const isa::Hierarchy& target, const tile::TileSpec* spec);
// "" when emit_conv maps the kernel (a convolution: is_nhwc_convolution), else the UserError text
// it would throw: the fused epilogue's form, the plan's fit (the user's tile or the policy's),
// windows that stop short of the image, a layout copy that does not fit UB (found by a dry run of
// the emitter into a throwaway program). Decided before emitting; never throws for those.
std::string why_not_conv(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_conv(const kernel::Kernel& kernel, const isa::Hierarchy& target);

// A depthwise convolution (depthwise.h's statement: Acc(n, p, q, c) +=! X(n, p + r - pt,
// q + s - pl, c) * Wt(r, s, c), element-wise statements after it; or its NCHW form) as its matcher
// reads it.
struct DepthwiseShape {
  std::string x, w, acc;
  int statement = 0;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, OH = 0, OW = 0, pt = 0, pl = 0;
  std::string an, ap, aq, ac, ar, as;  // the statement's index names (the tile spec's axes)
  bool nchw = false;  // X[N, C, H, W], Wt[C, R, S], the accumulator [N, C, OH, OW] (no epilogue)
};
// The depthwise convolution on the cube: a grouped convolution of one fractal of channels per group
// (C a multiple of it) whose weights are diagonal fractals built on chip; 16x the MACs, at the
// cube's rate, where the vector unit takes two f32 operations per tap. "" when emit_depthwise_on_cube
// maps it, else the UserError text (as why_not_conv).
std::string why_not_depthwise_on_cube(const kernel::Kernel& kernel, const isa::Hierarchy& target, const DepthwiseShape& d);
NpuKernel emit_depthwise_on_cube(const kernel::Kernel& kernel, const isa::Hierarchy& target, const DepthwiseShape& d);

}  // namespace tessel::emit_npu
