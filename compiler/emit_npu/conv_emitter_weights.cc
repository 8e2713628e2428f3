// ConvEmitter (conv_emitter_class.h): a channel tile's weights into L1 (one dma_in_nz, one per
// slice and kernel position, or the plan's chunks ahead of their slices), grouped and depthwise
// weights, the epilogue's per-channel values into UB, and each slice's weights L1 -> L0B.
#include "compiler/emit_npu/conv_emitter_class.h"

#include <algorithm>
#include <map>

#include "isa/base/error.h"

namespace tessel::emit_npu::conv_detail {

// The k-tile's per-channel epilogue values, once per k-tile.
void ConvEmitter::load_channels() {
  op(Opcode::Mul, {reg(kCol2), reg(kKTile), imm(plan_.tn * dtype_bytes(DType::F16))});
  op(Opcode::Mul, {reg(kCol4), reg(kKTile), imm(plan_.tn * dtype_bytes(DType::F32))});
  std::map<std::string, Operand> gm;
  for (const std::string& name : epi_->channel_tensors()) {
    const int eb = dtype_bytes(k_.find_tensor(name)->dtype);
    gm[name] = at(Buffer::GM, offset(name), eb == dtype_bytes(DType::F16) ? kCol2 : kCol4);
  }
  // one tile of padded channels: only the tensors' own K values (the rest of the pattern is unused)
  epi_->load_channels(p_, gm, plan_.tn, plan_.k_tiles == 1 ? std::min(plan_.tn, orig_.K) : plan_.tn, ub_resident());
}

// The k-tile's weights into L1, one fractal row of input channels x all kernel positions at a time.
void ConvEmitter::load_weights() {
  const int64_t tn = plan_.tn;
  if (cv_.depthwise)  // diagonal fractals built in UB (ConvCode::diagonal_weights)
    return code_.diagonal_weights(cv_.layout == Layout::Nchw, RS(), cv_.G, W_.base, kKTile, kWCol, kGroupX, copy_ub(), w_l1(),
                                  unsupported("the depthwise weights' diagonal fractals do not fit the vector buffer").what());
  if (weights_to_l1()) return;  // copy_weights put them there
  if (cv_.G > 1 && !per_core()) return grouped_weights();
  if (W_.fractal) {
    op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * frow_)});
    for (int64_t c1 = 0; c1 < C1(); ++c1)
      op(Opcode::DmaIn, {at(Buffer::L1, w_l1() + c1 * RS() * tn * frow_), at(Buffer::GM, W_.base + c1 * W_.KB * fractal_, kWCol),
                         imm(RS()), imm(tn * frow_), imm((C1() * W_.KB * cv_.unit - tn) * frow_), imm(0)});
    return;
  }
  if (per_core() && cv_.layout == Layout::Nchw) {
    op(Opcode::Mov, {reg(kWCol), reg(kPrivW)});  // the core's copy holds its channel tile only
  } else {
    op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * in_)});
    if (per_core()) op(Opcode::Add, {reg(kWCol), reg(kWCol), reg(kPrivW)});
  }
  weight_fractals(kWCol);
  if (cv_.folded() && fold_.weight_guard_bytes()) fold_.zero_weight_rows(w_l1(), tn, offset("w_guard"));
}

// The tile's weights in L1: fractals (c1, q, j) (slice, kernel position, 16-column block). Rows
// (t, q, c) evenly spaced in GM (conv_match.h's weights_in_one_copy): one dma_in_nz of all of
// them, NZ order: fractal (t, q, c1d, j) at j R S C1 + (t R S + q) C1d + c1d (slice c1 = t C1d +
// c1d at c1 + t (R S - 1) C1d, positions C1d apart, blocks R S C1); else one per (c1, q): slice
// c1 at c1 R S nb, positions nb apart, blocks 1 apart (README "Per-core chain").
bool ConvEmitter::one_weight_copy() const {
  if (!weights_in_one_copy(cv_, k0_) || weights_to_l1() || W_.fractal) return false;
  return W_.row_q == cv_.depth_channels() * W_.row_c && (cv_.T == 1 || W_.per_tap == RS() * W_.row_q);
}

int64_t ConvEmitter::w_slice_fractals(int64_t c1) const {
  const int64_t c1d = C1() / cv_.T;
  return one_weight_copy() ? c1 + c1 / c1d * (RS() - 1) * c1d : c1 * RS() * (plan_.tn / n0_);
}

// Per channel slice (a depth tap's slice in 3-D) and kernel position, 16 input channels x tn into
// L1 (or all of them by one copy: one_weight_copy).
void ConvEmitter::weight_fractals(Reg col) {
  const int64_t tn = plan_.tn, per_tap = C1() / cv_.T;
  if (!wchunks_.empty()) return weight_chunk(0);
  if (one_weight_copy()) {
    op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1()), at(Buffer::GM, W_.base, col), imm(RS() * cv_.C), imm(tn), imm(W_.row_c)});
    return;
  }
  for (int64_t c1 = 0; c1 < C1(); ++c1)
    for (int64_t q = 0; q < RS(); ++q)
      op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1() + (c1 * RS() + q) * tn * frow_),
                           at(Buffer::GM, W_.base + ((c1 / per_tap) * W_.per_tap + q * W_.row_q + (c1 % per_tap) * k0_ * W_.row_c) * in_, col),
                           imm(k0_), imm(tn), imm(W_.row_c)});
}

