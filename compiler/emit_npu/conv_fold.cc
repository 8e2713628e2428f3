// The folded feature map of a small-channel convolution (conv_fold.h).
#include "compiler/emit_npu/conv_fold.h"

#include <algorithm>

#include "compiler/emit_npu/operands.h"

namespace tessel::emit_npu::conv_detail {

using npu::Buffer;
using npu::Opcode;

int64_t FoldedMap::front_guard_bytes() const { return std::max<int64_t>(0, cv_.fold.pl * cv_.fold.C * in_); }

int64_t FoldedMap::back_guard_bytes() const {
  const Conv::Fold& f = cv_.fold;
  return std::max<int64_t>(0, ((cv_.OW - 1) * f.sw - f.pl + f.S - f.W) * f.C * in_);
}

// Past Wt's end: the last slice's rows past S C, and the zeros its rows in L1 are overwritten with.
int64_t FoldedMap::weight_guard_bytes() const {
  const int64_t rows = k0_ - valid_last();
  return rows * std::max(cv_.K * in_, cv_.R * cv_.K / m_.cube_f16.n0 * frow_);
}

bool FoldedMap::place_ub(int64_t begin, int64_t end, int64_t max_rows) {
  const int64_t first = round_up(begin, m_.vector_block_bytes);
  // a masked vdup's footprint spans a whole repeat past its pixel's block
  const int64_t room = end - first - m_.vector_bytes_per_repeat;
  rows_ = std::min(max_rows, room / 2 / row_bytes());
  if (rows_ < 1) return false;
  halves_[0] = first, halves_[1] = first + rows_ * row_bytes();
  return true;
}

// Lanes past S C in the last slice (its DMA's bursts run on to the next window, or the lanes hold
// an earlier chunk's): zeroed for the chunk's `pixels` pixels, 8 pixels' blocks per repeat.
void FoldedMap::pad_lanes(int64_t half, int64_t pixels) {
  const int64_t v = valid_last(), per = m_.vector_bytes_per_repeat / frow_, blk = frow_ / m_.vector_block_bytes;
  if (v == k0_) return;
  auto mask = [&](int64_t blocks) {  // lanes v..15 of each of the first `blocks` pixels
    uint64_t half_bits[2] = {0, 0};
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t l = v; l < k0_; ++l) half_bits[(b * k0_ + l) / 64] |= uint64_t(1) << ((b * k0_ + l) % 64);
    code_.op(Opcode::SetVectorMask, {imm(int64_t(half_bits[1])), imm(int64_t(half_bits[0]))});
  };
  const int64_t base = half + (slices() - 1) * rows_ * cv_.OW * frow_, full = pixels / per;
  if (full) mask(per);
  for (int64_t r0 = 0; r0 < full; r0 += m_.vector_max_repeat)
    code_.op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, base + r0 * per * frow_), npu::Operand::float_(0),
                            imm(std::min<int64_t>(m_.vector_max_repeat, full - r0)), imm(blk), imm(per * blk)});
  if (pixels % per) {
    mask(pixels % per);
    code_.op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, base + full * per * frow_), npu::Operand::float_(0), imm(1), imm(blk), imm(per * blk)});
  }
}

// Lanes of window element e of pixel q: outside the image where sw q - pl + e / C < 0 or >= W.
void FoldedMap::edge_masks(int64_t half, int64_t rows) {
  const Conv::Fold& f = cv_.fold;
  const int64_t sc = f.S * f.C, rep_blocks = cv_.OW * frow_ / m_.vector_block_bytes;
  for (int64_t q = 0; q < cv_.OW; ++q) {
    const int64_t left = std::min(sc, std::max<int64_t>(0, f.pl - q * f.sw) * f.C);
    const int64_t right = std::clamp<int64_t>((f.W + f.pl - q * f.sw) * f.C, 0, sc);
    if (left == 0 && right == sc) continue;
    for (int64_t c1 = 0; c1 < slices(); ++c1) {
      uint64_t bits = 0;
      for (int64_t l = 0; l < k0_ && c1 * k0_ + l < sc; ++l)
        if (c1 * k0_ + l < left || c1 * k0_ + l >= right) bits |= uint64_t(1) << l;
      if (!bits) continue;
      code_.op(Opcode::SetVectorMask, {imm(0), imm(int64_t(bits))});  // lanes of the pixel's first block only
      for (int64_t r0 = 0; r0 < rows; r0 += m_.vector_max_repeat)
        code_.op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, half + ((c1 * rows_ + r0) * cv_.OW + q) * frow_), npu::Operand::float_(0),
                                imm(std::min<int64_t>(m_.vector_max_repeat, rows - r0)), imm(1), imm(rep_blocks)});
    }
  }
  pad_lanes(half, rows * cv_.OW);
  code_.full_mask();
}

