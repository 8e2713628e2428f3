// f64 in the reference interpreter: an f64 value is held and computed in double (scalar.h,
// round_float keeps it; interpreter.cc, Compute<F64> = double), so values beyond f32's range
// (ONNX's double test data, 2.4e198) keep their value through arithmetic, built-in functions,
// reductions and casts; a cast to f32 rounds (to infinity beyond its range), one to i32 saturates.
// Every element is compared with the same computation written in double here.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"

using namespace tessel;

namespace {

NpyArray f64_array(const std::vector<int64_t>& shape, const std::vector<double>& values) {
  NpyArray a;
  a.dtype = DType::F64;
  a.shape = shape;
  a.data.assign(values.size() * 8, 0);
  for (size_t i = 0; i < values.size(); ++i) interp::store_float(DType::F64, a.data.data() + i * 8, values[i]);
  return a;
}

double at(const NpyArray& a, int64_t i) { return interp::element_as_double(a, i); }

}  // namespace

TEST_CASE("interpreter f64: values beyond f32's range keep their value through arithmetic, functions, sums and casts") {
  const std::string src =
      "def f(f64[M, N] X, f64[N] Y) -> (f64[M, N] S, f64[M, N] E, f64[M] R, f64[M] P, f32[M, N] C, i32[M, N] I, f64[M, N] L) {\n"
      "  S(m, n) = X(m, n) + Y(n) * 2.5 - X(m, n) / 3\n"
      "  E(m, n) = sqrt(abs(X(m, n))) + max(X(m, n), Y(n)) + exp(X(m, n) / 1e300)\n"
      "  R(m) +=! X(m, n)\n"
      "  P(m) *=! Y(n)\n"
      "  C(m, n) = f32(X(m, n))\n"
      "  I(m, n) = i32(X(m, n))\n"
      "  L(m, n) = f64(1e300) * select(X(m, n) > 0, 1, -1)\n"
      "}\n";
  const frontend::Module mod = frontend::parse_module(src, "f64.tsl");
  const int64_t M = 2, N = 3;
  const std::vector<double> x = {2.4e198, -1.5e-300, 7.25, -3.0e250, 1.0e39, 123456789.123456789};
  const std::vector<double> y = {1.0e100, -2.0e150, 0.5};
  const interp::Tensors out = interp::evaluate(mod.functions.at(0), {{"M", M}, {"N", N}},
                                               {{"X", f64_array({M, N}, x)}, {"Y", f64_array({N}, y)}});
  for (const char* name : {"S", "E", "R", "P", "L"}) CHECK(out.at(name).dtype == DType::F64);
  for (int64_t m = 0; m < M; ++m) {
    double r = 0, p = 1;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = m * N + n;
      const double v = x[size_t(i)], w = y[size_t(n)];
      CAPTURE(i);
      CHECK(at(out.at("S"), i) == v + w * 2.5 - v / 3);
      CHECK(at(out.at("E"), i) == std::sqrt(std::fabs(v)) + std::max(v, w) + std::exp(v / 1e300));
      CHECK(at(out.at("C"), i) == double(float(v)));  // rounded to f32: infinity beyond its range
      CHECK(at(out.at("I"), i) == interp::float_to_int(DType::I32, v));
      CHECK(at(out.at("L"), i) == (v > 0 ? 1e300 : -1e300));
      r += v;
      p *= w;
    }
    CHECK(at(out.at("R"), m) == r);
    CHECK(at(out.at("P"), m) == p);
  }
  CHECK(at(out.at("S"), 0) > 1e198);  // kept, not infinity
  CHECK(std::isinf(at(out.at("C"), 0)));
  CHECK(at(out.at("I"), 0) == std::numeric_limits<int32_t>::max());
  CHECK(at(out.at("I"), 5) == 123456789);  // exact in f64; f32 would give 123456792
}

TEST_CASE("interpreter f64: a cast from f32 or i32 to f64 is exact, and f64 data reads and writes 8 bytes an element") {
  const std::string src =
      "def g(f32[N] A, i32[N] B) -> (f64[N] D) {\n"
      "  D(n) = f64(A(n)) * 1e200 + f64(B(n))\n"
      "}\n";
  const frontend::Module mod = frontend::parse_module(src, "f64_cast.tsl");
  NpyArray a, b;
  a.dtype = DType::F32, a.shape = {2}, a.data.assign(8, 0);
  b.dtype = DType::I32, b.shape = {2}, b.data.assign(8, 0);
  interp::store_float(DType::F32, a.data.data(), 0.1);
  interp::store_float(DType::F32, a.data.data() + 4, -3);
  interp::store_int(DType::I32, b.data.data(), 2147483647);
  interp::store_int(DType::I32, b.data.data() + 4, -7);
  const interp::Tensors out = interp::evaluate(mod.functions.at(0), {{"N", 2}}, {{"A", a}, {"B", b}});
  const NpyArray& d = out.at("D");
  REQUIRE(d.dtype == DType::F64);
  CHECK(d.data.size() == 16);
  CHECK(at(d, 0) == double(0.1f) * 1e200 + 2147483647.0);
  CHECK(at(d, 1) == -3.0 * 1e200 - 7.0);
}
