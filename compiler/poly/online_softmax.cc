#include "compiler/poly/online_softmax.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::poly {

namespace {

using Rename = std::map<std::string, std::string>;  // a statement's index name -> role name

const ir::Expr* strip_casts(const ir::Expr* e) {
  while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast) e = e->args[0].get();
  return e;
}

// Casts that keep the value exact on the way to f32 (a widening read: f32(Q(..)) of an f16 Q).
bool widening_read(const ir::Expr* e) {
  while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast) {
    if (e->type != DType::F32) return false;
    e = e->args[0].get();
  }
  return e->kind == ir::ExprKind::Access;
}

// `e` without casts to f32 of float values (exact: max(f32(x)) = f32(max(x)) for f16 x).
const ir::Expr* exact_widening(const ir::Expr* e) {
  while (e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast && e->type == DType::F32 && dtype_is_float(e->args[0]->type))
    e = e->args[0].get();
  return e;
}

std::optional<std::vector<std::string>> plain_vars(const std::vector<ir::AffineExpr>& idx) {
  std::vector<std::string> r;
  for (const auto& e : idx) {
    auto p = ir::plain_index(e);
    if (!p) return std::nullopt;
    r.push_back(*p);
  }
  return r;
}

bool has_division(const ir::Statement& s) {
  bool d = std::any_of(s.out_indices.begin(), s.out_indices.end(), [](const ir::AffineExpr& e) { return e.has_div(); });
  ir::for_each_access(*s.rhs, [&](const ir::Expr& a) {
    for (const auto& i : a.indices) d = d || i.has_div();
  });
  return d;
}

std::vector<const ir::Expr*> accesses_of(const ir::Expr& e, const std::string& tensor) {
  std::vector<const ir::Expr*> r;
  ir::for_each_access(e, [&](const ir::Expr& a) {
    if (a.name == tensor) r.push_back(&a);
  });
  return r;
}

ir::AffineExpr renamed(const ir::AffineExpr& e, const Rename& r) {
  ir::AffineExpr out = e;
  out.index_coeffs.clear();
  for (const auto& [n, c] : e.index_coeffs) {
    auto it = r.find(n);
    out.index_coeffs[it == r.end() ? "?" + n : it->second] += c;
  }
  return out;
}

// Structural equality of two expressions, index names compared through their renames.
bool same(const ir::Expr& a, const Rename& ra, const ir::Expr& b, const Rename& rb) {
  if (a.kind != b.kind || a.type != b.type) return false;
  switch (a.kind) {
    case ir::ExprKind::Constant: return a.value == b.value;
    case ir::ExprKind::SizeParam: return a.name == b.name;
    case ir::ExprKind::IndexValue: return renamed(a.affine, ra) == renamed(b.affine, rb);
    case ir::ExprKind::Access:
      if (a.name != b.name || a.indices.size() != b.indices.size()) return false;
      for (size_t i = 0; i < a.indices.size(); ++i)
        if (!(renamed(a.indices[i], ra) == renamed(b.indices[i], rb))) return false;
      return true;
    case ir::ExprKind::Apply:
      if (a.op != b.op || a.args.size() != b.args.size()) return false;
      for (size_t i = 0; i < a.args.size(); ++i)
        if (!same(*a.args[i], ra, *b.args[i], rb)) return false;
      return true;
  }
  return false;
}

// Everything the matcher found, kept for build_attention.
struct Detail {
  int s = -1, mx = -1, e = -1, z = -1, p = -1, o = -1, epi = -1;
  std::vector<int> steps;  // element-wise statements between S and Mx
  std::map<int, Rename> rename;
  std::vector<std::string> batch;
  std::string i, j;
  std::vector<std::string> d, value;
  // Q and K as S reads them, V as O does; a local that is a copy of a tensor (an imported
  // Transpose) is read through: its statement joins the match (`copies`)
  struct Read {
    std::string tensor;
    std::vector<ir::AffineExpr> indices;
  };
  Read q, k, v;
  std::vector<int> copies;
  std::vector<int> statements() const {
    std::vector<int> r = {s, mx, e, z, o};
    r.insert(r.end(), copies.begin(), copies.end());
    r.insert(r.end(), steps.begin(), steps.end());
    if (p >= 0) r.push_back(p);
    if (epi >= 0) r.push_back(epi);
    std::sort(r.begin(), r.end());
    return r;
  }
};

struct Matcher {
  const ir::Function& f;
  std::map<std::string, std::vector<int>> readers, writers;

  explicit Matcher(const ir::Function& fn) : f(fn) {
    for (size_t i = 0; i < f.statements.size(); ++i) {
      const auto& s = f.statements[i];
      writers[s.output].push_back(int(i));
      std::set<std::string> r;
      ir::for_each_access(*s.rhs, [&](const ir::Expr& a) { r.insert(a.name); });
      for (const auto& t : r) readers[t].push_back(int(i));
    }
  }

