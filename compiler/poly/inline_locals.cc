#include "compiler/poly/inline_locals.h"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <set>

#include "compiler/ir/expr_cost.h"

namespace tessel::poly {

namespace {

constexpr int kMaxUses = 4;           // reads of one local, in all its readers
constexpr int kMaxInlinedSize = 96;   // nodes of a reader's value after inlining

using Renaming = std::map<std::string, std::string>;

ir::AffineExpr renamed(const ir::AffineExpr& a, const Renaming& r) {
  ir::AffineExpr out = a;
  out.index_coeffs.clear();
  for (const auto& [n, k] : a.index_coeffs) out.index_coeffs[r.count(n) ? r.at(n) : n] += k;
  std::erase_if(out.index_coeffs, [](const auto& p) { return p.second == 0; });
  for (auto& d : out.divs) d.numerator = renamed(d.numerator, r);
  return out;
}

ir::ExprPtr renamed(const ir::ExprPtr& e, const Renaming& r) {
  auto out = std::make_shared<ir::Expr>(*e);
  for (auto& i : out->indices) i = renamed(i, r);
  if (out->kind == ir::ExprKind::IndexValue) out->affine = renamed(out->affine, r);
  for (auto& a : out->args) a = renamed(a, r);
  return out;
}

// `e` with every read of `local` replaced by `value` at the read's indices (value's indices `from`).
ir::ExprPtr substituted(const ir::ExprPtr& e, const std::string& local, const ir::ExprPtr& value,
                        const std::vector<std::string>& from) {
  if (e->kind == ir::ExprKind::Access && e->name == local) {
    Renaming r;
    for (size_t d = 0; d < from.size(); ++d) r[from[d]] = *ir::plain_index(e->indices[d]);
    return renamed(value, r);
  }
  bool changed = false;
  std::vector<ir::ExprPtr> args;
  for (const auto& a : e->args) {
    args.push_back(substituted(a, local, value, from));
    changed = changed || args.back() != a;
  }
  if (!changed) return e;
  auto copy = std::make_shared<ir::Expr>(*e);
  copy->args = std::move(args);
  return copy;
}

std::set<std::string> tensors_read(const ir::Expr& e) {
  std::set<std::string> out;
  ir::for_each_access(e, [&](const ir::Expr& a) { out.insert(a.name); });
  return out;
}

// The writer's output indices where `s` writes its whole tensor `t` elementwise with a value of its
// type and no costly operation; else nothing.
std::optional<std::vector<std::string>> pointwise_writer(const ir::Statement& s, const ir::Tensor& t,
                                                         const std::map<std::string, int64_t>& sizes) {
  if (s.reduction != ir::Reduction::None || !s.rhs || s.rhs->type != t.dtype || ir::has_costly_op(*s.rhs) ||
      s.out_indices.size() != t.shape.size() || s.domain.size() != s.out_indices.size())
    return std::nullopt;
  std::vector<std::string> idx;
  for (size_t d = 0; d < s.out_indices.size(); ++d) {
    auto p = ir::plain_index(s.out_indices[d]);
    const ir::IndexVar* v = p ? s.find_index(*p) : nullptr;
    if (!v || std::find(idx.begin(), idx.end(), *p) != idx.end()) return std::nullopt;
    if (v->lo.evaluate({}, sizes) != 0 || v->hi.evaluate({}, sizes) != t.shape[d].evaluate({}, sizes)) return std::nullopt;
    idx.push_back(*p);
  }
  return idx;
}

// Reads of `local` in `s`, or -1 where one is not at plain indices of `s` within the tensor's shape.
int pointwise_reads(const ir::Statement& s, const ir::Tensor& t, const std::map<std::string, int64_t>& sizes) {
  int n = 0;
  bool ok = true;
  ir::for_each_access(*s.rhs, [&](const ir::Expr& a) {
    if (a.name != t.name) return;
    ++n;
    for (size_t d = 0; d < a.indices.size(); ++d) {
      auto p = ir::plain_index(a.indices[d]);
      const ir::IndexVar* v = p ? s.find_index(*p) : nullptr;
      if (!v || v->lo.evaluate({}, sizes) < 0 || v->hi.evaluate({}, sizes) > t.shape[d].evaluate({}, sizes)) ok = false;
    }
  });
  return ok ? n : -1;
}

// Inlines one local of `f` (the first that qualifies); false where none does.
bool inline_one(ir::Function& f, const std::map<std::string, int64_t>& sizes, std::vector<InlinedLocal>& done) {
  for (const auto& t : f.tensors) {
    if (t.kind != ir::TensorKind::Local) continue;
    std::vector<size_t> writers, readers;
    for (size_t i = 0; i < f.statements.size(); ++i) {
      const auto& s = f.statements[i];
      if (s.output == t.name) writers.push_back(i);
      if (s.rhs && tensors_read(*s.rhs).count(t.name)) readers.push_back(i);
    }
    if (writers.size() != 1 || readers.empty() || readers.front() <= writers.front()) continue;
    const ir::Statement& w = f.statements[writers.front()];
    const auto idx = pointwise_writer(w, t, sizes);
    if (!idx) continue;
    int uses = 0;
    bool ok = true;
    const std::set<std::string> inputs = tensors_read(*w.rhs);
    for (size_t r : readers) {
      const int n = pointwise_reads(f.statements[r], t, sizes);
      ok = ok && n > 0 && f.statements[r].output != t.name &&
           ir::expr_size(*f.statements[r].rhs) + n * ir::expr_size(*w.rhs) <= kMaxInlinedSize;
      uses += std::max(n, 0);
      for (size_t between = writers.front() + 1; between < r; ++between)
        ok = ok && !inputs.count(f.statements[between].output);
    }
    if (!ok || uses > kMaxUses) continue;
    InlinedLocal rec{t.name, w.name, {}, uses};
    for (size_t r : readers) {
      f.statements[r].rhs = substituted(f.statements[r].rhs, t.name, w.rhs, *idx);
      rec.readers.push_back(f.statements[r].name);
    }
    const std::string name = t.name;
    f.statements.erase(f.statements.begin() + writers.front());
    std::erase_if(f.tensors, [&](const ir::Tensor& x) { return x.name == name; });
    done.push_back(std::move(rec));
    return true;
  }
  return false;
}

}  // namespace

std::string InlinedLocal::to_string() const {
  std::string r;
  for (const auto& x : readers) r += (r.empty() ? "" : ", ") + x;
  return fmt::format("{} ({}): inlined into {} ({} read{})", local, statement, r, reads, reads == 1 ? "" : "s");
}

std::optional<ir::Function> inline_locals(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                          std::vector<InlinedLocal>* inlined) {
  ir::Function out = f;
  std::vector<InlinedLocal> done;
  while (inline_one(out, sizes, done)) {
  }
  if (done.empty()) return std::nullopt;
  for (size_t i = 0; i < out.statements.size(); ++i) out.statements[i].name = "S" + std::to_string(i);
  if (inlined) *inlined = std::move(done);
  return out;
}

}  // namespace tessel::poly
