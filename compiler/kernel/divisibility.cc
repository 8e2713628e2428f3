#include "compiler/kernel/divisibility.h"

#include <numeric>

namespace tessel::kernel {

namespace {

int64_t gcd0(int64_t a, int64_t b) { return std::gcd(a < 0 ? -a : a, b < 0 ? -b : b); }  // gcd(0, b) = b

}  // namespace

int64_t divisor(const Expr& e, const Divisors& vars) {
  switch (e.kind) {
    case ExprKind::Int: return e.value < 0 ? -e.value : e.value;
    case ExprKind::Var: {
      auto it = vars.find(e.name);
      return it == vars.end() ? 1 : it->second;
    }
    case ExprKind::Add:
    case ExprKind::Sub:
    case ExprKind::Min:
    case ExprKind::Max: return gcd0(divisor(e.args[0], vars), divisor(e.args[1], vars));
    case ExprKind::Neg: return divisor(e.args[0], vars);
    case ExprKind::Mul: {
      const int64_t a = divisor(e.args[0], vars), b = divisor(e.args[1], vars);
      if (a == 0 || b == 0) return 0;
      if (a > (int64_t(1) << 30) || b > (int64_t(1) << 30)) return 1;  // (no overflow; 1 is always true)
      return a * b;
    }
    case ExprKind::Select: return gcd0(divisor(e.args[1], vars), divisor(e.args[2], vars));
    default: return 1;  // floor division, modulo, comparisons: nothing claimed
  }
}

Divisors variable_divisors(const Kernel& k) {
  // Start optimistic (0: "every number") for each bound variable and lower to a fixpoint: each
  // pass replaces a variable's divisor by the gcd over its bindings under the current divisors.
  Divisors d;
  for_each_node(k.body, [&](const Node& n, int) {
    if (n.kind == NodeKind::Loop || n.kind == NodeKind::Let) d[n.var] = 0;
  });
  for (bool changed = true; changed;) {
    changed = false;
    Divisors next;
    for (const auto& [v, x] : d) next[v] = 0;
    for_each_node(k.body, [&](const Node& n, int) {
      int64_t x;
      if (n.kind == NodeKind::Loop)
        x = gcd0(divisor(n.lo, d), n.step);
      else if (n.kind == NodeKind::Let)
        x = divisor(n.value, d);
      else
        return;
      next[n.var] = gcd0(next[n.var], x);
    });
    changed = next != d;
    d = std::move(next);
  }
  return d;
}

}  // namespace tessel::kernel
