// The NPU convolution's tile policy (pass-free: a function of the problem, the machine model and
// the tile spec). One place decides how an img2col convolution is cut for the NPU: the output-
// channel tile whose weights stay in L1, images per core, kernel positions per L0 step, pixel
// blocks per L0A half, bands of output rows where one image does not fit L1 / L0C (input windows
// with halos), whether feature maps / accumulators ping-pong, whether NCHW / padded-channel
// copies are made per core or on one core, and whether a core's weights are copied in chunks
// ahead of their slices. The emitter
// (compiler/emit_npu/conv.cc) carries the plan out; the tuner's fit check and analytic model
// (compiler/tune/) read the same plan, so they never re-derive it or compile to find out.
//
// Input: ConvGeometry (sizes with the channel counts already padded to the cube's fractal, the
// statement's axis names), the isa::NpuMachine, an optional tile spec, and the UB bytes a fused
// epilogue needs for a pixel block of a given row count and output-channel tile (empty: none).
// Output: a ConvPlan, or a FitFailure (a user's tile that does not fit a level: level, bytes,
// capacity), or an `unsupported` reason (no plan fits at all). Never throws for a user's input.
//
// Tile spec (README "Convolutions: tile spec"): the outer size of the output-channel axis -> the
// channel tile tn (times `unit` channels per step in the blocked layout, rounded up to the fractal
// and shrunk to divide K); inner sizes of the output row / column axes -> the pixel block (their
// product, rounded up to the fractal); of the kernel row / column axes -> kernel positions per L0
// step. Unnamed axes: the planner's choice (per core, the cube's cycles against MTE1's img2col and
// weight loads; ties to more cores, then larger tiles).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/tile/fit.h"
#include "compiler/tile/tile_spec.h"
#include "isa/npu_machine.h"

