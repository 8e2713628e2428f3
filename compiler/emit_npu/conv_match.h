// Internal to the NPU convolution path (conv.h): a kernel's matched contraction read as a
// convolution (match: NHWC, NCHW, blocked, grouped, 3-D, a strided 1x1 with a weight matrix), its
// strided 1x1 form (rows clipped, columns read as pixels stride apart: strided_pointwise), the
// planner's view of it (padded_geometry) and the refusals that depend on the match alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/kernel/kernel_ir.h"
#include "compiler/tile/npu_conv_plan.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu::conv_detail {

// Tensor layouts of a convolution; positions of the dimensions in X, Wt and Y.
enum class Layout { Nhwc, Nchw, Blocked };

struct Conv {
  Layout layout = Layout::Nhwc;
  std::string x, w, y;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, K = 0, OH = 0, OW = 0, pt = 0, pl = 0;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;  // strides and dilations
  int statement = 0;       // the convolution statement
  std::string acc;         // its accumulator (== y without an epilogue)
  DType out = DType::F32;  // y's type
  bool epilogue = false;   // statements after the convolution, element-wise on its output
  // The statement's index names (the tile spec's axes): images, output rows / columns, output and
  // input channels, kernel rows / columns; k counts blocks of 16 in the blocked layout.
  std::string an, ap, aq, ak, ac, ar, as;
  int64_t unit = 1;  // channels per step of ak: 16 in the blocked layout
  // Grouped (NHWC only): X[n, h, w, g, c], Wt[g, r, s, c, k], Y[n, p, q, g, k]; C and K per group.
  int64_t G = 1;
  // Depthwise (NHWC, C a multiple of the fractal): grouped with C = K = one fractal per group and
  // block-diagonal weights built on chip from Wt[r, s, c] (depthwise.h's statement).
  bool depthwise = false;
  // 3-D (NDHWC, NCDHW; depth stride and dilation 1, no depth padding): T depth taps over D input
  // depths, O = D - T + 1 output depths. An image is one (n, o): N counts N x O of them, and C is T x
  // the channels, the feature map in L1 holding the T input depths one after another, so each
  // depth tap is C / T more channel slices accumulating in L0C.
  int64_t T = 1, D = 1, O = 1;
  int64_t depth_channels() const { return C / T; }
  // A strided 1x1 convolution without padding reads only some of X's src_h x src_w pixels
  // (strided_pointwise()): H is then the rows up to the last one read, and where the column stride
  // divides src_w, W is OW, the column stride 1 and X's pixel j of a row the image's pixel j x
  // x_step: one strided copy per fractal row of channels brings the columns read into L1.
  int64_t x_step = 1, src_h = 0, src_w = 0;
  bool clipped() const { return src_h > 0; }
  // Gathered (gathered_pointwise): a strided 1x1 convolution without padding whose read pixels
  // (rows x cols of them, sh rows and sw columns apart in X) come into L1 pixel-major ([P][C]: one
  // copy of `cols` whole pixels per output row), read as one image row of P = rows x cols pixels
  // (H 1, W P, OH 1, OW P, stride 1); each slice's load3d takes its 16 channels of every pixel as
  // a row of pixels C / 16 fractal rows apart (conv_emitter_slices.cc).
  struct Gather {
    int64_t rows = 0, cols = 0, sh = 1, sw = 1;
  } gather;
  bool gathered() const { return gather.rows > 0; }
  // Folded (fold_window): a convolution of fewer input channels than the cube's fractal read as
  // one whose channels are its window's columns and channels together, (s, c) -> s C + c: X's
  // pixel (h, q) of the folded map holds X(h, sw q - pl + s, c) for every s, c (zero outside the
  // image), so S is 1, W is OW, the column stride 1 and pl 0, and C is S x the channels. `fold`
  // keeps the user's X: its channels, kernel columns, column stride, left pad and width.
  struct Fold {
    int64_t C = 0, S = 0, sw = 1, pl = 0, W = 0;
  } fold;
  bool folded() const { return fold.C > 0; }
};

// The matched contraction (Kernel::contraction) read as a convolution
//   Y(n, p, q, k) +=! X(n, sh p + dh r - pt, sw q + dw s - pl, c) * Wt(r, s, c, k)
// in NHWC, the same in NCHW (X[n, c, h, w], Wt[k, c, r, s], Y[n, k, p, q]) and in the blocked
// layout (X[nb, h, w, cb, ni, ci], Wt[r, s, cb, kb, ci, ki], Y[nb, p, q, kb, ni, ki] with 16-blocks),
// X read as zero outside the image (the core inlines a padding statement into X's indices); or a
// strided 1x1 convolution with a weight matrix (pointwise_form).
std::optional<Conv> match(const kernel::Kernel& k, int64_t frac);

// A strided 1x1 convolution without padding (Conv::x_step): the image's rows clipped to the last
// one read (so an even H's windows reach its end), and where the column stride divides W, the
// columns read as the pixels of a row OW wide. NHWC, ungrouped, 2-D, channels multiples of the
// fractal (the scratch copies of padded channels hold whole images); any other convolution as it is.
Conv strided_pointwise(Conv c, const isa::NpuMachine& m);

// The same convolutions (strided_pointwise's conditions) with their read pixels gathered
// (Conv::Gather): the map in L1 holds only the pixels read, by one copy per output row, all landed
// before the first slice; nullopt for any other convolution. conv.cc plans both forms and keeps the
// one the planner prices lower.
std::optional<Conv> gathered_pointwise(const Conv& c, const isa::NpuMachine& m);

UserError conv_unsupported(const kernel::Kernel& k, const std::string& why);

// A strided window that stops short of the image's last rows or columns (a 1x1 stride-2
// convolution of an even H) has a negative bottom or right pad, which is no img2col geometry
// (the simulator refused set_fmatrix, issue 31): refused (the UserError text), the general lowering
// maps it. "" when the windows reach the image's end.
std::string windows_stop_short(const kernel::Kernel& k, const Conv& cv);

// Whether the emitter loads a channel tile's weights by one copy (its rows (t, q, c) evenly spaced
// in GM: NHWC, NDHWC with an even number of fractal rows of channels per depth tap, grouped NHWC,
// not folded or depthwise) instead of one per fractal row of channels and kernel position.
bool weights_in_one_copy(const Conv& c, int64_t frac);

// The planner's view of a matched convolution: channel counts padded to the cube's fractal.
tile::ConvGeometry padded_geometry(const Conv& c, const isa::NpuMachine& m);

// A convolution whose input channels are fewer than the cube's fractal, folded (Conv::Fold): its
// window's columns join the channels, so the cube's K holds R x round_up(S C, fractal) values
// instead of R x S x the fractal (the 7x7/2 stem with 3 channels: 7 x 32 = 224 instead of 784).
// NHWC, 2-D, ungrouped, no column dilation, output channels a multiple of the fractal, and fewer
// K fractals than unfolded; nullopt otherwise (the convolution as it is). The emitter builds the
// folded map in UB from the user's X (no scratch copy) and reads the user's weights directly.
std::optional<Conv> fold_window(const Conv& c, const isa::NpuMachine& m);

}  // namespace tessel::emit_npu::conv_detail
