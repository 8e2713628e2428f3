#include "compiler/emit_cuda/contraction.h"

#include <algorithm>
#include <functional>
#include <set>

#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

using Sizes = std::map<std::string, int64_t>;

int64_t param_value(const ir::AffineExpr& e, const Sizes& sizes) {
  int64_t c = e.constant;
  for (const auto& [p, k] : e.param_coeffs) c += k * sizes.at(p);
  return c;
}

bool plain_index(const ir::AffineExpr& e, std::string* name) {
  if (e.index_coeffs.size() != 1 || !e.param_coeffs.empty() || e.constant != 0) return false;
  if (e.index_coeffs.begin()->second != 1) return false;
  *name = e.index_coeffs.begin()->first;
  return true;
}

const ir::Expr* strip_cast(const ir::Expr* e) {
  while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast) e = e->args[0].get();
  return e;
}

void collect_accesses(const ir::Expr& e, std::vector<const ir::Expr*>& out) {
  if (e.kind == ir::ExprKind::Access) out.push_back(&e);
  for (const auto& a : e.args) collect_accesses(*a, out);
}

std::vector<int64_t> shape_of(const kernel::Kernel& k, const std::string& name) {
  if (const auto* t = k.find_tensor(name)) return t->shape;
  const ir::Tensor* t = k.function->find_tensor(name);
  TESSEL_CHECK(t, "emit_cuda: tensor " + name + " unknown");
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
  for (auto it = op.coeff.begin(); it != op.coeff.end();) it = it->second == 0 ? op.coeff.erase(it) : std::next(it);
}

}  // namespace

ir::AffineExpr substitute(const ir::AffineExpr& e, const std::map<std::string, ir::AffineExpr>& binding) {
  ir::AffineExpr r;
  r.constant = e.constant;
  r.param_coeffs = e.param_coeffs;
  for (const auto& [v, c] : e.index_coeffs) {
    auto it = binding.find(v);
    r = r + (it == binding.end() ? ir::AffineExpr::index(v, c) : it->second.scaled(c));
  }
  return r;
}

int64_t Contraction::size_m() const {
  int64_t s = 1;
  for (const auto& d : m) s *= d.extent;
  return s;
}
int64_t Contraction::size_n() const {
  int64_t s = 1;
  for (const auto& d : n) s *= d.extent;
  return s;
}
int64_t Contraction::size_k() const {
  int64_t s = 1;
  for (const auto& d : k) s *= d.extent;
  return s;
}
int64_t Contraction::size_batch() const {
  int64_t s = 1;
  for (const auto& d : batch) s *= d.extent;
  return s;
}

