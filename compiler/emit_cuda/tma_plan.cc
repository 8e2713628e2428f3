#include "compiler/emit_cuda/tma_plan.h"

#include <functional>
#include <optional>

namespace tessel::emit_cuda {

namespace {

TmaPlan& finish(TmaPlan& t, int eb);
TmaPlan split_outer_plan(const OperandPlan& p, const Contraction& c, int min_boxes, TmaPlan& t);

// The element stride of `dims` (outer -> inner) read as one linear dim: each dim's stride is the
// next inner one's times its extent. nullopt when they do not compose (or a dim is broadcast).
std::optional<int64_t> linear_stride(const ContractionOperand& op, const std::vector<ContractionDim>& dims) {
  std::optional<int64_t> inner;
  int64_t expect = 0;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    auto c = op.coeff.find(it->var);
    if (c == op.coeff.end() || c->second <= 0) return std::nullopt;
    if (inner && c->second != expect) return std::nullopt;
    if (!inner) inner = c->second;
    expect = c->second * it->extent;
  }
  return inner;
}

int64_t constant_of(const ir::AffineExpr& a, const std::map<std::string, int64_t>& sizes) {
  int64_t v = a.constant;
  for (const auto& [p, q] : a.param_coeffs) v += q * sizes.at(p);
  return v;
}

// The integer value of a guard expression at `point` (index -> value); nullopt for anything but
// integer arithmetic, comparisons and logic on indices and sizes.
std::optional<int64_t> eval_guard(const ir::Expr& e, const std::map<std::string, int64_t>& point, const std::map<std::string, int64_t>& sizes) {
  using ir::Op;
  switch (e.kind) {
    case ir::ExprKind::Constant: return e.value == double(int64_t(e.value)) ? std::optional<int64_t>(int64_t(e.value)) : std::nullopt;
    case ir::ExprKind::SizeParam: return sizes.count(e.name) ? std::optional<int64_t>(sizes.at(e.name)) : std::nullopt;
    case ir::ExprKind::IndexValue: {
      int64_t v = constant_of(e.affine, sizes);
      for (const auto& [x, q] : e.affine.index_coeffs) {
        auto it = point.find(x);
        if (it == point.end()) return std::nullopt;
        v += q * it->second;
      }
      return v;
    }
    case ir::ExprKind::Access: return std::nullopt;
    case ir::ExprKind::Apply: break;
  }
  std::vector<int64_t> a;
  for (const auto& x : e.args) {
    auto v = eval_guard(*x, point, sizes);
    if (!v) return std::nullopt;
    a.push_back(*v);
  }
  switch (e.op) {
    case Op::Add: return a[0] + a[1];
    case Op::Sub: return a[0] - a[1];
    case Op::Mul: return a[0] * a[1];
    case Op::Neg: return -a[0];
    case Op::Lt: return a[0] < a[1];
    case Op::Le: return a[0] <= a[1];
    case Op::Gt: return a[0] > a[1];
    case Op::Ge: return a[0] >= a[1];
    case Op::Eq: return a[0] == a[1];
    case Op::Ne: return a[0] != a[1];
    case Op::And: return a[0] && a[1];
    case Op::Or: return a[0] || a[1];
    case Op::Not: return !a[0];
    case Op::Min: return std::min(a[0], a[1]);
    case Op::Max: return std::max(a[0], a[1]);
    case Op::Select: return a[0] ? a[1] : a[2];
    default: return std::nullopt;
  }
}

// the read of `tensor` in a producer's right-hand side (its indices over the producer's indices)
const ir::Expr* find_access(const ir::Expr& e, const std::string& tensor) {
  if (e.kind == ir::ExprKind::Access && e.name == tensor) return &e;
  for (const auto& a : e.args)
    if (const ir::Expr* f = find_access(*a, tensor)) return f;
  return nullptr;
}

// `a` is exactly these index terms (index -> coefficient; constants aside, no division)
bool is_terms(const ir::AffineExpr& a, std::initializer_list<std::pair<std::string, int64_t>> terms) {
  if (a.has_div() || a.index_coeffs.size() != terms.size()) return false;
  for (const auto& [x, q] : terms) {
    auto it = a.index_coeffs.find(x);
    if (it == a.index_coeffs.end() || it->second != q) return false;
  }
  return true;
}

// The im2col view of `op` (the A operand of an NHWC convolution), or why there is none: tensor
// dims [n.., h, w, c..] read as (m[0..g) plain; p + dh * r + h0; q + dw * s + w0; k[2..] plain).
std::string im2col_view(const OperandPlan& p, const Contraction& c, Im2colView& v) {
  const ContractionOperand& op = *p.op;
  const auto& m = *p.outer;
  const auto& k = *p.kdims;
  if (m.size() < 3 || k.size() < 3) return "not an (n, p, q) x (r, s, c) convolution view";
  const size_t gn = m.size() - 2, gc = k.size() - 2, rank = gn + 2 + gc;
  if (op.indices.size() != rank || op.shape.size() != rank) return "not an NHWC input (dims [n.., h, w, c..])";
  const auto& ix = op.indices;
  for (size_t d = 0; d < rank; ++d) {
    if (d == gn || d == gn + 1) continue;
    const ContractionDim& x = d < gn ? m[d] : k[d - gn];
    if (!is_terms(ix[d], {{x.var, 1}})) return "batch or channel index is not plain";
    if (constant_of(ix[d], c.sizes) != 0) return "batch or channel index is shifted";
    if (x.extent != op.shape[d]) return "the view does not cover the input's batch and channels";
  }
  const ContractionDim &pv = m[gn], &qv = m[gn + 1], &rv = k[0], &sv = k[1];
  v.dh = ix[gn].index_coeffs.count(rv.var) ? ix[gn].index_coeffs.at(rv.var) : 0;
  v.dw = ix[gn + 1].index_coeffs.count(sv.var) ? ix[gn + 1].index_coeffs.at(sv.var) : 0;
  if (!is_terms(ix[gn], {{pv.var, 1}, {rv.var, v.dh}}) || !is_terms(ix[gn + 1], {{qv.var, 1}, {sv.var, v.dw}}) || v.dh < 1 || v.dw < 1)
    return "the window is not stride 1 (h = p + d * r - pad)";
  v.P = pv.extent, v.Q = qv.extent, v.R = rv.extent, v.S = sv.extent;
  v.h0 = constant_of(ix[gn], c.sizes), v.w0 = constant_of(ix[gn + 1], c.sizes);
  v.H = op.shape[gn], v.W = op.shape[gn + 1];
  v.N = v.C = 1;
  for (size_t d = 0; d < gn; ++d) v.N *= op.shape[d];
  for (size_t d = gn + 2; d < rank; ++d) v.C *= op.shape[d];
  // dense strides: the address of X(n, h, w, c) is ((n * H + h) * W + w) * C + c, n and c composed
  std::map<std::string, int64_t> want = {{pv.var, v.W * v.C}, {qv.var, v.C}, {rv.var, v.dh * v.W * v.C}, {sv.var, v.dw * v.C}};
  int64_t inner = 1;
  for (size_t d = rank; d-- > gn + 2;) want[k[d - gn].var] = inner, inner *= op.shape[d];
  inner = v.H * v.W * v.C;
  for (size_t d = gn; d-- > 0;) want[m[d].var] = inner, inner *= op.shape[d];
  for (const auto& [x, q] : want)
    if (!op.coeff.count(x) || op.coeff.at(x) != q) return "the input is not a dense NHWC tensor";
  if (op.base != v.h0 * v.W * v.C + v.w0 * v.C) return "the input view has an offset";
  return "";
}

}  // namespace

