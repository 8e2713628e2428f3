// poly::hoist_invariants: costly values that use only some of a statement's indices are computed
// once per point of those indices; checked against the reference interpreter on the original
// function, exactly (no arithmetic changes).
#include <doctest/doctest.h>

#include "compiler/poly/hoist_invariants.h"
#include "poly_test_util.h"

using namespace tessel;

namespace {

const char* kSource =
    "def bn(f16[N, C] X, f32[C] gamma) -> (f16[N, C] Y) {\n"
    "  Sum(c) +=! f32(X(n, c))\n  Mean(c) = Sum(c) / f32(N)\n"
    "  SqSum(c) +=! (f32(X(n, c)) - Mean(c)) * (f32(X(n, c)) - Mean(c))\n"
    "  Y(n, c) = f16((f32(X(n, c)) - Mean(c)) * rsqrt(SqSum(c) / f32(N) + 0.00001) * gamma(c))\n}\n"
    "def softmax(f32[M, N] X) -> (f32[M, N] Y) {\n  Mx(i) max=! X(i, j)\n  S(i) +=! exp(X(i, j) - Mx(i))\n"
    "  Y(i, j) = exp(X(i, j) - Mx(i)) / S(i)\n}\n"
    "def input_only(f32[M, N] X, f32[N] B) -> (f32[M, N] Y) {\n  Y(i, j) = X(i, j) * exp(B(j))\n}\n"
    "def integer(i32[M, N] X, i32[N] K) -> (i32[M, N] Y) {\n  T(j) = K(j) + 1\n  Y(i, j) = X(i, j) + 7 / T(j)\n}\n";

using Result = test::Rewritten<poly::HoistedValue>;

// The hoisted function against the original (test::check_same).
Result check_same(const char* def, const std::map<std::string, int64_t>& sizes) {
  return test::check_same<poly::HoistedValue>(kSource, def, sizes, 3, [](const ir::Function& f, const auto& s, auto* found) {
    return poly::hoist_invariants(f, s, found);
  });
}

}  // namespace

TEST_CASE("hoist invariants: batch norm's inverse deviation is computed once per channel") {
  const Result r = check_same("bn", {{"N", 37}, {"C", 5}});
  REQUIRE(r.found.size() == 1);
  CHECK(r.found[0].to_string() == "S3: Y_inv0(c) = rsqrt(((SqSum(c) / f32(N)) + 1e-05)), 37 uses each");
  REQUIRE(r.g->statements.size() == 5);
  CHECK(r.g->statements[3].output == "Y_inv0");
  CHECK(r.g->statements[3].domain.size() == 1);
  CHECK(r.g->find_tensor("Y_inv0")->dtype == DType::F32);
}

TEST_CASE("hoist invariants: a value of all the statement's indices, one of inputs only, an integer division and too few uses stay") {
  CHECK(check_same("softmax", {{"M", 4}, {"N", 9}}).found.empty());  // exp(X(i, j) - Mx(i)) / S(i) uses i and j
  CHECK(check_same("input_only", {{"M", 8}, {"N", 9}}).found.empty());
  CHECK(check_same("integer", {{"M", 8}, {"N", 9}}).found.empty());
  CHECK(check_same("bn", {{"N", 3}, {"C", 5}}).found.empty());  // 3 uses each
}
