#include "compiler/emit_cuda/repack_plan.h"

#include <algorithm>
#include <set>

#include "compiler/emit_cuda/operand_plan.h"
#include "compiler/emit_cuda/tma_plan.h"

namespace tessel::emit_cuda {

namespace {

int64_t constant_of(const ir::AffineExpr& a, const std::map<std::string, int64_t>& sizes) {
  int64_t v = a.constant;
  for (const auto& [p, q] : a.param_coeffs) v += q * sizes.at(p);
  return v;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The TMA plan of `op` (outer dims `outer`) with the configuration's tiles; `narrow`: it reads
// 32-byte rows (a blocked window or a split outer dim).
TmaPlan own_plan(const ContractionOperand& op, const Contraction& c, const std::vector<ContractionDim>& outer, int tile_outer,
                 int64_t outer_size, const TcConfig& g, const isa::GpuMachine& m, int min_boxes) {
  const OperandPlan p = plan_operand(op, c, c.sizes, outer, c.k, tile_outer, g.bk, outer_size, m, true);
  return tma_plan(p, c, m, min_boxes);
}

bool narrow(const TmaPlan& t) { return t.blocked || t.split_outer; }

enum Group { kOther = 0, kOuter, kWindow, kInner };

// The copy of `op` in canonical order (repack_plan.h), or why there is none; `k_major`: the K
// group innermost whatever the innermost dim (wgmma .tf32 reads K-major tiles only).
std::string canonical_copy(const ContractionOperand& op, const Contraction& c, const std::vector<ContractionDim>& outer, OperandCopy& cp,
                           bool k_major) {
  const size_t rank = op.indices.size();
  if (rank == 0 || op.shape.size() != rank) return "a scalar operand";
  std::set<std::string> outer_vars, k_vars;
  for (const auto& d : outer) outer_vars.insert(d.var);
  for (const auto& d : c.k) k_vars.insert(d.var);
  auto k_position = [&](const ir::AffineExpr& a) {
    size_t best = c.k.size();
    for (size_t i = 0; i < c.k.size(); ++i)
      if (a.index_coeffs.count(c.k[i].var)) best = std::min(best, i);
    return best;
  };
  std::vector<int> role(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (op.indices[d].has_div()) return "floor division in an index";
    bool o = false, k = false;
    for (const auto& [v, q] : op.indices[d].index_coeffs) o |= outer_vars.count(v) > 0, k |= k_vars.count(v) > 0;
    role[d] = o && k ? kWindow : o ? kOuter : k ? kInner : kOther;
  }
  // the group that ends innermost: the innermost dim's, or K for a window dim (an NCHW input
  // becomes NHWC, channels innermost for the im2col gather; the copy then transposes)
  const int contiguous = role[rank - 1] == kWindow || k_major ? int(kInner) : role[rank - 1];
  if (contiguous != kOuter && contiguous != kInner) return "the innermost dim is read by batch indices only";
  const int other_pure = contiguous == kOuter ? kInner : kOuter;
  std::vector<int> perm;
  for (int group : {int(kOther), other_pure, int(kWindow), contiguous}) {
    std::vector<int> dims;
    for (size_t d = 0; d < rank; ++d)
      if (role[d] == group) dims.push_back(int(d));
    if (group == kInner)  // K-only dims in the contraction's K order, so that K composes in its order
      std::stable_sort(dims.begin(), dims.end(), [&](int x, int y) { return k_position(op.indices[x]) < k_position(op.indices[y]); });
    perm.insert(perm.end(), dims.begin(), dims.end());
  }
  if (role[size_t(perm.back())] != contiguous) return "no dim of the contiguous group";
  bool identity = true;
  for (size_t d = 0; d < rank; ++d) identity &= perm[d] == int(d);
  if (identity) return "the operand is already in canonical order";
  cp.source = op.tensor;
  cp.dtype = op.dtype;
  cp.source_shape = op.shape;
  cp.perm = perm;
  cp.shape.clear();
  for (int d : perm) cp.shape.push_back(op.shape[size_t(d)]);
  const int eb = elem_bytes(op.dtype);
  const int64_t run = op.shape[rank - 1] * eb;
  cp.move_bytes = eb;
  if (perm.back() == int(rank - 1))  // the innermost dim stays: moves of its runs (a transpose moves elements)
    for (int w : {16, 8, 4, 2})
      if (w >= eb && run % w == 0) {
        cp.move_bytes = w;
        break;
      }
  return "";
}

// `op` re-described over its copy: indices and shape permuted, strides of the dense copy, no
// padding producer (out-of-shape indices read as 0).
ContractionOperand copied_operand(const ContractionOperand& op, const OperandCopy& cp, const std::map<std::string, int64_t>& sizes) {
  ContractionOperand n;
  n.tensor = kScratchCopyPrefix + op.tensor;
  n.dtype = op.dtype;
  n.shape = cp.shape;
  std::vector<int64_t> stride(cp.shape.size(), 1);
  for (size_t d = cp.shape.size(); d-- > 1;) stride[d - 1] = stride[d] * cp.shape[d];
  n.base = 0;
  for (size_t d = 0; d < cp.perm.size(); ++d) {
    const ir::AffineExpr& ix = op.indices[size_t(cp.perm[d])];
    n.indices.push_back(ix);
    n.base += constant_of(ix, sizes) * stride[d];
    for (const auto& [v, q] : ix.index_coeffs) n.coeff[v] += q * stride[d];
  }
  for (auto it = n.coeff.begin(); it != n.coeff.end();) it = it->second == 0 ? n.coeff.erase(it) : std::next(it);
  return n;
}

// `dims` ordered by decreasing stride in `op` (indices it does not read first), stably
std::vector<ContractionDim> by_stride(const std::vector<ContractionDim>& dims, const ContractionOperand& op) {
  std::vector<ContractionDim> out = dims;
  auto stride = [&](const ContractionDim& d) { return op.coeff.count(d.var) ? op.coeff.at(d.var) : INT64_MAX; };
  std::stable_sort(out.begin(), out.end(), [&](const ContractionDim& x, const ContractionDim& y) { return stride(x) > stride(y); });
  return out;
}

// The K order of the im2col gather for `op` read through a window: the K indices of its window
// dims first (in the order of those dims), then the others in `k`'s order (an NCHW input's (c, r,
// s) becomes (r, s, c)); empty when no dim of `op` is a window.
std::vector<ContractionDim> gather_k_order(const ContractionOperand& op, const std::vector<ContractionDim>& outer,
                                           const std::vector<ContractionDim>& k) {
  std::set<std::string> outer_vars;
  for (const auto& d : outer) outer_vars.insert(d.var);
  std::vector<ContractionDim> order;
  auto has = [&](const std::string& v) {
    return std::any_of(order.begin(), order.end(), [&](const ContractionDim& d) { return d.var == v; });
  };
  for (const auto& ix : op.indices) {
    bool window = false;
    for (const auto& [v, q] : ix.index_coeffs) window |= outer_vars.count(v) > 0;
    if (!window) continue;
    for (const auto& d : k)
      if (ix.index_coeffs.count(d.var) && !has(d.var)) order.push_back(d);
  }
  if (order.empty()) return order;
  for (const auto& d : k)
    if (!has(d.var)) order.push_back(d);
  return order;
}

}  // namespace

bool in_scratch(const std::string& tensor) { return tensor.rfind(kScratchCopyPrefix, 0) == 0; }

int64_t OperandCopy::elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

RepackPlan plan_repack(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m, uint64_t scratch_offset) {
  RepackPlan r;
  r.contraction = c;
  if (!g.tma_ws()) return r.why = "operand copies (/rp) feed the persistent TMA kernel (/ws)", r;
  if (!m.has(isa::GpuFeature::TensorMaps)) return r.why = "the machine has no tensor maps (TMA)", r;
  uint64_t cursor = scratch_offset;
  std::vector<std::string> kept;
  // operand `which` of `x` (0: A, 1: B) as the TMA unit reads it with these tiles
  auto plan_of = [&](int which, const Contraction& x) {
    return own_plan(which == 0 ? x.a : x.b, x, which == 0 ? x.m : x.n, which == 0 ? g.bm : g.bn, which == 0 ? x.size_m() : x.size_n(), g, m,
                    which == 1 && g.schedule == WsSchedule::multicast ? 2 : 1);
  };
  // f32 read as TF32 (tf32_wgmma_operand): an operand that is not K-contiguous is copied K-major
  const bool k_major = tf32_wgmma_operand(c.in_type);
  auto k_outer = [&](int which, const Contraction& x) {
    return k_major && !plan_operand(which == 0 ? x.a : x.b, x, x.sizes, which == 0 ? x.m : x.n, x.k, which == 0 ? g.bm : g.bn, g.bk,
                                    which == 0 ? x.size_m() : x.size_n(), m, true).k_inner;
  };
  auto needs_copy = [&](int which, const Contraction& x) {
    const TmaPlan t = plan_of(which, x);
    return !t.ok || narrow(t) || k_outer(which, x);
  };
  // A copied operand read through a window sets the K order (gather_k_order); the other operand
  // is then judged in that order.
  for (int which = 0; which < 2; ++which) {
    if (!needs_copy(which, c)) continue;
    std::vector<ContractionDim> order = gather_k_order(which == 0 ? c.a : c.b, which == 0 ? c.m : c.n, c.k);
    if (order.empty()) continue;
    r.contraction.k = std::move(order);
    break;
  }
  const Contraction base = r.contraction;  // the K order the copies follow
  for (int which = 0; which < 2; ++which) {
    const ContractionOperand& op = which == 0 ? base.a : base.b;
    const std::vector<ContractionDim>& outer = which == 0 ? base.m : base.n;
    if (!needs_copy(which, base)) {
      kept.push_back(op.tensor);
      continue;
    }
    OperandCopy cp;
    if (std::string why = canonical_copy(op, base, outer, cp, k_major); !why.empty()) return r.why = "copy of " + op.tensor + ": " + why, r;
    if (std::string why = guard_is_bounds(op, base.sizes); !why.empty()) return r.why = "copy of " + op.tensor + ": " + why, r;
    cp.offset = align_up(cursor, kCopyAlignBytes);
    cp.bytes = uint64_t(cp.elements()) * uint64_t(elem_bytes(op.dtype));
    cursor = cp.offset + cp.bytes;
    ContractionOperand n = copied_operand(op, cp, base.sizes);
    std::vector<ContractionDim> order = by_stride(outer, n);
    bool reordered = false;
    for (size_t i = 0; i < order.size(); ++i) reordered |= order[i].var != outer[i].var;
    if (reordered) r.contraction.plain_output = r.contraction.dense_output = false;  // no longer dense in M / N order
    (which == 0 ? r.contraction.m : r.contraction.n) = order;
    (which == 0 ? r.contraction.a : r.contraction.b) = std::move(n);
    r.copies.push_back(std::move(cp));
  }
  if (r.copies.empty()) return r.why = "no operand needs a copy (" + kept[0] + " and " + kept[1] + " have 128-byte TMA plans)", r;
  // the copies must read as 128-byte rows with these tiles
  const Contraction& rc = r.contraction;
  for (int which = 0; which < 2; ++which) {
    const ContractionOperand& op = which == 0 ? rc.a : rc.b;
    if (!in_scratch(op.tensor)) continue;
    const TmaPlan t = plan_of(which, rc);
    if (!t.ok) return r.why = "the copy " + op.tensor + " has no TMA plan: " + t.why, r;
    if (narrow(t)) return r.why = "the copy " + op.tensor + " still reads 32-byte rows", r;
    if (k_outer(which, rc)) return r.why = "the copy " + op.tensor + " is still not K-contiguous", r;
  }
  r.scratch_end = cursor;
  r.ok = true;
  return r;
}

}  // namespace tessel::emit_cuda
