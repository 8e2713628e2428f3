// Quasi-affine forms: '/' and '%' by positive integer constants in range bounds, shapes and
// indices lower to ir::AffineExpr floor-division terms (isl's floor((e)/d)); output sizes that
// follow from the range writing them are inferred (ir::InferredSize, ir::bind_sizes); what stays
// an error (a divisor that is not a positive constant) names file:line:col and the reason.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "isa/base/error.h"

using namespace tessel;
using ir::AffineExpr;

namespace {

ir::Function one(const std::string& text) {
  frontend::Module m = frontend::parse_module(text, "t.tsl");
  REQUIRE(m.functions.size() == 1);
  return m.functions[0];
}

std::string rejection(const std::string& text) {
  try {
    frontend::parse_module(text, "t.tsl");
  } catch (const UserError& e) {
    const std::string s = e.what();
    return s.substr(0, s.find('\n'));
  }
  return "";
}

std::string workload(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/workloads/" + name; }

const AffineExpr h = AffineExpr::index("h");

}  // namespace

TEST_CASE("floor_div and floor_mod round toward minus infinity, the remainder from 0 to d - 1") {
  CHECK(ir::floor_div(7, 2) == 3);
  CHECK(ir::floor_div(-7, 2) == -4);
  CHECK(ir::floor_div(-1, 4) == -1);
  CHECK(ir::floor_div(-8, 4) == -2);
  CHECK(ir::floor_mod(-7, 2) == 1);
  CHECK(ir::floor_mod(-5, 4) == 3);
  CHECK(ir::floor_mod(-8, 4) == 0);
  CHECK(ir::floor_mod(9, 4) == 1);
}

TEST_CASE("AffineExpr division terms: isl text, evaluation at negative numerators, canonical equality") {
  const AffineExpr q = AffineExpr::floor_div_of(h - AffineExpr::constant_of(5), 2);
  CHECK(q.has_div());
  CHECK_FALSE(q.is_affine());
  CHECK(q.uses_indices());
  CHECK(q.to_string() == "floor((h - 5)/2)");
  CHECK(q.evaluate({{"h", 0}}, {}) == -3);
  CHECK(q.evaluate({{"h", 4}}, {}) == -1);
  const AffineExpr r = AffineExpr::mod_of(h - AffineExpr::constant_of(5), 4);
  CHECK(r.to_string() == "h - 4*floor((h - 5)/4) - 5");
  for (int64_t x = -9; x <= 9; ++x) CHECK(r.evaluate({{"h", x}}, {}) == ir::floor_mod(x - 5, 4));
  // Equal terms merge; opposite ones cancel.
  CHECK((q + q) == q.scaled(2));
  CHECK((q - q) == AffineExpr::constant_of(0));
  CHECK((q - q).is_affine());
  CHECK(!(q == AffineExpr::floor_div_of(h - AffineExpr::constant_of(5), 3)));
}

TEST_CASE("floor_div_of simplifies only where exact: divisor 1, constants, multiples, nested floors") {
  CHECK(AffineExpr::floor_div_of(h, 1) == h);
  CHECK(AffineExpr::floor_div_of(AffineExpr::constant_of(-7), 2) == AffineExpr::constant_of(-4));
  CHECK(AffineExpr::floor_div_of(h.scaled(4) + AffineExpr::constant_of(-3), 2) ==
        h.scaled(2) + AffineExpr::constant_of(-2));
  CHECK(AffineExpr::floor_div_of(AffineExpr::floor_div_of(h, 2), 3) == AffineExpr::floor_div_of(h, 6));
  CHECK(AffineExpr::mod_of(h.scaled(2), 2) == AffineExpr::constant_of(0));
  CHECK(AffineExpr::floor_div_of(h + AffineExpr::param("H"), 2).to_string() == "floor((h + H)/2)");
}

TEST_CASE("'/' and '%' by constants lower in range bounds, shapes and indices") {
  const ir::Function f = one(
      "def f(f32[N, H] X) -> (f32[N, P] Y, f32[H / 2 + 1] Z) {\n"
      "  Y(n, p) = X(n, p * 2 + 1)\n"
      "      where p in 0:(H - 1) / 2\n"
      "  Z(i) = X(i % 2, i / 2)\n"
      "      where i in 0:H / 2 + 1\n"
      "}\n");
  CHECK(f.statements[0].domain[1].hi.to_string() == "floor((H - 1)/2)");
  CHECK(f.find_tensor("Z")->shape[0].to_string() == "floor((H)/2) + 1");
  const ir::Expr& read = *f.statements[1].rhs;
  REQUIRE(read.kind == ir::ExprKind::Access);
  CHECK(read.indices[0].to_string() == "i - 2*floor((i)/2)");
  CHECK(read.indices[1].to_string() == "floor((i)/2)");
  CHECK(ir::index_division_use(f) == "S1 reads X(i - 2*floor((i)/2), floor((i)/2))");
  CHECK(ir::division_use(f) == "S0: range of p 0:floor((H - 1)/2)");
}

TEST_CASE("a function without division reports no division use") {
  const frontend::Module m = frontend::load_module(workload("matmul.tsl"));
  CHECK(ir::division_use(m.functions[0]) == "");
  CHECK(m.functions[0].inferred.empty());
}

TEST_CASE("parser errors: a divisor that is not a positive integer constant, or a product of variables") {
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) +=! A(m / k)\n      where k in 1:3\n}\n") ==
        "t.tsl:2:18: non-affine index: '/' by 'k', which is not a constant; the divisor of '/' and '%' must be a "
        "positive integer constant");
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) = A(m % M)\n}\n") ==
        "t.tsl:2:16: non-affine index: '%' by 'M', which is not a constant; the divisor of '/' and '%' must be a "
        "positive integer constant");
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) = A(m / 0)\n}\n") ==
        "t.tsl:2:16: the divisor of '/' in an index must be a positive integer constant, not 0");
  CHECK(rejection("def f(f32[M / -2] A) -> (f32[M] Y) {\n  Y(m) = A(m)\n}\n") ==
        "t.tsl:1:15: the divisor of '/' in a tensor dimension must be a positive integer constant, not -2");
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) = A(m / 2.5)\n}\n") ==
        "t.tsl:2:16: an index must be an integer, not a real number");
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) = A((m / 2) * m)\n}\n").find(
            "t.tsl:2:20: non-affine index: 'floor((m)/2)' times 'm' is a product of two variables") == 0);
}

