// C emitter (`--target c`): plain C from the kernel IR, checking the polyhedral core on the CPU.
// Buffers become static local arrays standing for their hierarchy levels, so every copy that
// promotion planned is executed; Matmul fragments become loop nests over the operand buffers.
// The entry point is `void <symbol>(void** args)` with one pointer per non-temporary kernel tensor
// in Kernel::tensors order (inputs, then outputs); temporaries are allocated inside.
#pragma once

#include <string>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_c {

// The common prelude (includes, f16 type, bf16 rounding and bit conversions, helpers); emit it once
// per translation unit.
std::string prelude();
// One kernel function named `symbol`.
std::string emit_function(const kernel::Kernel& k, const std::string& symbol);
// prelude() + emit_function(k, symbol).
std::string emit_c(const kernel::Kernel& k, const std::string& symbol = "tessel_kernel");

}  // namespace tessel::emit_c
