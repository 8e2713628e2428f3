// The GEMM path of the NPU emitter (emit_npu.h; README "Matmul kernels"): a kernel's matmul node
// C[M,N] (+)= A[M,K] * B[K,N] on the cube — batched or not, A and B stored either way, f16 (or
// i8 -> i32) operands, an optional fused element-wise epilogue (GemmEpilogue, pointwise.h; on the
// i8 cube over the i32 accumulator, a dequant), sizes that are not whole fractals in place on
// every core (edge tiles over guards, K's columns past K zero-filled, the write-back clipped; zero-
// padded copies on one core where that cannot be: a batch, an operand row shorter than a tile) —
// tiled by the tile policy (compiler/tile/npu_gemm_plan.h). Part of compiler/emit_npu: emit_npu()
// dispatches to it.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// The kernel's matmul node, null when it has none; UserError when matmul nodes of two statements.
const kernel::Node* find_matmul(const kernel::Kernel& kernel);
// "" when emit_gemm maps matmul `mm`, else the UserError text it would throw (the operands' form,
// the epilogue's, the plan's fit, the broadcast tensors, the tails' copies), decided before
// emitting; never throws for those.
std::string why_not_gemm(const kernel::Kernel& kernel, const kernel::MatmulOp& mm, const isa::NpuMachine& machine,
                         const isa::Hierarchy& target);
NpuKernel emit_gemm(const kernel::Kernel& kernel, const kernel::MatmulOp& mm, const isa::NpuMachine& machine,
                    const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
