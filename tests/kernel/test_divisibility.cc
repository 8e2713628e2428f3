// kernel::variable_divisors / divisor: what divides every value of a loop or Let variable.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/kernel/divisibility.h"
#include "compiler/pipeline.h"

using namespace tessel;
using kernel::Expr;

TEST_CASE("divisor of expressions from the variables' divisors") {
  const kernel::Divisors d{{"a", 64}, {"b", 12}, {"z", 0}};
  CHECK(kernel::divisor(Expr::integer(0), d) == 0);
  CHECK(kernel::divisor(Expr::integer(-24), d) == 24);
  CHECK(kernel::divisor(Expr::var("a"), d) == 64);
  CHECK(kernel::divisor(Expr::var("unknown"), d) == 1);
  CHECK(kernel::divisor(Expr::var("a") + Expr::var("b"), d) == 4);
  CHECK(kernel::divisor(Expr::var("a") - Expr::integer(8), d) == 8);
  CHECK(kernel::divisor(Expr::var("z") + Expr::var("b"), d) == 12);  // z is always 0
  CHECK(kernel::divisor(Expr::make(kernel::ExprKind::Mul, {Expr::var("b"), Expr::integer(3)}), d) == 36);
  CHECK(kernel::divisor(min_expr(Expr::var("a"), Expr::integer(96)), d) == 32);
  CHECK(kernel::divisor(Expr::make(kernel::ExprKind::FloorDiv, {Expr::var("a"), Expr::integer(2)}), d) == 1);
}

TEST_CASE("tile origins of a tiled element-wise kernel are multiples of their tile sizes") {
  frontend::Module m = frontend::parse_module("def add1(f32[M, N] X) -> (f32[M, N] Y) {\n  Y(m, n) = X(m, n) + 1\n}\n", "add1.tsl");
  CompileOptions co;
  co.target = "isa/targets/davinci-910.yaml";
  co.sizes = {{"M", 256}, {"N", 384}};
  co.tile = "m=32/32,n=128/64";
  auto c = compile(m.functions[0], co);
  const kernel::Divisors d = kernel::variable_divisors(c->kernel);
  bool saw_64 = false, saw_32 = false;
  kernel::for_each_node(c->kernel.body, [&](const kernel::Node& n, int) {
    if (n.kind != kernel::NodeKind::Loop) return;
    const int64_t x = d.at(n.var);
    // every loop variable's divisor divides its lower bound and its step
    CHECK(x != 0);
    CHECK(n.step % x == 0);
    saw_64 |= x % 64 == 0;
    saw_32 |= x % 32 == 0;
  });
  CHECK(saw_32);
  CHECK(saw_64);
}