void FoldedMap::band(int64_t x_gm, uint8_t x_reg, int64_t in_first, int64_t in_rows, int64_t fm_l1) {
  const Conv::Fold& f = cv_.fold;
  const int64_t sc = f.S * f.C, pixel = f.sw * f.C * in_, plane = rows_ * cv_.OW * frow_;
  // Where X's rows are OW x sw pixels wide, pixel q of row i + 1 continues row i's pixels (its
  // window sw C elements after the one before it), so a chunk's rows are one run of pixels.
  const bool flat = f.W == cv_.OW * f.sw;
  for (int64_t r0 = 0; r0 < in_rows; r0 += rows_) {
    const int64_t nr = std::min(rows_, in_rows - r0), half = halves_[step_++ % 2];
    const int64_t runs = flat ? 1 : nr, run = flat ? nr * cv_.OW : cv_.OW;
    for (int64_t c1 = 0; c1 < slices(); ++c1) {
      // the slice's piece of each window: pixels J apart so that bursts never overlap
      int64_t e0 = c1 * k0_, burst = std::min(k0_, sc - e0) * in_, J = (burst + pixel - 1) / pixel;
      // one window per pixel stride: bursts run on to the stride (past S C: pad_lanes), one GM run
      if (J == 1 && c1 + 1 == slices()) burst = std::min(pixel, frow_);
      for (int64_t i = 0; i < runs; ++i) {
        const int64_t row = x_gm + (in_first + r0 + i) * f.W * f.C * in_;
        for (int64_t j = 0; j < std::min(J, run); ++j) {
          // J > 1: all but the last phase run on to J strides too (one GM run); the run-on lands in
          // the next pixel's first lanes, which a later DMA on the same in-order MTE2 queue writes
          // (the next phase, the next row, the next slice's first pixel), or past the last slice
          const int64_t b = J > 1 && j + 1 < J ? J * pixel : burst;
          code_.op(Opcode::DmaIn, {at(Buffer::UB, half + c1 * plane + (i * cv_.OW + j) * frow_),
                                   at(Buffer::GM, row + ((j * f.sw - f.pl) * f.C + e0) * in_, x_reg), imm((run - j + J - 1) / J),
                                   imm(b), imm(J * pixel - b), imm(J * frow_ - b)});
        }
      }
    }
    edge_masks(half, nr);
    code_.op(Opcode::DmaOut, {at(Buffer::L1, fm_l1 + r0 * cv_.OW * frow_), at(Buffer::UB, half), imm(slices()), imm(nr * cv_.OW * frow_),
                              imm((rows_ - nr) * cv_.OW * frow_), imm((in_rows - nr) * cv_.OW * frow_)});
  }
}

void FoldedMap::zero_weight_rows(int64_t w_l1, int64_t tn, int64_t zeros_gm) {
  const int64_t v = valid_last(), fractal = m_.fractal_bytes();
  if (v == k0_) return;
  // the last slice's R x tn / 16 fractals lie one after another: their rows past v by one DMA
  const int64_t burst = (k0_ - v) * frow_;
  code_.op(Opcode::DmaIn, {at(Buffer::L1, w_l1 + (slices() - 1) * cv_.R * tn * frow_ + v * frow_), at(Buffer::GM, zeros_gm),
                           imm(cv_.R * tn / m_.cube_f16.n0), imm(burst), imm(0), imm(fractal - burst)});
}

}  // namespace tessel::emit_npu::conv_detail
