// bf16 on the C target (issue 31): stored as its bits (uint16_t), computed in float with every bf16
// result rounded by tessel_rbf16 (round to nearest even, NaN quieted: the interpreter's
// round_to_bf16). Element-wise arithmetic, reductions, cast chains and contractions compiled with
// the host C compiler equal the reference interpreter element by element (NaN matching NaN).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
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

std::vector<double> samples(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v;
  while (v.size() < n) v.push_back(u(rng));
  return v;
}

// Compiles def `src` for the C target, runs it on `in` and compares every output with the interpreter:
// equal (exact), or within run_c's bf16 bound (4 units in the last place) where the target sums in
// another order than the interpreter (the online softmax).
void check_equal(const std::string& src, const std::map<std::string, int64_t>& sizes, const interp::Tensors& in,
                 bool exact = true) {
  const CAndInterpreter r = run_c_and_interpreter(src, "bf16.tsl", sizes, in);
  if (exact)
    for (const auto& [name, e] : r.expected) {
      CAPTURE(name);
      CHECK(differences(e, r.outputs.at(name)) == 0);
    }
  if (!exact) CHECK(emit_c::verify(r.expected, r.outputs).verified);
}

}  // namespace

TEST_CASE("C target bf16: element-wise arithmetic, reductions and a cast chain equal the interpreter") {
  const int64_t M = 7, N = 33;
  const std::string src =
      "def f(bf16[M, N] X, bf16[N] b, f32[N] F) -> (bf16[M, N] Y, bf16[M, N] L, bf16[M] S, bf16[M] X1, bf16[M] P,\n"
      "    i32[M, N] G, bf16[N] R, f16[M, N] H) {\n"
      "  Y(m, n) = max(X(m, n) * 3 + b(n) / 7, -1) - sqrt(abs(X(m, n)))\n"
      "  L(m, n) = log(X(m, n)) + exp(b(n))\n"     // NaN for X < 0
      "  S(m) +=! X(m, n) * b(n)\n"
      "  X1(m) max=! X(m, n)\n"
      "  P(m) *=! X(m, n) / 2 + 1\n"
      "  G(m, n) = sign(i32(tanh(bf16(X(m, n) * 2))) * 5)\n"
      "  R(n) = bf16(F(n))\n"                      // f32 -> bf16 at ties (to even) and NaN
      "  H(m, n) = f16(X(m, n)) + f16(b(n))\n"
      "}\n";
  std::vector<double> f = samples(N, -3, 3, 3);
  // ties: 1 + 2^-8 rounds to 1 (even), 1 + 3 * 2^-8 to 1 + 2^-6; NaN, infinity, the largest f32
  const std::vector<double> special = {1 + std::ldexp(1, -8), 1 + 3 * std::ldexp(1, -8), -(1 + std::ldexp(1, -8)),
                                       NAN, INFINITY, -INFINITY, 3.4028234663852886e38, std::ldexp(1, -130)};
  for (size_t i = 0; i < special.size(); ++i) f[i] = special[i];
  const interp::Tensors in = {{"X", array(DType::BF16, {M, N}, samples(M * N, -4, 4, 1))},
                              {"b", array(DType::BF16, {N}, samples(N, -2, 2, 2))},
                              {"F", array(DType::F32, {N}, f)}};
  check_equal(src, {{"M", M}, {"N", N}}, in);
}

TEST_CASE("C target bf16: contractions in bf16 and into f32 equal the interpreter") {
  const int64_t M = 9, N = 13, K = 40;
  const std::string src =
      "def g(bf16[M, K] A, bf16[K, N] B) -> (bf16[M, N] C, f32[M, N] D) {\n"
      "  C(m, n) +=! A(m, k) * B(k, n)\n"
      "  D(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
      "}\n";
  const interp::Tensors in = {{"A", array(DType::BF16, {M, K}, samples(M * K, -2, 2, 4))},
                              {"B", array(DType::BF16, {K, N}, samples(K * N, -2, 2, 5))}};
  check_equal(src, {{"M", M}, {"N", N}, {"K", K}}, in);
}

TEST_CASE("C target bf16: tensors are stored as uint16_t bits and results rounded by tessel_rbf16") {
  const std::string p = emit_c::prelude();
  CHECK(p.find("static inline float tessel_rbf16(float v)") != std::string::npos);
  CHECK(p.find("static inline uint16_t tessel_f2bf(float v)") != std::string::npos);
  const frontend::Module m = frontend::parse_module("def h(bf16[N] X) -> (bf16[N] Y) {\n  Y(i) = X(i) * X(i)\n}\n", "h.tsl");
  CompileOptions o;
  o.sizes = {{"N", 8}};
  auto c = compile(m.functions.at(0), o);
  const std::string fn = emit_c::emit_function(c->kernel, "k");
  CHECK(fn.find("uint16_t* t_X") != std::string::npos);
  CHECK(fn.find("tessel_rbf16(((float)tessel_bf2f(") != std::string::npos);
  CHECK(fn.find("tessel_f2bf(") != std::string::npos);
}

TEST_CASE("C target bf16: the fused attention kernel (online softmax) over bf16 tensors equals the interpreter") {
  const std::string src =
      "def a(bf16[S, D] Q, bf16[T, D] K, bf16[T, D] V) -> (bf16[S, D] Out) {\n"
      "  Sc(i, j) +=! f32(Q(i, d)) * f32(K(j, d))\n"
      "  Mx(i) max=! Sc(i, j) * rsqrt(f32(D))\n"
      "  E(i, j) = exp(Sc(i, j) * rsqrt(f32(D)) - Mx(i))\n"
      "  Z(i) +=! E(i, j)\n"
      "  O(i, e) +=! E(i, j) * f32(V(j, e))\n"
      "  Out(i, e) = bf16(O(i, e) / Z(i))\n"
      "}\n";
  const int64_t S = 5, T = 90, D = 16;
  const frontend::Module m = frontend::parse_module(src, "a.tsl");
  CompileOptions o;
  o.sizes = {{"S", S}, {"T", T}, {"D", D}};
  REQUIRE(compile(m.functions.at(0), o)->kernel.attention);
  const interp::Tensors in = {{"Q", array(DType::BF16, {S, D}, samples(S * D, -2, 2, 6))},
                              {"K", array(DType::BF16, {T, D}, samples(T * D, -2, 2, 7))},
                              {"V", array(DType::BF16, {T, D}, samples(T * D, -2, 2, 8))}};
  check_equal(src, o.sizes, in, false);
}
