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

// Whether the contraction's dtypes have a TensorCore shape the kernels implement (f16 -> f32,
// i8 -> i32) that the description's matrix unit lists at its architecture (a shape's min_arch at
// most the description's compute capability: sm70 has no i8 shape); the others run on the
// register-blocked SIMT contraction kernel (simt_gemm.h).
bool dtype_has_tensor_core_shape(const Contraction& c, const isa::GpuMachine& machine);

}  // namespace tessel::emit_cuda
