// The matched contraction as the CUDA emitter sees it: the polyhedral core's record
// (Kernel::contraction, compiler/kernel/contraction.h; matched once by compiler/poly/contraction.h)
// under the names this emitter uses, and what keeps it off the TensorCores of an architecture.
#pragma once

#include <string>

#include "isa/gpu_machine.h"
#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_cuda {

using kernel::Contraction;
using kernel::ContractionDim;
using kernel::ContractionOperand;
using kernel::substitute;

// Why the contraction cannot use the TensorCores of `arch` (dtype; sizes below 16 or so far from
// multiples of 16 that padded fragments would waste over a third of the work), or "".
std::string tensor_core_obstacle(const Contraction& c, const isa::GpuMachine& machine);

// Whether the contraction's dtypes have a TensorCore shape the kernels implement (f16 / bf16 -> f32,
// i8 -> i32) that the description's matrix unit lists at its architecture (a shape's min_arch at
// most the description's compute capability: sm70 has no i8 shape, sm75 no bf16 one); the others
// run on the register-blocked SIMT contraction kernel (simt_gemm.h).
bool dtype_has_tensor_core_shape(const Contraction& c, const isa::GpuMachine& machine);

// The operand dtypes of the mma.sync and wgmma main loops: the 16-bit floats f16 and bf16 (their
// ldmatrix loads, swizzled tiles and tensor maps move 16-bit elements alike; only the MMA
// instruction's type names differ). WMMA takes i8 too.
bool warp_mma_operand(DType t);
// The PTX type name of such an operand in mma.sync / wgmma.mma_async ("f16", "bf16"; an f32
// operand of the wgmma main loop is "tf32").
const char* ptx_operand_type(DType t);

// f32 operands of the wgmma main loop (sm_90a), read as TF32: wgmma.mma_async .tf32 takes the f32
// bits from shared memory with the low 13 mantissa bits ignored (truncated, no rounding), f32
// accumulation. An f32 contraction reaches the TensorCore kernels only when the caller asks for
// TF32 (CudaOptions::tf32, emit_cuda.cc); the .tf32 form has no transposed operands, so both tiles
// are K-major in shared memory (tile_policy.cc, repack_plan.h: an M- or N-contiguous operand is
// read from a K-major copy).
bool tf32_wgmma_operand(DType t);
// The K depth of one wgmma.mma_async of operand dtype `t`: 32 bytes of each operand row, as the
// description's 16-bit shape has it (m64nNk16 f16 / bf16, m64nNk8 tf32).
int wgmma_k_depth(const isa::GpuMachine& m, DType t);

}  // namespace tessel::emit_cuda
