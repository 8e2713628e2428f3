// poly::inline_locals: cheap pointwise locals are computed in their readers; checked against the
// reference interpreter on the original function, exactly (no arithmetic changes).
#include <doctest/doctest.h>

#include "compiler/poly/inline_locals.h"
#include "poly_test_util.h"

using namespace tessel;

namespace {

const char* kSource =
    "def bn(f16[N, C] X, f32[C] gamma) -> (f16[N, C] Y) {\n"
    "  Sum(c) +=! f32(X(n, c))\n  Mean(c) = Sum(c) / f32(N)\n  D(n, c) = f32(X(n, c)) - Mean(c)\n"
    "  SqSum(c) +=! D(n, c) * D(n, c)\n  Y(n, c) = f16(D(n, c) * rsqrt(SqSum(c) / f32(N) + 0.00001) * gamma(c))\n}\n"
    "def chain(f32[M] X) -> (f32[M] Y) {\n  A(i) = X(i) + 1.0\n  B(i) = A(i) * 2.0\n  Y(i) = B(i) - B(i)\n}\n"
    "def costly(f32[M] X) -> (f32[M] Y) {\n  E(i) = exp(X(i))\n  Y(i) = E(i) + E(i)\n}\n"
    "def window(f32[M] X) -> (f32[P] Y) {\n  A(i) = X(i) * 3.0\n  Y(i) = A(i) + A(i + 1)\n    where i in 0:P\n}\n"
    "def many(f32[M] X) -> (f32[M] Y) {\n  A(i) = X(i) * 3.0\n  Y(i) = A(i) * A(i) + A(i) * A(i) + A(i)\n}\n"
    "def typed(f32[M] X) -> (f32[M] Y) {\n  A(i) = f16(X(i))\n  Y(i) = f32(A(i)) * 2.0\n}\n";

using Result = test::Rewritten<poly::InlinedLocal>;

// The inlined function's outputs against the original's, element by element (test::check_same).
Result check_same(const char* def, const std::map<std::string, int64_t>& sizes) {
  return test::check_same<poly::InlinedLocal>(kSource, def, sizes, 5, [](const ir::Function& f, const auto& s, auto* found) {
    return poly::inline_locals(f, s, found);
  });
}

}  // namespace

TEST_CASE("inline locals: batch norm's centred value is computed in both of its readers") {
  const Result r = check_same("bn", {{"N", 37}, {"C", 5}});
  REQUIRE(r.found.size() == 1);
  CHECK(r.found[0].to_string() == "D (S2): inlined into S3, S4 (3 reads)");
  REQUIRE(r.g->statements.size() == 4);
  CHECK(!r.g->find_tensor("D"));
  CHECK(ir::to_string(*r.g->statements[2].rhs) == "((f32(X(n, c)) - Mean(c)) * (f32(X(n, c)) - Mean(c)))");
}

TEST_CASE("inline locals: a chain of locals inlines into the last reader") {
  const Result r = check_same("chain", {{"M", 9}});
  REQUIRE(r.found.size() == 2);
  REQUIRE(r.g->statements.size() == 1);
  CHECK(ir::to_string(*r.g->statements[0].rhs) == "(((X(i) + 1) * 2) - ((X(i) + 1) * 2))");
}

TEST_CASE("inline locals: a rounding cast inlines with its type (the reader rounds as the store did)") {
  const Result r = check_same("typed", {{"M", 9}});
  REQUIRE(r.found.size() == 1);
  CHECK(ir::to_string(*r.g->statements[0].rhs) == "(f32(f16(X(i))) * 2)");
}

TEST_CASE("inline locals: costly values, windows and many uses stay stored") {
  CHECK(check_same("costly", {{"M", 9}}).found.empty());
  CHECK(check_same("window", {{"M", 9}, {"P", 8}}).found.empty());
  CHECK(check_same("many", {{"M", 9}}).found.empty());
}
