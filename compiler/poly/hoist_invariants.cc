#include "compiler/poly/hoist_invariants.h"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <set>

#include "compiler/ir/expr_cost.h"

namespace tessel::poly {

namespace {

constexpr int64_t kMinReuse = 4;           // uses of each hoisted value, at least
constexpr int kMaxHoistsPerStatement = 4;

using IndexSet = std::set<std::string>;

// Every index `e` uses: in its reads' indices and its index values.
IndexSet indices_of(const ir::Expr& e) {
  IndexSet out;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& x) {
    std::map<std::string, int64_t> idx;
    for (const auto& a : x.indices) a.collect_names(&idx, nullptr);
    if (x.kind == ir::ExprKind::IndexValue) x.affine.collect_names(&idx, nullptr);
    for (const auto& [n, c] : idx) out.insert(n);
    for (const auto& a : x.args) walk(*a);
  };
  walk(e);
  return out;
}

struct StatementContext {
  const ir::Statement& s;
  const std::set<std::string>& written_before;  // tensors earlier statements write
  const std::map<std::string, int64_t>& sizes;
};

// True where `e` reads a tensor an earlier statement writes through exactly the plain indices `idx`.
bool reads_producer_through(const ir::Expr& e, const IndexSet& idx, const StatementContext& c) {
  bool found = false;
  ir::for_each_access(e, [&](const ir::Expr& a) {
    if (!c.written_before.count(a.name) || a.indices.size() != idx.size()) return;
    IndexSet got;
    for (const auto& x : a.indices) {
      auto p = ir::plain_index(x);
      if (!p) return;
      got.insert(*p);
    }
    if (got == idx) found = true;
  });
  return found;
}

bool reads_tensor(const ir::Expr& e, const std::string& name) {
  bool found = false;
  ir::for_each_access(e, [&](const ir::Expr& a) { found = found || a.name == name; });
  return found;
}

// Points of the statement per point of `idx` where `e` may be hoisted over `idx`, else 0.
int64_t hoistable_uses(const ir::Expr& e, const IndexSet& idx, const StatementContext& c) {
  if (e.kind != ir::ExprKind::Apply || !dtype_is_float(e.type) || !ir::has_costly_op(e)) return 0;
  if (reads_tensor(e, c.s.output) || !reads_producer_through(e, idx, c)) return 0;
  int64_t uses = 1;
  for (const auto& v : c.s.domain) {
    const int64_t lo = v.lo.evaluate({}, c.sizes), hi = v.hi.evaluate({}, c.sizes);
    if (idx.count(v.name)) {
      if (lo < 0) return 0;
    } else {
      uses *= std::max<int64_t>(hi - lo, 0);
    }
  }
  for (const auto& n : idx)
    if (!c.s.find_index(n)) return 0;
  return uses >= kMinReuse ? uses : 0;
}

struct Rewriter {
  const StatementContext& c;
  ir::Function& out;
  std::vector<ir::Statement>& before;  // the locals' statements, written before c.s
  std::vector<HoistedValue>& hoisted;
  int count = 0;

  ir::ExprPtr hoist(const ir::ExprPtr& e, const IndexSet& idx, int64_t uses) {
    std::string name;
    for (int k = 0;; ++k) {
      name = fmt::format("{}_inv{}", c.s.output, k);
      if (!out.find_tensor(name)) break;
    }
    ir::Tensor t;
    t.name = name;
    t.dtype = e->type;
    t.kind = ir::TensorKind::Local;
    t.loc = e->loc;
    ir::Statement st;
    st.output = name;
    st.rhs = e;
    st.acc_type = e->type;
    st.loc = c.s.loc;
    auto read = std::make_shared<ir::Expr>();
    read->kind = ir::ExprKind::Access;
    read->type = e->type;
    read->name = name;
    read->loc = e->loc;
    HoistedValue h{c.s.name, name, ir::to_string(*e), {}, uses};
    for (const auto& v : c.s.domain) {  // the statement's loop order
      if (!idx.count(v.name)) continue;
      t.shape.push_back(v.hi);
      ir::IndexVar iv = v;
      iv.is_reduction = false;
      st.domain.push_back(iv);
      st.out_indices.push_back(ir::AffineExpr::index(v.name));
      read->indices.push_back(ir::AffineExpr::index(v.name));
      h.indices.push_back(v.name);
    }
    out.tensors.push_back(std::move(t));
    before.push_back(std::move(st));
    hoisted.push_back(std::move(h));
    ++count;
    return read;
  }

  ir::ExprPtr rewrite(const ir::ExprPtr& e) {
    if (count < kMaxHoistsPerStatement) {
      const IndexSet idx = indices_of(*e);
      if (idx.size() < c.s.domain.size())
        if (const int64_t uses = hoistable_uses(*e, idx, c)) return hoist(e, idx, uses);
    }
    bool changed = false;
    std::vector<ir::ExprPtr> args;
    for (const auto& a : e->args) {
      args.push_back(rewrite(a));
      changed = changed || args.back() != a;
    }
    if (!changed) return e;
    auto copy = std::make_shared<ir::Expr>(*e);
    copy->args = std::move(args);
    return copy;
  }
};

}  // namespace

std::string HoistedValue::to_string() const {
  std::string idx;
  for (const auto& i : indices) idx += (idx.empty() ? "" : ", ") + i;
  return fmt::format("{}: {}({}) = {}, {} uses each", statement, local, idx, expression, uses);
}

std::optional<ir::Function> hoist_invariants(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                             std::vector<HoistedValue>* hoisted) {
  ir::Function out = f;
  out.statements.clear();
  std::vector<HoistedValue> found;
  std::set<std::string> written;
  for (const auto& s : f.statements) {
    std::vector<ir::Statement> before;
    ir::Statement copy = s;
    if (s.rhs) {
      const StatementContext c{s, written, sizes};
      Rewriter r{c, out, before, found};
      copy.rhs = r.rewrite(s.rhs);
    }
    for (auto& b : before) out.statements.push_back(std::move(b));
    out.statements.push_back(std::move(copy));
    written.insert(s.output);
  }
  if (found.empty()) return std::nullopt;
  for (size_t i = 0; i < out.statements.size(); ++i) out.statements[i].name = "S" + std::to_string(i);
  if (hoisted) *hoisted = std::move(found);
  return out;
}

}  // namespace tessel::poly