namespace tessel::tile {

// Up to this many pairs of channel slices the emitter (conv_emitter.cc) runs straight-line (more: in
// a loop).
inline constexpr int64_t kConvStraightPairs = 32;  // not hardware: a code-size cap

struct ConvGeometry {
  int64_t N = 0, H = 0, W = 0, C = 0, K = 0, R = 0, S = 0, OH = 0, OW = 0;  // C, K padded to the fractal
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;  // strides and dilations
  int64_t unit = 1;       // channels per step of the output-channel axis (the blocked layout's block)
  // Grouped convolutions: `groups` independent convolutions of C input and K output channels each
  // (C, K per group); a channel tile stays within one group (tn divides K), so there are
  // groups x K / tn tiles, each reading only its group's C input channels.
  int64_t groups = 1;
  // Scratch copies (NCHW, padded channels) are made per core, of what that core reads (cores
  // cannot synchronise); with output channels padded, one channel tile of all K keeps each core's
  // copy of its results whole, else (no such tile fits) one core copies everything.
  bool copies = false;  // NCHW or padded channels: scratch copies
  bool copies_fit_one_core = true;  // the one-core copies (whole tensors through UB) fit UB
  // GM round trips (read + write latency) the per-core copies add to one core's chain: the
  // padded-channel copies go through GM and back for X, the weights and Y (8, measured on the small
  // suite: NHWC 2x5x6x3 -> 4 runs 2.6x slower per core than on one); NCHW's transposes take X
  // straight into L1 and Y straight from UB, the weights' copy alone round trips (3).
  double copy_round_trips = 8;
  // GM bytes the layout copies move (0: not counted): on one core all of copy_bytes; per core, each
  // (image, channel tile) job its image's input channels x_job_bytes (three times where the map is
  // banded: through a GM slot) and y_channel_bytes per output channel, each tile its weights
  // (w_channel_bytes per output channel, in, out and in again); all cores share the GM bandwidth.
  double copy_bytes = 0, x_job_bytes = 0, y_channel_bytes = 0, w_channel_bytes = 0;
  // The emitter can spread bands of output rows over cores (each core one band of its images: equal
  // bands of OH / bands rows, no padding rows above or below), where channel tiles x images leave
  // cores idle.
  bool spread_bands = false;
  // The planner weighs each candidate's GM reads (feature maps and weights per core) against its
  // compute: 2-D convolutions without scratch copies (3-D ones read a depth tap's weights apart).
  bool weigh_gm_reads = false;
  // Copies that bring one channel tile's weights into L1 (0: one per fractal row of input channels
  // and kernel position; 1: the emitter's one copy of evenly spaced rows).
  int64_t weight_copies = 0;
  // The emitter can copy one channel tile's weights in chunks of slices (ConvPlan::weight_chunks):
  // NHWC without scratch copies, one copy of evenly spaced rows, 2-D, not grouped.
  bool chunk_weights = false;
  // A gathered map (the strided 1x1 convolution's read pixels only, pixel-major): one band's map by
  // this many copies, all landed before its first slice (each slice reads every pixel); 0: one
  // strided copy per fractal row of channels, slice c1 waiting for its own plane only.
  int64_t map_copies = 0;
  bool one_core = false;
  bool whole_k = false;
  // the statement's index names: images, output rows / columns, output / input channels, kernel rows / columns
  std::string an, ap, aq, ak, ac, ar, as;
  int64_t pixels() const { return OH * OW; }
  // Input rows a band of `rows` output rows reads (its halo included).
  int64_t band_input_rows(int64_t rows) const { return std::min(H, (rows - 1) * sh + dh * (R - 1) + 1); }
  int64_t kernel_positions() const { return R * S; }
};

struct ConvPlan {
  int64_t tn = 0;          // output channels per tile (weights resident in L1)
  int64_t k_tiles = 0;     // groups x K / tn
  int64_t group = 1;       // images per step when tiles <= cores
  int64_t cores = 1;
  int64_t jobs_per_core = 0;  // (image, tile) jobs one core runs
  int64_t fm_halves = 1;   // feature maps in L1 (2: two images ping-pong)
  int64_t c_halves = 1;    // accumulators in L0C
  int64_t kc = 0;          // kernel positions per L0 step
  std::vector<std::pair<int64_t, int64_t>> kgroups;  // (first kernel position, count)
  // Spatial tiling: bands of band_rows output rows (the last one may be shorter), each with its input
  // window (band_rows x stride + halo rows) in L1; one band (band_rows == OH) when an image fits.
  int64_t band_rows = 0, bands = 1;
  // Bands over cores: each core computes band (core's band index) of its images only (bands ==
  // core_bands); 1: every core runs every band of its images.
  int64_t core_bands = 1;
  int64_t tm0 = 0;         // rows of the largest pixel block
  std::vector<std::pair<int64_t, int64_t>> blocks;   // pixel blocks (first row, rows)
  int64_t padded_pixels = 0;  // one band's pixels rounded up to the fractal
  int64_t fm_bytes = 0;       // one band's feature map in L1 (C1HWC0, halo rows included)
  int64_t l0a_half = 0, l0b_half = 0;  // bytes of one L0A / L0B ping-pong half
  // Where each core loads its tile's weights once, ahead of one band read once: the slices per chunk
  // of the weights, each chunk's copies issued ahead of its first slice's map plane (empty: one copy
  // of all of them first). Every chunk but the last is a whole number of slice pairs.
  std::vector<int64_t> weight_chunks;
  // the planner's estimate (cycles per core; where a core copies its weights once ahead of one
  // band, the copy model's end of its last slice, chunked or not)
  double cost = 0;
  bool one_core = false;   // the geometry's scratch copies on one core (whole_k did not fit)
  bool operator==(const ConvPlan&) const = default;
};

struct ConvPlanResult {
  std::optional<ConvPlan> plan;
  std::optional<FitFailure> no_fit;  // the user's tile overflows a level
  std::string unsupported;           // no tile fits at all: why
};

ConvPlanResult plan_conv(const ConvGeometry& g, const isa::NpuMachine& m, const TileSpec* spec,
                         const std::function<int64_t(int64_t rows, int64_t channels)>& epilogue_ub_bytes = {});

}  // namespace tessel::tile