  const ir::Statement& st(int i) const { return f.statements[size_t(i)]; }
  bool local(const std::string& t) const {
    const ir::Tensor* x = f.find_tensor(t);
    return x && x->kind == ir::TensorKind::Local;
  }
  const std::vector<int>& readers_of(const std::string& t) const {
    static const std::vector<int> none;
    auto it = readers.find(t);
    return it == readers.end() ? none : it->second;
  }
  // `t`'s one writer when it is a local written once, else -1
  int sole_writer(const std::string& t) const {
    auto it = writers.find(t);
    if (!local(t) || it == writers.end() || it->second.size() != 1) return -1;
    return it->second.front();
  }

  // Binds the index names of `reader` through its read `a` of the output of `producer` (whose
  // rename is known): the read's plain indices take the roles of the producer's output positions.
  bool bind_read(const ir::Expr& a, int producer, const Rename& prod, Rename& out) const {
    const auto rv = plain_vars(a.indices);
    const auto pv = plain_vars(st(producer).out_indices);
    if (!rv || !pv || rv->size() != pv->size()) return false;
    for (size_t p = 0; p < rv->size(); ++p) {
      auto role = prod.find((*pv)[p]);
      if (role == prod.end()) return false;
      auto [it, fresh] = out.emplace((*rv)[p], role->second);
      if (!fresh && it->second != role->second) return false;
    }
    return true;
  }
  std::optional<std::vector<std::string>> out_roles(int s, const Rename& r) const {
    const auto v = plain_vars(st(s).out_indices);
    if (!v) return std::nullopt;
    std::vector<std::string> roles;
    for (const auto& n : *v) {
      auto it = r.find(n);
      if (it == r.end()) return std::nullopt;
      roles.push_back(it->second);
    }
    return roles;
  }
  std::vector<std::string> reduction_vars(int s) const {
    std::vector<std::string> r;
    for (const auto& v : st(s).domain)
      if (v.is_reduction) r.push_back(v.name);
    return r;
  }
  bool only_read_by(const std::string& t, std::set<int> allowed) const {
    for (int r : readers_of(t))
      if (!allowed.count(r)) return false;
    return true;
  }

  // The value the pattern carries into statement `s`: its one read of a local written once by a
  // contraction or an element-wise statement (other reads are inputs of the kernel).
  const ir::Expr* chain_read(int s) const {
    const ir::Expr* found = nullptr;
    int count = 0;
    ir::for_each_access(*st(s).rhs, [&](const ir::Expr& a) {
      const int w = sole_writer(a.name);
      if (w < 0 || w >= s) return;
      const ir::Statement& ws = st(w);
      const bool elementwise = ws.reduction == ir::Reduction::None;
      const bool contraction = ws.reduction == ir::Reduction::Sum && ws.init && !reduction_vars(w).empty();
      if (elementwise || contraction) {
        if (!found || found->name != a.name) ++count;
        found = &a;
      }
    });
    return count == 1 ? found : nullptr;
  }

  // The operand `a` read by statement `reader`, through a copy: a local written once by an
  // element-wise statement whose right-hand side is one plain read (`kt(a, b) = k(b, a)`) and read
  // by `reader` alone is replaced by the tensor it copies, its indices composed.
  Detail::Read through_copies(const ir::Expr& a, int reader, std::vector<int>& copies) const {
    Detail::Read r{a.name, a.indices};
    for (int guard = 0; guard < 8; ++guard) {
      const int w = sole_writer(r.tensor);
      if (w < 0 || w >= reader || readers_of(r.tensor) != std::vector<int>{reader}) break;
      const ir::Statement& c = st(w);
      if (c.reduction != ir::Reduction::None || c.rhs->kind != ir::ExprKind::Access) break;
      const auto vars = plain_vars(c.out_indices);
      if (!vars || vars->size() != r.indices.size()) break;
      std::map<std::string, ir::AffineExpr> binding;
      for (size_t p = 0; p < vars->size(); ++p) binding[(*vars)[p]] = r.indices[p];
      std::vector<ir::AffineExpr> composed;
      for (const auto& e : c.rhs->indices) composed.push_back(kernel::substitute(e, binding));
      r = {c.rhs->name, composed};
      copies.push_back(w);
      reader = w;
    }
    return r;
  }

  // What the steps of `match` pass on: the maximum's reduced index and input, the chain from the
  // scores to that input, the scores' output indices, the logits' last stored form (x), the
  // maximum's output roles (the scores' less the key), the context's probability input, its
  // producer and read, and the context's output roles.
  struct MatchState {
    std::vector<std::string> mred;
    const ir::Expr* in = nullptr;
    std::vector<int> chain;
    std::vector<std::string> s_out, expect_m, o_roles;
    int x = -1;
    std::string ctx_input;
    int ctx_producer = -1;
    const ir::Expr* pread = nullptr;
  };

