#include "compiler/emit_cuda/tma_plan.h"

namespace tessel::emit_cuda {

TmaPlan tma_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m) {
  TmaPlan t;
  const ContractionOperand& op = *p.op;
  const int eb = elem_bytes(op.dtype);
  if (!m.has(isa::GpuFeature::TensorMaps)) return t.why = "the machine has no tensor maps (TMA)", t;
  if (op.producer || op.guard || !p.bounded.empty()) return t.why = "an im2col view (the TMA path takes plain operands)", t;
  if (p.outer->size() != 1 || p.kdims->size() != 1) return t.why = "several outer or K dims", t;
  if (!p.swz) return t.why = "not the wgmma swizzled layout", t;
  const std::string ov = p.outer->front().var, kv = p.kdims->front().var;
  const int64_t co = op.coeff.count(ov) ? op.coeff.at(ov) : 0, ck = op.coeff.count(kv) ? op.coeff.at(kv) : 0;
  const int row = kSwizzleRowBytes / eb;  // elements per 128-byte swizzled row
  t.map.tensor = op.tensor;
  t.map.dtype = op.dtype;
  t.map.base = op.base;
  t.map.swizzle_bytes = kSwizzleRowBytes;
  int64_t stride1 = 0;
  if (p.k_inner) {
    if (ck != 1) return t.why = "K is not the contiguous dim", t;
    if (p.bk != row || p.tile_outer > kTmaMaxBox) return t.why = "a K-inner stage must be one box of 64 x up to 256 rows", t;
    t.map.dims = {uint64_t(c.size_k()), uint64_t(p.outer_size)};
    t.map.box = {uint32_t(p.bk), uint32_t(p.tile_outer)};
    stride1 = co;
    t.boxes = 1;
  } else {
    if (co != 1) return t.why = "the outer dim is not contiguous", t;
    if (p.tile_outer % row || p.bk > kTmaMaxBox) return t.why = "an outer-inner stage must be 64-wide atoms", t;
    t.map.dims = {uint64_t(p.outer_size), uint64_t(c.size_k())};
    t.map.box = {uint32_t(row), uint32_t(p.bk)};
    stride1 = ck;
    t.boxes = p.tile_outer / row;
  }
  if (stride1 <= 0) return t.why = "a zero stride (broadcast operand)", t;
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
  if ((op.base * eb) % kTmaAlignBytes) return t.why = "the operand's origin is not 16-byte aligned", t;
  for (uint64_t s : t.map.strides) {
    if (s % kTmaAlignBytes) return t.why = "a row stride of " + S(int64_t(s)) + " B (tensor maps need multiples of 16 B)", t;
    if (s >= (uint64_t(1) << 40)) return t.why = "a stride beyond 2^40 B", t;
  }
  for (uint64_t d : t.map.dims)
    if (d >= (uint64_t(1) << 32)) return t.why = "a dim beyond 2^32 elements", t;
  t.box_elems = int64_t(t.map.box[0]) * t.map.box[1];
  t.stage_bytes = t.box_elems * t.boxes * eb;
  t.ok = true;
  return t;
}

}  // namespace tessel::emit_cuda
