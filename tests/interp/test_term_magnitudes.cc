// The reference interpreter's term magnitudes (interp::evaluate's term_magnitudes, error_scale.h):
// for every output a float sum wrote, the sum of |term| per element, and for values computed from
// one, that scale carried through the arithmetic, against hand-written loops; and the comparison
// that takes them as the scale of its relative bound (interp::compare's scale).
#include <doctest/doctest.h>

#include <cmath>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/row_sample.h"
#include "compiler/interp/scalar.h"

using namespace tessel;
using interp::Sizes;
using interp::Tensors;

namespace {

ir::Function fn(const std::string& text) { return frontend::parse_module(text, "t.tsl").functions.at(0); }

double at(const NpyArray& a, int64_t i) { return interp::element_as_double(a, i); }

// M = 64 (lanes of the innermost output index, split over threads), J = 3 (one point at a time)
const char* kSums = R"(def sums(f32[M, K] A, f32[J, K] B, f16[M, K] H) -> (f32[M] S, f32[M, J] R, f32[M] P, f16[M] T, f32[M] X, f32[M] Q) {
  S(m) +=! A(m, k) * 2.0
  R(m, j) +=! A(m, k) * B(j, k)
  P(m) = A(m, 0)
  P(m) += A(m, k)
  T(m) +=! H(m, k)
  X(m) max=! A(m, k)
  Q(m) +=! A(m, k)
  Q(m) = Q(m) * 3.0
}
)";

}  // namespace

TEST_CASE("term magnitudes: each float sum's sum of |term| per element, from |initial value| for +=") {
  const ir::Function f = fn(kSums);
  const Sizes s{{"M", 64}, {"K", 70}, {"J", 3}};
  const Tensors in = interp::random_inputs(f, s, 5);
  Tensors mags;
  const Tensors out = interp::evaluate(f, s, in, &mags);
  // X (a max of no scaled value) has none; Q, a sum then scaled by 3, has its sum's carried on
  CHECK(mags.size() == 5);
  CHECK(mags.count("X") == 0);
  const NpyArray &A = in.at("A"), &B = in.at("B"), &H = in.at("H");
  int64_t checked = 0;
  for (int64_t m = 0; m < 64; ++m) {
    double s_abs = 0, p_abs = std::fabs(at(A, m * 70)), t_abs = 0;
    for (int64_t k = 0; k < 70; ++k) {
      s_abs += std::fabs(float(at(A, m * 70 + k)) * 2.0f);
      p_abs += std::fabs(at(A, m * 70 + k));
      t_abs += std::fabs(at(H, m * 70 + k));
    }
    CHECK(at(mags.at("S"), m) == double(float(s_abs)));
    CHECK(at(mags.at("P"), m) == double(float(p_abs)));
    CHECK(at(mags.at("T"), m) == double(float(t_abs)));
    CHECK(at(mags.at("S"), m) >= std::fabs(at(out.at("S"), m)));
    // Q = 3 (sum of A's row): S(3 q) = S(q) |3| + |q| |3|, S(q) = p_abs minus P's initial term
    const double q_abs = p_abs - std::fabs(at(A, m * 70));
    CHECK(at(mags.at("Q"), m) == doctest::Approx(3 * q_abs + std::fabs(at(out.at("Q"), m))).epsilon(1e-6));
    for (int64_t j = 0; j < 3; ++j) {
      double r_abs = 0;
      for (int64_t k = 0; k < 70; ++k) r_abs += std::fabs(float(at(A, m * 70 + k)) * float(at(B, j * 70 + k)));
      CHECK(at(mags.at("R"), m * 3 + j) == double(float(r_abs)));
      ++checked;
    }
  }
  CHECK(checked == 192);
  CHECK(mags.at("R").shape == std::vector<int64_t>{64, 3});
  CHECK(mags.at("R").dtype == DType::F32);
  // without the argument the outputs are the same
  const Tensors plain = interp::evaluate(f, s, in);
  CHECK(plain.at("S").data == out.at("S").data);
  CHECK(plain.at("R").data == out.at("R").data);
}

TEST_CASE("term magnitudes of sampled rows equal the same rows of the full evaluation's") {
  const ir::Function f = fn(kSums);
  const Sizes s{{"M", 64}, {"K", 70}, {"J", 3}};
  const Tensors in = interp::random_inputs(f, s, 6);
  Tensors full, rows;
  interp::evaluate(f, s, in, &full);
  const std::vector<interp::RowBlock> blocks{{0, 5}, {30, 41}, {60, 64}};
  interp::evaluate_rows(f, s, in, blocks, &rows);
  REQUIRE(rows.size() == full.size());
  for (const auto& [name, a] : interp::take_rows(full, blocks)) {
    CHECK(rows.at(name).shape == a.shape);
    CHECK(rows.at(name).data == a.data);
  }
}

