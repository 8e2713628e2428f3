#include "compiler/kernel/c_value.h"

#include <cstdio>

namespace tessel::kernel {

std::string c_number(double v, const CValueDialect& d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s == "inf") return d.inf;
  if (s == "-inf") return d.neg_inf;
  if (d.nan && (s == "nan" || s == "-nan")) return d.nan;
  return s;
}

namespace {

class Printer {
 public:
  Printer(const ir::Expr& e, const CValueContext& ctx)
      : e_(e), ctx_(ctx), d_(ctx.dialect), T_(d_.value_type(e.type)), fl_(dtype_is_float(e.type)),
        wide_(computes_in_double(e)) {}

  std::string leaf() const {
    switch (e_.kind) {
      case ir::ExprKind::Constant:
        return fl_ ? fres("(" + ft() + ")" + c_number(e_.value, d_), true)
                   : cast(d_.int_constant + c_number(e_.value, d_));
      case ir::ExprKind::SizeParam: {
        const std::string n = std::to_string(ctx_.sizes->at(e_.name));
        return fl_ ? fres(to_ft() + n, true) : cast(n + d_.int_size_suffix);
      }
      case ir::ExprKind::IndexValue:
        return fl_ ? fres(to_ft() + ctx_.affine(e_.affine), true) : cast(ctx_.affine(e_.affine));
      case ir::ExprKind::Access: return ctx_.access(e_);
      case ir::ExprKind::Apply: break;
    }
    return apply();
  }

 private:
  const ir::Expr& e_;
  const CValueContext& ctx_;
  const CValueDialect& d_;
  const std::string T_;
  const bool fl_;
  const bool wide_;  // the operation computes in double (an f64 result, or a cast of an f64 operand)

  // f64 values compute in double, every other float dtype in float; a cast computes in its operand's type.
  static bool computes_in_double(const ir::Expr& e) {
    if (e.type == DType::F64) return true;
    return e.kind == ir::ExprKind::Apply && e.op == ir::Op::Cast && e.args[0]->type == DType::F64;
  }
  std::string ft() const { return wide_ ? "double" : "float"; }
  std::string to_ft() const { return wide_ && *d_.to_float ? "(double)" : d_.to_float; }
  // The C library's or the prelude's function `f32_fn` (expf, tessel_fmin) for the computation type:
  // the double one (exp, tessel_dmin) where the operation computes in double.
  std::string fn(const std::string& f32_fn) const {
    if (!wide_) return f32_fn;
    if (f32_fn.rfind("tessel_f", 0) == 0) return "tessel_d" + f32_fn.substr(8);
    if (f32_fn == "tessel_sigmoid") return "tessel_dsigmoid";
    return f32_fn.back() == 'f' ? f32_fn.substr(0, f32_fn.size() - 1) : f32_fn;
  }

  std::string arg(int i) const { return c_value(*e_.args[i], ctx_); }
  std::string f(int i) const { return "((" + ft() + ")" + arg(i) + ")"; }
  std::string fres(const std::string& v, bool primary) const { return d_.float_result(e_.type, v, primary); }
  std::string cast(const std::string& v) const { return "((" + T_ + ")" + v + ")"; }
  std::string infix(const char* op) const { return "(" + arg(0) + " " + op + " " + arg(1) + ")"; }
  std::string arith(const char* op) const {
    if (fl_) return fres(f(0) + " " + op + " " + f(1), false);
    return cast(std::string("(") + d_.widen + arg(0) + " " + op + " " + d_.widen + arg(1) + ")");
  }
  std::string helper(const char* fn, int arity) const {
    std::string s = std::string(fn) + "(" + d_.helper_arg + arg(0);
    if (arity == 2) s += std::string(", ") + d_.helper_arg + arg(1);
    return cast(s + ")");
  }
  std::string math(const char* name) const { return fres(fn(name) + "(" + f(0) + ")", true); }
  std::string float_call2(const char* name) const { return fres(fn(name) + "(" + f(0) + ", " + f(1) + ")", true); }
  std::string int_min_max(const char* helper_fn, const char* cmp) const {
    if (d_.int_helpers) return helper(helper_fn, 2);
    return cast("(" + arg(0) + " " + cmp + " " + arg(1) + " ? " + arg(0) + " : " + arg(1) + ")");
  }