// The padding guard of an inlined producer is exactly "the input element is in bounds": checked
// at every point of the producer's domain over the indices the guard reads (at most 2^20 points).
std::string guard_is_bounds(const ContractionOperand& op, const std::map<std::string, int64_t>& sizes) {
  if (!op.guard) return "";
  const ir::Expr* read = op.producer ? find_access(*op.producer->rhs, op.tensor) : nullptr;
  if (!read) return "the padding guard's input read is not found";
  std::vector<const ir::IndexVar*> vars;
  std::function<void(const ir::Expr&)> collect = [&](const ir::Expr& e) {
    if (e.kind == ir::ExprKind::IndexValue)
      for (const auto& [x, q] : e.affine.index_coeffs)
        for (const auto& d : op.producer->domain)
          if (d.name == x && std::find(vars.begin(), vars.end(), &d) == vars.end()) vars.push_back(&d);
    for (const auto& a : e.args) collect(*a);
  };
  collect(*op.guard);
  int64_t points = 1;
  for (const auto* v : vars) points *= std::max<int64_t>(constant_of(v->hi, sizes) - constant_of(v->lo, sizes), 1);
  if (points > (int64_t(1) << 20)) return "the padding guard spans too many points to check";
  std::map<std::string, int64_t> point;
  std::function<std::string(size_t)> walk = [&](size_t i) -> std::string {
    if (i == vars.size()) {
      auto g = eval_guard(*op.guard, point, sizes);
      if (!g) return "the padding guard is not integer logic on indices";
      bool in = true;
      for (size_t d = 0; d < read->indices.size(); ++d) {
        bool depends = false;
        int64_t v = constant_of(read->indices[d], sizes);
        for (const auto& [x, q] : read->indices[d].index_coeffs) {
          auto it = point.find(x);
          if (it == point.end()) continue;  // an index the guard does not read: not a bounded dim
          depends = true;
          v += q * it->second;
        }
        if (depends && (v < 0 || v >= op.shape[d])) in = false;
      }
      return (*g != 0) == in ? "" : "the padding guard is not the input's bounds";
    }
    for (int64_t x = constant_of(vars[i]->lo, sizes); x < constant_of(vars[i]->hi, sizes); ++x) {
      point[vars[i]->name] = x;
      if (std::string why = walk(i + 1); !why.empty()) return why;
    }
    return "";
  };
  return walk(0);
}

