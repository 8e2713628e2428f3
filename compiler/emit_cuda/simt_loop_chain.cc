#include "compiler/emit_cuda/simt_loop_chain.h"

#include <algorithm>

namespace tessel::emit_cuda::simt {

void expr_vars(const Expr& e, std::set<std::string>& out) {
  if (e.kind == kernel::ExprKind::Var) out.insert(e.name);
  for (const auto& a : e.args) expr_vars(a, out);
}

bool constant_expr(const Expr& e, int64_t* v) {
  try {
    *v = e.evaluate({});
    return true;
  } catch (...) {
    return false;
  }
}

bool compute_nest(const Node& n) {
  using kernel::NodeKind;
  switch (n.kind) {
    case NodeKind::Copy:
    case NodeKind::Matmul: return false;
    default: break;
  }
  for (const auto& c : n.children)
    if (!compute_nest(*c)) return false;
  for (const auto& c : n.else_children)
    if (!compute_nest(*c)) return false;
  return true;
}

std::vector<ChainLevel> loop_chain(const Node& root) {
  using kernel::NodeKind;
  std::vector<ChainLevel> chain;
  const Node* n = &root;
  while (n && n->kind == NodeKind::Loop) {
    ChainLevel level{n, {}};
    const Node* next = nullptr;
    bool only_lets_then_loop = true;
    for (const auto& c : n->children) {
      if (!next && c->kind == NodeKind::Let) level.lets.push_back(c.get());
      else if (!next && c->kind == NodeKind::Loop) next = c.get();
      else only_lets_then_loop = false;
    }
    if (!only_lets_then_loop) level.lets.clear();
    chain.push_back(level);
    n = only_lets_then_loop ? next : nullptr;
  }
  return chain;
}
bool threads_may_share(const Node& loop) { return loop.parallel && !loop.rebinds_buffers; }

std::optional<Linear> linear(const Expr& e) {
  Linear l;
  switch (e.kind) {
    case kernel::ExprKind::Int: l.constant = e.value; return l;
    case kernel::ExprKind::Var: l.coeff[e.name] = 1; return l;
    case kernel::ExprKind::Neg: {
      auto a = linear(e.args[0]);
      if (!a) return std::nullopt;
      for (auto& [v, c] : a->coeff) c = -c;
      a->constant = -a->constant;
      return a;
    }
    case kernel::ExprKind::Add:
    case kernel::ExprKind::Sub: {
      auto a = linear(e.args[0]), b = linear(e.args[1]);
      if (!a || !b) return std::nullopt;
      const int64_t sg = e.kind == kernel::ExprKind::Add ? 1 : -1;
      for (const auto& [v, c] : b->coeff) a->coeff[v] += sg * c;
      a->constant += sg * b->constant;
      return a;
    }
    case kernel::ExprKind::Mul: {
      auto a = linear(e.args[0]), b = linear(e.args[1]);
      if (!a || !b) return std::nullopt;
      if (!b->coeff.empty() && a->coeff.empty()) std::swap(a, b);
      if (!b->coeff.empty()) return std::nullopt;
      for (auto& [v, c] : a->coeff) c *= b->constant;
      a->constant *= b->constant;
      return a;
    }
    default: return std::nullopt;
  }
}

bool merges(const Node& t, const Node& p) {
  if (p.step != 1 || t.step <= 1 || p.lo.kind != kernel::ExprKind::Var || p.lo.name != t.var) return false;
  Linear tile_end;
  tile_end.coeff[t.var] = 1;
  tile_end.constant = t.step;
  auto full = linear(p.hi);
  if (full && *full == tile_end) {
    auto lo = linear(t.lo), hi = linear(t.hi);
    if (!lo || !hi) return false;
    Linear len = *hi;
    for (const auto& [v, c] : lo->coeff) len.coeff[v] -= c;
    len.constant -= lo->constant;
    return Linear{{}, len.constant} == len && len.constant % t.step == 0;
  }
  if (p.hi.kind != kernel::ExprKind::Min) return false;
  for (int i = 0; i < 2; ++i) {
    auto a = linear(p.hi.args[i]), b = linear(p.hi.args[1 - i]), hi = linear(t.hi);
    if (a && b && hi && *a == tile_end && *b == *hi) return true;
  }
  return false;
}

std::vector<Dim> dims_of(const std::vector<ChainLevel>& chain, size_t from, size_t to) {
  std::vector<Dim> dims;
  for (size_t i = from; i < to; ++i) {
    const Node& l = *chain[i].loop;
    Dim d{&l, nullptr, l.lo, l.hi, l.step};
    if (i + 1 < to && merges(l, *chain[i + 1].loop)) {
      d.point = chain[i + 1].loop;
      d.step = 1;
      ++i;
    }
    dims.push_back(d);
  }
  return dims;
}

bool bounds_independent(const std::vector<Dim>& dims, const std::set<std::string>& bound_in_chain) {
  for (const auto& d : dims) {
    std::set<std::string> bv;
    expr_vars(d.lo, bv);
    expr_vars(d.hi, bv);
    for (const auto& v : bv)
      if (bound_in_chain.count(v)) return false;
  }
  return true;
}
std::set<std::string> bound_in(const std::vector<ChainLevel>& chain) {
  std::set<std::string> out;
  for (const auto& l : chain) {
    out.insert(l.loop->var);
    for (const Node* let : l.lets) out.insert(let->var);
  }
  return out;
}

TripCount trip_count(const Dim& d) {
  auto lo = linear(d.lo);
  auto span = [&](const Expr& h) -> std::optional<int64_t> {
    auto hl = linear(h);
    if (!lo || !hl) return std::nullopt;
    Linear x = *hl;
    for (const auto& [v, c] : lo->coeff) x.coeff[v] -= c;
    x.constant -= lo->constant;
    if (!(Linear{{}, x.constant} == x)) return std::nullopt;
    return std::max<int64_t>(0, (x.constant + d.step - 1) / d.step);
  };
  if (auto c = span(d.hi)) return {c, std::nullopt};
  if (d.hi.kind == kernel::ExprKind::Min)
    for (const auto& h : d.hi.args)
      if (auto c = span(h)) return {std::nullopt, c};
  return {};
}

}  // namespace tessel::emit_cuda::simt
