#include "compiler/poly/fold_padding.h"

#include <functional>

#include "compiler/poly/scop.h"

namespace tessel::poly {

namespace {

// An affine value expression as isl text, or nullopt. A value division `a / d` by a positive
// integer constant truncates toward zero (compiler/README.md) where isl's floor rounds down: the
// two agree where a >= 0, so each numerator is appended to `numerators` for as_padding to prove
// non-negative on the statement's domain (`(H - 1) / 4 + 1`, a stage's size in a network).
std::optional<std::string> affine_text(const ir::Expr& e, std::vector<std::string>& numerators) {
  auto integer = [](const ir::Expr& c) {
    return c.kind == ir::ExprKind::Constant && c.value == double(int64_t(c.value));
  };
  switch (e.kind) {
    case ir::ExprKind::Constant:
      if (!integer(e)) return std::nullopt;
      return std::to_string(int64_t(e.value));
    case ir::ExprKind::SizeParam: return e.name;
    case ir::ExprKind::IndexValue: return "(" + e.affine.to_string() + ")";
    case ir::ExprKind::Apply: {
      if (e.op == ir::Op::Cast) return affine_text(*e.args[0], numerators);
      if (e.op == ir::Op::Div) {
        if (!integer(*e.args[1]) || e.args[1]->value <= 0) return std::nullopt;
        auto a = affine_text(*e.args[0], numerators);
        if (!a) return std::nullopt;
        numerators.push_back(*a);
        return "floor(" + *a + "/" + std::to_string(int64_t(e.args[1]->value)) + ")";
      }
      if (e.op == ir::Op::Mul) {
        const bool left = integer(*e.args[0]);
        if (!left && !integer(*e.args[1])) return std::nullopt;
        auto a = affine_text(*e.args[left ? 1 : 0], numerators);
        if (!a) return std::nullopt;
        return "(" + std::to_string(int64_t(e.args[left ? 0 : 1]->value)) + "*" + *a + ")";
      }
      if (e.op != ir::Op::Add && e.op != ir::Op::Sub) return std::nullopt;
      auto a = affine_text(*e.args[0], numerators), b = affine_text(*e.args[1], numerators);
      if (!a || !b) return std::nullopt;
      return "(" + *a + (e.op == ir::Op::Add ? " + " : " - ") + *b + ")";
    }
    default: return std::nullopt;
  }
}

// A condition of comparisons joined by && as isl constraints, or nullopt.
std::optional<std::string> condition_text(const ir::Expr& e, std::vector<std::string>& numerators) {
  if (e.kind != ir::ExprKind::Apply) return std::nullopt;
  if (e.op == ir::Op::And) {
    auto a = condition_text(*e.args[0], numerators), b = condition_text(*e.args[1], numerators);
    if (!a || !b) return std::nullopt;
    return *a + " and " + *b;
  }
  const char* op = e.op == ir::Op::Lt ? "<" : e.op == ir::Op::Le ? "<=" : e.op == ir::Op::Gt ? ">" : e.op == ir::Op::Ge ? ">=" : e.op == ir::Op::Eq ? "=" : nullptr;
  if (!op) return std::nullopt;
  auto a = affine_text(*e.args[0], numerators), b = affine_text(*e.args[1], numerators);
  if (!a || !b) return std::nullopt;
  return *a + " " + op + " " + *b;
}

bool is_zero(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::Constant) return e.value == 0;
  return e.kind == ir::ExprKind::Apply && e.op == ir::Op::Cast && is_zero(*e.args[0]);
}

struct Padding {
  std::string local, source;
  std::vector<int64_t> shift;  // source index = local index - shift
};

std::optional<Padding> as_padding(isl::ctx ctx, const ir::Function& f, const ir::Statement& s) {
  const ir::Tensor* out = f.find_tensor(s.output);
  if (!out || out->kind != ir::TensorKind::Local || s.reduction != ir::Reduction::None) return std::nullopt;
  // the copy is the tensor's value only when no other statement writes it (`T(i) += ...` after it)
  for (const auto& other : f.statements)
    if (&other != &s && other.output == s.output) return std::nullopt;
  const ir::Expr& r = *s.rhs;
  if (r.kind != ir::ExprKind::Apply || r.op != ir::Op::Select || !is_zero(*r.args[2])) return std::nullopt;
  const ir::Expr& x = *r.args[1];
  if (x.kind != ir::ExprKind::Access) return std::nullopt;
  const ir::Tensor* src = f.find_tensor(x.name);
  if (!src || src->dtype != out->dtype || x.indices.size() != s.out_indices.size()) return std::nullopt;
  Padding p{s.output, x.name, {}};
  std::vector<std::string> dims;
  std::string inside;
  for (size_t d = 0; d < x.indices.size(); ++d) {
    const ir::AffineExpr& o = s.out_indices[d];
    if (o.index_coeffs.size() != 1 || o.index_coeffs.begin()->second != 1 || o.constant || !o.param_coeffs.empty() ||
        o.has_div())
      return std::nullopt;
    const ir::AffineExpr diff = o - x.indices[d];
    if (!diff.index_coeffs.empty() || !diff.param_coeffs.empty() || diff.has_div()) return std::nullopt;  // a shift only
    p.shift.push_back(diff.constant);
    dims.push_back(o.index_coeffs.begin()->first);
    inside += (inside.empty() ? "" : " and ") + std::string("0 <= ") + x.indices[d].to_string() + " < " +
              src->shape[d].to_string();
  }
  std::vector<std::string> numerators;
  auto cond = condition_text(*r.args[0], numerators);
  if (!cond) return std::nullopt;
  // the select's condition must be exactly "the read is inside X" on the statement's domain
  std::string dom;
  for (const auto& v : s.domain)
    dom += (dom.empty() ? "" : " and ") + v.lo.to_string() + " <= " + v.name + " < " + v.hi.to_string();
  std::string tuple = "[";
  for (size_t i = 0; i < s.domain.size(); ++i) tuple += (i ? ", " : "") + s.domain[i].name;
  tuple += "]";
  try {
    isl::set a(ctx, param_prefix(f) + "{ " + tuple + " : " + dom + " and " + *cond + " }");
    isl::set b(ctx, param_prefix(f) + "{ " + tuple + " : " + dom + " and " + inside + " }");
    if (!a.is_equal(b)) return std::nullopt;
    // every value division in the condition has a non-negative numerator (sizes are >= 1)
    std::string sizes;
    for (const auto& prm : f.params) sizes += " and " + prm + " >= 1";
    for (const auto& num : numerators)
      if (!isl::set(ctx, param_prefix(f) + "{ " + tuple + " : " + dom + sizes + " and " + num + " < 0 }").is_empty())
        return std::nullopt;
    // and the padded tensor is written entirely by this statement: its domain is its shape
    std::string full;
    for (size_t d = 0; d < out->shape.size(); ++d)
      full += (full.empty() ? "" : " and ") + std::string("0 <= ") + s.out_indices[d].to_string() + " < " +
              out->shape[d].to_string();
    isl::set written(ctx, param_prefix(f) + "{ " + tuple + " : " + dom + " }");
    isl::set shape(ctx, param_prefix(f) + "{ " + tuple + " : " + full + " }");
    if (!written.is_equal(shape)) return std::nullopt;
  } catch (const isl::exception&) {
    return std::nullopt;
  }
  return p;
}

ir::ExprPtr rewrite(const ir::ExprPtr& e, const Padding& p) {
  if (e->kind == ir::ExprKind::Access && e->name == p.local) {
    auto n = std::make_shared<ir::Expr>(*e);
    n->name = p.source;
    for (size_t d = 0; d < n->indices.size(); ++d) n->indices[d] = n->indices[d] - ir::AffineExpr::constant_of(p.shift[d]);
    return n;
  }
  if (e->args.empty()) return e;
  auto n = std::make_shared<ir::Expr>(*e);
  for (auto& a : n->args) a = rewrite(a, p);
  return n;
}

}  // namespace

std::optional<ir::Function> fold_padding(isl::ctx ctx, const ir::Function& f) {
  std::optional<ir::Function> out;
  for (;;) {
    const ir::Function& cur = out ? *out : f;
    std::optional<Padding> found;
    size_t at = 0;
    for (size_t i = 0; i < cur.statements.size() && !found; ++i)
      if ((found = as_padding(ctx, cur, cur.statements[i]))) at = i;
    if (!found) return out;
    ir::Function g = cur;
    g.statements.erase(g.statements.begin() + at);
    for (auto& s : g.statements) s.rhs = rewrite(s.rhs, *found);
    g.tensors.erase(std::remove_if(g.tensors.begin(), g.tensors.end(), [&](const ir::Tensor& t) { return t.name == found->local; }),
                    g.tensors.end());
    out = std::move(g);
  }
}

}  // namespace tessel::poly