std::string blocked_window(const ContractionOperand& op, const std::vector<ContractionDim>& m, const std::vector<ContractionDim>& k,
                           const std::map<std::string, int64_t>& sizes, BlockedWindow& v) {
  if (op.indices.size() != 6 || op.shape.size() != 6) return "not a rank-6 blocked input";
  if (m.size() != 4 || k.size() != 4) return "not an (nb, p, q, ni) x (r, s, cb, ci) convolution view";
  const auto& ix = op.indices;
  if (!is_terms(ix[0], {{m[0].var, 1}}) || !is_terms(ix[3], {{k[2].var, 1}}) || !is_terms(ix[4], {{m[3].var, 1}}) || !is_terms(ix[5], {{k[3].var, 1}}))
    return "the batch, channel-block or inner indices are not plain";
  for (int d : {0, 3, 4, 5})
    if (constant_of(ix[d], sizes) != 0) return "an index other than the window is shifted";
  v.dh = ix[1].index_coeffs.count(k[0].var) ? ix[1].index_coeffs.at(k[0].var) : 0;
  v.dw = ix[2].index_coeffs.count(k[1].var) ? ix[2].index_coeffs.at(k[1].var) : 0;
  if (!is_terms(ix[1], {{m[1].var, 1}, {k[0].var, v.dh}}) || !is_terms(ix[2], {{m[2].var, 1}, {k[1].var, v.dw}}) || v.dh < 1 || v.dw < 1)
    return "the window is not stride 1 (h = p + d * r - pad)";
  v.NB = op.shape[0], v.H = op.shape[1], v.W = op.shape[2], v.CB = op.shape[3], v.NI = op.shape[4], v.CI = op.shape[5];
  v.P = m[1].extent, v.Q = m[2].extent, v.R = k[0].extent, v.S = k[1].extent;
  v.h0 = constant_of(ix[1], sizes), v.w0 = constant_of(ix[2], sizes);
  if (m[0].extent != v.NB || k[2].extent != v.CB || m[3].extent != v.NI || k[3].extent != v.CI)
    return "the view does not cover the input's batch blocks and channels";
  const int64_t e = v.NI * v.CI, wst = v.CB * e, hst = v.W * wst;
  const std::map<std::string, int64_t> want = {{m[0].var, v.H * hst}, {m[1].var, hst}, {m[2].var, wst}, {m[3].var, v.CI},
                                                {k[0].var, v.dh * hst}, {k[1].var, v.dw * wst}, {k[2].var, e}, {k[3].var, 1}};
  for (const auto& [x, q] : want)
    if (!op.coeff.count(x) || op.coeff.at(x) != q) return "the input is not a dense blocked tensor";
  if (op.base != v.h0 * hst + v.w0 * wst) return "the input view has an offset";
  return "";
}