  bool is_sum_of(int s, const std::string& t) const {
    const ir::Statement& z = st(s);
    const ir::Expr* r = strip_casts(z.rhs.get());
    return z.reduction == ir::Reduction::Sum && z.init && widening_read(z.rhs.get()) && r->name == t && reduction_vars(s).size() == 1;
  }
  // A context contraction of `t`: a widened product summed over one index, one factor a read of
  // `t`; its read of `t` and its other factor, or nulls.
  std::pair<const ir::Expr*, const ir::Expr*> is_context(int s, const std::string& t) const {
    const ir::Statement& o = st(s);
    const ir::Expr& p = *o.rhs;
    if (!(o.reduction == ir::Reduction::Sum && o.init && p.kind == ir::ExprKind::Apply && p.op == ir::Op::Mul &&
          widening_read(p.args[0].get()) && widening_read(p.args[1].get()) && reduction_vars(s).size() == 1))
      return {nullptr, nullptr};
    const ir::Expr* a = strip_casts(p.args[0].get());
    const ir::Expr* b = strip_casts(p.args[1].get());
    if (a->name == t && b->name != t) return {a, b};
    if (b->name == t && a->name != t) return {b, a};
    return {nullptr, nullptr};
  }

  // The maximum's input walked back to the score contraction S (an f32 sum of a widened product)
  // through element-wise steps, each reading the previous value at the element it computes.
  std::string match_scores(int mx, MatchState& m, Detail& d) const {
    // walk back from the maximum's input to the score contraction
    m.in = chain_read(mx);
    if (!m.in) return "its input is not one local written by a contraction or an element-wise chain";
    for (int w = sole_writer(m.in->name);; ) {  // Mx's input back to S
      if (w < 0) return "its input chain has a tensor written more than once or not local";
      m.chain.push_back(w);
      if (st(w).reduction != ir::Reduction::None) break;
      const ir::Expr* prev = chain_read(w);
      if (!prev) return fmt::format("step {} ({}) reads no one chain value", st(w).name, st(w).output);
      w = sole_writer(prev->name);
    }
    std::reverse(m.chain.begin(), m.chain.end());
    d.s = m.chain.front();
    d.steps.assign(m.chain.begin() + 1, m.chain.end());
    const ir::Statement& S = st(d.s);
    if (S.acc_type != DType::F32) return fmt::format("the scores {} accumulate in {}, not f32", S.output, dtype_name(S.acc_type));
    const ir::Expr& prod = *S.rhs;
    if (!(prod.kind == ir::ExprKind::Apply && prod.op == ir::Op::Mul && widening_read(prod.args[0].get()) &&
          widening_read(prod.args[1].get())))
      return fmt::format("the scores {} are not a sum of a product of two reads widened to f32", S.output);
    const auto s_out = plain_vars(S.out_indices);
    if (!s_out) return fmt::format("the scores {} are written at non-plain indices", S.output);
    m.s_out = *s_out;
    Rename& rs = d.rename[d.s];
    for (const auto& v : S.domain) rs[v.name] = v.name;
    // the steps: element-wise over the scores' space, reading the previous value at its element
    int prev = d.s;
    for (int t : d.steps) {
      const ir::Statement& T = st(t);
      if (T.reduction != ir::Reduction::None) return fmt::format("step {} is a reduction", T.name);
      const ir::Expr* r = chain_read(t);
      if (!r || !bind_read(*r, prev, d.rename[prev], d.rename[t]) || out_roles(t, d.rename[t]) != m.s_out)
        return fmt::format("step {} ({}) does not read {} at the element it computes", T.name, T.output, st(prev).output);
      if (readers_of(st(prev).output) != std::vector<int>{t})
        return fmt::format("{} is read by more than the next step", st(prev).output);
      prev = t;
    }
    m.x = prev;  // the logits' last stored form
    return "";
  }

