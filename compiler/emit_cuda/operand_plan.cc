#include "compiler/emit_cuda/operand_plan.h"

namespace tessel::emit_cuda {

namespace {

// Measured on an H200 (emit_cuda/README.md): bulk row copies under 256 B are slower than cp.async
// (512 copies of 64 B: 5.0 us), and one warp issues a stage's copies, so a stage takes at most
// 128 of them. Policy thresholds, not properties of the copy engine.
constexpr int64_t kMinBulkRowBytes = 256;
constexpr int kMaxBulkRowsPerStage = 128;

// Dimensions of the operand whose index may leave the tensor (folded padding, im2col windows).
std::vector<int> bounded_dims(const ContractionOperand& op, const Contraction& c, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, int64_t> extent;
  for (const auto* ds : {&c.m, &c.n, &c.k, &c.batch})
    for (const auto& d : *ds) extent[d.var] = d.extent;
  std::vector<int> out;
  for (size_t d = 0; d < op.indices.size(); ++d) {
    const auto& e = op.indices[d];
    int64_t lo = e.constant, hi = e.constant;  // range over the anchor's domain
    for (const auto& [p, q] : e.param_coeffs) lo += q * sizes.at(p), hi += q * sizes.at(p);
    for (const auto& [v, q] : e.index_coeffs) {
      const int64_t ext = extent.count(v) ? extent.at(v) : 1;
      if (q > 0) hi += q * (ext - 1);
      else lo += q * (ext - 1);
    }
    if (lo < 0 || hi >= op.shape[d]) out.push_back(int(d));
  }
  return out;
}

void guard_anchor_vars(const ContractionOperand& op, std::set<std::string>& out) {
  if (!op.guard) return;
  std::vector<const ir::Expr*> stack = {op.guard};
  while (!stack.empty()) {
    const ir::Expr* e = stack.back();
    stack.pop_back();
    if (e->kind == ir::ExprKind::IndexValue) {
      ir::AffineExpr a = substitute(e->affine, op.producer_binding);
      for (const auto& [v, c] : a.index_coeffs) out.insert(v);
    }
    for (const auto& a : e->args) stack.push_back(a.get());
  }
}

bool vectorisable(const ContractionOperand& op, const std::vector<ContractionDim>& dims, int vec, const std::set<std::string>& guard) {
  if (dims.empty()) return false;
  const ContractionDim& last = dims.back();
  auto it = op.coeff.find(last.var);
  if (it == op.coeff.end() || it->second != 1 || last.extent % vec != 0) return false;
  if (guard.count(last.var)) return false;
  for (const auto& [v, c] : op.coeff)
    if (v != last.var && c % vec != 0) return false;
  return op.base % vec == 0;
}

}  // namespace

OperandPlan plan_operand(const ContractionOperand& op, const Contraction& c, const std::map<std::string, int64_t>& sizes,
                         const std::vector<ContractionDim>& outer, const std::vector<ContractionDim>& kd, int tile_outer, int bk,
                         int64_t outer_size, const isa::GpuMachine& m, bool swizzle) {
  OperandPlan p;
  p.op = &op;
  p.outer = &outer;
  p.kdims = &kd;
  p.tile_outer = tile_outer;
  p.bk = bk;
  p.outer_size = outer_size;
  guard_anchor_vars(op, p.guard_vars);
  p.bounded = bounded_dims(op, c, sizes);
  for (int d : p.bounded)
    for (const auto& [v, q] : op.indices[d].index_coeffs) p.guard_vars.insert(v);
  const int vec = int(m.vector_access_bytes) / elem_bytes(op.dtype);
  p.pad = swizzle ? 0 : vec;
  p.swz = swizzle;
  if (vectorisable(op, kd, vec, p.guard_vars) && bk % vec == 0) {
    p.vec = vec;
    p.k_inner = true;
  } else if (vectorisable(op, outer, vec, p.guard_vars) && tile_outer % vec == 0) {
    p.vec = vec;
    p.k_inner = false;
  }
  return p;
}

BulkPlan bulk_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m) {
  BulkPlan b;
  const ContractionOperand& op = *p.op;
  const int eb = elem_bytes(op.dtype);
  if (op.producer || op.guard || !p.bounded.empty()) return b.why = "an im2col view", b;
  if (p.outer->size() != 1 || p.kdims->size() != 1) return b.why = "several outer or K dims", b;
  if (p.outer_size % p.tile_outer || c.size_k() % p.bk) return b.why = "tiles do not divide the operand", b;
  b.outer_var = p.outer->front().var, b.k_var = p.kdims->front().var;
  const int64_t co = op.coeff.count(b.outer_var) ? op.coeff.at(b.outer_var) : 0, ck = op.coeff.count(b.k_var) ? op.coeff.at(b.k_var) : 0;
  b.k_stride = ck;
  if (p.k_inner && ck == 1) {
    b.rows = p.tile_outer, b.row_elems = p.bk, b.row_stride = co;
  } else if (!p.k_inner && co == 1) {
    b.rows = p.bk, b.row_elems = p.tile_outer, b.row_stride = ck;
    b.whole = ck == p.tile_outer;  // the tile spans the whole contiguous dim: the stage is one run
  } else {
    return b.why = "the tile's rows are not contiguous", b;
  }
  if (!b.whole && int64_t(b.row_elems) * eb < kMinBulkRowBytes)
    return b.why = "rows of " + S(int64_t(b.row_elems) * eb) + " B (bulk copies need >= " + S(kMinBulkRowBytes) + " B)", b;
  if (!b.whole && b.rows > kMaxBulkRowsPerStage) return b.why = S(b.rows) + " copies per stage", b;
  const int64_t al = m.bulk_copy_alignment_bytes;
  if (al == 0) return b.why = "no bulk copy engine", b;
  if ((op.base * eb) % al || (b.row_stride * eb) % al || (int64_t(b.row_elems) * eb) % al || (b.k_stride * p.bk * eb) % al)
    return b.why = "rows not " + S(al) + "-byte aligned", b;
  for (const auto& d : c.batch)
    if (op.coeff.count(d.var) && (op.coeff.at(d.var) * eb) % al) return b.why = "batch stride not " + S(al) + "-byte aligned", b;
  b.ok = true;
  return b;
}

}  // namespace tessel::emit_cuda
