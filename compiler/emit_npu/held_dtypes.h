// Which element types an NPU description can hold at all, checked before anything is compiled for
// it: a dtype is held where some unit of the description lists it (a vector or scalar unit's
// `dtypes`, a vector conversion's end, a matrix shape's operand or accumulator), u8 where i8 or
// i32 is (the lowerings compute u8 in i32). A tensor of any other dtype (f64 on the DaVinci
// descriptions) is a UserError naming the tensor, its place, the dtype and what the units take —
// a refusal of the target, not a compiler bug; c and the GPU targets compile it.
// Input: the function as written and an NPU description. Runs first in compile (pipeline.cc).
#pragma once

#include "compiler/ir/tensor_ir.h"
#include "isa/hierarchy.h"

namespace tessel::emit_npu {

// Throws UserError for the first tensor of `f` whose dtype no unit of `target` takes.
void check_held_dtypes(const ir::Function& f, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