std::optional<Contraction> identify_contraction(const kernel::Kernel& k, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<Contraction> {
    if (why) *why = w;
    return std::nullopt;
  };
  const ir::Function& f = *k.function;
  Contraction c;
  for (size_t i = 0; i < f.statements.size(); ++i) {
    const ir::Statement& s = f.statements[i];
    if (s.reduction != ir::Reduction::Sum || !s.init) continue;
    const ir::Expr& r = *s.rhs;
    if (r.kind != ir::ExprKind::Apply || r.op != ir::Op::Mul) continue;
    if (strip_cast(r.args[0].get())->kind != ir::ExprKind::Access ||
        strip_cast(r.args[1].get())->kind != ir::ExprKind::Access)
      continue;
    if (c.anchor >= 0) return fail("more than one reduction statement of the form C += A * B");
    c.anchor = int(i);
  }
  if (c.anchor < 0) return fail("no reduction statement of the form C(..) +=! A(..) * B(..) (no matrix multiply to match)");
  const ir::Statement& s = f.statements[c.anchor];
  std::vector<std::string> out_vars;
  for (const auto& e : s.out_indices) {
    std::string v;
    if (!plain_index(e, &v)) return fail(s.name + ": output index " + e.to_string() + " is not a plain index");
    out_vars.push_back(v);
  }
  for (const auto& v : s.domain)
    if (param_value(v.lo, k.sizes) != 0) return fail(s.name + ": index " + v.name + " does not start at 0");

  const ir::Expr* acc[2] = {strip_cast(s.rhs->args[0].get()), strip_cast(s.rhs->args[1].get())};
  ContractionOperand ops[2];
  std::set<std::string> used[2];
  for (int o = 0; o < 2; ++o) {
    const ir::Expr& e = *acc[o];
    ContractionOperand& op = ops[o];
    for (const auto& ix : e.indices)
      for (const auto& [v, cf] : ix.index_coeffs) used[o].insert(v);
    const ir::Tensor* t = f.find_tensor(e.name);
    if (t->kind == ir::TensorKind::Input) {
      op.tensor = e.name;
      op.dtype = t->dtype;
      linearise(shape_of(k, e.name), e.indices, k.sizes, op);
      continue;
    }
    // a local: inline its producer when it is a (guarded) copy of an input
    int producer = -1;
    for (size_t i = 0; i < f.statements.size(); ++i)
      if (f.statements[i].output == e.name) {
        if (producer >= 0) return fail("operand " + e.name + " has more than one producer");
        producer = int(i);
      }
    if (producer < 0 || producer > c.anchor) return fail("operand " + e.name + " is not produced before " + s.name);
    const ir::Statement& p = f.statements[producer];
    if (p.reduction != ir::Reduction::None) return fail("operand " + e.name + " is itself a reduction");
    const ir::Expr* body = p.rhs.get();
    const ir::Expr* guard = nullptr;
    if (body->kind == ir::ExprKind::Apply && body->op == ir::Op::Select) {
      const ir::Expr* z = body->args[2].get();
      if (strip_cast(z)->kind != ir::ExprKind::Constant || strip_cast(z)->value != 0)
        return fail("operand " + e.name + ": producer's select does not pad with 0");
      guard = body->args[0].get();
      body = body->args[1].get();
    }
    if (body->kind != ir::ExprKind::Access || f.find_tensor(body->name)->kind != ir::TensorKind::Input ||
        f.find_tensor(body->name)->dtype != t->dtype)
      return fail("operand " + e.name + ": producer is not a (padded) copy of an input");
    std::vector<ir::AffineExpr> g;
    for (size_t d = 0; d < p.out_indices.size(); ++d) {
      std::string v;
      if (!plain_index(p.out_indices[d], &v)) return fail(p.name + ": output index is not a plain index");
      op.producer_binding[v] = e.indices[d];
    }
    for (const auto& ix : body->indices) g.push_back(substitute(ix, op.producer_binding));
    op.tensor = body->name;
    op.dtype = t->dtype;
    op.producer = &p;
    op.guard = guard;
    linearise(shape_of(k, body->name), g, k.sizes, op);
    c.inlined.push_back(producer);
  }
  // which operand holds N: the one with the innermost output index
  const std::string inner = out_vars.back();
  int nside = used[1].count(inner) ? 1 : 0;
  if (used[0].count(inner) && used[1].count(inner)) nside = 1;
  c.swapped = nside == 0;
  const int aside = 1 - nside;
  c.a = ops[aside];
  c.b = ops[nside];
  c.in_type = c.a.dtype;
  c.acc_type = s.acc_type;
  if (c.a.dtype != c.b.dtype) return fail("operands have different dtypes (" + std::string(dtype_name(c.a.dtype)) + ", " + std::string(dtype_name(c.b.dtype)) + ")");
  for (const auto& v : out_vars) {
    const ir::IndexVar* iv = s.find_index(v);
    ContractionDim d{v, param_value(iv->hi, k.sizes) - param_value(iv->lo, k.sizes)};
    const bool ia = used[aside].count(v), ib = used[nside].count(v);
    if (ia && ib) c.batch.push_back(d);
    else if (ia) c.m.push_back(d);
    else if (ib) c.n.push_back(d);
    else return fail(s.name + ": output index " + v + " is read by neither operand (broadcast)");
  }
  if (c.m.empty() || c.n.empty()) return fail(s.name + ": no M or no N index (a matrix-vector product)");
  // K dims ordered by their appearance in A's memory order (outer -> inner)
  std::vector<std::pair<int64_t, std::string>> korder;
  for (const auto& v : s.domain) {
    if (!v.is_reduction) continue;
    if (!used[0].count(v.name) || !used[1].count(v.name)) return fail(s.name + ": reduction index " + v.name + " is not in both operands");
    auto it = c.a.coeff.find(v.name);
    korder.push_back({it == c.a.coeff.end() ? 0 : -std::abs(it->second), v.name});
  }
  if (korder.empty()) return fail(s.name + ": no reduction index");
  std::stable_sort(korder.begin(), korder.end());
  for (const auto& [_, v] : korder) {
    const ir::IndexVar* iv = s.find_index(v);
    c.k.push_back({v, param_value(iv->hi, k.sizes) - param_value(iv->lo, k.sizes)});
  }
  // every other statement: an inlined producer (before) or an element-wise epilogue (after)
  std::set<std::string> elementwise = {s.output};
  for (size_t i = 0; i < f.statements.size(); ++i) {
    if (int(i) == c.anchor || std::count(c.inlined.begin(), c.inlined.end(), int(i))) continue;
    const ir::Statement& e = f.statements[i];
    if (int(i) < c.anchor) return fail(e.name + " runs before the matrix multiply and is not a padding copy of an operand");
    if (e.reduction != ir::Reduction::None) return fail(e.name + " (after the matrix multiply) is a reduction, not an element-wise epilogue");
    if (e.out_indices.size() != out_vars.size()) return fail(e.name + " has another rank than " + s.output);
    for (const auto& ix : e.out_indices) {
      std::string v;
      if (!plain_index(ix, &v)) return fail(e.name + ": output index is not a plain index");
    }
    for (size_t d = 0; d < e.out_indices.size(); ++d) {
      const ir::IndexVar* iv = e.find_index(e.out_indices[d].index_coeffs.begin()->first);
      if (param_value(iv->lo, k.sizes) != 0 || param_value(iv->hi, k.sizes) != shape_of(k, s.output)[d])
        return fail(e.name + ": domain differs from " + s.output + "'s shape");
    }
    std::vector<const ir::Expr*> accs;
    collect_accesses(*e.rhs, accs);
    for (const ir::Expr* a : accs) {
      const ir::Tensor* t = f.find_tensor(a->name);
      if (elementwise.count(a->name)) {
        if (a->indices != e.out_indices) return fail(e.name + " reads " + a->name + " at other indices than it writes");
      } else if (t->kind != ir::TensorKind::Input) {
        return fail(e.name + " reads local " + a->name + " that is not element-wise with " + s.output);
      }
    }
    elementwise.insert(e.output);
    c.epilogue.push_back(int(i));
  }
  // several M dims (the (n, p, q) of an NHWC convolution) in output order flatten to one row index
  if (c.epilogue.empty() && c.n.size() == 1 && f.find_tensor(s.output)->kind == ir::TensorKind::Output) {
    std::vector<std::string> expect;
    for (const auto& d : c.batch) expect.push_back(d.var);
    for (const auto& d : c.m) expect.push_back(d.var);
    expect.push_back(c.n[0].var);
    c.plain_output = expect == out_vars;
  }
  c.sizes = k.sizes;
  if (why) why->clear();
  return c;
}

std::string tensor_core_obstacle(const Contraction& c, const std::string& arch) {
  const bool f16 = c.in_type == DType::F16 && c.acc_type == DType::F32;
  const bool i8 = c.in_type == DType::I8 && c.acc_type == DType::I32;
  if (!f16 && !i8)
    return "dtypes " + std::string(dtype_name(c.in_type)) + " -> " + std::string(dtype_name(c.acc_type)) +
           " have no WMMA shape on " + arch + " (f16 -> f32 and i8 -> i32 do)";
  // partial fragments are zero-filled by the loads and masked in the stores, so any size works;
  // tiny or badly rounded problems are better served by SIMT
  const int64_t M = c.size_m(), N = c.size_n(), K = c.size_k();
  const std::string sizes = "sizes M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  if (M < 16 || N < 16 || K < 16) return sizes + " are not multiples of the 16x16x16 fragment (one is smaller than 16)";
  auto up = [](int64_t v) { return double((v + 15) / 16 * 16); };
  if (up(M) * up(N) * up(K) > 1.5 * double(M) * double(N) * double(K))
    return sizes + " are not multiples of the 16x16x16 fragment and padding them would waste over a third of the work";
  return "";
}

}  // namespace tessel::emit_cuda
