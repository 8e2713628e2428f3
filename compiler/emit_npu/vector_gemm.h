// Contractions on the vector unit (README "Vector contractions"): a kernel whose one statement is
// `C(m, n) +=! A(..) * B(..)` in an operand dtype the cube has no shape for (f32 on the DaVinci
// descriptions; bf16 too, C(m, n) +=! f32(A(..)) * f32(B(..)), each chunk loaded as bf16 and
// converted to f32 in UB by the description's conversion, exact), A stored [M][K] or [K][M], B [K][N] with N unit-stride, C [M][N] with N
// unit-stride, no batch, no epilogue. Rows of C are spread over the cores; a core computes blocks
// of R rows x Nb columns in UB, k by k in the interpreter's order: each A value is broadcast to a
// 32-byte block once (`vbrcb`, repeat per value, destination block stride 0), then per k one `vmul`
// per 64-lane repeat column (or per row, whichever issues fewer instructions) reads the A blocks
// with block stride 0 against the B row (repeat stride 0), and one `vadd` adds the products into
// the accumulator: 2 repeats per 64 MACs, the roofline's vector count, plus one repeat per A value.
// B and A arrive in chunks of Kc rows of k, two buffers, the next chunk loaded while this one is
// computed. Exact: every element is summed in ascending k, products and sums rounded to f32 as
// the interpreter does. Part of compiler/emit_npu: emit_npu() tries it before the general lowering.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when emit_vector_gemm maps the kernel, else why not (never throws).
std::string why_not_vector_gemm(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_vector_gemm(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
