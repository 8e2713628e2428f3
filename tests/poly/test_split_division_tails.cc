// poly::split_division_tails: a divided output index whose range is not a whole number of
// quotients becomes the whole quotients and a tail; checked against the reference interpreter on
// the original function (exactly: no arithmetic changes) and on the rewritten statements.
#include <doctest/doctest.h>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "compiler/poly/split_division_tails.h"
#include "poly_test_util.h"

using namespace tessel;

namespace {

const char* kSource =
    "def up(f32[H] X) -> (f32[M] Y) {\n  Y(i) = X(i / 2) * 3.0\n    where i in 0:M\n}\n"
    "def rows(f32[A, B] X) -> (f32[M] Y) {\n  Y(i) +=! X(i / 3, j)\n    where i in 0:M\n}\n"
    "def two(f16[A, B] X, f16[N] Z) -> (f16[M, N] Y) {\n  Y(i, j) = X((i + 1) / 2, j / 3) + Z(j % 3)\n"
    "    where i in 1:M, j in 0:N\n}\n"
    "def odd_start(f32[H] X) -> (f32[M] Y) {\n  Y(i) = X((i + 1) / 2)\n    where i in 0:M\n}\n"
    "def summed(f32[M, N] X) -> (f32[M] Y) {\n  Y(i) +=! X(i, j / 2)\n    where j in 0:7\n}\n"
    "def residues(f16[D2, D3, D4] X, f16[N] Z) -> (f16[M, N] Y) {\n"
    "  Y(i, j) = X(i * 2 + j * 2, (i + 1) / 3, i % 2) * Z(j)\n    where i in 0:M, j in 0:N\n}\n";

// The split function's outputs against the original's, element by element (test::check_same).
std::vector<poly::DivisionTail> check_same(const char* def, const std::map<std::string, int64_t>& sizes) {
  return test::check_same<poly::DivisionTail>(kSource, def, sizes, 11, [](const ir::Function& f, const auto& s, auto* found) {
    return poly::split_division_tails(f, s, found);
  }).found;
}

}  // namespace

TEST_CASE("division tails: the whole quotients and a tail whose quotient is a constant") {
  const auto t = check_same("up", {{"H", 4}, {"M", 7}});
  REQUIRE(t.size() == 1);
  CHECK(t[0].to_string() == "S0: index i (0:7) divided by 2: whole quotients 0:6 and the tail 6:7");
  frontend::Module m = frontend::parse_module(kSource, "div.tsl");
  const ir::Function& f = frontend::select_function(m, "up");
  auto g = poly::split_division_tails(f, {{"H", 4}, {"M", 7}});
  REQUIRE(g);
  REQUIRE(g->statements.size() == 2);
  CHECK(g->statements[1].rhs->args[0]->indices[0].to_string() == "3");  // floor(6 / 2)
  CHECK(g->statements[0].rhs->args[0]->indices[0].has_div());
}

TEST_CASE("division tails: a reduction over another index, two divided indices, a range shorter than the divisor") {
  CHECK(check_same("rows", {{"A", 4}, {"B", 5}, {"M", 11}}).size() == 1);
  CHECK(check_same("two", {{"A", 20}, {"B", 30}, {"M", 39}, {"N", 88}}).size() == 1);  // i: 38 points, whole
  CHECK(check_same("two", {{"A", 21}, {"B", 30}, {"M", 40}, {"N", 88}}).size() == 3);  // i, then j in both parts
  // M = 2 < 3: no whole quotient, the tail alone
  frontend::Module m = frontend::parse_module(kSource, "div.tsl");
  auto g = poly::split_division_tails(frontend::select_function(m, "rows"), {{"A", 4}, {"B", 5}, {"M", 2}});
  REQUIRE(g);
  CHECK(g->statements.size() == 1);
}

TEST_CASE("division tails: left as written where the cut would not be exact or is not needed") {
  // (0 + 1) % 2 != 0: the quotient does not start at the range's start
  CHECK(check_same("odd_start", {{"H", 5}, {"M", 7}}).empty());
  // a reduced index is not cut (the tail would accumulate into the whole part's result)
  CHECK(check_same("summed", {{"M", 3}, {"N", 4}}).empty());
  // a whole number of quotients
  CHECK(check_same("up", {{"H", 4}, {"M", 8}}).empty());
}

TEST_CASE("an index divided by several constants: one statement per residue modulo their least common multiple") {
  const auto t = check_same("residues", {{"M", 7}, {"N", 5}, {"D2", 24}, {"D3", 3}, {"D4", 2}});
  REQUIRE(t.size() == 1);
  CHECK(t[0].to_string() == "S0: index i (0:7) divided by several constants: one statement per residue modulo 6");
  frontend::Module m = frontend::parse_module(kSource, "div.tsl");
  auto g = poly::split_division_tails(frontend::select_function(m, "residues"), {{"M", 7}, {"N", 5}, {"D2", 24}, {"D3", 3}, {"D4", 2}});
  REQUIRE(g);
  REQUIRE(g->statements.size() == 6);  // residues 0..5 of 7 points: 2, 1, 1, 1, 1, 1
  for (const auto& s : g->statements) {
    CHECK_FALSE(s.out_indices[0].has_div());
    ir::for_each_access(*s.rhs, [&](const ir::Expr& e) {
      for (const auto& i : e.indices) CHECK_FALSE(i.has_div());
    });
  }
  // fewer points than residues: only the residues that occur
  CHECK(check_same("residues", {{"M", 4}, {"N", 3}, {"D2", 14}, {"D3", 2}, {"D4", 2}}).size() == 1);
}

TEST_CASE("division tails run in the NPU pipeline only") {
  frontend::Module m = frontend::parse_module(kSource, "div.tsl");
  const ir::Function& f = frontend::select_function(m, "up");
  CompileOptions o;
  o.sizes = {{"H", 4}, {"M", 7}};
  o.target = "isa/targets/davinci-910.yaml";
  auto c = compile(f, o);
  REQUIRE(c->division_tails.size() == 1);
  CHECK(c->function->statements.size() == 2);
  o.target = "isa/targets/sm90.yaml";
  CHECK(compile(f, o)->division_tails.empty());
}
