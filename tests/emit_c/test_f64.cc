// f64 on the C target: stored and computed as double (emit_c.cc ctype; compiler/kernel/c_value.cc
// prints an f64 operation with double operands and the C library's double functions, exp not
// expf, and the prelude's tessel_dmin / tessel_dmax / tessel_d2i / tessel_dsign / tessel_dsigmoid).
// Values beyond f32's range (ONNX's double test data: 2.4e198) compiled with the host C compiler
// equal the reference interpreter element by element (exactly: the same double operations, no
// contraction), through arithmetic, every built-in function, sums, products, maxima and casts.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compiler/emit_c/emit_c.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "compiler/pipeline.h"
#include "element_compare.h"

using namespace tessel;
using namespace tessel::emit_c_test;

namespace {

// Compiles `src` for the C target, runs it on `in`, and returns its outputs after checking each
// equals the interpreter's element by element.
interp::Tensors check_equal(const std::string& src, const std::map<std::string, int64_t>& sizes, const interp::Tensors& in) {
  const CAndInterpreter r = run_c_and_interpreter(src, "f64.tsl", sizes, in);
  for (const auto& [name, e] : r.expected) {
    CAPTURE(name);
    CHECK(differences(e, r.outputs.at(name)) == 0);
  }
  return r.outputs;
}

}  // namespace

TEST_CASE("C target f64: arithmetic, reductions and casts beyond f32's range equal the interpreter element by element") {
  const int64_t M = 3, N = 5;
  const std::string src =
      "def f(f64[M, N] X, f64[N] Y) -> (f64[M, N] S, f64[M] R, f64[M] P, f64[M] Mx, f32[M, N] C, i32[M, N] I, f64[M, N] Q) {\n"
      "  S(m, n) = X(m, n) + Y(n) * 2.5 - X(m, n) / 3 + min(X(m, n), Y(n)) % 7\n"
      "  R(m) +=! X(m, n)\n"
      "  P(m) *=! Y(n) / 1e40\n"
      "  Mx(m) max=! X(m, n) - Y(n)\n"
      "  C(m, n) = f32(X(m, n))\n"
      "  I(m, n) = i32(X(m, n))\n"
      "  Q(m, n) = f64(1e300) * select(X(m, n) > Y(n), 1, -1) + f64(f32(Y(n)))\n"
      "}\n";
  std::vector<double> x, y = {2.4e198, -3.5e120, 0.25, 1.0e39, -123456789.123456789};
  for (int64_t i = 0; i < M * N; ++i) x.push_back((i % 2 ? -1 : 1) * std::ldexp(1.2345678912345, int(i * 97 % 1500) - 700));
  const interp::Tensors out = check_equal(src, {{"M", M}, {"N", N}}, {{"X", array(DType::F64, {M, N}, x)}, {"Y", array(DType::F64, {N}, y)}});
  // the values themselves: beyond f32 kept in f64, infinity once cast to f32, saturated in i32
  const NpyArray& s = out.at("S");
  CHECK(interp::element_as_double(s, 0) == x[0] + y[0] * 2.5 - x[0] / 3 + std::fmod(std::min(x[0], y[0]), 7.0));
  CHECK(std::fabs(interp::element_as_double(out.at("Q"), 0)) >= 1e300);
}

TEST_CASE("C target f64: every built-in function computes in double, as the interpreter does") {
  const std::string src =
      "def g(f64[N] X) -> (f64[N] A, f64[N] B, f64[N] T, f64[N] H) {\n"
      "  A(n) = exp(X(n) / 1e300) + log(abs(X(n)) + 1) + sqrt(abs(X(n))) + rsqrt(abs(X(n)) + 1) + tanh(X(n) / 1e200)\n"
      "  B(n) = erf(X(n) / 1e100) + pow(abs(X(n)) + 1, 0.5) + floor(X(n) / 3) + ceil(X(n) / 7) + round(X(n) / 11) + sign(X(n))\n"
      "  T(n) = sin(X(n) / 1e290) + cos(X(n) / 1e290) + tan(X(n) / 1e300) + asin(X(n) / 1e305) + acos(X(n) / 1e305) + atan(X(n))\n"
      "  H(n) = sinh(X(n) / 1e300) + cosh(X(n) / 1e300) + asinh(X(n)) + acosh(abs(X(n)) + 1) + atanh(X(n) / 1e305) + sigmoid(X(n) / 1e290)\n"
      "}\n";
  const std::vector<double> x = {2.4e198, -1.0e300, 3.5, -0.25, 1.0e-300, 0.0, -7.0e45, 9.0e307};
  check_equal(src, {{"N", int64_t(x.size())}}, {{"X", array(DType::F64, {int64_t(x.size())}, x)}});
}

TEST_CASE("C target f64: the emitted C computes an f64 statement in double and an f32 one in float") {
  const frontend::Module m = frontend::parse_module(
      "def h(f64[N] X, f32[N] Y) -> (f64[N] D, f32[N] F) {\n  D(n) = exp(X(n))\n  F(n) = exp(Y(n))\n}\n", "f64_text.tsl");
  CompileOptions o;
  o.sizes = {{"N", 4}};
  auto c = compile(m.functions.at(0), o);
  const std::string text = emit_c::emit_c(c->kernel);
  CHECK(text.find("double* t_X") != std::string::npos);
  CHECK(text.find("exp(((double)") != std::string::npos);
  CHECK(text.find("expf(((float)") != std::string::npos);
}
