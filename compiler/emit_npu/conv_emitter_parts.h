// Internal to the NPU convolution emitter (conv_emitter_class.h): the plain descriptions it carries out
// (no emission here): the GM layouts of the activations and the weights, bands of output rows with
// their input windows, write-back pieces placed between channel slices, and the L1 layout of a
// channel tile's weights copied in chunks of channel slices (tile::ConvPlan::weight_chunks), each
// chunk's copies issued on MTE2 just ahead of its first slice's map plane, so the cube starts once
// the first chunk (not every weight) has landed.
//
// Weight chunks: chunk g holds slices [first, first + slices) (16 input channels each; every chunk
// but the last a whole number of slice pairs). Per kernel position q its rows (q, c) of the user's
// RSCK weights are evenly spaced, one dma_in_nz of `slices` fractal rows x tn columns, landing NZ at
// fractal first x RS x nb + q x slices x nb (nb = tn / 16 column blocks). Slice c1 = first + i then
// has its (position q, column block j) fractal at first x RS x nb + q x slices x nb + j x slices + i:
// load2d's position stride is slices x nb, its block stride slices.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace tessel::emit_npu::conv_detail {

// Byte addressing of one image of an activation tensor in GM: image n starts at
// base + (n / group) * group_bytes + (n % group) * inner_bytes; pixel i at + i * pixel_bytes;
// channel block j (one fractal row of channels) at + j * block_bytes.
struct ActivationLayout {
  int64_t base = 0, group = 1, group_bytes = 0, inner_bytes = 0, pixel_bytes = 0, block_bytes = 0;
  int64_t tap_bytes = 0;  // 3-D: from one depth tap's input depth to the next's
};

// Weights in GM: `fractal` (blocked: the fractal (q, c1, kb) at ((q * C1 + c1) * KB + kb) fractals)
// or rows (row (q, c) of K elements at element (q * row_q + c * row_c), columns k contiguous).
struct WeightLayout {
  int64_t base = 0;
  bool fractal = false;
  int64_t row_q = 0, row_c = 0;  // elements
  int64_t per_tap = 0;           // 3-D: elements from one depth tap's weights to the next's
  int64_t KB = 0;                // fractal: output-channel blocks
};

// Write-back pieces to place between a band's channel slices: emit(i), i < pieces.
struct Trailing {
  int64_t pieces = 0;
  std::function<void(int64_t)> emit;
};

// A band of output rows [out_first, out_first + out_rows) and its input window: rows
// [in_first, in_first + in_rows) of the image, pad_top / pad_bottom zero rows of the padding beyond
// it (only at the image's real border); its pixel blocks (first pixel, pixels) within the band.
struct Band {
  int64_t out_first = 0, out_rows = 0, in_first = 0, in_rows = 0, pad_top = 0, pad_bottom = 0, pixels = 0;
  std::vector<std::pair<int64_t, int64_t>> blocks;
};

// The tile's weights in chunks of slices (see the header comment).
struct WeightChunk {
  int64_t first = 0, slices = 0;
};

struct WeightChunks {
  std::vector<WeightChunk> chunks;
  int64_t RS = 1, nb = 1;

  // Chunks of the given slice counts, in order.
  static WeightChunks of_sizes(const std::vector<int64_t>& sizes, int64_t RS, int64_t nb) {
    WeightChunks w;
    w.RS = RS, w.nb = nb;
    int64_t first = 0;
    for (int64_t n : sizes) w.chunks.push_back({first, n}), first += n;
    return w;
  }
  bool empty() const { return chunks.empty(); }
  const WeightChunk& of(int64_t c1) const {
    for (const WeightChunk& c : chunks)
      if (c1 < c.first + c.slices) return c;
    return chunks.back();
  }
  // Slice c1's first fractal (position 0, column block 0) from the weights' L1 base.
  int64_t slice_fractal(int64_t c1) const {
    const WeightChunk& c = of(c1);
    return c.first * RS * nb + (c1 - c.first);
  }
  int64_t position_stride(int64_t c1) const { return of(c1).slices * nb; }
  int64_t block_stride(int64_t c1) const { return of(c1).slices; }
};

}  // namespace tessel::emit_npu::conv_detail
