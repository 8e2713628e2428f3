#include "compiler/poly/collapse_indices.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace tessel::poly {

namespace {

// One tensor access of a statement: the written tensor (index 0) or a read.
struct Access {
  std::string tensor;
  std::vector<std::optional<std::string>> plain;  // the index at each position when it is plain
};

struct StatementView {
  std::vector<Access> accesses;
  std::set<std::string> impure;  // indices used in a non-plain position or as a value
  std::map<std::string, std::pair<int64_t, int64_t>> range;  // index -> (lo, extent) under sizes
  std::map<std::string, bool> reduced;
};

StatementView view_of(const ir::Statement& s, const std::map<std::string, int64_t>& sizes) {
  StatementView v;
  auto add = [&](const std::string& tensor, const std::vector<ir::AffineExpr>& indices) {
    Access a{tensor, {}};
    for (const auto& e : indices) {
      a.plain.push_back(ir::plain_index(e));
      if (!a.plain.back()) {
        std::map<std::string, int64_t> idx, params;
        e.collect_names(&idx, &params);
        for (const auto& [n, c] : idx) v.impure.insert(n);
      }
    }
    v.accesses.push_back(std::move(a));
  };
  add(s.output, s.out_indices);
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    if (e.kind == ir::ExprKind::Access) add(e.name, e.indices);
    if (e.kind == ir::ExprKind::IndexValue) {
      std::map<std::string, int64_t> idx, params;
      e.affine.collect_names(&idx, &params);
      for (const auto& [n, c] : idx) v.impure.insert(n);
    }
    for (const auto& a : e.args) walk(*a);
  };
  if (s.rhs) walk(*s.rhs);
  for (const auto& iv : s.domain) {
    const int64_t lo = iv.lo.evaluate({}, sizes), hi = iv.hi.evaluate({}, sizes);
    v.range[iv.name] = {lo, hi - lo};
    v.reduced[iv.name] = iv.is_reduction;
  }
  return v;
}

using TensorPair = std::pair<std::string, int>;                      // (tensor, d): dimensions d, d+1
using StatementPair = std::tuple<size_t, std::string, std::string>;  // (statement, i, j)

class Collapser {
 public:
  Collapser(const ir::Function& f, const std::map<std::string, int64_t>& sizes) : f_(f), sizes_(sizes) {
    for (const auto& t : f_.tensors) {
      std::vector<int64_t> dims;
      for (const auto& e : t.shape) dims.push_back(e.evaluate({}, sizes_));
      dims_[t.name] = dims;
    }
    for (const auto& s : f_.statements) views_.push_back(view_of(s, sizes_));
  }

  // The first component that collapses (its tensor pairs and statement pairs), if any.
  std::optional<std::pair<std::set<TensorPair>, std::set<StatementPair>>> find() {
    std::set<TensorPair> dead;
    for (const auto& t : f_.tensors)
      for (int d = 0; d + 1 < int(t.shape.size()); ++d) {
        if (dead.count({t.name, d})) continue;
        std::set<TensorPair> tensors;
        std::set<StatementPair> pairs;
        const bool ok = grow({t.name, d}, &tensors, &pairs);
        if (ok) return std::make_pair(tensors, pairs);
        dead.insert(tensors.begin(), tensors.end());
      }
    return std::nullopt;
  }

 private:
  // Every access to T has two different plain indices at d, d+1 whose ranges start at 0, cover
  // the dimensions and agree on being reduced.
  bool tensor_pair_ok(const TensorPair& tp) const {
    const auto& dims = dims_.at(tp.first);
    for (size_t s = 0; s < views_.size(); ++s)
      for (const auto& a : views_[s].accesses) {
        if (a.tensor != tp.first) continue;
        const auto& i = a.plain[tp.second];
        const auto& j = a.plain[tp.second + 1];
        if (!i || !j || *i == *j) return false;
        const StatementView& v = views_[s];
        if (v.impure.count(*i) || v.impure.count(*j) || !v.range.count(*i) || !v.range.count(*j)) return false;
        if (v.range.at(*i) != std::make_pair(int64_t(0), dims[tp.second]) ||
            v.range.at(*j) != std::make_pair(int64_t(0), dims[tp.second + 1]))
          return false;
        if (v.reduced.at(*i) != v.reduced.at(*j)) return false;
      }
    return true;
  }