// The plan's weight chunks (conv_emitter_parts.h) where the tile's one copy is loaded once per
// core, ahead of one band's map read once, its slices straight-line (else the one copy).
void ConvEmitter::plan_weight_chunks() {
  const bool once = (bands_.size() == 1 || spread()) && per_core_images() == 1 && !kt_loop() && C1() / 2 <= kStraightPairs;
  if (!plan_.weight_chunks.empty() && once && one_weight_copy() && cv_.T == 1 && cv_.G == 1 && !per_core() && !loads_after_fold())
    wchunks_ = WeightChunks::of_sizes(plan_.weight_chunks, RS(), plan_.tn / n0_);
}

// Chunk g: per kernel position its slices' rows (evenly spaced) by one dma_in_nz (kWCol: the tile's columns).
void ConvEmitter::weight_chunk(size_t g) {
  const WeightChunk& c = wchunks_.chunks[g];
  const int64_t nb = plan_.tn / n0_;
  for (int64_t q = 0; q < RS(); ++q)
    op(Opcode::DmaInNz, {f16(), at(Buffer::L1, w_l1() + (c.first * RS() + q * c.slices) * nb * fractal_),
                         at(Buffer::GM, W_.base + (q * W_.row_q + c.first * k0_ * W_.row_c) * in_, kWCol), imm(c.slices * k0_),
                         imm(plan_.tn), imm(W_.row_c)});
}

// Grouped: tile kKTile is local tile kKTile % (K / tn) of group g = kKTile / (K / tn), whose
// weights start at g x R S C K elements and whose input channels at g x C within a pixel (kGroupX).
void ConvEmitter::grouped_weights() {
  const int64_t tn = plan_.tn, per_group = cv_.K / tn;
  op(Opcode::Div, {reg(kGroupX), reg(kKTile), imm(per_group)});
  op(Opcode::Mul, {reg(kTmp), reg(kGroupX), imm(per_group)});
  op(Opcode::Sub, {reg(kTmp), reg(kKTile), reg(kTmp)});
  op(Opcode::Mul, {reg(kWCol), reg(kTmp), imm(tn * in_)});
  op(Opcode::Mul, {reg(kTmp), reg(kGroupX), imm(RS() * cv_.C * cv_.K * in_)});
  op(Opcode::Add, {reg(kWCol), reg(kWCol), reg(kTmp)});
  op(Opcode::Mul, {reg(kGroupX), reg(kGroupX), imm(cv_.C * in_)});
  weight_fractals(kWCol);
}

// kWSlice = the L1 offset of slice 2 kSlice's weights from w_l1() (one_weight_copy with depth
// taps: tap t = 2 kSlice / C1d, C1d even: slice 2 kSlice + 1 in the same tap).
void ConvEmitter::slice_weights() {
  if (!wchunks_.empty()) return op(Opcode::Mov, {reg(kWSlice), imm(wchunks_.slice_fractal(cur_slice_) * fractal_)});
  const int64_t c1d = C1() / cv_.T;
  if (!one_weight_copy() || cv_.T == 1)
    return op(Opcode::Mul, {reg(kWSlice), reg(kSlice), imm((one_weight_copy() ? 2 : 2 * RS() * (plan_.tn / n0_)) * fractal_)});
  op(Opcode::Div, {reg(kTmp), reg(kSlice), imm(c1d / 2)});
  op(Opcode::Mul, {reg(kTmp), reg(kTmp), imm((RS() - 1) * c1d * fractal_)});
  op(Opcode::Mul, {reg(kWSlice), reg(kSlice), imm(2 * fractal_)});
  op(Opcode::Add, {reg(kWSlice), reg(kWSlice), reg(kTmp)});
}

// The weights of kernel-position group gi of slice `sub` L1 -> L0B (the next ping-pong half).
int64_t ConvEmitter::load_group(int64_t sub, size_t gi) {
  const int64_t nb = plan_.tn / n0_, lb = (l0b_step_++ % 2) * plan_.l0b_half;
  const auto [q0, qn] = plan_.kgroups[gi];
  const bool chunked = !wchunks_.empty();
  const int64_t pos = chunked ? wchunks_.position_stride(cur_slice_) : w_position_stride();
  const int64_t first = (chunked ? sub : w_slice_fractals(sub)) + q0 * pos;
  op(Opcode::Load2d, {f16(), at(Buffer::L0B, lb), at(Buffer::L1, w_l1() + first * fractal_, kWSlice), imm(qn), imm(nb), imm(pos),
                      imm(chunked ? wchunks_.block_stride(cur_slice_) : w_block_stride()), imm(1)});
  return lb;
}

}  // namespace tessel::emit_npu::conv_detail
