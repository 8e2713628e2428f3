// ConvEmitter (conv_emitter_class.h): a band's input window into L1 as C1HWC0 planes, the channel
// slices on the cube (load3d of a slice's plane, mmad into L0C), and the write-back of each pixel
// block through UB (the fused epilogue) to GM.
#include "compiler/emit_npu/conv_emitter_class.h"

#include <algorithm>
#include <map>

#include "isa/base/error.h"

namespace tessel::emit_npu::conv_detail {

// The band's input window as C1HWC0: one strided copy per fractal row of channels, with slice c1 - kPlanesAhead's pair where
// the slices run straight-line (slices() flushes it): the first pairs then issue without waiting behind every plane's copy.
void ConvEmitter::load_band(const Band& b, int64_t fm_base) {
  if (cv_.folded()) {
    fold_.band(X_.base, kXBase, b.in_first, b.in_rows, fm_base);
    if (loads_after_fold()) {  // behind the map's DMAs on MTE2 (the longer chain to the cube), the weights first
      load_weights();
      if (epi_) load_channels();
    }
    return;
  }
  const int64_t per_tap = C1() / cv_.T, first = X_.base + b.in_first * cv_.W * X_.pixel_bytes, pixels = b.in_rows * cv_.W;
  const bool defer = C1() / 2 <= kStraightPairs;
  if (defer) flush_map_chunks(-1), chunk_slice0_ = 0;
  auto ahead_of = [&](int64_t c1, const std::function<void()>& f) { defer && c1 >= kPlanesAhead ? map_chunks_.push_back({c1 - kPlanesAhead, f}) : f(); };
  if (cv_.gathered()) {
    gathered_map(fm_base);
    if (weights_after_map()) load_weights();
  }
  for (int64_t c1 = 0; c1 < C1(); ++c1) {
    for (size_t g = 1; g < wchunks_.chunks.size(); ++g)  // chunk g's weights ahead of its first plane
      if (wchunks_.chunks[g].first == c1) ahead_of(c1, [=, this] { weight_chunk(g); });
    if (cv_.gathered()) continue;
    const int64_t dst = fm_base + c1 * pixels * frow_, src = first + (c1 / per_tap) * X_.tap_bytes + (c1 % per_tap) * X_.block_bytes;
    ahead_of(c1, [=, this] { op(Opcode::DmaIn, {at(Buffer::L1, dst), at(Buffer::GM, src, kXBase), imm(pixels), imm(frow_), imm(X_.pixel_bytes - frow_), imm(0)}); });
  }
}

void ConvEmitter::gathered_map(int64_t fm_base) {
  const Conv::Gather& g = cv_.gather;
  const int64_t pb = X_.pixel_bytes, row = g.cols * cv_.C * in_;
  for (int64_t r = 0; r < g.rows; ++r)
    op(Opcode::DmaIn, {at(Buffer::L1, fm_base + r * row), at(Buffer::GM, X_.base + r * g.sh * cv_.src_w * pb, kXBase), imm(g.cols),
                       imm(cv_.C * in_), imm((g.sw - 1) * pb + pb - cv_.C * in_), imm(0)});
}

// Every channel slice of one band: pairs of slices in a loop, the odd last one after it.
// `trailing` pieces of an earlier write-back (one per pixel block) go between the first pairs
// (those iterations peeled), so the vector unit's work spreads over this band's mmads instead
// of holding the in-order scalar issue (and with it the cube) behind a full vector queue.
void ConvEmitter::slices(const Band& b, int64_t fm_base, int64_t c_base, const Trailing& trailing) {
  flush_pending_weights();
  const int64_t pairs = C1() / 2;
  // every pair straight-line where there are few: each slice's load3d then reads its own
  // constant plane, so the sync pass lets it start once that plane's copy has landed
  const int64_t peeled = pairs <= kStraightPairs ? pairs : trailing.pieces ? std::min(pairs, trailing.pieces) : 0;
  if (peeled < pairs) flush_map_chunks(-1);
  plane_ = cv_.gathered() ? frow_ : b.in_rows * cv_.W * frow_;  // slice c1's map from c1 x plane_
  auto pair = [&] {
    op(Opcode::Seq, {reg(kInit), reg(kSlice), imm(0)});
    slice_weights();
    op(Opcode::Mul, {reg(kKpos), reg(kSlice), imm(2 * plane_)});
    slice(0, reg(kInit), fm_base, c_base, b.blocks, true);
    slice(1, imm(0), fm_base, c_base, b.blocks, false);
  };
  for (int64_t i = 0; i < peeled; ++i) {
    flush_map_chunks(2 * i + 1);
    op(Opcode::Mov, {reg(kSlice), imm(i)});
    cur_slice_ = 2 * i;
    pair();
    if (i < trailing.pieces) trailing.emit(i);
  }
  if (pairs - peeled > 1) {
    op(Opcode::Loop, {reg(kSlice), imm(peeled), imm(pairs), imm(1)});
    pair();
    op(Opcode::EndLoop, {});
  } else if (pairs - peeled == 1) {
    op(Opcode::Mov, {reg(kSlice), imm(peeled)});
    pair();
  }
  flush_map_chunks(-1);
  if (C1() % 2) {
    cur_slice_ = C1() - 1;
    op(Opcode::Mov, {reg(kWSlice), imm((wchunks_.empty() ? w_slice_fractals(C1() - 1) : wchunks_.slice_fractal(C1() - 1)) * fractal_)});
    op(Opcode::Mov, {reg(kKpos), imm((C1() - 1) * plane_)});
    slice(0, imm(C1() == 1 ? 1 : 0), fm_base, c_base, b.blocks, false);
  }
  for (int64_t i = std::min(peeled, trailing.pieces); i < trailing.pieces; ++i) trailing.emit(i);
}

// One channel slice (c1 = 2 * kSlice + sub, or the constant last one): per kernel-position group
// the weights L1 -> L0B and per pixel block load3d -> L0A, mmad. load3d reads the slice's own
// 16-channel plane of the feature map (kKpos: its L1 offset; C1HWC0, so plane c1 is a feature map
// of one fractal row of channels), kernel positions counted within the slice. The next group's weights are
// loaded after the second block's load3d (into the other L0B half), and with `load_next` the
// next slice's first group's, so MTE1 has them ready when the cube reaches them.
void ConvEmitter::slice(int64_t sub, Operand init_first, int64_t fm_base, int64_t c_base, const std::vector<std::pair<int64_t, int64_t>>& blocks,
           bool load_next) {
  const int64_t tn = plan_.tn;
  const auto& kgroups = plan_.kgroups;
  int64_t lb = sub == 1 && next_lb_ >= 0 ? next_lb_ : load_group(sub, 0);
  next_lb_ = -1;
  for (size_t gi = 0; gi < kgroups.size(); ++gi) {
    const auto [q0, qn] = kgroups[gi];
    int64_t next = -1;
    for (size_t bi = 0; bi < blocks.size(); ++bi) {
      const auto [p0, size] = blocks[bi];
      const int64_t la = (l0a_step_++ % 2) * plan_.l0a_half;
      op(Opcode::Load3d, {f16(), at(Buffer::L0A, la), at(Buffer::L1, fm_base + sub * plane_, kKpos), imm(k0_), imm(p0), imm(size), imm(q0),
                          imm(qn)});
      if (bi == std::min<size_t>(1, blocks.size() - 1)) {
        if (gi + 1 < kgroups.size()) next = load_group(sub, gi + 1);
        else if (load_next) next_lb_ = load_group(sub + 1, 0);
      }
      op(Opcode::Mmad, {f16(), at(Buffer::L0C, c_base + p0 * tn * acc_), at(Buffer::L0A, la), at(Buffer::L0B, lb), imm(size),
                        imm(qn * k0_), imm(tn), gi == 0 ? init_first : imm(0)});
    }
    lb = next;
  }
}

void ConvEmitter::write_back(const Band& b, int64_t c_base, Reg y) {
  for (size_t i = 0; i < b.blocks.size(); ++i) write_back_block(b, c_base, y, i);
}

void ConvEmitter::write_back_block(const Band& b, int64_t c_base, Reg y, size_t block) {
  const int64_t tn = plan_.tn, tm0 = plan_.tm0, first = b.out_first * cv_.OW;
  {
    const auto [p0, size] = b.blocks[block];
    const int64_t ub = (ub_step_++ % 2) * tm0 * tn * acc_, valid = std::min(size, b.pixels - p0);
    op(Opcode::MovL0c, {Operand::type(m_.cube_f16.acc), at(Buffer::UB, ub), at(Buffer::L0C, c_base + p0 * tn * acc_),
                        imm(size * tn / m_.cube_f16.acc_fractal_elements()), imm(0)});
    if (valid <= 0) return;
    if (y_from_ub()) return rows_out(ub, size, valid, first + p0);
    for (int64_t jj = 0; jj < tn / n0_; ++jj) {
      int64_t src = ub + jj * size * n0_ * acc_;
      if (epi_) src = epi_->emit_column(p_, src, size, jj, ub_columns(column_step_++ % column_sets()));
      op(Opcode::DmaOut, {at(Buffer::GM, Y_.base + (first + p0) * Y_.pixel_bytes + jj * Y_.block_bytes, y), at(Buffer::UB, src), imm(valid),
                          imm(n0_ * eo_), imm(0), imm(Y_.pixel_bytes - n0_ * eo_)});
    }
  }
}

// NCHW: the accumulator block at `ub` ([16-channel block][size pixels][16] f32) transposed in UB,
// per 16 channels, to channel rows of its `valid` pixels, and those to the user's Y at pixel `pixel`.
void ConvEmitter::rows_out(int64_t ub, int64_t size, int64_t valid, int64_t pixel) {
  const int64_t tn = plan_.tn, channels = std::min(tn, orig_.K), sq = n0_ * n0_ * acc_, pitch = size / n0_ * (n0_ * acc_ / frow_);
  const int64_t t1 = ub_resident(), t2 = t1 + sq, rows = t2 + sq, row_bytes = plan_.tm0 * n0_ * acc_;
  if (rows + 2 * row_bytes > m_.capacity(Buffer::UB))
    return code_.refuse(unsupported("the result's transposes do not fit the vector buffer").what());
  for (int64_t jj = 0; jj * n0_ < channels; ++jj) {
    const int64_t out = rows + (rows_step_++ % 2) * row_bytes, src = ub + jj * size * n0_ * acc_;
    for (int64_t b = 0; b * n0_ < size; ++b) code_.f32_block_to_rows(src + b * sq, out + b * (n0_ * acc_), pitch, t1, t2);
    op(Opcode::DmaOut, {at(Buffer::GM, user_y_ + (jj * n0_ * y_plane() + pixel) * eo_, kYDst), at(Buffer::UB, out),
                        imm(std::min(n0_, channels - jj * n0_)), imm(valid * eo_), imm(pitch * frow_ - valid * eo_),
                        imm((y_plane() - valid) * eo_)});
  }
}

}  // namespace tessel::emit_npu::conv_detail