  // Every occurrence of i is followed by j, every occurrence of j follows i.
  bool statement_pair_ok(const StatementPair& sp) const {
    const auto& [s, i, j] = sp;
    const StatementView& v = views_[s];
    if (v.impure.count(i) || v.impure.count(j)) return false;
    for (const auto& a : v.accesses)
      for (size_t p = 0; p < a.plain.size(); ++p) {
        if (a.plain[p] == i && (p + 1 >= a.plain.size() || a.plain[p + 1] != j)) return false;
        if (a.plain[p] == j && (p == 0 || a.plain[p - 1] != i)) return false;
      }
    return true;
  }

  bool grow(const TensorPair& start, std::set<TensorPair>* tensors, std::set<StatementPair>* pairs) const {
    std::vector<TensorPair> tensor_work = {start};
    std::vector<StatementPair> pair_work;
    tensors->insert(start);
    bool ok = true;
    while (!tensor_work.empty() || !pair_work.empty()) {
      if (!tensor_work.empty()) {
        const TensorPair tp = tensor_work.back();
        tensor_work.pop_back();
        if (!tensor_pair_ok(tp)) ok = false;
        // overlapping pairs of one tensor cannot both collapse
        if (tensors->count({tp.first, tp.second - 1}) || tensors->count({tp.first, tp.second + 1})) ok = false;
        for (size_t s = 0; s < views_.size(); ++s)
          for (const auto& a : views_[s].accesses) {
            if (a.tensor != tp.first || !a.plain[tp.second] || !a.plain[tp.second + 1]) continue;
            const StatementPair sp{s, *a.plain[tp.second], *a.plain[tp.second + 1]};
            if (pairs->insert(sp).second) pair_work.push_back(sp);
          }
        continue;
      }
      const StatementPair sp = pair_work.back();
      pair_work.pop_back();
      if (!statement_pair_ok(sp)) {
        ok = false;
        continue;
      }
      for (const auto& a : views_[std::get<0>(sp)].accesses)
        for (size_t p = 0; p + 1 < a.plain.size(); ++p)
          if (a.plain[p] == std::get<1>(sp)) {
            const TensorPair tp{a.tensor, int(p)};
            if (tensors->insert(tp).second) tensor_work.push_back(tp);
          }
    }
    return ok;
  }

  const ir::Function& f_;
  const std::map<std::string, int64_t>& sizes_;
  std::map<std::string, std::vector<int64_t>> dims_;
  std::vector<StatementView> views_;
};

std::vector<ir::AffineExpr> merged(const std::vector<ir::AffineExpr>& indices, const std::string& i, const std::string& by) {
  std::vector<ir::AffineExpr> out;
  for (size_t p = 0; p < indices.size(); ++p) {
    if (ir::plain_index(indices[p]) == i) {
      out.push_back(ir::AffineExpr::index(by));
      ++p;  // j, the next position, is part of the collapsed index
      continue;
    }
    out.push_back(indices[p]);
  }
  return out;
}

ir::ExprPtr merged(const ir::ExprPtr& e, const std::string& i, const std::string& by) {
  auto x = std::make_shared<ir::Expr>(*e);
  if (x->kind == ir::ExprKind::Access) x->indices = merged(x->indices, i, by);
  for (auto& a : x->args) a = merged(a, i, by);
  return x;
}

std::string fresh(const std::string& base, const std::set<std::string>& taken) {
  std::string n = base;
  for (int k = 2; taken.count(n); ++k) n = base + std::to_string(k);
  return n;
}

