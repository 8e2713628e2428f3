#include "compiler/poly/contraction.h"

#include <algorithm>
#include <set>

#include "isa/base/error.h"

namespace tessel::poly {

using kernel::Contraction;
using kernel::ContractionDim;
using kernel::ContractionOperand;

namespace {

using Sizes = std::map<std::string, int64_t>;

// The part of `e` without indices; exact for range bounds and shapes (which may divide), and for
// indices of statements without division (the matcher rejects the others first).
int64_t param_value(const ir::AffineExpr& e, const Sizes& sizes) {
  if (!e.uses_indices()) return e.evaluate({}, sizes);
  TESSEL_CHECK(!e.has_div(), "contraction: index " + e.to_string() + " with division reached the matcher");
  int64_t c = e.constant;
  for (const auto& [p, k] : e.param_coeffs) c += k * sizes.at(p);
  return c;
}

bool indices_divide(const std::vector<ir::AffineExpr>& idx) {
  return std::any_of(idx.begin(), idx.end(), [](const ir::AffineExpr& e) { return e.has_div(); });
}

bool expr_uses_division(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::Access && indices_divide(e.indices)) return true;
  if (e.kind == ir::ExprKind::IndexValue && e.affine.has_div()) return true;
  return std::any_of(e.args.begin(), e.args.end(), [](const ir::ExprPtr& a) { return expr_uses_division(*a); });
}

bool statement_uses_division(const ir::Statement& s) { return indices_divide(s.out_indices) || expr_uses_division(*s.rhs); }

int64_t extent(const ir::IndexVar& v, const Sizes& sizes) { return param_value(v.hi, sizes) - param_value(v.lo, sizes); }

void collect_accesses(const ir::Expr& e, std::vector<const ir::Expr*>& out) {
  if (e.kind == ir::ExprKind::Access) out.push_back(&e);
  for (const auto& a : e.args) collect_accesses(*a, out);
}

std::vector<int64_t> shape_of(const kernel::Kernel& k, const std::string& name) {
  if (const auto* t = k.find_tensor(name)) return t->shape;
  const ir::Tensor* t = k.function->find_tensor(name);
  TESSEL_CHECK(t, "contraction: tensor " + name + " unknown to kernel " + k.name);
  std::vector<int64_t> s;
  for (const auto& d : t->shape) s.push_back(param_value(d, k.sizes));
  return s;
}

// Linear element address of `indices` (affine over anchor vars) in a row-major tensor.
void linearise(const std::vector<int64_t>& shape, const std::vector<ir::AffineExpr>& indices, const Sizes& sizes,
               ContractionOperand& op) {
  op.indices = indices;
  op.shape = shape;
  int64_t stride = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    const auto& e = indices[d];
    op.base += stride * param_value(e, sizes);
    for (const auto& [v, c] : e.index_coeffs) op.coeff[v] += stride * c;
    stride *= shape[d];
  }
  std::erase_if(op.coeff, [](const auto& kv) { return kv.second == 0; });
}

// The one `+=!` statement whose right-hand side is a product of two reads, or -1 (`why` set).
int find_anchor(const ir::Function& f, std::string* why) {
  int anchor = -1;
  for (size_t i = 0; i < f.statements.size(); ++i) {
    const ir::Statement& s = f.statements[i];
    if (!s.init || !product_of_accesses(s)) continue;
    if (anchor >= 0) {
      *why = "more than one reduction statement of the form C += A * B";
      return -1;
    }
    anchor = int(i);
  }
  if (anchor < 0) *why = "no reduction statement of the form C(..) +=! A(..) * B(..) (no matrix multiply to match)";
  return anchor;
}

