#include "compiler/ir/expr_cost.h"

#include "compiler/ir/builtin_math.h"

namespace tessel::ir {

bool has_costly_op(const Expr& e) {
  if (e.kind == ExprKind::Apply && dtype_is_float(e.type) &&
      ((e.op == Op::Div && dtype_is_float(e.args.at(0)->type)) || is_float_math(e.op)))
    return true;
  for (const auto& a : e.args)
    if (has_costly_op(*a)) return true;
  return false;
}

int expr_size(const Expr& e) {
  int n = 1;
  for (const auto& a : e.args) n += expr_size(*a);
  return n;
}

}  // namespace tessel::ir