  // The maximum over the key index j of the logits, written over the scores' space less j; then
  // its one reader, the exponentials exp(logit - max) of the expression the maximum reduces.
  std::string match_max_and_exp(int mx, MatchState& m, Detail& d) const {
    const ir::Statement& M = st(mx);
    const int x = m.x;
    Rename& rm = d.rename[mx];
    if (!bind_read(*m.in, x, d.rename[x], rm) || !rm.count(m.mred[0])) return "the maximum does not read its input at plain indices";
    d.j = rm.at(m.mred[0]);
    auto mroles = out_roles(mx, rm);
    for (const auto& v : m.s_out)
      if (v != d.j) m.expect_m.push_back(v);
    if (mroles != m.expect_m) return "the maximum's output is not the scores' space less the key index";
    // the exponentials
    const std::vector<int>& mx_readers = readers_of(M.output);
    if (mx_readers.size() != 1) return fmt::format("{} is read by {} statements (the exponentials alone expected)", M.output, mx_readers.size());
    d.e = mx_readers.front();
    const ir::Statement& E = st(d.e);
    if (E.reduction != ir::Reduction::None) return fmt::format("{} reads {} in a reduction", E.output, M.output);
    const ir::Expr* ex = strip_casts(E.rhs.get());
    if (!(ex->kind == ir::ExprKind::Apply && ex->op == ir::Op::Exp)) return fmt::format("{} is not exp(logit - {})", E.output, M.output);
    const ir::Expr* sub = ex->args[0].get();
    if (!(sub->kind == ir::ExprKind::Apply && sub->op == ir::Op::Sub)) return fmt::format("{} is not exp(logit - {})", E.output, M.output);
    const ir::Expr* mread = strip_casts(sub->args[1].get());
    if (mread->kind != ir::ExprKind::Access || mread->name != M.output) return fmt::format("{} does not subtract {}", E.output, M.output);
    Rename& re = d.rename[d.e];
    const auto xreads = accesses_of(*sub->args[0], st(x).output);
    if (xreads.size() != 1 || !bind_read(*xreads[0], x, d.rename[x], re) || !bind_read(*mread, mx, rm, re))
      return fmt::format("{} does not read {} and {} at its element", E.output, st(x).output, M.output);
    if (!same(*exact_widening(sub->args[0].get()), re, *exact_widening(M.rhs.get()), rm))
      return fmt::format("the exponent of {} is not the expression the maximum {} reduces", E.output, M.output);
    if (out_roles(d.e, re) != m.s_out) return fmt::format("{} is not written over the scores' space", E.output);
    if (!only_read_by(st(x).output, {mx, d.e})) return fmt::format("{} is read outside the softmax", st(x).output);
    return "";
  }

  // The exponentials' two readers: the row sum Z over j and the context O (of the exponentials,
  // or of the normalised probabilities P = E / Z).
  std::string match_sum_and_context(MatchState& m, Detail& d) const {
    const ir::Statement& E = st(d.e);
    Rename& re = d.rename[d.e];
    const std::vector<int>& e_readers = readers_of(E.output);
    if (e_readers.size() != 2) return fmt::format("{} is read by {} statements (the sum and the context expected)", E.output, e_readers.size());
    for (int r : e_readers) {
      if (is_sum_of(r, E.output)) d.z = r;
      else if (is_context(r, E.output).first) d.o = r;
      else if (st(r).reduction == ir::Reduction::None) d.p = r;
    }
    if (d.z < 0) return fmt::format("no row sum of {} (Z(..) +=! {}(..))", E.output, E.output);
    const ir::Statement& Z = st(d.z);
    if (Z.acc_type != DType::F32) return fmt::format("the sum {} accumulates in {}, not f32", Z.output, dtype_name(Z.acc_type));
    Rename& rz = d.rename[d.z];
    if (!bind_read(*strip_casts(Z.rhs.get()), d.e, re, rz) || rz.at(reduction_vars(d.z)[0]) != d.j || out_roles(d.z, rz) != m.expect_m)
      return fmt::format("{} does not sum {} over the key index", Z.output, E.output);
    m.ctx_input = E.output;
    m.ctx_producer = d.e;
    if (d.p >= 0) {  // P = E / Z, then the context of P
      const ir::Statement& P = st(d.p);
      const ir::Expr* div = strip_casts(P.rhs.get());
      Rename& rp = d.rename[d.p];
      if (!(div->kind == ir::ExprKind::Apply && div->op == ir::Op::Div && strip_casts(div->args[0].get())->name == E.output &&
            strip_casts(div->args[1].get())->name == Z.output && bind_read(*strip_casts(div->args[0].get()), d.e, re, rp) &&
            bind_read(*strip_casts(div->args[1].get()), d.z, rz, rp) && out_roles(d.p, rp) == m.s_out))
        return fmt::format("{} is neither the sum nor the context of {} nor {} / {}", P.output, E.output, E.output, Z.output);
      if (!only_read_by(Z.output, {d.p})) return fmt::format("{} is read outside the softmax", Z.output);
      if (sole_writer(P.output) < 0) return fmt::format("{} is not a local written once", P.output);
      const std::vector<int>& p_readers = readers_of(P.output);
      if (p_readers.size() != 1 || !is_context(p_readers.front(), P.output).first)
        return fmt::format("{} is not read by one context contraction", P.output);
      d.o = p_readers.front();
      m.ctx_input = P.output;
      m.ctx_producer = d.p;
    }
    if (d.o < 0) return fmt::format("no context contraction reads {}", E.output);
    const ir::Statement& O = st(d.o);
    if (O.acc_type != DType::F32) return fmt::format("the context {} accumulates in {}, not f32", O.output, dtype_name(O.acc_type));
    m.pread = is_context(d.o, m.ctx_input).first;
    Rename& ro = d.rename[d.o];
    if (!bind_read(*m.pread, m.ctx_producer, d.rename[m.ctx_producer], ro) || ro.at(reduction_vars(d.o)[0]) != d.j)
      return fmt::format("{} does not sum {} over the key index", O.output, m.ctx_input);
    return "";
  }

