// Error scales (error_scale.h): S(e) built as an f32 expression of the tensor language, and the
// statement that computes a statement's output scale.
#include "compiler/interp/error_scale.h"

#include <memory>
#include <utility>
#include <vector>

namespace tessel::interp {

using ir::Expr;
using ir::ExprKind;
using ir::ExprPtr;
using ir::Op;

namespace {

ExprPtr constant(double v) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Constant;
  e->type = DType::F32;
  e->value = v;
  return e;
}

ExprPtr apply(Op op, std::vector<ExprPtr> args) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Apply;
  e->type = DType::F32;
  e->op = op;
  e->args = std::move(args);
  return e;
}

// `e` as an f32 value (exact from f16 / bf16; integers converted)
ExprPtr f32(const ExprPtr& e) {
  if (e->type == DType::F32) return e;
  auto c = std::make_shared<Expr>();
  c->kind = ExprKind::Apply;
  c->type = DType::F32;
  c->op = Op::Cast;
  c->args = {e};
  return c;
}

ExprPtr add(ExprPtr a, ExprPtr b) { return apply(Op::Add, {std::move(a), std::move(b)}); }
ExprPtr mul(ExprPtr a, ExprPtr b) { return apply(Op::Mul, {std::move(a), std::move(b)}); }
ExprPtr dvd(ExprPtr a, ExprPtr b) { return apply(Op::Div, {std::move(a), std::move(b)}); }
ExprPtr absv(const ExprPtr& e) { return apply(Op::Abs, {f32(e)}); }
ExprPtr sq(const ExprPtr& e) { return mul(f32(e), f32(e)); }

// |f'(a)| for a differentiable one-argument built-in `op` with value `v` = op(a); null for the
// others (their scale is |value|)
ExprPtr derivative(Op op, const ExprPtr& a, const ExprPtr& v) {
  const ExprPtr one = constant(1);
  switch (op) {
    case Op::Exp: return absv(v);
    case Op::Log: return dvd(one, absv(a));
    case Op::Sqrt: return dvd(constant(0.5), absv(v));
    case Op::Rsqrt: return dvd(mul(constant(0.5), absv(v)), absv(a));
    case Op::Tanh: return apply(Op::Abs, {apply(Op::Sub, {one, sq(v)})});
    case Op::Sigmoid: return absv(mul(f32(v), apply(Op::Sub, {one, f32(v)})));
    case Op::Erf: return mul(constant(1.1283791670955126), apply(Op::Exp, {apply(Op::Neg, {sq(a)})}));
    case Op::Sin: return absv(apply(Op::Cos, {f32(a)}));
    case Op::Cos: return absv(apply(Op::Sin, {f32(a)}));
    case Op::Tan: return add(one, sq(v));
    case Op::Asin:
    case Op::Acos: return dvd(one, apply(Op::Sqrt, {apply(Op::Abs, {apply(Op::Sub, {one, sq(a)})})}));
    case Op::Atan: return dvd(one, add(one, sq(a)));
    case Op::Sinh: return apply(Op::Cosh, {f32(a)});
    case Op::Cosh: return absv(apply(Op::Sinh, {f32(a)}));
    case Op::Asinh: return dvd(one, apply(Op::Sqrt, {add(sq(a), one)}));
    case Op::Acosh: return dvd(one, apply(Op::Sqrt, {apply(Op::Abs, {apply(Op::Sub, {sq(a), one})})}));
    case Op::Atanh: return dvd(one, apply(Op::Abs, {apply(Op::Sub, {one, sq(a)})}));
    default: return nullptr;
  }
}

// S(e) where `e` reads a tracked tensor (scale_expr handles the others)
ExprPtr scale_of_apply(const ExprPtr& e, const std::set<std::string>& tracked) {
  const auto& x = e->args;
  auto S = [&](size_t i) { return scale_expr(x[i], tracked); };
  switch (e->op) {
    case Op::Add:
    case Op::Sub: return add(S(0), S(1));
    case Op::Mul: return add(mul(S(0), absv(x[1])), mul(absv(x[0]), S(1)));
    case Op::Div: return dvd(add(S(0), mul(absv(e), S(1))), absv(x[1]));
    case Op::Neg:
    case Op::Abs: return S(0);
    case Op::Min:
    case Op::Max: return apply(Op::Max, {S(0), S(1)});
    case Op::Select: return apply(Op::Select, {x[0], S(1), S(2)});
    case Op::Cast: return dtype_is_float(e->type) ? S(0) : absv(e);
    case Op::Pow: {
      // |b a^(b-1)| S(a) + |a^b log|a|| S(b) + |a^b|
      ExprPtr d = mul(absv(mul(f32(x[1]), apply(Op::Pow, {f32(x[0]), apply(Op::Sub, {f32(x[1]), constant(1)})}))), S(0));
      if (reads_any(*x[1], tracked)) d = add(d, mul(absv(mul(f32(e), apply(Op::Log, {absv(x[0])}))), S(1)));
      return add(d, absv(e));
    }
    default:
      if (ir::op_arity(e->op) == 1)
        if (ExprPtr d = derivative(e->op, x[0], e)) return add(mul(d, S(0)), absv(e));
      return absv(e);  // comparisons, logic, %, floor / ceil / round / sign
  }
}

}  // namespace

std::string scale_name(const std::string& tensor) { return tensor + "#scale"; }

bool reads_any(const Expr& e, const std::set<std::string>& tracked) {
  bool found = false;
  ir::for_each_access(e, [&](const Expr& a) { found = found || tracked.count(a.name) > 0; });
  return found;
}

ExprPtr scale_expr(const ExprPtr& e, const std::set<std::string>& tracked) {
  if (!reads_any(*e, tracked)) return absv(e);
  if (e->kind == ExprKind::Access) {
    auto s = std::make_shared<Expr>(*e);
    s->name = scale_name(e->name);
    s->type = DType::F32;
    return s;
  }
  return scale_of_apply(e, tracked);
}

std::optional<ir::Statement> scale_statement(const ir::Statement& st, const std::set<std::string>& tracked) {
  if (!dtype_is_float(st.acc_type) || !reads_any(*st.rhs, tracked) || st.reduction == ir::Reduction::Prod)
    return std::nullopt;
  ir::Statement s = st;
  s.name = st.name + "'s scale";
  s.output = scale_name(st.output);
  s.rhs = scale_expr(st.rhs, tracked);
  s.acc_type = DType::F32;
  if (st.reduction == ir::Reduction::Min) s.reduction = ir::Reduction::Max;
  return s;
}

}  // namespace tessel::interp
