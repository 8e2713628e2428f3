#include "compiler/poly/split_reductions.h"

#include <functional>

#include <algorithm>
#include <set>

namespace tessel::poly {

namespace {

ir::AffineExpr substitute(const ir::AffineExpr& e, const std::string& index, const ir::AffineExpr& by) {
  ir::AffineExpr out = ir::AffineExpr::constant_of(e.constant);
  for (const auto& [n, c] : e.index_coeffs) out = out + (n == index ? by.scaled(c) : ir::AffineExpr::index(n, c));
  for (const auto& [p, c] : e.param_coeffs) out = out + ir::AffineExpr::param(p, c);
  for (const auto& d : e.divs) out = out + ir::AffineExpr::floor_div_of(substitute(d.numerator, index, by), d.divisor).scaled(d.coeff);
  return out;
}

ir::ExprPtr substitute(const ir::ExprPtr& e, const std::string& index, const ir::AffineExpr& by) {
  auto x = std::make_shared<ir::Expr>(*e);
  if (x->kind == ir::ExprKind::IndexValue) x->affine = substitute(x->affine, index, by);
  for (auto& i : x->indices) i = substitute(i, index, by);
  for (auto& a : x->args) a = substitute(a, index, by);
  return x;
}

std::shared_ptr<ir::Expr> node(ir::ExprKind k, DType t, const ir::SourceLoc& loc) {
  auto x = std::make_shared<ir::Expr>();
  x->kind = k;
  x->type = t;
  x->loc = loc;
  return x;
}

std::string fresh(const std::string& base, const std::set<std::string>& taken) {
  std::string n = base;
  for (int i = 2; taken.count(n); ++i) n = base + std::to_string(i);
  return n;
}

// Where a reduction statement is cut: the reduced index, its length, the chunk length B and the
// number of chunks C.
struct SplitChoice {
  const ir::IndexVar* index = nullptr;
  int64_t length = 0, chunk = 0, chunks = 0;
  int64_t outputs = 0;  // the statement's output elements
  bool column = false;   // ir::is_column_reduction
};

// The cut of reduction `s`, or nothing where it keeps one phase: it has as many outputs as the
// policy's parallel units, too few reduced elements, or fewer than two chunks would result. One
// long index: aligned chunks of it; several short ones (a reduction over N, H, W): the outermost
// one in chunks of whole slices.
std::optional<SplitChoice> choose_split(const ir::Statement& s, const std::map<std::string, int64_t>& sizes, const SplitPolicy& policy) {
  int64_t outputs = 1, volume = 1;
  const ir::IndexVar *longest = nullptr, *outermost = nullptr;
  int64_t length = 0, outer_length = 0;
  for (const auto& iv : s.domain) {
    const int64_t n = std::max<int64_t>(0, iv.hi.evaluate({}, sizes) - iv.lo.evaluate({}, sizes));
    if (!iv.is_reduction) {
      outputs *= n;
      continue;
    }
    volume = volume > (int64_t(1) << 40) / std::max<int64_t>(1, n) ? int64_t(1) << 40 : volume * n;
    if (n > length) length = n, longest = &iv;
    if (!outermost && n >= 2) outermost = &iv, outer_length = n;
  }
  // A column reduction (ir::is_column_reduction: NHWC batch-norm statistics) maps outputs to
  // threads, so it wants a block of threads' worth of outputs per unit: many small chunks, not
  // a few long ones; its reduced index is not the contiguous one, so no granule either. It is
  // split while its outputs leave units without a block of threads (a max over the middle axis of
  // 16x512x256: 4,096 threads walking 512 elements each, 5 % of copy bandwidth on an H200), its
  // chunks at least column_min_chunk long.
  const bool column = ir::is_column_reduction(s);
  if (!longest || outputs <= 0) return std::nullopt;
  if (column ? outputs >= policy.column_outputs_per_unit * policy.parallel_units || volume < 2 * policy.column_min_chunk
             : outputs >= policy.parallel_units || volume < policy.min_length)
    return std::nullopt;
  const bool long_index = length >= policy.min_length;
  if (!long_index) longest = outermost, length = outer_length;
  const int64_t granule = long_index && !column ? policy.granule : 1;
  const int64_t wanted = column ? policy.column_outputs_per_unit * policy.parallel_units : policy.chunks_per_unit * policy.parallel_units;
  const int64_t target = (wanted + outputs - 1) / outputs;
  // (a chunk's elements: its part of the split index times the other reduced indices')
  const int64_t inner = std::max<int64_t>(1, volume / std::max<int64_t>(1, length));
  const int64_t per = std::max((length + target - 1) / target, column ? (policy.column_min_chunk + inner - 1) / inner : 1);
  const int64_t B = long_index && !column
                        ? std::min(std::max(granule, policy.max_chunk / granule * granule), (per + granule - 1) / granule * granule)
                        : per;
  const int64_t C = (length + B - 1) / B;
  if (C < 2) return std::nullopt;
  return SplitChoice{longest, length, B, C, outputs, column};
}

// The right-hand side of phase one: `s`'s with the cut index at chunk ci's element ji; past the
// index's length (a last chunk cut short) the reduction's identity for a sum (0) or a product
// (1), the chunk's first element for max / min (idempotent).
ir::ExprPtr phase_one_value(const ir::Statement& s, const SplitChoice& cut, const std::string& ci, const std::string& ji) {
  const std::string r = cut.index->name;
  const ir::AffineExpr offset = ir::AffineExpr::index(ci, cut.chunk) + ir::AffineExpr::index(ji);
  ir::ExprPtr body = substitute(s.rhs, r, cut.index->lo + offset);
  if (cut.length % cut.chunk == 0) return body;
  auto pos = node(ir::ExprKind::IndexValue, DType::I32, s.loc);
  pos->affine = offset;
  auto len = node(ir::ExprKind::Constant, DType::I32, s.loc);
  len->value = double(cut.length);
  auto cond = node(ir::ExprKind::Apply, DType::I32, s.loc);
  cond->op = ir::Op::Lt;
  cond->args = {pos, len};
  ir::ExprPtr other;
  if (s.reduction == ir::Reduction::Sum || s.reduction == ir::Reduction::Prod) {
    auto identity = node(ir::ExprKind::Constant, s.rhs->type, s.loc);  // 0, or 1 for a product
    identity->value = s.reduction == ir::Reduction::Prod ? 1.0 : 0.0;
    other = identity;
  } else {
    // the chunk's own first element (max / min are idempotent): the chunk's reads stay inside
    // it, so its footprint per tile is one chunk, not everything from the index's first element
    other = substitute(s.rhs, r, cut.index->lo + ir::AffineExpr::index(ci, cut.chunk));
  }
  auto sel = node(ir::ExprKind::Apply, s.rhs->type, s.loc);
  sel->op = ir::Op::Select;
  sel->args = {cond, body, other};
  return sel;
}

// The two statements a cut reduction becomes, and the partial tensor between them (one element
// per output index value and chunk).
struct SplitPhases {
  ir::Tensor partial;
  ir::Statement one, two;
};
SplitPhases split_phases(const ir::Statement& s, const SplitChoice& cut, const std::string& partial, std::set<std::string>& names,
                         const SplitPolicy& policy) {
  const std::string r = cut.index->name;
  const std::string ci = fresh(r + "_chunk", names), ji = fresh(r + "_in", names), pi = fresh(r + "_part", names);
  names.insert(ci), names.insert(ji), names.insert(pi);
  SplitPhases out;
  ir::Tensor& pt = out.partial;
  pt.name = partial;
  pt.dtype = s.acc_type;
  pt.kind = ir::TensorKind::Local;
  pt.loc = s.loc;
  std::vector<ir::AffineExpr> pidx;     // T_partial's indices in terms of the output indices
  std::vector<ir::IndexVar> out_dims;   // the statement's output indices
  for (const auto& iv : s.domain)
    if (!iv.is_reduction) {
      out_dims.push_back(iv);
      pt.shape.push_back(iv.hi - iv.lo);
      pidx.push_back(ir::AffineExpr::index(iv.name) - iv.lo);
    }
  // chunk-major (T_partial(c, o)) where phase two's threads take consecutive outputs
  const bool chunk_major = policy.chunk_major_outputs > 0 && cut.column && cut.outputs >= policy.chunk_major_outputs;
  const auto with_chunk = [&](std::vector<ir::AffineExpr> idx, const ir::AffineExpr& c) {
    idx.insert(chunk_major ? idx.begin() : idx.end(), c);
    return idx;
  };
  pt.shape = with_chunk(pt.shape, ir::AffineExpr::constant_of(cut.chunks));

  ir::Statement& p1 = out.one;
  p1 = s;
  p1.output = partial;
  p1.out_indices = with_chunk(pidx, ir::AffineExpr::index(ci));
  p1.domain = out_dims;
  p1.domain.push_back({ci, ir::AffineExpr::constant_of(0), ir::AffineExpr::constant_of(cut.chunks), false});
  p1.domain.push_back({ji, ir::AffineExpr::constant_of(0), ir::AffineExpr::constant_of(cut.chunk), true});
  for (const auto& iv : s.domain)
    if (iv.is_reduction && iv.name != r) p1.domain.push_back(iv);
  p1.rhs = phase_one_value(s, cut, ci, ji);

  // phase two: its own name for the chunk index, so that its tile (all chunks in one block) is
  // chosen apart from phase one's (chunks spread over the blocks)
  ir::Statement& p2 = out.two;
  p2 = s;
  p2.domain = out_dims;
  p2.domain.push_back({pi, ir::AffineExpr::constant_of(0), ir::AffineExpr::constant_of(cut.chunks), true});
  auto read = node(ir::ExprKind::Access, s.acc_type, s.loc);
  read->name = partial;
  read->indices = with_chunk(pidx, ir::AffineExpr::index(pi));
  p2.rhs = read;
  return out;
}

}  // namespace

std::string ReductionSplit::to_string() const {
  return statement + ": the reduction over " + index + " (" + std::to_string(length) + " elements) runs in two phases: " +
         std::to_string(chunks) + " chunks of " + std::to_string(chunk) + " into " + partial +
         ", then the chunks in order";
}

std::optional<ir::Function> split_reductions(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                             const SplitPolicy& policy, std::vector<ReductionSplit>* splits) {
  if (policy.parallel_units <= 0) return std::nullopt;
  ir::Function out = f;
  out.statements.clear();
  std::set<std::string> tensor_names;
  for (const auto& t : f.tensors) tensor_names.insert(t.name);
  bool changed = false;
  // Phase-two statements wait until a later statement touches their output (or the end), so that
  // consecutive split reductions (a sum and a sum of squares over the same input) keep their phase
  // ones together: fused into one pass over the input, the phase twos into another.
  std::vector<ir::Statement> pending;
  auto touches = [](const ir::Statement& st, const std::string& name) {
    bool hit = st.output == name;
    if (st.rhs) ir::for_each_access(*st.rhs, [&](const ir::Expr& e) { hit = hit || e.name == name; });
    return hit;
  };
  auto place = [&](const ir::Statement& st) {
    bool flush = false;
    for (const auto& q : pending) flush = flush || touches(st, q.output);
    if (flush) {
      for (auto& q : pending) out.statements.push_back(std::move(q));
      pending.clear();
    }
    out.statements.push_back(st);
  };
  for (const ir::Statement& s : f.statements) {
    // a 16-bit product's partial products would round differently
    const std::optional<SplitChoice> cut = s.reduction == ir::Reduction::None || !s.init || ir::is_ordered_product(s)
                                               ? std::nullopt
                                               : choose_split(s, sizes, policy);
    if (!cut) {
      place(s);
      continue;
    }
    std::set<std::string> names(f.params.begin(), f.params.end());
    for (const auto& iv : s.domain) names.insert(iv.name);
    const std::string partial = fresh(s.output + "_partial", tensor_names);
    tensor_names.insert(partial);
    SplitPhases phases = split_phases(s, *cut, partial, names, policy);
    out.tensors.push_back(phases.partial);
    place(phases.one);
    pending.push_back(phases.two);  // after the phase ones that follow, until something reads it
    if (splits) splits->push_back({s.name, cut->index->name, cut->length, cut->chunks, cut->chunk, partial});
    changed = true;
  }
  for (auto& q : pending) out.statements.push_back(std::move(q));
  if (!changed) return std::nullopt;
  for (size_t i = 0; i < out.statements.size(); ++i) out.statements[i].name = "S" + std::to_string(i);
  return out;
}

}  // namespace tessel::poly
