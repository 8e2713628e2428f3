// NPU mapping of last-axis transposes Y(b, c, p...) = X(b, p..., c) (NHWC -> NCHW): the whole
// tensor in UB (X rows padded to 32 bytes), per pixel row one vbrcb that broadcasts its C values
// to the C rows of Y with the lane mask set to that pixel's lane, so each writes one column of Y.
// Bit-exact; one core; tensors that do not fit UB in one piece are a UserError. 2- and 4-byte
// elements (bf16 moved as f16); 1-byte elements are not this form (the general lowering maps them).
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when the kernel is that copy, else the UserError message saying why not; never throws.
std::string why_not_transpose(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// For that copy: "" when emit_transpose maps it, else the UserError text of why it does not fit
// (too many channels or pixel rows, not in UB at once); "" for another kernel. Never throws.
std::string why_not_transpose_fit(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_transpose(const kernel::Kernel& kernel, const isa::Hierarchy& target);

// One-hot Y(n, d) = select(d == idx(n), a, b) for i32 idx[N] -> f32 Y[N, D], D <= 64 (transpose.cc).
// why_not_one_hot, why_not_one_hot_fit: as why_not_transpose and why_not_transpose_fit.
std::string why_not_one_hot(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
std::string why_not_one_hot_fit(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_one_hot(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
