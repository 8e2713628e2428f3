// poly::hoist_invariants: costly values that use only some of a statement's indices are computed
// once per point of those indices; checked against the reference interpreter on the original
// function, exactly (no arithmetic changes).
#include <doctest/doctest.h>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/poly/hoist_invariants.h"

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

struct Result {
  std::vector<poly::HoistedValue> hoisted;
  std::optional<ir::Function> g;
};

Result check_same(const char* def, const std::map<std::string, int64_t>& sizes) {
  frontend::Module m = frontend::parse_module(kSource, "hoist.tsl");
  const ir::Function& f = frontend::select_function(m, def);
  Result r;
  r.g = poly::hoist_invariants(f, sizes, &r.hoisted);
  REQUIRE(r.g.has_value() == !r.hoisted.empty());
  if (!r.g) return r;
  const auto inputs = interp::random_inputs(f, sizes, 3);
  const emit_c::Verification v = emit_c::verify(interp::evaluate(f, sizes, inputs), interp::evaluate(*r.g, sizes, inputs), 0.0);
  CHECK_MESSAGE(v.verified, v.first_mismatch);
  for (size_t i = 0; i < r.g->statements.size(); ++i) CHECK(r.g->statements[i].name == "S" + std::to_string(i));
  return r;
}

}  // namespace

TEST_CASE("hoist invariants: batch norm's inverse deviation is computed once per channel") {
  const Result r = check_same("bn", {{"N", 37}, {"C", 5}});
  REQUIRE(r.hoisted.size() == 1);
  CHECK(r.hoisted[0].to_string() == "S3: Y_inv0(c) = rsqrt(((SqSum(c) / f32(N)) + 1e-05)), 37 uses each");
  REQUIRE(r.g->statements.size() == 5);
  CHECK(r.g->statements[3].output == "Y_inv0");
  CHECK(r.g->statements[3].domain.size() == 1);
  CHECK(r.g->find_tensor("Y_inv0")->dtype == DType::F32);
}

TEST_CASE("hoist invariants: a value of all the statement's indices, one of inputs only, an integer division and too few uses stay") {
  CHECK(check_same("softmax", {{"M", 4}, {"N", 9}}).hoisted.empty());  // exp(X(i, j) - Mx(i)) / S(i) uses i and j
  CHECK(check_same("input_only", {{"M", 8}, {"N", 9}}).hoisted.empty());
  CHECK(check_same("integer", {{"M", 8}, {"N", 9}}).hoisted.empty());
  CHECK(check_same("bn", {{"N", 3}, {"C", 5}}).hoisted.empty());  // 3 uses each
}