// Applies one component to `f` and describes it.
IndexCollapse apply(ir::Function& f, const std::map<std::string, int64_t>& sizes, const std::set<TensorPair>& tensors,
                    const std::set<StatementPair>& pairs, std::map<std::string, std::vector<std::string>>* removed) {
  IndexCollapse step;
  // from the last pair of a tensor to its first, so an erased dimension does not shift the next
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    const auto& [name, d] = *it;
    for (auto& t : f.tensors) {
      if (t.name != name) continue;
      const int64_t extent = t.shape[d].evaluate({}, sizes) * t.shape[d + 1].evaluate({}, sizes);
      t.shape[d] = ir::AffineExpr::constant_of(extent);
      t.shape.erase(t.shape.begin() + d + 1);
    }
    step.tensors.insert(step.tensors.begin(), name + "[" + std::to_string(d) + ":" + std::to_string(d + 2) + "]");
  }
  for (const auto& [s, i, j] : pairs) {
    ir::Statement& st = f.statements[s];
    std::set<std::string> taken(f.params.begin(), f.params.end());
    for (const auto& iv : st.domain) taken.insert(iv.name);
    const std::string name = fresh(i + "_" + j, taken);
    int64_t extent = 1;
    for (const auto& iv : st.domain)
      if (iv.name == i || iv.name == j) extent *= iv.hi.evaluate({}, sizes) - iv.lo.evaluate({}, sizes);
    std::vector<ir::IndexVar> domain;
    for (const auto& iv : st.domain) {
      if (iv.name == j) continue;
      if (iv.name != i) {
        domain.push_back(iv);
        continue;
      }
      ir::IndexVar c = iv;
      c.name = name;
      c.lo = ir::AffineExpr::constant_of(0);
      c.hi = ir::AffineExpr::constant_of(extent);
      domain.push_back(c);
    }
    st.domain = std::move(domain);
    st.out_indices = merged(st.out_indices, i, name);
    if (st.rhs) st.rhs = merged(st.rhs, i, name);
    (*removed)[st.name].push_back(i);
    (*removed)[st.name].push_back(j);
    step.statements.push_back(st.name + ": " + i + ", " + j + " -> " + name);
  }
  return step;
}

}  // namespace

std::string IndexCollapse::to_string() const {
  std::string s;
  for (const auto& x : statements) s += (s.empty() ? "" : "; ") + x;
  s += " (";
  for (size_t k = 0; k < tensors.size(); ++k) s += (k ? ", " : "") + tensors[k];
  return s + " merged)";
}

std::optional<CollapsedFunction> collapse_indices(const ir::Function& f, const std::map<std::string, int64_t>& sizes) {
  CollapsedFunction out{f, {}, {}, {}};
  for (const auto& t : f.tensors) {
    std::vector<int64_t> dims;
    for (const auto& e : t.shape) dims.push_back(e.evaluate({}, sizes));
    out.original_shapes[t.name] = dims;
  }
  // each step removes one dimension of at least one tensor, so this ends
  for (;;) {
    Collapser c(out.function, sizes);
    const auto component = c.find();
    if (!component) break;
    out.steps.push_back(apply(out.function, sizes, component->first, component->second, &out.removed_indices));
  }
  if (out.steps.empty()) return std::nullopt;
  for (auto it = out.original_shapes.begin(); it != out.original_shapes.end();) {
    const ir::Tensor* t = out.function.find_tensor(it->first);
    if (t && t->shape.size() == it->second.size()) {
      it = out.original_shapes.erase(it);
      continue;
    }
    std::vector<int64_t> dims;
    for (const auto& e : t->shape) dims.push_back(e.evaluate({}, sizes));
    out.collapsed_shapes[it->first] = dims;
    ++it;
  }
  // an index of the input that a later step merged again is still removed; a name a step created
  // and a later step removed is not the input's
  std::map<std::string, std::vector<std::string>> input_removed;
  for (const auto& s : f.statements)
    for (const auto& iv : s.domain) {
      const auto& r = out.removed_indices[s.name];
      if (std::find(r.begin(), r.end(), iv.name) != r.end()) input_removed[s.name].push_back(iv.name);
    }
  out.removed_indices = input_removed;
  return out;
}

}  // namespace tessel::poly
