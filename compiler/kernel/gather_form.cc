// The one-hot gather form (see gather_form.h).
#include "compiler/kernel/gather_form.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace tessel::kernel {
namespace {

int64_t product(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, v.size()); ++i) n *= v[i];
  return n;
}

// `a` is index `name` plus `constant`, nothing else.
bool is_index(const ir::AffineExpr& a, const std::string& name, int64_t constant) {
  return a.index_coeffs.size() == 1 && a.index_coeffs.begin()->first == name && a.index_coeffs.begin()->second == 1 &&
         a.param_coeffs.empty() && a.divs.empty() && a.constant == constant;
}

using Sizes = std::map<std::string, int64_t>;

// The value of `a` without its `skip` term (coefficient 1) at the kernel's sizes; nullopt where it
// has another index, a division or a parameter without a size.
std::optional<int64_t> value_without(const ir::AffineExpr& a, const std::string& skip, const Sizes& sizes) {
  if (a.has_div()) return std::nullopt;
  for (const auto& [name, coeff] : a.index_coeffs)
    if (name != skip || coeff != 1) return std::nullopt;
  if (!skip.empty() && !a.index_coeffs.count(skip)) return std::nullopt;
  int64_t v = a.constant;
  for (const auto& [name, coeff] : a.param_coeffs) {
    auto it = sizes.find(name);
    if (it == sizes.end()) return std::nullopt;
    v += coeff * it->second;
  }
  return v;
}

// `e` is index r plus an integer (an index value, or one plus or minus an integer constant or a
// size): the integer, or nullopt.
std::optional<int64_t> offset_of(const ir::Expr& e, const std::string& r, const Sizes& sizes) {
  if (e.kind == ir::ExprKind::IndexValue) return value_without(e.affine, r, sizes);
  if (e.kind != ir::ExprKind::Apply || (e.op != ir::Op::Add && e.op != ir::Op::Sub) || e.args.size() != 2) return std::nullopt;
  const ir::Expr& c = *e.args[1];
  std::optional<int64_t> v;
  if (c.kind == ir::ExprKind::Constant && c.value == double(int64_t(c.value))) v = int64_t(c.value);
  if (c.kind == ir::ExprKind::SizeParam && sizes.count(c.name)) v = sizes.at(c.name);
  const std::optional<int64_t> x = offset_of(*e.args[0], r, sizes);
  if (!x || !v) return std::nullopt;
  return e.op == ir::Op::Add ? *x + *v : *x - *v;
}

// `e` is I(..) == r + c (either side): the access to I.
const ir::Expr* index_test(const ir::Expr& e, const std::string& r, int64_t c, const Sizes& sizes) {
  if (e.kind != ir::ExprKind::Apply || e.op != ir::Op::Eq) return nullptr;
  const ir::Expr* a = e.args[0].get();
  const ir::Expr* b = e.args[1].get();
  if (b->kind == ir::ExprKind::Access) std::swap(a, b);
  if (a->kind != ir::ExprKind::Access || offset_of(*b, r, sizes) != c) return nullptr;
  return a;
}

// The index's range is 0:extent at the kernel's sizes.
bool spans(const ir::IndexVar* v, int64_t extent, const Sizes& sizes) {
  return v && value_without(v->lo, "", sizes) == 0 && value_without(v->hi, "", sizes) == extent;
}

// The condition: I(p..) == r0, or I(p..) == r0 || I(p..) == r0 - D. The access to I, or null.
const ir::Expr* index_condition(const ir::Expr& cond, const std::string& r, int64_t D, bool& wraps, const Sizes& sizes) {
  wraps = false;
  if (const ir::Expr* a = index_test(cond, r, 0, sizes)) return a;
  if (cond.kind != ir::ExprKind::Apply || cond.op != ir::Op::Or) return nullptr;
  const ir::Expr* a = index_test(*cond.args[0], r, 0, sizes);
  const ir::Expr* b = index_test(*cond.args[1], r, -D, sizes);
  if (!a || !b || a->name != b->name || a->indices != b->indices) return nullptr;
  wraps = true;
  return a;
}

}  // namespace