TEST_CASE("inference: an output size written by a where-ranged index is inferred from its range") {
  const frontend::Module m = frontend::load_module(workload("quasi.tsl"));
  const ir::Function& dw = frontend::select_function(m, "depthwise_stride2");
  REQUIRE(dw.inferred.size() == 2);
  CHECK(dw.inferred[0].param == "P");
  CHECK(dw.inferred[0].value.to_string() == "floor((H - R)/2) + 1");
  CHECK(dw.inferred[0].loc.line == 8);
  const std::map<std::string, int64_t> sizes =
      ir::bind_sizes(dw, {{"N", 1}, {"H", 8}, {"W", 7}, {"C", 2}, {"R", 3}, {"S", 3}});
  CHECK(sizes.at("P") == 3);  // (8 - 3) / 2 + 1, rounded down
  CHECK(sizes.at("Q") == 3);
  // A given value equal to the inferred one is accepted; another is an error naming both.
  CHECK(ir::bind_sizes(dw, {{"H", 8}, {"W", 7}, {"R", 3}, {"S", 3}, {"P", 3}}).at("P") == 3);
  std::string msg;
  try {
    ir::bind_sizes(dw, {{"H", 8}, {"W", 7}, {"R", 3}, {"S", 3}, {"P", 4}});
  } catch (const UserError& e) {
    msg = e.what();
  }
  CHECK(msg.find("--shape: size parameter 'P' is given as 4 but is inferred as 3 from the range of 'p' in S0") == 0);
  CHECK(msg.find("floor((H - R)/2) + 1") != std::string::npos);
}

TEST_CASE("inference does not fire for a size an input uses, nor for an index ranged by the output itself") {
  const ir::Function a = one("def f(f32[P] A) -> (f32[P] Y) {\n  Y(p) = A(p)\n      where p in 0:P\n}\n");
  CHECK(a.inferred.empty());
  const ir::Function b = one("def f(f32[M] A) -> (f32[M, P] Y) {\n  Y(m, p) = A(m)\n      where p in 0:P\n}\n");
  CHECK(b.inferred.empty());
  const ir::Function c = one("def f(f32[M] A) -> (f32[P] Y) {\n  Y(p) = A(p * 2)\n      where p in 0:M / 2\n}\n");
  REQUIRE(c.inferred.size() == 1);
  CHECK(c.inferred[0].param == "P");
}

TEST_CASE("suite entries may leave inferred sizes out, a disagreeing one names the entry") {
  frontend::Suite s = frontend::load_suite(workload("quasi.yaml"));
  CHECK_NOTHROW(frontend::check_suite(s));
  s.entries.resize(1);
  s.entries[0].shape["P"] = 9;
  std::string msg;
  try {
    frontend::check_suite(s);
  } catch (const UserError& e) {
    msg = e.what();
  }
  CHECK(msg.find("suite 'quasi', entry 'depthwise_stride2': size parameter 'P' is given as 9 but is inferred as 3") == 0);
}
