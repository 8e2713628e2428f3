// bf16 widening: compiler/poly/widen_bf16.h states the contract.
#include "compiler/poly/widen_bf16.h"

#include <functional>
#include <map>
#include <memory>
#include <set>

#include "isa/base/bf16.h"

namespace tessel::poly {
namespace {

ir::ExprPtr cast_to(DType t, ir::ExprPtr e) {
  auto c = std::make_shared<ir::Expr>();
  c->kind = ir::ExprKind::Apply;
  c->op = ir::Op::Cast;
  c->type = t;
  c->loc = e->loc;
  c->args = {std::move(e)};
  return c;
}

// f32(bf16(e)) of an f32 value (an int one converted to f32 first: the interpreter rounds an
// integer to bf16 through f32 too, compiler/interp/scalar.h round_float).
ir::ExprPtr rounded(ir::ExprPtr e) {
  if (e->type != DType::F32) e = cast_to(DType::F32, std::move(e));
  return cast_to(DType::F32, cast_to(DType::BF16, std::move(e)));
}

// `e` with no bf16 arithmetic, as an f32 expression where `e` is bf16: every bf16 operation computed
// in f32 and rounded to bf16 (to bf16 and back: the interpreter rounds each operation's result),
// so every value is the interpreter's.
ir::ExprPtr widen(const ir::ExprPtr& e) {
  if (e->kind != ir::ExprKind::Apply) {
    if (e->type != DType::BF16) return e;
    if (e->kind == ir::ExprKind::Access) return cast_to(DType::F32, e);
    auto x = std::make_shared<ir::Expr>(*e);
    x->type = DType::F32;
    if (e->kind == ir::ExprKind::Constant) {
      x->value = bf16_bits_to_f32(f32_to_bf16_bits(static_cast<float>(e->value)));
      return x;
    }
    return rounded(x);  // a size parameter or an index as a bf16 value
  }
  if (e->op == ir::Op::Cast && e->type == DType::BF16) return rounded(widen(e->args[0]));
  auto x = std::make_shared<ir::Expr>(*e);
  for (auto& a : x->args) a = widen(a);
  if (x->op == ir::Op::Cast && x->type == x->args[0]->type) return x->args[0];  // f32(f32 value)
  if (e->type != DType::BF16) return x;
  x->type = DType::F32;
  return rounded(x);
}

// `e` without its last rounding (f32(bf16(y)) -> y): a store to bf16 rounds it.
ir::ExprPtr unrounded(const ir::ExprPtr& e) {
  const bool round_trip = e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast && e->type == DType::F32 &&
                          e->args[0]->kind == ir::ExprKind::Apply && e->args[0]->op == ir::Op::Cast &&
                          e->args[0]->type == DType::BF16 && e->args[0]->args[0]->type == DType::F32;
  return round_trip ? e->args[0]->args[0] : e;
}

ir::Expr access_of(const std::string& tensor, const std::vector<ir::AffineExpr>& indices, DType t, const ir::SourceLoc& loc) {
  ir::Expr a;
  a.kind = ir::ExprKind::Access;
  a.name = tensor;
  a.indices = indices;
  a.type = t;
  a.loc = loc;
  return a;
}

std::string fresh_name(const ir::Function& f, const std::string& base) {
  std::string n = base;
  for (int i = 1; f.find_tensor(n); ++i) n = base + std::to_string(i);
  return n;
}

// Whether `a` names index `n` (in a plain term or inside a division).
bool mentions(const ir::AffineExpr& a, const std::string& n) {
  if (a.index_coeffs.count(n)) return true;
  for (const auto& t : a.divs)
    if (mentions(t.numerator, n)) return true;
  return false;
}

// The bf16 tensors `s` reads without some of its indices (broadcast over them: a contraction's
// operands), converted to an f32 copy before it (the vector lowering does not broadcast bf16).
std::set<std::string> converted_first(const ir::Statement& s) {
  std::set<std::string> out;
  ir::for_each_access(*s.rhs, [&](const ir::Expr& a) {
    if (a.type != DType::BF16) return;
    bool all = true;
    for (const auto& iv : s.domain) {
      bool used = false;
      for (const auto& i : a.indices) used = used || mentions(i, iv.name);
      all = all && used;
    }
    if (!all) out.insert(a.name);
  });
  return out;
}

// `to`(c0, ..) = f32(`from`(c0, ..)) over `from`'s whole shape.
ir::Statement conversion(const ir::Tensor& from, const std::string& to) {
  ir::Statement c;
  c.output = to;
  c.loc = from.loc;
  std::vector<ir::AffineExpr> idx;
  for (size_t d = 0; d < from.shape.size(); ++d) {
    const std::string n = "cv" + std::to_string(d);
    c.domain.push_back({n, ir::AffineExpr::constant_of(0), from.shape[d], false});
    idx.push_back(ir::AffineExpr::index(n));
  }
  c.out_indices = idx;
  c.rhs = cast_to(DType::F32, std::make_shared<ir::Expr>(access_of(from.name, idx, DType::BF16, from.loc)));
  c.acc_type = DType::F32;
  return c;
}

// `e` with every read of a tensor in `copies` reading its f32 copy instead.
ir::ExprPtr read_copies(const ir::ExprPtr& e, const std::map<std::string, std::string>& copies) {
  auto x = std::make_shared<ir::Expr>(*e);
  if (x->kind == ir::ExprKind::Access)
    if (const auto it = copies.find(x->name); it != copies.end()) x->name = it->second, x->type = DType::F32;
  for (auto& a : x->args) a = read_copies(a, copies);
  return x;
}

// f32(X(..)) of a bf16 tensor X.
bool converted_read(const ir::Expr& e) {
  return e.kind == ir::ExprKind::Apply && e.op == ir::Op::Cast && e.type == DType::F32 && e.args.size() == 1 &&
         e.args[0]->kind == ir::ExprKind::Access && e.args[0]->type == DType::BF16;
}

// C(..) +=! f32(A(..)) * f32(B(..)): bf16 A and B, an f32 accumulator and output.
bool bf16_contraction(const ir::Function& f, const ir::Statement& s) {
  const ir::Tensor* out = f.find_tensor(s.output);
  const ir::Expr& e = *s.rhs;
  return s.reduction == ir::Reduction::Sum && s.acc_type == DType::F32 && out && out->dtype == DType::F32 &&
         e.kind == ir::ExprKind::Apply && e.op == ir::Op::Mul && e.args.size() == 2 && converted_read(*e.args[0]) &&
         converted_read(*e.args[1]);
}

// The index an access index is, plainly (1 x one index, nothing else), or "".
std::string plain_index_of(const ir::AffineExpr& a) { return ir::plain_index(a).value_or(""); }

// The form the vector contraction maps (compiler/emit_npu/vector_gemm.h): C(m, n) of A(m, k) or
// A(k, m) and B(k, n), plain indices, no batch; what it refuses for other reasons goes to the general
// lowering, which loads bf16 as f32.
bool vector_contraction_form(const ir::Statement& s) {
  if (s.domain.size() != 3 || s.out_indices.size() != 2) return false;
  const std::string m = plain_index_of(s.out_indices[0]), n = plain_index_of(s.out_indices[1]);
  std::string k;
  for (const auto& v : s.domain)
    if (v.is_reduction) k = v.name;
  const ir::Expr &a = *s.rhs->args[0]->args[0], &b = *s.rhs->args[1]->args[0];
  auto reads = [](const ir::Expr& x, const std::string& i, const std::string& j) {
    return x.indices.size() == 2 && plain_index_of(x.indices[0]) == i && plain_index_of(x.indices[1]) == j;
  };
  const bool a_ok = reads(a, m, k) || reads(a, k, m), b_ok = reads(b, k, n);
  const bool swapped = (reads(b, m, k) || reads(b, k, m)) && reads(a, k, n);
  return !m.empty() && !n.empty() && !k.empty() && m != n && ((a_ok && b_ok) || swapped);
}

}  // namespace

bool computes_bf16(const ir::Statement& s, bool conversions_ok) {
  if (s.reduction != ir::Reduction::None && s.acc_type == DType::BF16) return true;
  bool found = false;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    if (found || e.kind != ir::ExprKind::Apply) return;
    const bool conversion = conversions_ok && e.op == ir::Op::Cast &&
                            ((e.type == DType::BF16 && e.args[0]->type == DType::F32) ||
                             (e.type == DType::F32 && e.args[0]->type == DType::BF16));
    if (!conversion) {
      found = e.type == DType::BF16;
      for (const auto& a : e.args) found = found || a->type == DType::BF16;
    }
    for (const auto& a : e.args) walk(*a);
  };
  walk(*s.rhs);
  return found;
}