TEST_CASE("a comparison scaled by term magnitudes: within rel * magnitudes passes, beyond it fails and says so") {
  NpyArray expected, actual, scale;
  for (NpyArray* a : {&expected, &actual, &scale}) {
    a->dtype = DType::F32;
    a->shape = {2};
    a->data.assign(8, 0);
  }
  const auto set = [](NpyArray& a, int64_t i, double v) { interp::store_float(DType::F32, a.data.data() + i * 4, v); };
  set(expected, 0, -1.0), set(expected, 1, 4.0);
  set(scale, 0, 2000.0), set(scale, 1, 2.0);  // element 1's scale is below |expected|: |expected| counts
  // bound of element 0: 1e-6 + 1e-5 * 2000 = 0.020001; of element 1: 1e-6 + 1e-5 * 4
  set(actual, 0, -1.0 + 0.015), set(actual, 1, 4.0 + 3e-5);
  CHECK(interp::compare(expected, actual, 1e-6, 1e-5, "Y", &scale).ok);
  CHECK_FALSE(interp::compare(expected, actual, 1e-6, 1e-5, "Y").ok);  // relative to the result: 1e-5 * 1 fails
  set(actual, 0, -1.0 + 0.025);
  const interp::Comparison beyond = interp::compare(expected, actual, 1e-6, 1e-5, "Y", &scale);
  CHECK_FALSE(beyond.ok);
  CHECK(beyond.mismatches == 1);
  CHECK(beyond.first_mismatch == "Y[0]: expected -1, got -0.975000024 (beyond 0.020001, its error scale 2000: the magnitudes of the terms of the sums it is computed from)");
  set(actual, 0, -1.0), set(actual, 1, 4.0 + 6e-5);  // element 1: the ordinary bound
  const interp::Comparison second = interp::compare(expected, actual, 1e-6, 1e-5, "Y", &scale);
  CHECK(second.mismatches == 1);
  CHECK(second.first_mismatch == "Y[1]: expected 4, got 4.00006008");
  scale.shape = {3};
  CHECK_THROWS_WITH(interp::compare(expected, actual, 1e-6, 1e-5, "Y", &scale),
                    "compare: the term magnitudes of Y have shape [3], not [2]");
}

// A cancelling sum feeding later arithmetic: each result's scale is its operands' carried through
// the rule of its operation (error_scale.h), computed here in double from the sum's |terms|.
TEST_CASE("error scales carried from a cancelling sum through a product, exp, a quotient, max and select") {
  const ir::Function f = fn(R"(def carry(f32[M, K] A, f32[M] B) -> (f32[M] Y, f32[M] Z, f32[M] D, f32[M] W, f32[M] U, f32[M] V) {
  S(m) +=! A(m, k) - A(m, K - 1 - k)
  Y(m) = S(m) * 4.0 + 1.0
  Z(m) = exp(S(m) / 64.0)
  D(m) = B(m) / (abs(S(m)) + 2.0)
  W(m) = max(S(m), B(m))
  U(m) = select(B(m) > 0, S(m), B(m))
  V(m) = B(m) * B(m)
}
)");
  const Sizes s{{"M", 40}, {"K", 33}};
  const Tensors in = interp::random_inputs(f, s, 7);
  Tensors mags;
  const Tensors out = interp::evaluate(f, s, in, &mags);
  // V reads no scaled tensor: no scale, compared relative to its value as before
  CHECK(mags.count("V") == 0);
  CHECK(mags.size() == 5);
  const NpyArray &A = in.at("A"), &B = in.at("B");
  int cancelled = 0;
  for (int64_t m = 0; m < 40; ++m) {
    double s_abs = 0, sum = 0;
    for (int64_t k = 0; k < 33; ++k) {
      const double t = double(float(at(A, m * 33 + k)) - float(at(A, m * 33 + 32 - k)));
      s_abs += std::fabs(t), sum += t;
    }
    cancelled += s_abs > 4 * std::fabs(sum);
    const double b = at(B, m), v = sum / 64, e = std::exp(v), q = b / (std::fabs(sum) + 2);
    CHECK(at(mags.at("Y"), m) == doctest::Approx(4 * s_abs + 4 * std::fabs(sum) + 1).epsilon(1e-5));
    CHECK(at(mags.at("Z"), m) == doctest::Approx(e * (s_abs + 64 * std::fabs(v)) / 64 + e).epsilon(1e-5));
    // S(b / d) = (S(b) + |b / d| S(d)) / |d|, S(d) = S(|sum|) + |2|
    CHECK(at(mags.at("D"), m) == doctest::Approx((std::fabs(b) + std::fabs(q) * (s_abs + 2)) / (std::fabs(sum) + 2)).epsilon(1e-5));
    CHECK(at(mags.at("W"), m) == doctest::Approx(std::max(s_abs, std::fabs(b))).epsilon(1e-6));
    CHECK(at(mags.at("U"), m) == doctest::Approx(b > 0 ? s_abs : std::fabs(b)).epsilon(1e-6));
    CHECK(at(mags.at("Y"), m) > 3 * std::fabs(at(out.at("Y"), m)) - 4);  // a scale, not the value
  }
  CHECK(cancelled > 20);  // the sums do cancel: the scale is what bounds their error
}
