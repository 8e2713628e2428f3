#include "compiler/poly/intrinsics.h"

namespace tessel::poly {

namespace {

// The single index name of a pure index access dimension ("m"), or "" when it is not one.
std::string pure_index(const ir::AffineExpr& e) {
  if (e.index_coeffs.size() != 1 || !e.param_coeffs.empty() || e.constant != 0) return "";
  const auto& [name, coeff] = *e.index_coeffs.begin();
  return coeff == 1 ? name : "";
}

const ir::Expr* strip_cast(const ir::Expr* e) {
  while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast) e = e->args[0].get();
  return e;
}

MatmulMatch fail(const std::string& why) {
  MatmulMatch m;
  m.why_not = why;
  return m;
}

}  // namespace

MatmulMatch match_matmul(const ir::Statement& s, const ir::Function& f, const isa::Hierarchy& h) {
  if (s.reduction != ir::Reduction::Sum) return fail("not a sum reduction");
  if (s.rhs->kind != ir::ExprKind::Apply || s.rhs->op != ir::Op::Mul) return fail("right-hand side is not a product");
  const ir::Expr* x = strip_cast(s.rhs->args[0].get());
  const ir::Expr* y = strip_cast(s.rhs->args[1].get());
  if (x->kind != ir::ExprKind::Access || y->kind != ir::ExprKind::Access)
    return fail("factors are not tensor reads");
  std::vector<std::string> red;
  for (const auto& v : s.domain)
    if (v.is_reduction) red.push_back(v.name);
  if (red.size() != 1) return fail("needs exactly one reduction axis (img2col views are not built yet)");
  if (s.out_indices.size() != 2) return fail("output is not two-dimensional");
  MatmulMatch r;
  r.m = pure_index(s.out_indices[0]);
  r.n = pure_index(s.out_indices[1]);
  r.k = red[0];
  if (r.m.empty() || r.n.empty() || r.m == r.n) return fail("output indices are not two distinct axes");
  auto idx = [](const ir::Expr* a) {
    std::vector<std::string> v;
    for (const auto& e : a->indices) v.push_back(pure_index(e));
    return v;
  };
  std::vector<std::string> xi = idx(x), yi = idx(y);
  if (xi.size() != 2 || yi.size() != 2) return fail("inputs are not two-dimensional");
  auto is = [](const std::vector<std::string>& v, const std::string& a, const std::string& b) {
    return v[0] == a && v[1] == b;
  };
  auto has = [&](const std::vector<std::string>& v, const std::string& a, const std::string& b) {
    return is(v, a, b) || is(v, b, a);
  };
  if (has(yi, r.m, r.k) && has(xi, r.k, r.n)) {
    std::swap(x, y);
    std::swap(xi, yi);
  }
  if (!has(xi, r.m, r.k) || !has(yi, r.k, r.n)) return fail("inputs are not indexed by (m, k) and (k, n)");
  r.a = x->name;
  r.b = y->name;
  r.c = s.output;
  r.a_layout = is(xi, r.m, r.k) ? kernel::Layout::RowMajor : kernel::Layout::ColMajor;
  r.b_layout = is(yi, r.k, r.n) ? kernel::Layout::RowMajor : kernel::Layout::ColMajor;
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
