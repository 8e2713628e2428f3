// poly::inline_locals: cheap pointwise locals are computed in their readers; checked against the
// reference interpreter on the original function, exactly (no arithmetic changes).
#include <doctest/doctest.h>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/poly/inline_locals.h"

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

struct Result {
  std::vector<poly::InlinedLocal> inlined;
  std::optional<ir::Function> g;
};

// The inlined function's outputs against the original's, element by element (exact).
Result check_same(const char* def, const std::map<std::string, int64_t>& sizes) {
  frontend::Module m = frontend::parse_module(kSource, "inline.tsl");
  const ir::Function& f = frontend::select_function(m, def);
  Result r;
  r.g = poly::inline_locals(f, sizes, &r.inlined);
  REQUIRE(r.g.has_value() == !r.inlined.empty());
  if (!r.g) return r;
  const auto inputs = interp::random_inputs(f, sizes, 5);
  const emit_c::Verification v = emit_c::verify(interp::evaluate(f, sizes, inputs), interp::evaluate(*r.g, sizes, inputs), 0.0);
  CHECK_MESSAGE(v.verified, v.first_mismatch);
  for (size_t i = 0; i < r.g->statements.size(); ++i) CHECK(r.g->statements[i].name == "S" + std::to_string(i));
  return r;
}

}  // namespace

TEST_CASE("inline locals: batch norm's centred value is computed in both of its readers") {
  const Result r = check_same("bn", {{"N", 37}, {"C", 5}});
  REQUIRE(r.inlined.size() == 1);
  CHECK(r.inlined[0].to_string() == "D (S2): inlined into S3, S4 (3 reads)");
  REQUIRE(r.g->statements.size() == 4);
  CHECK(!r.g->find_tensor("D"));
  CHECK(ir::to_string(*r.g->statements[2].rhs) == "((f32(X(n, c)) - Mean(c)) * (f32(X(n, c)) - Mean(c)))");
}

TEST_CASE("inline locals: a chain of locals inlines into the last reader") {
  const Result r = check_same("chain", {{"M", 9}});
  REQUIRE(r.inlined.size() == 2);
  REQUIRE(r.g->statements.size() == 1);
  CHECK(ir::to_string(*r.g->statements[0].rhs) == "(((X(i) + 1) * 2) - ((X(i) + 1) * 2))");
}

TEST_CASE("inline locals: a rounding cast inlines with its type (the reader rounds as the store did)") {
  const Result r = check_same("typed", {{"M", 9}});
  REQUIRE(r.inlined.size() == 1);
  CHECK(ir::to_string(*r.g->statements[0].rhs) == "(f32(f16(X(i))) * 2)");
}

TEST_CASE("inline locals: costly values, windows and many uses stay stored") {
  CHECK(check_same("costly", {{"M", 9}}).inlined.empty());
  CHECK(check_same("window", {{"M", 9}, {"P", 8}}).inlined.empty());
  CHECK(check_same("many", {{"M", 9}}).inlined.empty());
}