  // The value indices (the context's output indices not bound through the probabilities, named
  // apart from the scores'), then the roles: the head indices (S's reductions), the query index i
  // (read by Q, not K), the batch indices, and the operands Q, K, V read through copies.
  std::string match_roles(MatchState& m, Detail& d) const {
    const ir::Statement& O = st(d.o);
    Rename& rs = d.rename[d.s];
    Rename& ro = d.rename[d.o];
    std::set<std::string> used;
    for (const auto& [n, r] : rs) used.insert(r);
    const auto o_out = plain_vars(O.out_indices);
    if (!o_out) return fmt::format("the context {} is written at non-plain indices", O.output);
    for (const auto& v : *o_out)
      if (!ro.count(v)) {
        std::string role = used.count(v) ? v + "_v" : v;
        while (used.count(role)) role += "_";
        used.insert(role);
        ro[v] = role;
        d.value.push_back(role);
      }
    if (d.value.empty()) return fmt::format("the context {} has no value index", O.output);
    m.o_roles = *out_roles(d.o, ro);
    std::set<std::string> o_role_set(m.o_roles.begin(), m.o_roles.end());
    for (const auto& v : m.expect_m)
      if (!o_role_set.count(v)) return fmt::format("the context {} drops the scores' index {}", O.output, v);
    // roles: d (S's reductions), i, batch
    d.d = reduction_vars(d.s);
    const ir::Expr& prod = *st(d.s).rhs;
    const ir::Expr* qa = strip_casts(prod.args[0].get());
    const ir::Expr* ka = strip_casts(prod.args[1].get());
    auto reads_var = [](const std::vector<ir::AffineExpr>& indices, const std::string& v, const Rename& r) {
      for (const auto& ix : indices)
        if (renamed(ix, r).index_coeffs.count(v)) return true;
      return false;
    };
    if (reads_var(qa->indices, d.j, rs)) std::swap(qa, ka);
    if (reads_var(qa->indices, d.j, rs) || !reads_var(ka->indices, d.j, rs)) return "the key index is read by both score operands or by neither";
    for (const auto& v : m.s_out)
      if (v != d.j && reads_var(qa->indices, v, rs) && !reads_var(ka->indices, v, rs)) d.i = v;
    if (d.i.empty()) return "no query index (an output index of the scores that Q reads and K does not)";
    for (const auto& v : m.s_out)
      if (v != d.i && v != d.j) d.batch.push_back(v);
    for (const auto& v : d.d)
      if (!reads_var(qa->indices, v, rs) || !reads_var(ka->indices, v, rs)) return "a head index " + v + " is not read by both score operands";
    const ir::Expr* va = m.pread == strip_casts(O.rhs->args[0].get()) ? strip_casts(O.rhs->args[1].get()) : strip_casts(O.rhs->args[0].get());
    if (reads_var(va->indices, d.i, ro)) return fmt::format("the value operand {} reads the query index", va->name);
    for (const auto& v : d.d)
      if (reads_var(va->indices, v, ro)) return fmt::format("the value operand {} reads a head index", va->name);
    d.q = through_copies(*qa, d.s, d.copies);
    d.k = through_copies(*ka, d.s, d.copies);
    d.v = through_copies(*va, d.o, d.copies);
    for (const auto* opnd : {&d.q, &d.k, &d.v}) {
      const int w = sole_writer(opnd->tensor);
      if (w >= 0 && std::find(m.chain.begin(), m.chain.end(), w) != m.chain.end()) return "an operand is a value of the softmax itself";
      for (const auto& ix : opnd->indices)
        if (ix.has_div()) return "an operand is read with floor division or modulo";
    }
    return "";
  }

