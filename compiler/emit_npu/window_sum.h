// Stride-1 window sums over channel-last maps on the vector unit (README "Window sums"): a kernel
//   S(n, p, q, c) +=! f32(X(n, p + r, q + t, c))   (or X f32 without the cast)
//   [element-wise statements over S at (n, p, q, c): Y = f16(S / 9), ...]
// with r, t windows from 0 (either may be absent), S summed in f32 and the channels a whole number
// of blocks. Tiles are one output row (n, p) times Qc output columns (Qc divides Q), spread over the
// cores in equal runs of tiles; a tile's KH input rows (its Qc + KW - 1 columns) come in by one DMA,
// are converted to f32 once per input element (not once per tap: the roofline's count), and the
// KH x KW taps are added at their offsets in UB as whole repeats of the tile's Qc x C elements, in
// the interpreter's order (r, then t). The element-wise statements run on the tile in UB and only
// the kernel's outputs are stored. Two value sets: the next tile loads while this one is computed.
// Part of compiler/emit_npu: emit_npu() tries it before the vector templates and the general lowering.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when emit_window_sum maps the kernel, else why not (never throws).
std::string why_not_window_sum(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_window_sum(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
