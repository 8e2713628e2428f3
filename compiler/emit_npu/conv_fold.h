// Internal to the NPU convolution path (conv.h): the folded feature map of a convolution with fewer
// input channels than the cube's fractal (Conv::Fold, conv_match.h's fold_window). Its pixel
// (h, q) holds the window row X(h, sw q - pl + s, c) for every (s, c), S C values in s C + c order,
// zero past them to the fractal and outside the image, so that the convolution is an R x 1 one of
// round_up(S C, 16) channels that load3d reads as any other (C1HWC0 in L1, K = R x 16-channel
// slices instead of R x S of them).
//
// The map is built per band, straight from the user's X, with no scratch copy: per input row and
// 16-channel slice, the slice's piece of every pixel's window (one contiguous run of X's row) by
// GM -> UB DMAs whose bursts are the pieces; the windows overlap (stride sw C < S C elements) and
// bursts may not, so the pixels go in J interleaved DMAs (pixels j, j + J, ...), J the pieces per
// pixel stride; all but the last of them run each burst on to J strides (one contiguous GM run,
// half the granules), into the next pixel's first lanes, which a later DMA on the same in-order
// MTE2 queue writes (slices outer, then rows, then phases). Only GM takes unaligned addresses (UB and L1 need 32 bytes), so a window that
// crosses the image's left or right edge is read whole (its row's neighbours, or GM guards placed
// around X) and its lanes outside the image are zeroed by masked vdups, one per edge pixel and
// slice over the chunk's rows; the last slice's bursts run on to the pixel stride where that makes
// them one contiguous GM run, and its lanes past S C are zeroed per chunk by one masked vdup (8
// pixels a repeat). Then one UB -> L1 DMA per chunk of rows moves every slice into the band's
// C1HWC0 place.
// Chunks alternate between two UB halves so the next rows load while the last ones move.
// The weights need no copy either: the folded row (r, s C + c) is the user's Wt[R, S, C, K] row
// r S C + s C + c, so each slice's 16 rows load as they are and the rows past S C of the last
// slice (the next kernel row's, or the guard after Wt) are overwritten in L1 with zeros from that
// guard (GM scratch is zero), on MTE2 after the weights' own DMAs (one queue: no sync).
#pragma once

#include <cstdint>

#include "compiler/emit_npu/conv_layout.h"
#include "compiler/emit_npu/conv_match.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu::conv_detail {

class FoldedMap {
 public:
  FoldedMap(const isa::NpuMachine& m, const Conv& cv, npu::Program& p, ConvCode& code) : m_(m), cv_(cv), p_(p), code_(code) {}

  // GM a window may read before X's first row / past X's last (guards placed around X).
  int64_t front_guard_bytes() const;
  int64_t back_guard_bytes() const;
  // GM the last slice's 16 weight rows may read past Wt's end, and the zeros zero_weight_rows reads.
  int64_t weight_guard_bytes() const;
  // UB [begin, end) for the two staging halves, sized for bands of at most
  // `max_rows` input rows; false (nothing placed) when not even one row fits.
  bool place_ub(int64_t begin, int64_t end, int64_t max_rows);
  // The band's input rows [in_first, in_first + in_rows) of the image at x_gm + register x_reg (the
  // user's X, NHWC) as the folded map's C1HWC0 in L1 at fm_l1.
  void band(int64_t x_gm, uint8_t x_reg, int64_t in_first, int64_t in_rows, int64_t fm_l1);
  // The last slice's weight rows past S C zeroed in L1 (the fractals of kernel row q < R at
  // w_l1 + ((C1 - 1) R + q) tn fractal rows, tn / 16 of them) from the zero guard at zeros_gm.
  void zero_weight_rows(int64_t w_l1, int64_t tn, int64_t zeros_gm);
  // Rows per chunk (for the mapping note).
  int64_t chunk_rows() const { return rows_; }

 private:
  int64_t slices() const { return cv_.C / k0_; }
  int64_t valid_last() const { return cv_.fold.S * cv_.fold.C - (slices() - 1) * k0_; }  // S C values of the last slice
  int64_t row_bytes() const { return slices() * cv_.OW * frow_; }
  void edge_masks(int64_t half, int64_t rows);
  void pad_lanes(int64_t half, int64_t pixels);

  const isa::NpuMachine& m_;
  const Conv& cv_;
  npu::Program& p_;
  ConvCode& code_;
  const int64_t k0_ = m_.cube_f16.k0, frow_ = m_.fractal_row_bytes, in_ = 2;
  int64_t halves_[2] = {0, 0}, rows_ = 0;
  int64_t step_ = 0;  // chunks emitted: the next one's UB half
};

}  // namespace tessel::emit_npu::conv_detail
