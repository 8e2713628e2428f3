// The C target's built-in functions (compiler/README.md; issue 34): each of erf, pow, floor, ceil,
// round, sign, sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, sigmoid, in f32
// and f16, over a wide sampled range, compiled with the host C compiler and compared element by
// element with the reference interpreter: equal (the same C library f32 functions, each result
// rounded once to the dtype), NaN where the interpreter has NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

NpyArray array(DType t, const std::vector<double>& v) {
  NpyArray a;
  a.dtype = t;
  a.shape = {int64_t(v.size())};
  a.data.assign(v.size() * dtype_bytes(t), 0);
  for (size_t i = 0; i < v.size(); ++i) interp::store_float(t, a.data.data() + i * dtype_bytes(t), v[i]);
  return a;
}

std::vector<double> samples(double lo, double hi, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v = {0.5, -0.5, 1.5, 2.5, -2.5, 0, -0.0, 1, -1};
  while (int(v.size()) < n) v.push_back(u(rng));
  return v;
}

// Elements that differ (NaN matching NaN).
int64_t differences(const NpyArray& e, const NpyArray& a) {
  int64_t d = 0;
  for (int64_t i = 0; i < e.element_count(); ++i) {
    const double x = interp::element_as_double(e, i), y = interp::element_as_double(a, i);
    d += !(x == y || (std::isnan(x) && std::isnan(y)));
  }
  return d;
}

}  // namespace

TEST_CASE("C target: every new built-in equals the interpreter element by element (f32 and f16)") {
  const int n = 1024;
  const std::vector<std::string> fns = {"erf",  "floor", "ceil",  "round", "sign",  "sin",   "cos",   "tan",    "asin",
                                        "acos", "atan",  "sinh",  "cosh",  "asinh", "acosh", "atanh", "sigmoid"};
  for (DType t : {DType::F32, DType::F16}) {
    const std::string dt(dtype_name(t));
    std::string body, outs;
    for (size_t i = 0; i < fns.size(); ++i) {
      outs += ", " + dt + "[N] Y" + std::to_string(i);
      body += "  Y" + std::to_string(i) + "(i) = " + fns[i] + "(X(i))\n";
    }
    body += "  Z(i) = pow(X(i), P(i))\n";
    const std::string src = "def f(" + dt + "[N] X, " + dt + "[N] P) -> (" + dt + "[N] Z" + outs + ") {\n" + body + "}\n";
    const frontend::Module m = frontend::parse_module(src, "builtins.tsl");
    CompileOptions o;
    o.sizes = {{"N", n}};
    auto c = compile(m.functions.at(0), o);
    const interp::Tensors in = {{"X", array(t, samples(-12, 12, n, 1))}, {"P", array(t, samples(-4, 4, n, 2))}};
    const interp::Tensors expected = interp::evaluate(m.functions.at(0), o.sizes, in);
    const auto runs = emit_c::run_c_batch({&c->kernel}, {in});
    REQUIRE(runs.size() == 1);
    for (const auto& [name, e] : expected) {
      CAPTURE(dt);
      CAPTURE(name);
      CHECK(differences(e, runs[0].outputs.at(name)) == 0);
    }
  }
}
