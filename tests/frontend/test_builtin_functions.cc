// The front end's built-in functions (compiler/README.md "Types and promotion rules", rule 6): each
// name parses to its operator with the right arity and dtype, pow unifies its operands as min/max
// do, sign keeps an integer dtype, the float-only ones take a weak operand as f32; wrong arities and
// integer operands are errors naming file:line:col; every built-in name is reserved.
#include <doctest/doctest.h>

#include <string>

#include "compiler/frontend/frontend.h"
#include "isa/base/error.h"

using namespace tessel;

namespace {

ir::Function one(const std::string& text) { return frontend::parse_module(text, "t.tsl").functions.at(0); }

std::string rejection(const std::string& text) {
  try {
    frontend::parse_module(text, "t.tsl");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

const ir::Expr& rhs(const std::string& dt, const std::string& value) {
  static ir::Function f;
  f = one("def f(" + dt + "[N] X, i32[N] I) -> (" + dt + "[N] Y) {\n  Y(i) = " + value + "\n}\n");
  return *f.statements.at(0).rhs;
}

}  // namespace

TEST_CASE("each new built-in parses to its operator, of its operand's float dtype") {
  for (const char* fn : {"erf", "floor", "ceil", "round", "sign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
                         "asinh", "acosh", "atanh", "sigmoid"}) {
    for (const char* dt : {"f32", "f16", "bf16"}) {
      CAPTURE(fn);
      CAPTURE(dt);
      const ir::Expr& e = rhs(dt, std::string(fn) + "(X(i))");
      REQUIRE(e.kind == ir::ExprKind::Apply);
      CHECK(std::string(ir::op_spelling(e.op)) == fn);
      CHECK(ir::op_arity(e.op) == 1);
      CHECK(std::string(dtype_name(e.type)) == dt);
    }
  }
}

TEST_CASE("pow takes two operands of one dtype: a weak exponent adapts, two weak ones are f32") {
  const ir::Expr& e = rhs("f16", "pow(X(i), 2)");
  REQUIRE(e.op == ir::Op::Pow);
  CHECK(e.type == DType::F16);
  CHECK(e.args.at(1)->type == DType::F16);
  const ir::Expr& w = rhs("f32", "X(i) * pow(2, 0.5)");
  CHECK(w.args.at(1)->op == ir::Op::Pow);
  CHECK(w.args.at(1)->type == DType::F32);
  CHECK(rejection("def f(f16[N] X, f32[N] P) -> (f16[N] Y) {\n  Y(i) = pow(X(i), P(i))\n}\n")
            .find("t.tsl:2:20: type mismatch: f16 pow f32") == 0);
}

TEST_CASE("sign keeps an integer dtype, the float-only built-ins reject integers and take weak operands as f32") {
  CHECK(rhs("i32", "sign(I(i))").type == DType::I32);
  CHECK(rhs("f32", "X(i) + sin(1)").args.at(1)->type == DType::F32);
  CHECK(rejection("def f(i32[N] I) -> (f32[N] Y) {\n  Y(i) = f32(floor(I(i)))\n}\n") ==
        "t.tsl:2:20: 'floor' needs a floating-point argument, not i32; cast it, e.g. floor(f32(...))\n"
        "    Y(i) = f32(floor(I(i)))\n"
        "                     ^");
}

TEST_CASE("wrong arities name the function's place") {
  CHECK(rejection("def f(f32[N] X) -> (f32[N] Y) {\n  Y(i) = pow(X(i))\n}\n").find("t.tsl:2:10: 'pow' takes 2 arguments, but 1 is given") == 0);
  CHECK(rejection("def f(f32[N] X) -> (f32[N] Y) {\n  Y(i) = sigmoid(X(i), 1)\n}\n")
            .find("t.tsl:2:10: 'sigmoid' takes 1 argument, but 2 are given") == 0);
  CHECK(rejection("def f(f32[N] X) -> (f32[N] Y) {\n  Y(i) = X(i) * atanh()\n}\n").find("t.tsl:2:17: 'atanh' takes 1 argument, but 0 are given") == 0);
}

TEST_CASE("built-in names are reserved: no tensor, size parameter or index may take one") {
  CHECK(rejection("def f(f32[N] sigmoid) -> (f32[N] Y) {\n  Y(i) = sigmoid(i)\n}\n").find("'sigmoid' is a built-in function and cannot name a tensor") != std::string::npos);
  CHECK(rejection("def f(f32[erf] X) -> (f32[erf] Y) {\n  Y(i) = X(i)\n}\n").find("t.tsl:1:11: 'erf' is a function and cannot be used in a tensor dimension") != std::string::npos);
  CHECK(rejection("def f(f32[N] X) -> (f32[N] Y) {\n  Y(sin) = X(sin)\n}\n").find("'sin' is a reserved name and cannot be an index") != std::string::npos);
}