TmaPlan tma_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m, int min_boxes) {
  TmaPlan t;
  const ContractionOperand& op = *p.op;
  const int eb = elem_bytes(op.dtype);
  if (!m.has(isa::GpuFeature::TensorMaps)) return t.why = "the machine has no tensor maps (TMA)", t;
  if (!p.swz) return t.why = "not the wgmma swizzled layout", t;
  const int row = kSwizzleRowBytes / eb;  // elements per 128-byte swizzled row
  t.map.tensor = op.tensor;
  t.map.dtype = op.dtype;
  t.map.swizzle_bytes = kSwizzleRowBytes;
  BlockedWindow bw;
  const bool blocked = p.outer && p.kdims && blocked_window(op, *p.outer, *p.kdims, c.sizes, bw).empty();
  if (blocked) {  // a blocked-layout convolution input: a tiled map with the window in its coordinates
    if (!p.k_inner) return t.why = "a blocked window with channels not innermost", t;
    if (min_boxes > 1) return t.why = "a blocked window split between blocks", t;
    if (!c.batch.empty()) return t.why = "a blocked window with batch dims", t;
    BlockedWindow& v = t.bview = bw;
    if (std::string why = guard_is_bounds(op, c.sizes); !why.empty()) return t.why = "blocked window: " + why, t;
    if (v.CI * eb != kNarrowSwizzleBytes) return t.why = "blocked window: channel blocks of " + S(v.CI * eb) + " B (32 B needed)", t;
    if (p.bk != row || row % v.CI || (v.CB * v.CI) % row) return t.why = "blocked window: a 64-wide K tile is not whole channel blocks of one tap", t;
    if (p.tile_outer % v.NI || p.tile_outer / v.NI > kTmaMaxBox || v.NI > kTmaMaxBox) return t.why = "blocked window: M tile not whole pixels", t;
    if (v.NB * v.H >= (int64_t(1) << 31) || v.W + p.tile_outer / v.NI >= (int64_t(1) << 31)) return t.why = "blocked window: coordinates beyond 2^31", t;
    t.blocked = true;
    t.map.base = 0;
    t.map.swizzle_bytes = kNarrowSwizzleBytes;
    t.map.dims = {uint64_t(v.CI), uint64_t(v.NI), uint64_t(v.W), uint64_t(v.CB), uint64_t(v.NB * v.H)};
    const int64_t e = v.NI * v.CI * eb;
    t.map.strides = {uint64_t(v.CI * eb), uint64_t(v.CB * e), uint64_t(e), uint64_t(v.W * v.CB * e)};
    t.map.box = {uint32_t(v.CI), uint32_t(v.NI), uint32_t(p.tile_outer / v.NI), uint32_t(row / v.CI), 1};
    t.m_segment = v.Q * v.NI;
    t.boxes = 1;
    t.box_elems = int64_t(row) * p.tile_outer;
  } else if (op.producer || op.guard || !p.bounded.empty()) {  // a convolution window: the im2col mode
    if (!p.k_inner) return t.why = "an im2col view with channels not innermost", t;
    if (min_boxes > 1) return t.why = "an im2col view split between blocks", t;
    if (!c.batch.empty()) return t.why = "an im2col view with batch dims", t;
    if (std::string why = im2col_view(p, c, t.view); !why.empty()) return t.why = "im2col: " + why, t;
    if (std::string why = guard_is_bounds(op, c.sizes); !why.empty()) return t.why = "im2col: " + why, t;
    const Im2colView& v = t.view;
    if (v.C % p.bk || p.bk != row) return t.why = "im2col: channels not a multiple of the 64-channel K tile", t;
    if (p.tile_outer > kTmaMaxBox) return t.why = "im2col: more than 256 pixels per copy", t;
    const int64_t H = v.H, W = v.W;
    // the box of window origins: from (h0, w0) to the last output pixel's (P - 1 + h0, Q - 1 + w0),
    // as offsets from each image's first and last pixel
    const int64_t lo_h = v.h0, lo_w = v.w0, up_h = v.P - 1 + v.h0 - (H - 1), up_w = v.Q - 1 + v.w0 - (W - 1);
    for (int64_t x : {lo_h, lo_w, up_h, up_w})
      if (x < -128 || x > 127) return t.why = "im2col: a padding beyond the tensor map's corner range [-128, 127]", t;
    if ((v.R - 1) * v.dh > 65535 || (v.S - 1) * v.dw > 65535) return t.why = "im2col: a filter window beyond 16-bit offsets", t;
    t.im2col = true;
    t.map.im2col = true;
    t.map.base = 0;
    t.map.dims = {uint64_t(v.C), uint64_t(W), uint64_t(H), uint64_t(v.N)};
    t.map.strides = {uint64_t(v.C * eb), uint64_t(W * v.C * eb), uint64_t(H * W * v.C * eb)};
    t.map.lower = {int(lo_w), int(lo_h)};
    t.map.upper = {int(up_w), int(up_h)};
    t.map.channels = uint32_t(p.bk);
    t.map.pixels = uint32_t(p.tile_outer);
    t.boxes = 1;
    t.box_elems = int64_t(p.bk) * p.tile_outer;
  } else {
    const std::optional<int64_t> co = linear_stride(op, *p.outer), ck = linear_stride(op, *p.kdims);
    if (!co && !p.k_inner && p.outer->size() == 2 && p.kdims->size() >= 2 && c.batch.empty())
      return split_outer_plan(p, c, min_boxes, t);
    if (!co || !ck) return t.why = "outer or K dims that are not one linear stride", t;
    t.map.base = op.base;
    int64_t stride1 = 0;
    if (p.k_inner) {
      if (*ck != 1) return t.why = "K is not the contiguous dim", t;
      if (p.bk != row || p.tile_outer > kTmaMaxBox) return t.why = "a K-inner stage must be one box of 64 x up to 256 rows", t;
      if (p.tile_outer % (8 * min_boxes)) return t.why = "a K-inner stage that does not split into " + S(min_boxes) + " boxes of whole 8-row swizzle groups", t;
      t.map.dims = {uint64_t(c.size_k()), uint64_t(p.outer_size)};
      t.map.box = {uint32_t(p.bk), uint32_t(p.tile_outer / min_boxes)};
      stride1 = *co;
      t.boxes = min_boxes;
    } else {
      if (*co != 1) return t.why = "the outer dim is not contiguous", t;
      if (p.tile_outer % row || p.bk > kTmaMaxBox) return t.why = "an outer-inner stage must be 64-wide atoms", t;
      t.map.dims = {uint64_t(p.outer_size), uint64_t(c.size_k())};
      t.map.box = {uint32_t(row), uint32_t(p.bk)};
      stride1 = *ck;
      t.boxes = p.tile_outer / row;
      if (t.boxes % min_boxes) return t.why = S(t.boxes) + " boxes per stage do not split between " + S(min_boxes) + " blocks", t;
    }
    t.map.strides = {uint64_t(stride1 * eb)};
    for (const auto& d : c.batch) {
      auto it = op.coeff.find(d.var);
      if (it == op.coeff.end() || it->second == 0) continue;  // broadcast over this batch index: no map dim
      if (it->second < 0) return t.why = "a negative batch stride", t;
      t.map.dims.push_back(uint64_t(d.extent));
      t.map.strides.push_back(uint64_t(it->second * eb));
      t.map.box.push_back(1);
      t.batch_vars.push_back(d.var);
    }
    if (int(t.map.dims.size()) > kTmaMaxRank) return t.why = "more than 3 batch dims", t;
    t.box_elems = int64_t(t.map.box[0]) * t.map.box[1];
  }
  return finish(t, eb);
}

