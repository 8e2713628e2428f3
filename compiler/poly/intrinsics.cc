#include "compiler/poly/intrinsics.h"

#include <array>

#include "compiler/poly/contraction.h"

namespace tessel::poly {

namespace {

MatmulMatch fail(const std::string& why) {
  MatmulMatch m;
  m.why_not = why;
  return m;
}

// Dimension of `a` indexed by `axis` (coefficient 1); -1 if none, -2 if several or another coefficient.
int dim_of(const ir::Expr* a, const std::string& axis) {
  int found = -1;
  for (size_t d = 0; d < a->indices.size(); ++d) {
    auto it = a->indices[d].index_coeffs.find(axis);
    if (it == a->indices[d].index_coeffs.end()) continue;
    if (it->second != 1 || found != -1) return -2;
    found = int(d);
  }
  return found;
}

// Is `a` a 2-D view (row, col) of its tensor, each one dimension indexed with coefficient 1? Sets
// the layout and r.img2col when a view dimension also depends on another axis (e.g. q + s).
bool views(MatmulMatch& r, const ir::Expr* a, const std::string& row, const std::string& col, kernel::Layout& layout) {
  int dr = dim_of(a, row), dc = dim_of(a, col);
  if (dr < 0 || dc < 0 || dr == dc) return false;
  for (int d : {dr, dc}) {
    for (const auto& [name, c] : a->indices[d].index_coeffs)
      if ((name == r.m || name == r.n || name == r.k) && name != (d == dr ? row : col)) return false;
    if (a->indices[d].index_coeffs.size() > 1) r.img2col = true;
  }
  layout = dr < dc ? kernel::Layout::RowMajor : kernel::Layout::ColMajor;
  return true;
}

}  // namespace

MatmulMatch match_matmul(const ir::Statement& s, const ir::Function& f, const isa::Hierarchy& h) {
  std::string why;
  const std::optional<Product> product = product_of_accesses(s, &why);
  if (!product) return fail(why);
  std::vector<std::string> red;
  for (const auto& v : s.domain)
    if (v.is_reduction) red.push_back(v.name);
  if (red.empty()) return fail("no reduction axis");
  if (s.out_indices.size() < 2) return fail("output has fewer than two dimensions");
  // Candidate (m, n, k): the last two output axes and the last reduction axis first, then any
  // other pair of output axes and reduction axis (NCHW convolutions: m = output channel).
  std::vector<std::string> out_axes;
  for (const auto& e : s.out_indices)
    if (auto v = plain_index(e)) out_axes.push_back(*v);
  if (out_axes.size() < 2) return fail("output has fewer than two pure index dimensions");
  std::vector<std::array<std::string, 3>> candidates = {
      {out_axes[out_axes.size() - 2], out_axes.back(), red.back()}};
  for (int j = int(out_axes.size()) - 1; j >= 0; --j)
    for (int i = int(out_axes.size()) - 1; i >= 0; --i)
      for (int q = int(red.size()) - 1; q >= 0; --q)
        if (i != j) candidates.push_back({out_axes[i], out_axes[j], red[q]});
  MatmulMatch r;
  const ir::Expr *x = nullptr, *y = nullptr;
  bool found = false;
  for (const auto& cand : candidates) {
    r = MatmulMatch{};
    r.m = cand[0];
    r.n = cand[1];
    r.k = cand[2];
    // A is the factor reading m (and not n), B the one reading n (and not m); both read k
    x = product->left;
    y = product->right;
    if (classify_index(*x, *y, r.m) != IndexRole::M) std::swap(x, y);
    if (classify_index(*x, *y, r.m) != IndexRole::M || classify_index(*x, *y, r.n) != IndexRole::N ||
        classify_index(*x, *y, r.k) != IndexRole::Shared)
      continue;
    if (views(r, x, r.m, r.k, r.a_layout) && views(r, y, r.k, r.n, r.b_layout)) {
      found = true;
      break;
    }
  }
  if (!found)
    return fail("inputs are not (m, k) and (k, n) views for any choice of axes (tried m = " + candidates[0][0] +
                ", n = " + candidates[0][1] + ", k = " + candidates[0][2] + " first)");
  r.a = x->name;
  r.b = y->name;
  r.c = s.output;
  r.a_access = x->indices;
  r.b_access = y->indices;
  r.c_access = s.out_indices;
  for (const auto& v : s.domain)
    if (v.name != r.m && v.name != r.n && v.name != r.k) r.other_axes.push_back(v.name);
  const ir::Tensor* ta = f.find_tensor(r.a);
  const ir::Tensor* tb = f.find_tensor(r.b);
  if (!ta || !tb || ta->dtype != tb->dtype) return fail("inputs have different dtypes");
  r.in_type = ta->dtype;
  r.acc_type = s.acc_type;
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const auto& sh : u->shapes)
      if (sh.a == r.in_type && sh.acc == r.acc_type && !r.unit_m) {
        r.unit_m = sh.m;
        r.unit_n = sh.n;
        r.unit_k = sh.k;
      }
  if (!r.unit_m)
    return fail(std::string("the target's matrix unit has no ") + std::string(dtype_name(r.in_type)) + "->" +
                std::string(dtype_name(r.acc_type)) + " shape");
  r.matched = true;
  return r;
}

}  // namespace tessel::poly