// An operand read: an input as is, or a local whose producer (before the anchor) is a padded copy
// of an input, inlined. Returns "" or why the operand cannot be read so.
std::string read_operand(const kernel::Kernel& k, const ir::Expr& e, int anchor, ContractionOperand& op,
                         std::vector<int>& inlined) {
  const ir::Function& f = *k.function;
  const ir::Tensor* t = f.find_tensor(e.name);
  op.dtype = t->dtype;
  if (t->kind == ir::TensorKind::Input) {
    op.tensor = e.name;
    linearise(shape_of(k, e.name), e.indices, k.sizes, op);
    return "";
  }
  int producer = -1;
  for (size_t i = 0; i < f.statements.size(); ++i)
    if (f.statements[i].output == e.name) {
      if (producer >= 0) return "operand " + e.name + " has more than one producer";
      producer = int(i);
    }
  if (producer < 0 || producer > anchor)
    return "operand " + e.name + " is not produced before " + f.statements[anchor].name;
  const ir::Statement& p = f.statements[producer];
  if (p.reduction != ir::Reduction::None) return "operand " + e.name + " is itself a reduction";
  const ir::Expr* body = p.rhs.get();
  const ir::Expr* guard = nullptr;
  if (body->kind == ir::ExprKind::Apply && body->op == ir::Op::Select) {
    const ir::Expr* z = strip_cast(body->args[2].get());
    if (z->kind != ir::ExprKind::Constant || z->value != 0) return "operand " + e.name + ": producer's select does not pad with 0";
    guard = body->args[0].get();
    body = body->args[1].get();
  }
  if (body->kind != ir::ExprKind::Access || f.find_tensor(body->name)->kind != ir::TensorKind::Input ||
      f.find_tensor(body->name)->dtype != t->dtype)
    return "operand " + e.name + ": producer is not a (padded) copy of an input";
  for (size_t d = 0; d < p.out_indices.size(); ++d) {
    auto v = plain_index(p.out_indices[d]);
    if (!v) return p.name + ": output index is not a plain index";
    op.producer_binding[*v] = e.indices[d];
  }
  std::vector<ir::AffineExpr> g;
  for (const auto& ix : body->indices) g.push_back(kernel::substitute(ix, op.producer_binding));
  op.tensor = body->name;
  op.producer = &p;
  op.guard = guard;
  linearise(shape_of(k, body->name), g, k.sizes, op);
  inlined.push_back(producer);
  return "";
}

// Splits the output indices into batch / M / N and the reductions into K (ordered by A's
// strides, outer to inner). Returns "" or why not.
std::string classify_dims(const kernel::Kernel& k, const ir::Statement& s, const ir::Expr& a, const ir::Expr& b,
                          const std::vector<std::string>& out_vars, Contraction& c) {
  for (const auto& v : out_vars) {
    ContractionDim d{v, extent(*s.find_index(v), k.sizes)};
    switch (classify_index(a, b, v)) {
      case IndexRole::Shared: c.batch.push_back(d); break;
      case IndexRole::M: c.m.push_back(d); break;
      case IndexRole::N: c.n.push_back(d); break;
      case IndexRole::Broadcast: return s.name + ": output index " + v + " is read by neither operand (broadcast)";
    }
  }
  if (c.m.empty() || c.n.empty()) return s.name + ": no M or no N index (a matrix-vector product)";
  std::vector<std::pair<int64_t, std::string>> korder;
  for (const auto& v : s.domain) {
    if (!v.is_reduction) continue;
    if (classify_index(a, b, v.name) != IndexRole::Shared) return s.name + ": reduction index " + v.name + " is not in both operands";
    auto it = c.a.coeff.find(v.name);
    korder.push_back({it == c.a.coeff.end() ? 0 : -std::abs(it->second), v.name});
  }
  if (korder.empty()) return s.name + ": no reduction index";
  std::stable_sort(korder.begin(), korder.end());
  for (const auto& [_, v] : korder) c.k.push_back({v, extent(*s.find_index(v), k.sizes)});
  return "";
}

// Is statement `e` (after the anchor) element-wise over the anchor's output? Returns "" or why not.
std::string epilogue_obstacle(const kernel::Kernel& k, const ir::Statement& s, const ir::Statement& e,
                              const std::set<std::string>& elementwise) {
  const ir::Function& f = *k.function;
  if (e.reduction != ir::Reduction::None) return e.name + " (after the matrix multiply) is a reduction, not an element-wise epilogue";
  if (e.out_indices.size() != s.out_indices.size()) return e.name + " has another rank than " + s.output;
  for (const auto& ix : e.out_indices)
    if (!plain_index(ix)) return e.name + ": output index is not a plain index";
  for (size_t d = 0; d < e.out_indices.size(); ++d) {
    const ir::IndexVar* iv = e.find_index(e.out_indices[d].index_coeffs.begin()->first);
    if (param_value(iv->lo, k.sizes) != 0 || param_value(iv->hi, k.sizes) != shape_of(k, s.output)[d])
      return e.name + ": domain differs from " + s.output + "'s shape";
  }
  std::vector<const ir::Expr*> accs;
  collect_accesses(*e.rhs, accs);
  for (const ir::Expr* a : accs) {
    if (elementwise.count(a->name)) {
      if (a->indices != e.out_indices) return e.name + " reads " + a->name + " at other indices than it writes";
    } else if (f.find_tensor(a->name)->kind != ir::TensorKind::Input) {
      return e.name + " reads local " + a->name + " that is not element-wise with " + s.output;
    }
  }
  return "";
}