  // The epilogue: a local context has one element-wise reader, which divides by the sum unless the
  // probabilities were normalised first; an output context needs them normalised.
  std::string match_epilogue(const MatchState& m, Detail& d) const {
    const ir::Statement& O = st(d.o);
    const ir::Statement& Z = st(d.z);
    if (local(O.output)) {
      const std::vector<int>& o_readers = readers_of(O.output);
      if (o_readers.size() != 1) return fmt::format("{} is read by {} statements (one epilogue expected)", O.output, o_readers.size());
      d.epi = o_readers.front();
      const ir::Statement& X = st(d.epi);
      Rename& rx = d.rename[d.epi];
      const auto oreads = accesses_of(*X.rhs, O.output);
      if (X.reduction != ir::Reduction::None || oreads.size() != 1 || !bind_read(*oreads[0], d.o, d.rename[d.o], rx) ||
          out_roles(d.epi, rx) != m.o_roles)
        return fmt::format("{} is not element-wise over the context {}", X.output, O.output);
      if (d.p < 0) {
        const auto zreads = accesses_of(*X.rhs, Z.output);
        if (zreads.empty()) return fmt::format("{} does not divide by the sum {}", X.output, Z.output);
        for (const auto* zr : zreads)
          if (!bind_read(*zr, d.z, d.rename[d.z], rx)) return fmt::format("{} reads {} off the row", X.output, Z.output);
      }
      if (!only_read_by(Z.output, {d.p >= 0 ? d.p : d.epi})) return fmt::format("{} is read outside the softmax", Z.output);
    } else if (d.p < 0) {
      return fmt::format("the context {} is an output, so the sum {} is never divided into it", O.output, Z.output);
    }
    return "";
  }

  // Probabilities rounded to a 16-bit type are rounded at another scale by the online form (the
  // running maximum's; normalise-first: not at all before the context): a difference of about one
  // unit in their last place per term, which an f32 result would show beyond its bound, so the
  // result must itself be of a 16-bit type. And every intermediate a local written once, read
  // only inside, with no floor division or modulo in an index.
  std::string check_rounding_and_locals(const Detail& d) const {
    auto narrow = [&](int s) { return s >= 0 && dtype_bytes(f.find_tensor(st(s).output)->dtype) < 4; };
    const int result = d.epi >= 0 ? d.epi : d.o;
    if ((narrow(d.e) || narrow(d.p)) && !narrow(result))
      return fmt::format("the probabilities are rounded to a 16-bit type but the result {} is {}: the online form rounds them "
                         "at the running maximum's scale, about one unit in their last place apart per term",
                         st(result).output, dtype_name(f.find_tensor(st(result).output)->dtype));
    const std::vector<int> all = d.statements();
    const std::set<int> inside(all.begin(), all.end());
    for (int s : all) {
      if (has_division(st(s))) return fmt::format("{} uses floor division or modulo in an index", st(s).name);
      if (s == d.epi || (s == d.o && d.epi < 0)) continue;
      if (sole_writer(st(s).output) != s) return fmt::format("{} is not a local written once", st(s).output);
      for (int r : readers_of(st(s).output))
        if (!inside.count(r)) return fmt::format("{} is read by {} outside the softmax", st(s).output, st(r).name);
    }
    return "";
  }

  // Tries the pattern around max statement `mx`; "" and `d` filled on success, else the reason.
  std::string match(int mx, Detail& d) const {
    const ir::Statement& M = st(mx);
    if (M.reduction != ir::Reduction::Max || !M.init) return "not a max=! reduction";
    MatchState m;
    m.mred = reduction_vars(mx);
    if (m.mred.size() != 1) return "the maximum reduces over " + std::to_string(m.mred.size()) + " indices (one key index expected)";
    d.mx = mx;
    std::string why = match_scores(mx, m, d);
    if (why.empty()) why = match_max_and_exp(mx, m, d);
    if (why.empty()) why = match_sum_and_context(m, d);
    if (why.empty()) why = match_roles(m, d);
    if (why.empty()) why = match_epilogue(m, d);
    if (why.empty()) why = check_rounding_and_locals(d);
    return why;
  }
};

std::string summary(const ir::Function& f, const Detail& d) {
  auto out = [&](int s) { return f.statements[size_t(s)].output; };
  std::string steps;
  for (int t : d.steps) steps += out(t) + ", ";
  std::string s = out(d.s) + " -> " + steps + out(d.mx) + ", " + out(d.e) + ", " + out(d.z);
  if (d.p >= 0) s += " -> " + out(d.p);
  s += " -> " + out(d.o);
  if (d.epi >= 0) s += " -> " + out(d.epi);
  return s;
}