namespace {

// the rules every map obeys (alignment, stride and dim ranges); the stage's bytes
TmaPlan& finish(TmaPlan& t, int eb) {
  if ((t.map.base * eb) % kTmaAlignBytes) return t.why = "the operand's origin is not 16-byte aligned", t;
  for (uint64_t s : t.map.strides) {
    if (s % kTmaAlignBytes) return t.why = "a row stride of " + S(int64_t(s)) + " B (tensor maps need multiples of 16 B)", t;
    if (s >= (uint64_t(1) << 40)) return t.why = "a stride beyond 2^40 B", t;
  }
  for (uint64_t d : t.map.dims)
    if (d >= (uint64_t(1) << 32)) return t.why = "a dim beyond 2^32 elements", t;
  t.stage_bytes = t.box_elems * t.boxes * eb;
  t.ok = true;
  return t;
}

}  // namespace

namespace {

TmaPlan split_outer_plan(const OperandPlan& p, const Contraction& c, int min_boxes, TmaPlan& t) {
  const ContractionOperand& op = *p.op;
  const int eb = elem_bytes(op.dtype);
  const auto& o = *p.outer;
  const auto& k = *p.kdims;
  auto coeff = [&](const std::string& v) { return op.coeff.count(v) ? op.coeff.at(v) : 0; };
  const ContractionDim &ohi = o[0], &olo = o[1], &klo = k.back();
  const std::vector<ContractionDim> khi(k.begin(), k.end() - 1);
  const std::optional<int64_t> ckh = linear_stride(op, khi);
  if (coeff(olo.var) != 1 || coeff(ohi.var) <= 0 || coeff(klo.var) <= 0 || !ckh)
    return t.why = "outer or K dims that are not one linear stride (nor a split outer dim)", t;
  const int64_t OL = olo.extent, KL = klo.extent;
  if (OL * eb != kNarrowSwizzleBytes) return t.why = "split outer dim: inner blocks of " + S(OL * eb) + " B (32 B needed)", t;
  if (min_boxes > 1) return t.why = "split outer dim: one box per stage, not split between blocks", t;
  if (KL != 16) return t.why = "split outer dim: K blocks of " + S(KL) + " (16, one wgmma K step, needed)", t;
  if (p.tile_outer % OL || p.tile_outer / OL > kTmaMaxBox || p.bk % KL || p.bk / KL > kTmaMaxBox || KL > kTmaMaxBox)
    return t.why = "split outer dim: tiles that are not whole inner blocks", t;
  t.split_outer = true;
  t.sview = {OL, KL};
  t.map.base = op.base;
  t.map.swizzle_bytes = kNarrowSwizzleBytes;
  t.map.dims = {uint64_t(OL), uint64_t(KL), uint64_t(ohi.extent), uint64_t(c.size_k() / KL)};
  t.map.strides = {uint64_t(coeff(klo.var) * eb), uint64_t(coeff(ohi.var) * eb), uint64_t(*ckh * eb)};
  t.map.box = {uint32_t(OL), uint32_t(KL), uint32_t(p.tile_outer / OL), uint32_t(p.bk / KL)};
  t.boxes = 1;
  t.box_elems = int64_t(p.tile_outer) * p.bk;
  return finish(t, eb);
}

}  // namespace

}  // namespace tessel::emit_cuda
