// What an expression costs to compute again, for the passes that decide between storing a value and
// recomputing it (compiler/poly/hoist_invariants.h, compiler/poly/inline_locals.h).
#pragma once

#include "compiler/ir/tensor_ir.h"

namespace tessel::ir {

// A float division or a float built-in (exp, log, sqrt, rsqrt, tanh, pow, ...) anywhere in `e`:
// tens of instructions per evaluation on a GPU, where add, multiply, compare, select and casts are one.
bool has_costly_op(const Expr& e);

// The number of nodes of `e`.
int expr_size(const Expr& e);

}  // namespace tessel::ir