kernel::AttentionOperand operand(const ir::Function& f, const std::string& tensor, const std::vector<ir::AffineExpr>& indices,
                                 const Rename& r, const std::map<std::string, int64_t>& sizes) {
  const ir::Tensor* t = f.find_tensor(tensor);
  TESSEL_CHECK(t, "online_softmax: no tensor " + tensor);
  kernel::AttentionOperand o;
  o.tensor = tensor;
  o.dtype = t->dtype;
  for (const auto& s : t->shape) o.shape.push_back(s.evaluate({}, sizes));
  int64_t stride = 1;
  for (size_t dim = indices.size(); dim-- > 0;) {
    const ir::AffineExpr& e = indices[dim];
    for (const auto& [n, c] : e.index_coeffs) {
      auto it = r.find(n);
      TESSEL_CHECK(it != r.end(), "online_softmax: index " + n + " of " + tensor + " has no role");
      o.coeff[it->second] += c * stride;
    }
    ir::AffineExpr rest = e;
    rest.index_coeffs.clear();
    o.base += rest.evaluate({}, sizes) * stride;
    stride *= o.shape[dim];
  }
  for (auto it = o.coeff.begin(); it != o.coeff.end();) it = it->second == 0 ? o.coeff.erase(it) : std::next(it);
  return o;
}

kernel::ContractionDim dim_of(const ir::Statement& s, const std::string& name, const std::string& role,
                              const std::map<std::string, int64_t>& sizes) {
  const ir::IndexVar* v = s.find_index(name);
  TESSEL_CHECK(v, "online_softmax: no index " + name + " in " + s.name);
  return {role, (v->hi - v->lo).evaluate({}, sizes)};
}

// The statement index name whose role is `role` (inverse of a rename).
std::string named(const Rename& r, const std::string& role) {
  for (const auto& [n, x] : r)
    if (x == role) return n;
  throw InternalError("online_softmax: no index has the role " + role);
}

// An integer-valued expression of indices, sizes and integer constants as an affine expression.
std::optional<ir::AffineExpr> integer_affine(const ir::Expr& e) {
  switch (e.kind) {
    case ir::ExprKind::IndexValue: return e.affine;
    case ir::ExprKind::SizeParam: return ir::AffineExpr::param(e.name);
    case ir::ExprKind::Constant:
      if (e.value != std::floor(e.value) || std::fabs(e.value) > 1e15) return std::nullopt;
      return ir::AffineExpr::constant_of(int64_t(e.value));
    case ir::ExprKind::Apply: {
      if (e.op == ir::Op::Cast && dtype_is_float(e.type)) return std::nullopt;
      std::vector<ir::AffineExpr> a;
      for (const auto& x : e.args) {
        auto v = integer_affine(*x);
        if (!v) return std::nullopt;
        a.push_back(*v);
      }
      switch (e.op) {
        case ir::Op::Cast: return a[0];
        case ir::Op::Add: return a[0] + a[1];
        case ir::Op::Sub: return a[0] - a[1];
        case ir::Op::Neg: return a[0].scaled(-1);
        case ir::Op::Mul:
          if (a[0].is_constant()) return a[1].scaled(a[0].constant);
          if (a[1].is_constant()) return a[0].scaled(a[1].constant);
          return std::nullopt;
        default: return std::nullopt;
      }
    }
    case ir::ExprKind::Access: return std::nullopt;
  }
  return std::nullopt;
}

// `select(j <= i + c, x, m)` (or <, >=, > forms) with m <= -1e30 as the last step: the offset c.
std::optional<int64_t> causal_offset(const kernel::AttentionExpr& step, const std::string& i, const std::string& j,
                                     const std::map<std::string, int64_t>& sizes) {
  const ir::Expr* e = strip_casts(step.expr);
  if (!(e->kind == ir::ExprKind::Apply && e->op == ir::Op::Select)) return std::nullopt;
  const ir::Expr* masked = strip_casts(e->args[2].get());
  double sign = 1;
  while (masked->kind == ir::ExprKind::Apply && masked->op == ir::Op::Neg) {
    sign = -sign;
    masked = strip_casts(masked->args[0].get());
  }
  if (!(masked->kind == ir::ExprKind::Constant && sign * masked->value <= -1e30)) return std::nullopt;
  const ir::Expr* c = e->args[0].get();
  if (!(c->kind == ir::ExprKind::Apply && c->args.size() == 2)) return std::nullopt;
  const auto lhs = integer_affine(*c->args[0]), rhs = integer_affine(*c->args[1]);
  if (!lhs || !rhs) return std::nullopt;
  ir::AffineExpr diff = renamed(*lhs, step.rename) - renamed(*rhs, step.rename);
  int64_t slack = 0;  // diff <= slack
  switch (c->op) {
    case ir::Op::Le: break;
    case ir::Op::Lt: slack = -1; break;
    case ir::Op::Ge: diff = diff.scaled(-1); break;
    case ir::Op::Gt: diff = diff.scaled(-1); slack = -1; break;
    default: return std::nullopt;
  }
  // diff = j - i + k <= slack  <=>  j <= i + slack - k
  if (diff.index_coeffs != std::map<std::string, int64_t>{{i, -1}, {j, 1}} || diff.has_div()) return std::nullopt;
  ir::AffineExpr rest = diff;
  rest.index_coeffs.clear();
  const int64_t offset = slack - rest.evaluate({}, sizes);
  if (offset < 0) return std::nullopt;  // rows i < -offset keep no key: the mask is not a skip
  return offset;
}

}  // namespace

