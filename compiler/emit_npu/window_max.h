// Strided window maxima and minima over channel-last maps on the vector unit (README "Window
// maxima"): a kernel of one statement
//   Y(n, p, q, c) max=! X(n, sh * p + r + oh, sw * q + t + ow, c)     (or min=!; n may be absent)
// with r, t windows from 0 (either may be absent, not both), strides sh, sw >= 1, offsets oh, ow of
// any sign (reads outside X are 0: a zero padding folded into the read, poly/fold_padding.h), X and
// Y one dtype (f16 or f32), the channels a whole number of vector blocks. Its ranges may use floor
// division (the output's size from the input's: they are evaluated), its indices may not.
// Tiles are Rt output rows (Rt divides P) of one image at full width, spread over the cores in equal
// runs. A tile's input rows come in by one DMA per row and column phase (w mod sw): the columns of a
// phase land contiguous in UB, so every tap (r, t) is one row of a phase plane shifted by whole
// pixels, and each output row is the element-wise vmax (vmin) of its KH x KW taps as whole repeats
// of Q x C elements. Rows above or below X (a zero-padded border) are zeroed by a vdup instead of
// copied (decided per tile at run time); columns outside X are slots of the planes that no copy
// writes, zeroed once. Two value sets: the next tile loads while this one is computed.
// Part of compiler/emit_npu: emit_npu() tries it before the floor-division check (which sends
// other kernels with divided ranges to the general lowering).
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when emit_window_max maps the kernel, else why not (never throws).
std::string why_not_window_max(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_window_max(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
