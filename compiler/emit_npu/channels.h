// NPU mapping of channel-last row kernels (batch-norm reduce / update in NHWC): every tensor is
// either "full" [d0, ..., C] or per channel [C]; statements are per-channel element-wise ([C]),
// full element-wise reading [C] values at the channel index (broadcast down the rows), or
// per-channel reductions (Sum / Max / Min from the identity) over all leading indices.
// Layout in UB: rows of one f32 vector repeat (C <= 64 channels, padded), chunks of rows a
// multiple of 32 (GM offsets stay aligned); [C] values read by row statements are expanded once by
// a copy with source repeat stride 0; reductions accumulate row by row in ascending order (the
// interpreter's order), one vector instruction per row. One core (the reductions span all rows).
// why_not_channels / why_not_rows: "" when the mapping takes the kernel, else the UserError message
// saying why (never throws); emit_channels / emit_rows throw that UserError.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

std::string why_not_channels(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_channels(const kernel::Kernel& kernel, const isa::Hierarchy& target);

// Last-axis row kernels (softmax, layer-norm over [..., N], rows = the leading indices): tensors
// full [..., N], per row [...] or per column [N]; statements full element-wise (reading per-row
// values at the leading indices, per-column ones at the last), per-row element-wise, or per-row
// Sum / Max reductions over the last index. Rows of one f32 repeat (N <= 64), chunks of rows;
// reductions by vcadd / vcmax with the lanes past N masked off (lanes summed in ascending order,
// the interpreter's), per-row values broadcast across the row's lanes by vbrcb. One core.
std::string why_not_rows(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_rows(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