// Every statement but the anchor: an inlined producer (before) or an element-wise epilogue (after).
std::string collect_epilogue(const kernel::Kernel& k, Contraction& c) {
  const ir::Function& f = *k.function;
  const ir::Statement& s = f.statements[c.anchor];
  std::set<std::string> elementwise = {s.output};
  for (size_t i = 0; i < f.statements.size(); ++i) {
    if (int(i) == c.anchor || std::count(c.inlined.begin(), c.inlined.end(), int(i))) continue;
    const ir::Statement& e = f.statements[i];
    if (int(i) < c.anchor) return e.name + " runs before the matrix multiply and is not a padding copy of an operand";
    if (std::string why = epilogue_obstacle(k, s, e, elementwise); !why.empty()) return why;
    elementwise.insert(e.output);
    c.epilogue.push_back(int(i));
  }
  return "";
}

// Several M dims (the (n, p, q) of an NHWC convolution) in output order flatten to one row index.
bool is_plain_output(const ir::Function& f, const Contraction& c, const std::vector<std::string>& out_vars) {
  if (!c.epilogue.empty() || c.n.size() != 1 || f.find_tensor(f.statements[c.anchor].output)->kind != ir::TensorKind::Output)
    return false;
  std::vector<std::string> expect;
  for (const auto& d : c.batch) expect.push_back(d.var);
  for (const auto& d : c.m) expect.push_back(d.var);
  expect.push_back(c.n[0].var);
  return expect == out_vars;
}

std::optional<Contraction> identify(const kernel::Kernel& k, std::string& why) {
  auto fail = [&](std::string w) {
    why = std::move(w);
    return std::optional<Contraction>();
  };
  const ir::Function& f = *k.function;
  if (std::string use = ir::index_division_use(f); !use.empty())
    return fail(use + ": an index uses floor division or modulo (the contraction's operands are affine views)");
  Contraction c;
  c.anchor = find_anchor(f, &why);
  if (c.anchor < 0) return std::nullopt;
  const ir::Statement& s = f.statements[c.anchor];
  std::vector<std::string> out_vars;
  for (const auto& e : s.out_indices) {
    auto v = plain_index(e);
    if (!v) return fail(s.name + ": output index " + e.to_string() + " is not a plain index");
    out_vars.push_back(*v);
  }
  if (out_vars.empty()) return fail(s.name + ": a 0-d output (a dot product) has no M or N index");
  for (const auto& v : s.domain)
    if (param_value(v.lo, k.sizes) != 0) return fail(s.name + ": index " + v.name + " does not start at 0");
  const Product product = *product_of_accesses(s);
  const ir::Expr* acc[2] = {product.left, product.right};
  ContractionOperand ops[2];
  for (int o = 0; o < 2; ++o)
    if (std::string w = read_operand(k, *acc[o], c.anchor, ops[o], c.inlined); !w.empty()) return fail(w);
  // the N operand holds the innermost output index
  const int nside = reads_index(*acc[1], out_vars.back()) ? 1 : 0, aside = 1 - nside;
  c.swapped = nside == 0;
  c.a = ops[aside];
  c.b = ops[nside];
  c.in_type = c.a.dtype;
  c.acc_type = s.acc_type;
  if (c.a.dtype != c.b.dtype)
    return fail("operands have different dtypes (" + std::string(dtype_name(c.a.dtype)) + ", " +
                std::string(dtype_name(c.b.dtype)) + ")");
  if (std::string w = classify_dims(k, s, *acc[aside], *acc[nside], out_vars, c); !w.empty()) return fail(w);
  if (std::string w = collect_epilogue(k, c); !w.empty()) return fail(w);
  c.plain_output = is_plain_output(f, c, out_vars);
  c.out_vars = out_vars;
  std::vector<std::string> dense_order;
  std::vector<int64_t> dense_shape;
  for (const auto* dims : {&c.batch, &c.m, &c.n})
    for (const auto& d : *dims) dense_order.push_back(d.var), dense_shape.push_back(d.extent);
  c.dense_output = dense_order == out_vars && shape_of(k, s.output) == dense_shape;
  auto stored = [&](int si) {
    const ir::Statement& st = f.statements[size_t(si)];
    if (f.find_tensor(st.output)->kind == ir::TensorKind::Output) c.stored_outputs.push_back({st.output, st.acc_type});
  };
  stored(c.anchor);
  for (int si : c.epilogue) stored(si);
  ContractionOperand out;
  linearise(shape_of(k, s.output), s.out_indices, k.sizes, out);
  c.out_coeff = out.coeff;
  c.sizes = k.sizes;
  return c;
}

}  // namespace

