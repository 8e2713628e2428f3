// The reference interpreter's built-in functions erf, pow, floor, ceil, round, sign, sin, cos, tan,
// asin, acos, atan, sinh, cosh, asinh, acosh, atanh, sigmoid (compiler/README.md): each value is
// the C library's f32 function (round: halves to even; sign: -1, 0, 1 keeping -0 and NaN; sigmoid:
// 1 / (1 + exp(-x)) in f32), rounded once to f16 / bf16 as the other operations are; sign of
// integers stays an integer.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "isa/base/f16.h"

using namespace tessel;

namespace {

NpyArray array(DType t, const std::vector<double>& values) {
  NpyArray a;
  a.dtype = t;
  a.shape = {int64_t(values.size())};
  a.data.assign(values.size() * dtype_bytes(t), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = a.data.data() + i * dtype_bytes(t);
    if (dtype_is_float(t)) interp::store_float(t, p, values[i]);
    else interp::store_int(t, p, static_cast<int64_t>(values[i]));
  }
  return a;
}

std::vector<double> run(const std::string& fn_call, DType t, const std::vector<double>& x, const std::vector<double>& y = {}) {
  const std::string dt(dtype_name(t));
  const bool binary = !y.empty();
  const std::string text = "def f(" + dt + "[N] X" + (binary ? ", " + dt + "[N] P" : "") + ") -> (" + dt + "[N] Y) {\n  Y(i) = " +
                           fn_call + "\n}\n";
  const ir::Function f = frontend::parse_module(text, "t.tsl").functions.at(0);
  interp::Tensors in{{"X", array(t, x)}};
  if (binary) in["P"] = array(t, y);
  const NpyArray out = interp::evaluate(f, {{"N", int64_t(x.size())}}, in).at("Y");
  std::vector<double> v;
  for (int64_t i = 0; i < out.element_count(); ++i) v.push_back(interp::element_as_double(out, i));
  return v;
}

double to_dtype(DType t, float v) {
  if (t == DType::F16) return round_to_f16(v);
  if (t == DType::BF16) return interp::round_float(DType::BF16, v);
  return v;
}

// Equal, or both NaN.
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

struct Unary {
  const char* name;
  std::function<float(float)> ref;
};

const std::vector<Unary> kUnary = {
    {"erf", [](float x) { return std::erf(x); }},     {"floor", [](float x) { return std::floor(x); }},
    {"ceil", [](float x) { return std::ceil(x); }},   {"round", [](float x) { return std::nearbyint(x); }},
    {"sin", [](float x) { return std::sin(x); }},     {"cos", [](float x) { return std::cos(x); }},
    {"tan", [](float x) { return std::tan(x); }},     {"asin", [](float x) { return std::asin(x); }},
    {"acos", [](float x) { return std::acos(x); }},   {"atan", [](float x) { return std::atan(x); }},
    {"sinh", [](float x) { return std::sinh(x); }},   {"cosh", [](float x) { return std::cosh(x); }},
    {"asinh", [](float x) { return std::asinh(x); }}, {"acosh", [](float x) { return std::acosh(x); }},
    {"atanh", [](float x) { return std::atanh(x); }},
    {"sign", [](float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : x; }},
    {"sigmoid", [](float x) { return 1.0f / (1.0f + std::exp(-x)); }},
};

const std::vector<double> kInputs = {-3.75, -2.5, -1.5, -1, -0.75, -0.5, -0.0, 0, 0.25, 0.5, 0.999, 1, 1.5, 2.5, 3.5, 7.25, 100, -100};

}  // namespace

TEST_CASE("each unary built-in equals the C library's f32 function, rounded once to f16 and bf16") {
  for (const Unary& u : kUnary) {
    for (DType t : {DType::F32, DType::F16, DType::BF16}) {
      CAPTURE(u.name);
      CAPTURE(dtype_name(t));
      const std::vector<double> got = run(std::string(u.name) + "(X(i))", t, kInputs);
      for (size_t i = 0; i < kInputs.size(); ++i) {
        CAPTURE(kInputs[i]);
        const float x = float(to_dtype(t, float(kInputs[i])));
        CHECK(same(got[i], to_dtype(t, u.ref(x))));
      }
    }
  }
}

TEST_CASE("round halves to even (ONNX Round), floor and ceil toward -inf and +inf, sign keeps NaN") {
  CHECK(run("round(X(i))", DType::F32, {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998}) ==
        std::vector<double>{0, 2, 2, -0.0, -2, -2, 2});
  CHECK(run("floor(X(i))", DType::F32, {-0.5, 0.5, -2}) == std::vector<double>{-1, 0, -2});
  CHECK(run("ceil(X(i))", DType::F32, {-0.5, 0.5, -2}) == std::vector<double>{-0.0, 1, -2});
  const auto s = run("sign(X(i))", DType::F32, {-7, 0, 3, std::nan("")});
  CHECK(s[0] == -1);
  CHECK(s[1] == 0);
  CHECK(s[2] == 1);
  CHECK(std::isnan(s[3]));
  CHECK(run("sigmoid(X(i))", DType::F32, {0, -100, 100}) == std::vector<double>{0.5, 0.0f, 1});
}

TEST_CASE("sign of i8 and i32 is an integer -1, 0 or 1") {
  CHECK(run("sign(X(i))", DType::I32, {-5, 0, 9, -2147483648.0}) == std::vector<double>{-1, 0, 1, -1});
  CHECK(run("sign(X(i))", DType::I8, {-128, 0, 127}) == std::vector<double>{-1, 0, 1});
}

TEST_CASE("pow equals the C library's powf, f16 rounded once, special values as C99 Annex F") {
  const std::vector<double> x = {2, 2, -2, -2, 0, 0, 1, 9, 0.5, -8};
  const std::vector<double> y = {10, -1.5, 3, 0.5, -1, 0, std::nan(""), 0.5, 3, 1.0 / 3};
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    CAPTURE(dtype_name(t));
    const auto got = run("pow(X(i), P(i))", t, x, y);
    for (size_t i = 0; i < x.size(); ++i) {
      CAPTURE(i);
      CHECK(same(got[i], to_dtype(t, std::pow(float(to_dtype(t, float(x[i]))), float(to_dtype(t, float(y[i])))))));
    }
  }
  const auto f = run("pow(X(i), P(i))", DType::F32, x, y);
  CHECK(f[0] == 1024);
  CHECK(f[2] == -8);
  CHECK(std::isnan(f[3]));
  CHECK(std::isinf(f[4]));
  CHECK(f[5] == 1);
  CHECK(f[6] == 1);  // 1^NaN
  CHECK(f[7] == 3);
  // A weak exponent takes the base's dtype: pow(f16, 2) squares in f32 and rounds once.
  CHECK(run("pow(X(i), 2)", DType::F16, {3, 0.1}) == std::vector<double>{9, round_to_f16(float(round_to_f16(0.1f)) * float(round_to_f16(0.1f)))});
}
