// NPU mapping of element-wise kernels (relu, add, casts, fused element-wise chains): every
// statement reads its inputs at exactly its output's indices and all tensors have one shape, so the
// tensors are processed as flat arrays in UB chunks (GM -(MTE2)-> UB -(V: vector instructions with
// repeat <= max_repeat)-> UB -(MTE3)-> GM), chunks spread over the cores, the tail chunk on core 0.
// Part of the NPU emitter (compiler/emit_npu/emit_npu.h), which calls it for kernels without a
// matched matmul. Throws UserError saying why a kernel is not element-wise.
#pragma once

#include "compiler/emit_npu/emit_npu.h"

namespace tessel::emit_npu {

NpuKernel emit_pointwise(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