const ir::Expr* strip_cast(const ir::Expr* e) {
  while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast) e = e->args[0].get();
  return e;
}

std::optional<Product> product_of_accesses(const ir::Statement& s, std::string* why) {
  auto fail = [&](const char* w) -> std::optional<Product> {
    if (why) *why = w;
    return std::nullopt;
  };
  if (s.reduction != ir::Reduction::Sum) return fail("not a sum reduction");
  if (statement_uses_division(s)) return fail("an index uses floor division or modulo (not matched as a contraction)");
  if (s.rhs->kind != ir::ExprKind::Apply || s.rhs->op != ir::Op::Mul) return fail("right-hand side is not a product");
  Product p{strip_cast(s.rhs->args[0].get()), strip_cast(s.rhs->args[1].get())};
  if (p.left->kind != ir::ExprKind::Access || p.right->kind != ir::ExprKind::Access) return fail("factors are not tensor reads");
  return p;
}

bool reads_index(const ir::Expr& access, const std::string& index) {
  for (const auto& ix : access.indices)
    if (ix.index_coeffs.count(index)) return true;
  return false;
}

IndexRole classify_index(const ir::Expr& a, const ir::Expr& b, const std::string& index) {
  const bool ra = reads_index(a, index), rb = reads_index(b, index);
  if (ra && rb) return IndexRole::Shared;
  if (ra) return IndexRole::M;
  return rb ? IndexRole::N : IndexRole::Broadcast;
}

std::optional<Contraction> identify_contraction(const kernel::Kernel& k, std::string* why) {
  std::string reason;
  auto c = identify(k, reason);
  if (why) *why = reason;
  return c;
}

void record_contraction(kernel::Kernel& k) {
  k.no_contraction.clear();
  k.contraction = identify_contraction(k, &k.no_contraction);
}

std::string contraction_to_string(const kernel::Kernel& k) {
  if (!k.contraction) return "no contraction: " + k.no_contraction;
  const Contraction& c = *k.contraction;
  const ir::Function& f = *k.function;
  auto dims = [](const char* role, const std::vector<ContractionDim>& ds) {
    std::string s = std::string(" ") + role + "(";
    for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + ds[i].var + "=" + std::to_string(ds[i].extent);
    return s + ")";
  };
  auto operand = [&](const char* role, const ContractionOperand& op) {
    std::string s = std::string("\n  ") + role + " = " + op.tensor + " base " + std::to_string(op.base) + " strides {";
    bool first = true;
    for (const auto& [v, st] : op.coeff) s += (first ? "" : ", ") + v + ": " + std::to_string(st), first = false;
    s += "}";
    if (op.producer) s += " through " + op.producer->name + (op.guard ? " (guarded)" : "");
    return s;
  };
  std::string s = "contraction " + f.statements[c.anchor].name + " (" + std::string(dtype_name(c.in_type)) + " -> " +
                  std::string(dtype_name(c.acc_type)) + "):" + dims("batch", c.batch) + dims("M", c.m) + dims("N", c.n) +
                  dims("K", c.k) + operand("A", c.a) + operand("B", c.b);
  s += std::string("\n  epilogue:") + (c.epilogue.empty() ? " none" : "");
  for (int i : c.epilogue) s += " " + f.statements[i].name;
  if (c.plain_output) s += "\n  plain output (fragments stored straight to global memory)";
  return s;
}

}  // namespace tessel::poly
