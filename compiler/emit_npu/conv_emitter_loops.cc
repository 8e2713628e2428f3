// ConvEmitter (conv_emitter_class.h): the bands of output rows and the loops that run them: channel
// tiles over cores, images (two ping-pong in L1 / L0C where both fit), bands in turn or spread over
// cores (each kind of padded band its own code).
#include "compiler/emit_npu/conv_emitter_class.h"

#include <algorithm>
#include <map>

#include "isa/base/error.h"

namespace tessel::emit_npu::conv_detail {

// The plan's bands: the whole image (its pad rows as the statement has them), or bands of
// band_rows output rows, each reading its rows x stride + halo input rows clipped to the image.
void ConvEmitter::make_bands() {
  const int64_t th = plan_.band_rows ? plan_.band_rows : cv_.OH;
  for (int64_t o0 = 0; o0 < cv_.OH; o0 += th) {
    Band b;
    b.out_first = o0, b.out_rows = std::min(th, cv_.OH - o0), b.pixels = b.out_rows * cv_.OW;
    const int64_t lo = o0 * cv_.sh - cv_.pt, hi = (o0 + b.out_rows - 1) * cv_.sh + cv_.dh * (cv_.R - 1) - cv_.pt;
    if (th == cv_.OH) {
      b.in_first = 0, b.in_rows = cv_.H, b.pad_top = cv_.pt, b.pad_bottom = hi - (cv_.H - 1);
    } else {
      b.in_first = std::max<int64_t>(0, lo);
      const int64_t last = std::min(cv_.H - 1, hi);
      b.in_rows = last - b.in_first + 1, b.pad_top = b.in_first - lo, b.pad_bottom = hi - last;
    }
    const int64_t padded = round_up(b.pixels, m_.cube_f16.m0);
    for (const auto& [p0, size] : plan_.blocks)
      if (p0 < padded) b.blocks.push_back({p0, std::min(size, padded - p0)});
    bands_.push_back(std::move(b));
  }
}

void ConvEmitter::set_fmatrix(const Band& b) {
  if (cv_.gathered()) {  // slice c1's 16 channels of pixel p at (p x C1 + c1) x 32 bytes: a row of pixels C1 apart
    const int64_t w = (P() - 1) * C1() + 1;
    return op(Opcode::SetFmatrix, {imm(1), imm(w), imm(0), imm(0), imm(0), imm(0), imm(1), imm(C1()), imm(1), imm(1), imm(1), imm(1)});
  }
  const int64_t pr = (cv_.OW - 1) * cv_.sw + cv_.dw * (cv_.S - 1) + 1 - cv_.W - cv_.pl;
  op(Opcode::SetFmatrix, {imm(b.in_rows), imm(cv_.W), imm(b.pad_top), imm(b.pad_bottom), imm(cv_.pl), imm(pr), imm(cv_.sh), imm(cv_.sw),
                          imm(cv_.R), imm(cv_.S), imm(cv_.dh), imm(cv_.dw)});
}

void ConvEmitter::main_loops() {
  p_.cores = static_cast<int>(plan_.cores);
  if (bands_.size() == 1) set_fmatrix(bands_[0]);
  if (kt_loop()) {
    op(Opcode::Loop, {reg(kKTile), reg(npu::kRegCoreId), imm(plan_.k_tiles), reg(npu::kRegCoreCount)});
    op(Opcode::Mov, {reg(kImage0), imm(0)});
  } else {
    op(Opcode::Div, {reg(kImage0), reg(npu::kRegCoreId), imm(plan_.k_tiles)});
    op(Opcode::Mul, {reg(kTmp), reg(kImage0), imm(plan_.k_tiles)});
    op(Opcode::Sub, {reg(kKTile), reg(npu::kRegCoreId), reg(kTmp)});
    if (spread()) {  // core = (image * bands + band) * tiles + tile
      op(Opcode::Div, {reg(kTmp), reg(kImage0), imm(plan_.core_bands)});
      op(Opcode::Mul, {reg(kCond), reg(kTmp), imm(plan_.core_bands)});
      op(Opcode::Sub, {reg(kBand), reg(kImage0), reg(kCond)});
      op(Opcode::Mov, {reg(kImage0), reg(kTmp)});
    }
  }
  plan_weight_chunks();
  if (!loads_after_fold()) {
    if (epi_) load_channels();
    if (per_core()) copy_weights();
    if (!weights_per_band_kind() && !weights_after_map()) load_weights();
  }
  const int64_t iterations = per_core_images() / halves();
  if (bands_.size() > 1) {
    banded_images();
  } else if (pipelined()) {
    // Image 2j + 1's mmads are issued before image 2j's write-back, and image 2j + 2's before
    // image 2j + 1's: the vector unit's epilogue of one image overlaps the cube's next image (the
    // scalar pipe issues in order, so a write-back issued right after its own mmads would hold
    // the next image's mmads behind the vector queue). The first pair is peeled (no write-back
    // trails it).
    op(Opcode::Mov, {reg(kPair), imm(0)});
    image(0);
    image(1, trailing(0));
    if (iterations > 1) {
      op(Opcode::Loop, {reg(kPair), imm(1), imm(iterations), imm(1)});
      image(0, trailing(1));
      image(1, trailing(0));
      op(Opcode::EndLoop, {});
    }
    write_back(1);
  } else {
    if (iterations > 1) op(Opcode::Loop, {reg(kPair), imm(0), imm(iterations), imm(1)});
    else op(Opcode::Mov, {reg(kPair), imm(0)});
    for (int64_t half = 0; half < halves(); ++half) {
      image(half);
      write_back(half);
      if (per_core()) copy_image_out(y_base(half));
    }
    if (iterations > 1) op(Opcode::EndLoop, {});
  }
  if (kt_loop()) op(Opcode::EndLoop, {});
}

// Feature maps larger than L1 (or accumulators larger than L0C): per image its bands in turn,
// each with its own geometry and input window (overlapping its neighbours' by the halo); bands
// ping-pong in L1 and L0C where both hold two, band b's write-back then trailing band b + 1's mmads.
void ConvEmitter::banded_images() {
  const int64_t images = per_core_images(), step_images = kt_loop() ? 1 : plan_.group;
  const bool two = plan_.fm_halves == 2 && plan_.c_halves == 2 && !spread();
  if (images > 1) op(Opcode::Loop, {reg(kPair), imm(0), imm(images), imm(1)});
  else op(Opcode::Mov, {reg(kPair), imm(0)});
  op(Opcode::Mul, {reg(kImage), reg(kPair), imm(step_images)});
  op(Opcode::Add, {reg(kImage), reg(kImage), reg(kImage0)});
  image_bases(kYBase, 0);
  if (spread()) return core_band(images);
  for (size_t i = 0; i < bands_.size(); ++i) {
    const int64_t half = two ? int64_t(i % 2) : 0;
    set_fmatrix(bands_[i]);
    load_band(bands_[i], half * plan_.fm_bytes);
    Trailing previous;
    if (two && i > 0)
      previous = {int64_t(bands_[i - 1].blocks.size()),
                  [this, i, half](int64_t bi) { write_back_block(bands_[i - 1], c_base(1 - half), kYBase, bi); }};
    slices(bands_[i], half * plan_.fm_bytes, c_base(half), previous);
    if (!two) write_back(bands_[i], c_base(half), kYBase);
  }
  if (two) write_back(bands_.back(), c_base((bands_.size() - 1) % 2), kYBase);
  if (per_core()) copy_image_out(kYBase);
  if (images > 1) op(Opcode::EndLoop, {});
}

// Bands over cores: every band alike (the planner's equal bands, no padding rows), so the core's
// band kBand is band 0's code at its offsets: kBand x rows x stride input rows into X, kBand x
// rows output rows into Y.
void ConvEmitter::core_band(int64_t images) {
  const Band& b = bands_[0];
  const int64_t rows = plan_.band_rows, in_step = rows * cv_.sh * x_width(), out_step = rows * cv_.OW;
  op(Opcode::Mul, {reg(kTmp), reg(kBand), imm(in_step * (x_to_l1() ? in_ : X_.pixel_bytes))});
  op(Opcode::Add, {reg(x_to_l1() ? kXSrc : kXBase), reg(x_to_l1() ? kXSrc : kXBase), reg(kTmp)});
  op(Opcode::Mul, {reg(kTmp), reg(kBand), imm(out_step * (y_from_ub() ? eo_ : Y_.pixel_bytes))});
  op(Opcode::Add, {reg(y_from_ub() ? kYDst : kYBase), reg(y_from_ub() ? kYDst : kYBase), reg(kTmp)});
  if (!bands_alike()) {
    padded_core_bands();
  } else {
    set_fmatrix(b);
    if (x_to_l1()) copy_band_in(b, 0);
    else load_band(b, 0);
    slices(b, 0, c_base(0));
    write_back(b, c_base(0), kYBase);
  }
  if (images > 1) op(Opcode::EndLoop, {});
}

bool ConvEmitter::bands_alike() const {
  for (const Band& o : bands_)
    if (o.in_rows != bands_[0].in_rows || o.out_rows != bands_[0].out_rows || o.pad_top != 0 || o.pad_bottom != 0) return false;
  return true;
}

// Bands over cores with padding rows (NHWC): the first band (zero rows on top), the middle ones
// (alike: their halo rows on both sides) and the last (zero rows below) differ in their input
// windows, so each kind has its own code, run as a loop of one iteration on its cores and of none
// on the others. kXBase / kYBase hold the core's band's offsets (band x rows); a kind's code is its
// first band's, its X rows addressed from the band's first input row.
void ConvEmitter::padded_core_bands() {
  TESSEL_CHECK(!x_to_l1() && !per_core() && bands_.size() >= 2, "conv: padded bands over cores are NHWC without copies");
  const int64_t n = int64_t(bands_.size());
  for (int64_t i = 1; i + 1 < n; ++i)
    TESSEL_CHECK(bands_[i].in_rows == bands_[1].in_rows && bands_[i].pad_top == 0 && bands_[i].pad_bottom == 0,
                 "conv: the middle bands over cores must be alike (plan_conv's spread_over_cores)");
  op(Opcode::Loop, {reg(kCase), reg(kBand), imm(1), imm(1)});  // band 0
  band_code(0, 0);
  op(Opcode::EndLoop, {});
  if (n > 2) {  // 1 <= band <= n - 2: (band + n - 2) / (n - 1) - band / (n - 1) iterations
    op(Opcode::Add, {reg(kMid), reg(kBand), imm(n - 2)});
    op(Opcode::Div, {reg(kMid), reg(kMid), imm(n - 1)});
    op(Opcode::Div, {reg(kTmp), reg(kBand), imm(n - 1)});
    op(Opcode::Sub, {reg(kMid), reg(kMid), reg(kTmp)});
    op(Opcode::Loop, {reg(kCase), imm(0), reg(kMid), imm(1)});
    band_code(1, 1);
    op(Opcode::EndLoop, {});
  }
  op(Opcode::Add, {reg(kMid), reg(kBand), imm(1)});  // band n - 1: band + 1 - (n - 1) iterations
  op(Opcode::Loop, {reg(kCase), imm(n - 1), reg(kMid), imm(1)});
  band_code(n - 1, n > 2 ? 2 : 1);
  op(Opcode::EndLoop, {});
}

// Band t's code at the core's band offsets: X from the band's first input row (t x rows x stride
// rows past the core's offset, less its halo), Y at the core's band's first row.
// `kind`: the kind's slot (band_kind_slots).
void ConvEmitter::band_code(int64_t t, int64_t kind) {
  Band b = bands_[size_t(t)];
  const int64_t back = (t * plan_.band_rows * cv_.sh - b.in_first) * x_width() * X_.pixel_bytes;
  const int64_t slot = kind % band_kind_slots(), fm = slot * plan_.fm_bytes, acc = slot * plan_.padded_pixels * plan_.tn * acc_;
  b.in_first = 0, b.out_first = 0;
  if (back) op(Opcode::Sub, {reg(kXBase), reg(kXBase), imm(back)});
  set_fmatrix(b);
  if (weights_per_band_kind()) load_weights();
  load_band(b, fm);
  slices(b, fm, acc);
  write_back(b, acc, kYBase);
  if (back) op(Opcode::Add, {reg(kXBase), reg(kXBase), imm(back)});
}

// dst = base offset of image kImage in layout l (without l.base)
void ConvEmitter::image_base(const ActivationLayout& l, Reg dst) {
  if (l.group == 1) {
    op(Opcode::Mul, {reg(dst), reg(kImage), imm(l.group_bytes)});
    return;
  }
  op(Opcode::Div, {reg(kGroup), reg(kImage), imm(l.group)});
  op(Opcode::Mul, {reg(kInner), reg(kGroup), imm(l.group)});
  op(Opcode::Sub, {reg(kInner), reg(kImage), reg(kInner)});
  op(Opcode::Mul, {reg(dst), reg(kGroup), imm(l.group_bytes)});
  op(Opcode::Mul, {reg(kInner), reg(kInner), imm(l.inner_bytes)});
  op(Opcode::Add, {reg(dst), reg(dst), reg(kInner)});
}

// One image of the pair: its feature map into L1, the channel slices, the write-back.
// The write-back of the image in `half`, piece by piece.
Trailing ConvEmitter::trailing(int64_t half) {
  return {int64_t(bands_[0].blocks.size()), [this, half](int64_t i) { write_back_block(bands_[0], c_base(half), y_base(half), i); }};
}

void ConvEmitter::image(int64_t half, const Trailing& trailing) {
  const int64_t step_images = kt_loop() ? 1 : plan_.group;
  const int64_t fm_base = half * plan_.fm_bytes, c_base = this->c_base(half);
  const Reg y = y_base(half);
  // image = image0 + (pair * halves + half) * step_images
  op(Opcode::Mul, {reg(kImage), reg(kPair), imm(halves() * step_images)});
  op(Opcode::Add, {reg(kImage), reg(kImage), reg(kImage0)});
  if (half) op(Opcode::Add, {reg(kImage), reg(kImage), imm(half * step_images)});
  image_bases(y, half, fm_base);
  if (!x_to_l1()) load_band(bands_[0], fm_base);
  slices(bands_[0], fm_base, c_base, trailing);
}

void ConvEmitter::image_bases(Reg y, int64_t slot, int64_t fm_base) {
  if (spread() && x_to_l1()) user_x_base();  // each band's rows copied by its core (copy_band_in)
  else if (per_core() && x_copied()) copy_image_in(slot, fm_base);
  else image_base(X_, kXBase);
  if (y_from_ub()) user_y_base();
  if (cv_.G > 1 && !(per_core() && x_copied())) op(Opcode::Add, {reg(kXBase), reg(kXBase), reg(kGroupX)});
  image_base(Y_, y);
  op(Opcode::Mul, {reg(kTmp), reg(kKTile), imm(plan_.tn / n0_ * Y_.block_bytes)});
  op(Opcode::Add, {reg(y), reg(y), reg(kTmp)});
}

}  // namespace tessel::emit_npu::conv_detail