OnlineSoftmaxSearch find_online_softmax(const ir::Function& f) {
  OnlineSoftmaxSearch r;
  const Matcher m(f);
  std::set<int> taken;
  for (size_t i = 0; i < f.statements.size(); ++i) {
    if (f.statements[i].reduction != ir::Reduction::Max) continue;
    Detail d;
    const std::string why = m.match(int(i), d);
    if (!why.empty()) {
      r.rejected.push_back(fmt::format("{} ({}): {}", f.statements[i].output, f.statements[i].name, why));
      continue;
    }
    const auto st = d.statements();
    if (std::any_of(st.begin(), st.end(), [&](int s) { return taken.count(s); })) continue;
    taken.insert(st.begin(), st.end());
    r.matches.push_back(OnlineSoftmaxMatch{st, d.s, summary(f, d)});
  }
  return r;
}

std::optional<OnlineSoftmaxMatch> whole_function_match(const ir::Function& f, std::string* why_not) {
  const OnlineSoftmaxSearch s = find_online_softmax(f);
  for (const auto& m : s.matches)
    if (m.statements.size() == f.statements.size()) return m;
  if (why_not) {
    if (!s.matches.empty()) *why_not = "the softmax is one part of the def (the program partition cuts it out)";
    else if (!s.rejected.empty()) *why_not = s.rejected.front();
    else *why_not = "no max=! reduction";
  }
  return std::nullopt;
}

kernel::Attention build_attention(const ir::Function& f, const OnlineSoftmaxMatch& match,
                                  const std::map<std::string, int64_t>& sizes) {
  const Matcher m(f);
  Detail d;
  int mx = -1;
  for (int s : match.statements)
    if (f.statements[size_t(s)].reduction == ir::Reduction::Max) mx = s;
  const std::string why = mx < 0 ? "no maximum" : m.match(mx, d);
  TESSEL_CHECK(why.empty(), "online_softmax: the match no longer holds: " + why);
  kernel::Attention a;
  a.statements = d.statements();
  a.name = summary(f, d);
  a.sizes = sizes;
  const ir::Statement& S = f.statements[size_t(d.s)];
  const ir::Statement& O = f.statements[size_t(d.o)];
  const Rename& rs = d.rename.at(d.s);
  const Rename& ro = d.rename.at(d.o);
  for (const auto& b : d.batch) a.batch.push_back(dim_of(S, named(rs, b), b, sizes));
  a.query = dim_of(S, named(rs, d.i), d.i, sizes);
  a.key = dim_of(S, named(rs, d.j), d.j, sizes);
  for (const auto& h : d.d) a.head.push_back(dim_of(S, h, h, sizes));
  for (const auto& v : d.value) a.value.push_back(dim_of(O, named(ro, v), v, sizes));
  a.q = operand(f, d.q.tensor, d.q.indices, rs, sizes);
  a.k = operand(f, d.k.tensor, d.k.indices, rs, sizes);
  a.v = operand(f, d.v.tensor, d.v.indices, ro, sizes);
  a.score_type = S.acc_type;
  int prev = d.s;
  for (int t : d.steps) {
    const ir::Statement& T = f.statements[size_t(t)];
    a.steps.push_back({T.rhs.get(), d.rename.at(t), {{f.statements[size_t(prev)].output, "score"}}, f.find_tensor(T.output)->dtype});
    prev = t;
  }
  const ir::Statement& M = f.statements[size_t(d.mx)];
  if (M.rhs->kind != ir::ExprKind::Access)
    a.steps.push_back({M.rhs.get(), d.rename.at(d.mx), {{f.statements[size_t(prev)].output, "score"}}, M.rhs->type});
  if (!a.steps.empty()) a.causal_offset = causal_offset(a.steps.back(), d.i, d.j, sizes);
  a.prob_type = f.find_tensor(f.statements[size_t(d.e)].output)->dtype;
  a.sum_type = f.statements[size_t(d.z)].acc_type;
  a.context_type = O.acc_type;
  a.normalise_first = d.p >= 0;
  if (d.epi >= 0) {
    const ir::Statement& X = f.statements[size_t(d.epi)];
    std::map<std::string, std::string> inputs = {{O.output, "O"}};
    if (d.p < 0) inputs[f.statements[size_t(d.z)].output] = "Z";
    a.epilogue = {X.rhs.get(), d.rename.at(d.epi), inputs, f.find_tensor(X.output)->dtype};
    a.out = operand(f, X.output, X.out_indices, d.rename.at(d.epi), sizes);
  } else {
    a.out = operand(f, O.output, O.out_indices, ro, sizes);
  }
  return a;
}

}  // namespace tessel::poly
