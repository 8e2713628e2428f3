#include "compiler/poly/parallelism.h"

#include <functional>
#include <set>
#include <string>

#include "compiler/poly/isl_util.h"
#include "isa/base/error.h"

namespace tessel::poly {

namespace {

std::string tuple(const char* prefix, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::string(prefix) + std::to_string(i);
  return s + "]";
}

// { [t] -> [s] : t_i = s_i for i < d }
isl::map equal_prefix(isl::ctx ctx, int n, int d) {
  std::string c;
  for (int i = 0; i < d; ++i) c += (i ? " and " : "") + std::string("t") + std::to_string(i) + " = s" + std::to_string(i);
  return isl::map(ctx, "{ " + tuple("t", n) + " -> " + tuple("s", n) + (c.empty() ? "" : " : " + c) + " }");
}

// { [x] : x_d != 0 }
isl::set nonzero_at(isl::ctx ctx, int n, int d) {
  const std::string x = "x" + std::to_string(d);
  return isl::set(ctx, "{ " + tuple("x", n) + " : " + x + " >= 1 or " + x + " <= -1 }");
}

void expr_vars(const kernel::Expr& e, std::set<std::string>& out) {
  if (e.kind == kernel::ExprKind::Var) out.insert(e.name);
  for (const auto& a : e.args) expr_vars(a, out);
}

}  // namespace

Coincidence::Coincidence(const Dependences& deps, const TiledProgram& tiled) {
  isl::ctx ctx = tiled.fixed_context.ctx();
  const isl::union_map all = deps.all().intersect_params(tiled.fixed_context);
  const size_t groups = tiled.group_schedules.size();
  pairs_.resize(groups);
  dims_.resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    dims_[g] = int(tiled.group_kept_dims.at(g).size());
    std::map<std::string, isl::map> sched;  // the group's statements (not markers) -> time
    tiled.group_schedules[g].foreach_map([&](isl::map m) {
      auto it = tiled.statement_group.find(m.domain_tuple_id().name());
      if (it != tiled.statement_group.end() && it->second == int(g)) sched[it->first] = m;
    });
    all.foreach_map([&](isl::map d) {
      auto s = sched.find(d.domain_tuple_id().name());
      auto t = sched.find(d.range_tuple_id().name());
      if (s == sched.end() || t == sched.end()) return;
      isl::map in_time = d.apply_domain(s->second).apply_range(t->second);
      TESSEL_CHECK(int(in_time.domain().tuple_dim()) == dims_[g] && int(in_time.range().tuple_dim()) == dims_[g],
                   "parallelism: group " + std::to_string(g) + "'s time tuples do not have its " + std::to_string(dims_[g]) +
                       " kept dimensions (tile pass)");
      if (!in_time.is_empty()) pairs_[g].push_back({s->first, t->first, in_time});
    });
  }
  (void)ctx;
}

bool Coincidence::carries_none(int group, int dim, const std::set<std::string>& statements) const {
  auto key = std::make_tuple(group, dim, statements);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const int n = dims_.at(group);
  bool none = true;
  for (const Pair& p : pairs_.at(group)) {
    if (!statements.count(p.src) || !statements.count(p.dst)) continue;
    isl::ctx ctx = p.in_time.ctx();
    isl::set deltas = p.in_time.intersect(equal_prefix(ctx, n, dim)).deltas();
    if (!deltas.intersect(nonzero_at(ctx, n, dim)).is_empty()) {
      none = false;
      break;
    }
  }
  memo_[key] = none;
  return none;
}

void mark_buffer_rebinding(kernel::Kernel& k) {
  std::set<std::string> placed_at;  // Let variables some buffer's box is placed at
  for (const auto& b : k.buffers)
    for (const auto& o : b.offset) expr_vars(o, placed_at);
  // returns whether the subtree binds such a variable
  std::function<bool(kernel::Node&)> visit = [&](kernel::Node& n) {
    bool binds = n.kind == kernel::NodeKind::Let && placed_at.count(n.var);
    for (auto& c : n.children) binds |= visit(*c);
    for (auto& c : n.else_children) binds |= visit(*c);
    if (n.kind == kernel::NodeKind::Loop) n.rebinds_buffers = binds;
    return binds;
  };
  if (k.body) visit(*k.body);
}

}  // namespace tessel::poly