// Y(p.., q..) +=! select(I(p..) == r0 [|| I(p..) == r0 - D], X(r0, q..), 0): "" or why not.
std::string why_not_gather_form(const Kernel& k, GatherForm& g) {
  const ir::Function* f = k.function;
  if (!f || f->statements.size() != 1) return "not one statement";
  const ir::Statement& s = f->statements[0];
  const ir::Expr& e = *s.rhs;
  if (s.reduction != ir::Reduction::Sum || !s.init || e.kind != ir::ExprKind::Apply || e.op != ir::Op::Select)
    return "not a sum of select(index test, table row, 0)";
  std::vector<const ir::IndexVar*> reductions;
  for (const ir::IndexVar& v : s.domain)
    if (v.is_reduction) reductions.push_back(&v);
  const ir::Expr& x = *e.args[1];
  if (reductions.size() != 1 || e.args[2]->kind != ir::ExprKind::Constant || e.args[2]->value != 0 ||
      x.kind != ir::ExprKind::Access || x.indices.empty())
    return "not a sum over one index of select(index test, table row, 0)";
  const std::string r = reductions[0]->name;
  g.X = k.find_tensor(x.name);
  g.Y = k.find_tensor(s.output);
  if (!g.X || !g.Y || g.X == g.Y || g.X->shape.empty() || !is_index(x.indices[0], r, 0)) return "the table is not read at row r0";
  g.D = g.X->shape[0];
  if (!spans(reductions[0], g.D, k.sizes)) return "the sum does not run over the table's rows";
  const ir::Expr* ia = index_condition(*e.args[0], r, g.D, g.wraps, k.sizes);
  if (!ia) return "the condition is not I(..) == r0 (or I(..) == r0 || I(..) == r0 - D)";
  g.I = k.find_tensor(ia->name);
  if (!g.I || g.I->dtype != DType::I32 || g.I == g.Y) return "the indices are not an i32 tensor";
  // Y's indices: I's indices, then the table's after r0, each a plain index over Y's whole extent.
  std::vector<ir::AffineExpr> want = ia->indices;
  want.insert(want.end(), x.indices.begin() + 1, x.indices.end());
  if (s.out_indices != want || g.Y->shape.size() != want.size() || g.I->shape.size() != ia->indices.size())
    return "Y is not indexed by I's indices then the table's";
  std::set<std::string> seen;
  for (size_t d = 0; d < want.size(); ++d) {
    const auto& c = want[d].index_coeffs;
    if (c.size() != 1 || !is_index(want[d], c.begin()->first, 0) || !seen.insert(c.begin()->first).second ||
        !spans(s.find_index(c.begin()->first), g.Y->shape[d], k.sizes))
      return "Y's indices are not distinct plain indices over its extents";
  }
  const size_t a = ia->indices.size();
  for (size_t d = 0; d < a; ++d)
    if (g.I->shape[d] != g.Y->shape[d]) return "I's shape is not Y's leading shape";
  for (size_t d = 1; d < g.X->shape.size(); ++d)
    if (g.X->shape[d] != g.Y->shape[a + d - 1]) return "the table's row shape is not Y's trailing shape";
  if (g.X->dtype != g.Y->dtype || s.acc_type != g.Y->dtype ||
      (g.X->dtype != DType::F16 && g.X->dtype != DType::F32 && g.X->dtype != DType::I32))
    return "not an f16, f32 or i32 table gathered into its own type";
  g.rows = product(g.Y->shape, 0, a);
  g.row_bytes = product(g.X->shape, 1) * dtype_bytes(g.X->dtype);
  if (g.rows <= 0 || g.D <= 0 || g.row_bytes <= 0) return "an empty table or output";
  return "";
}

}  // namespace tessel::kernel
