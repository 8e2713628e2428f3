// NPU mapping of a depthwise NHWC convolution on the vector unit:
//   [Xp(n, h, w, c) = select(in the image, X(n, h - pt, w - pl, c), 0)]   (or the padding inlined)
//   Acc(n, p, q, c) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c))
//   element-wise statements on Acc (e.g. relu6), the last one writing Y[N, OH, OW, C].
// Not a contraction (c is read by both factors and is an output index: no N side), so the core's
// matcher does not record it; this file recognises it from the tensor-IR statement with the core's
// shared pieces (poly::product_of_accesses, poly::plain_index).
// Layout: pixels as rows of one f32 repeat (C <= lanes of f32), X, weights and accumulator whole in
// UB; per output row and kernel position one vmul (weights row with source repeat stride 0) and one
// vadd over the valid output columns (terms reading the zero padding are skipped: they add 0), r
// then s ascending like the interpreter; the epilogue over all pixels. One core. Every hardware
// number from isa::NpuMachine. Part of compiler/emit_npu (emit_npu.h dispatches to it).
// Channel counts that are a multiple of the cube's fractal go to the cube instead (conv.h,
// emit_depthwise_on_cube: groups of one fractal of channels with diagonal weights, every core).
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when the kernel's function is that depthwise convolution (then emit_depthwise maps it or
// throws UserError saying which size does not fit), else why not.
std::string why_not_depthwise(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// With the shape matched: "" when the template fits (channels within one f32 repeat), else the
// refusal the dispatcher hands to the general vector lowering as its first note.
std::string why_not_depthwise_fit(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// The dispatcher's check: "" when the cube mapping (conv.h, emit_depthwise_on_cube: channels a
// multiple of the cube's fractal, on every core) or else the vector template takes the kernel,
// else both refusals (the cube's, then the vector template's), separated by "; ".
std::string why_not_depthwise_fit(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_depthwise(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