std::optional<ir::Function> widen_bf16(const ir::Function& f, std::vector<std::string>* widened, const WidenBf16Options& options) {
  ir::Function out = f;
  out.statements.clear();
  bool changed = false;
  std::map<std::string, std::string> input_copies;  // a bf16 input -> its f32 copy
  const auto read_copies_of = [](const ir::Statement& st, const std::map<std::string, std::string>& copies) {
    ir::Statement r = st;
    r.rhs = read_copies(st.rhs, copies);
    return r;
  };
  for (const ir::Statement& s_in : f.statements) {
    if (!computes_bf16(s_in)) {
      out.statements.push_back(s_in);
      continue;
    }
    if (bf16_contraction(f, s_in)) {
      const bool vector = options.vector && f.statements.size() == 1 && vector_contraction_form(s_in);
      if (widened)
        widened->push_back(s_in.name + ": a bf16 contraction accumulated in f32: " +
                           (options.cube ? std::string("on the cube (bf16 x bf16 -> f32), as written")
                                         : options.no_cube + (vector ? "; on the vector unit, its operands converted to f32 in UB"
                                                                     : "; on the vector unit in f32")));
      if (options.cube || vector) {
        out.statements.push_back(s_in);
        continue;
      }
    }
    changed = true;
    // bf16 operands the lowering cannot convert in place: an f32 copy first (an input's once)
    std::map<std::string, std::string> copies;
    for (const std::string& name : converted_first(s_in)) {
      if (const auto it = input_copies.find(name); it != input_copies.end()) {
        copies[name] = it->second;
        continue;
      }
      ir::Tensor copy = *f.find_tensor(name);
      copy.name = fresh_name(out, name + "_f32");
      copy.dtype = DType::F32;
      copy.kind = ir::TensorKind::Local;
      out.tensors.push_back(copy);
      out.statements.push_back(conversion(*f.find_tensor(name), copy.name));
      copies[name] = copy.name;
      if (f.find_tensor(name)->kind == ir::TensorKind::Input) input_copies[name] = copy.name;
      if (widened) widened->push_back(s_in.name + ": reads " + name + " as an f32 copy (" + copy.name + ")");
    }
    const ir::Statement s = read_copies_of(s_in, copies);
    const ir::Tensor* t = f.find_tensor(s.output);
    const DType out_type = t ? t->dtype : DType::F32;
    ir::Statement w = s;
    w.rhs = widen(s.rhs);
    if (s.reduction == ir::Reduction::None && out_type == DType::BF16) {
      w.rhs = unrounded(w.rhs);  // the store rounds (vconv to bf16)
    } else if (s.reduction == ir::Reduction::None && w.rhs->type != out_type) {
      w.rhs = cast_to(out_type, w.rhs);
    } else if (out_type != DType::BF16 && w.rhs->type != out_type) {
      w.rhs = cast_to(out_type, w.rhs);
    }
    out.statements.push_back(w);
    if (widened)
      widened->push_back(s.name + ": computed in f32, each bf16 result rounded" +
                         std::string(s.reduction != ir::Reduction::None && out_type == DType::BF16
                                         ? " (a bf16 sum or product: the f32 accumulator after every step)" : ""));
  }
  if (!changed) return std::nullopt;
  for (size_t i = 0; i < out.statements.size(); ++i) out.statements[i].name = "S" + std::to_string(i);
  return out;
}

}  // namespace tessel::poly