  std::string cast_op() const {
    if (dtype_is_float(e_.args[0]->type) && !fl_) {
      const std::string L = d_.long_suffix;
      const std::string range = e_.type == DType::I8   ? "-128" + L + ", 127" + L
                                : e_.type == DType::U8 ? "0" + L + ", 255" + L
                                                       : "-2147483648" + L + ", 2147483647" + L;
      return cast(fn("tessel_f2i") + "(" + f(0) + ", " + range + ")");
    }
    if (fl_ && wide_) return fres(std::string(e_.type == DType::F64 ? "(double)" : "(float)") + arg(0), true);
    return fl_ ? fres(d_.to_float + arg(0), true) : cast(d_.widen + arg(0));
  }

  std::string apply() const {
    switch (e_.op) {
      case ir::Op::Add: return arith("+");
      case ir::Op::Sub: return arith("-");
      case ir::Op::Mul: return arith("*");
      case ir::Op::Div: return fl_ ? arith("/") : helper("tessel_idiv", 2);
      case ir::Op::Mod: return fl_ ? float_call2("fmodf") : helper("tessel_irem", 2);
      case ir::Op::Neg: return fl_ && d_.float_negate ? fres("-" + f(0), false) : cast(std::string("(-") + d_.widen + arg(0) + ")");
      case ir::Op::Lt: return infix("<");
      case ir::Op::Le: return infix("<=");
      case ir::Op::Gt: return infix(">");
      case ir::Op::Ge: return infix(">=");
      case ir::Op::Eq: return infix("==");
      case ir::Op::Ne: return infix("!=");
      case ir::Op::And: return infix("&&");
      case ir::Op::Or: return infix("||");
      case ir::Op::Not: return "(!" + arg(0) + ")";
      case ir::Op::Select: return cast("(" + arg(0) + " ? " + arg(1) + " : " + arg(2) + ")");
      case ir::Op::Min: return fl_ ? float_call2("tessel_fmin") : int_min_max("tessel_imin", "<");
      case ir::Op::Max: return fl_ ? float_call2("tessel_fmax") : int_min_max("tessel_imax", ">");
      case ir::Op::Abs:
        if (fl_) return math("fabsf");
        return d_.int_helpers ? helper("tessel_iabs", 1) : cast("(" + arg(0) + " < 0 ? -" + arg(0) + " : " + arg(0) + ")");
      case ir::Op::Exp: return math("expf");
      case ir::Op::Log: return math("logf");
      case ir::Op::Sqrt: return math("sqrtf");
      case ir::Op::Rsqrt: return fres((wide_ ? "1.0 / sqrt(" : "1.0f / sqrtf(") + f(0) + ")", false);
      case ir::Op::Tanh: return math("tanhf");
      case ir::Op::Erf: return math("erff");
      case ir::Op::Pow: return float_call2("powf");
      case ir::Op::Floor: return math("floorf");
      case ir::Op::Ceil: return math("ceilf");
      case ir::Op::Round: return math("rintf");  // halves to even in the default rounding mode
      case ir::Op::Sign: return fl_ ? math("tessel_fsign") : helper("tessel_isign", 1);
      case ir::Op::Sin: return math("sinf");
      case ir::Op::Cos: return math("cosf");
      case ir::Op::Tan: return math("tanf");
      case ir::Op::Asin: return math("asinf");
      case ir::Op::Acos: return math("acosf");
      case ir::Op::Atan: return math("atanf");
      case ir::Op::Sinh: return math("sinhf");
      case ir::Op::Cosh: return math("coshf");
      case ir::Op::Asinh: return math("asinhf");
      case ir::Op::Acosh: return math("acoshf");
      case ir::Op::Atanh: return math("atanhf");
      case ir::Op::Sigmoid: return math("tessel_sigmoid");
      case ir::Op::Cast: return cast_op();
    }
    return "0";
  }
};

}  // namespace

std::string c_value(const ir::Expr& e, const CValueContext& ctx) {
  if (ctx.replace)
    if (auto r = ctx.replace(e)) return *r;
  return Printer(e, ctx).leaf();
}

}  // namespace tessel::kernel
