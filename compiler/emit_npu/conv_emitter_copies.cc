// ConvEmitter (conv_emitter_class.h): the scratch layout copies. NCHW X and weights transposed to
// NHWC, channel counts padded to the fractal, per-core copies of what one core reads and writes,
// and the results back to the user's layout. Nothing one core writes is read by another.
#include "compiler/emit_npu/conv_emitter_class.h"

#include <algorithm>
#include <map>

#include "isa/base/error.h"

namespace tessel::emit_npu::conv_detail {

// The core's own copy of the weights: NCHW [K][C R S] -> [C][R S][Kp]; NHWC rows of K -> Kp.
void ConvEmitter::copy_weights() {
  if (cv_.G > 1 && x_copied()) {  // the tile's group's first input plane within an image (copy_image_in)
    op(Opcode::Div, {reg(kGroupX), reg(kKTile), imm(cv_.K / plan_.tn)});
    op(Opcode::Mul, {reg(kGroupX), reg(kGroupX), imm(cv_.C * cv_.H * cv_.W * in_)});
  }
  if (cv_.depthwise) return;  // ConvCode::diagonal_weights builds them in L1
  if (weights_to_l1()) return transpose_weights_to_l1();
  op(Opcode::Mul, {reg(kPrivW), reg(npu::kRegCoreId), imm(w_slot_bytes())});
  if (cv_.layout == Layout::Nchw) {  // the channel tile's rows [K][C R S] -> [C][R S][tn]
    const int64_t tn = plan_.tn, crs = orig_.C * RS();
    op(Opcode::Mul, {reg(kXSrc), reg(kKTile), imm(tn * crs * in_)});
    code_.transpose_rows(user_w_, kXSrc, crs, std::min(tn, orig_.K), crs, cv_.C * RS(), W_.base, kPrivW, k0_, tn, copy_ub(),
                         copy_ub_bytes());
    return;
  }
  for (int64_t q = 0; q < RS(); ++q)
    code_.resize_rows(user_w_ + q * orig_.C * orig_.K * in_, npu::kNoRegister, W_.base + q * cv_.C * cv_.K * in_, kPrivW, orig_.C,
                      orig_.K, cv_.K, DType::F16, copy_ub(), copy_ub_bytes());
}

bool ConvEmitter::weights_to_l1() const {
  return per_core() && cv_.layout == Layout::Nchw && cv_.C == orig_.C && 2 * weight_row_pitch() * k0_ * in_ <= copy_ub_bytes();
}

int64_t ConvEmitter::weight_slots() const {
  if (!weights_to_l1()) return 0;
  const int64_t map_slots = 2 * code_.transpose_slot_bytes(map_plane(), copy_ub_bytes());
  const int64_t fit = (copy_ub_bytes() - map_slots) / weight_slot_bytes();
  return std::clamp<int64_t>(fit, 1, weight_groups());
}

void ConvEmitter::transpose_weights_to_l1() {
  pending_weights_ = code_.weights_to_l1(user_w_, kKTile, kWSrc, orig_.C * RS(), orig_.K, plan_.tn, cv_.depth_channels(), cv_.T, RS(),
                                         weight_row_pitch(), copy_ub(), weight_slots(), w_l1());
  // held back only where the map's copy runs once (no image or tile loop: the ring's later loads
  // would be redone per iteration, over slots the first ones filled)
  if (per_core_images() != 1 || kt_loop()) flush_pending_weights();
}

// The map's copies into L1 (x_to_l1) leave each chunk's transposes to slices(), which emits a
// slice pair's chunks right before the pair, so the scalar pipe dispatches the pair's mmads
// without waiting for every later chunk's transposes to enter the vector queue. map_chunks(t):
// where transpose_rows appends tap t's chunks (an earlier tap's emitted first: same UB slots).
ConvCode::DeferredChunks* ConvEmitter::map_chunks(int64_t t) {
  flush_map_chunks(-1);
  chunk_slice0_ = t * (cv_.depth_channels() / k0_);
  return &map_chunks_;
}

// Image kImage of X into the core's slot `slot` (kXBase: the slot's offset from X_.base).
// kXSrc = the user's X offset of image kImage (3-D: (n, o)), of the tile's group's planes.
void ConvEmitter::user_x_base() {
  const int64_t HW = cv_.H * cv_.W;
  if (cv_.T > 1) return image_of_depth(kXSrc, cv_.depth_channels() * cv_.D * HW * in_, HW * in_);
  op(Opcode::Mul, {reg(kXSrc), reg(kImage), imm(cv_.G * orig_.C * HW * in_)});
  if (cv_.G > 1) op(Opcode::Add, {reg(kXSrc), reg(kXSrc), reg(kGroupX)});
}

// Bands spread over cores, NCHW: the band's input rows of every plane (of every depth tap)
// transposed straight into the band's C1HWC0 feature map in L1.
void ConvEmitter::copy_band_in(const Band& b, int64_t fm_base) {
  const int64_t HW = cv_.H * cv_.W, first = b.in_first * cv_.W, plane = b.in_rows * cv_.W;
  const int64_t c = cv_.depth_channels(), rows = cv_.T > 1 ? c : orig_.C, src_row = cv_.T > 1 ? cv_.D * HW : HW;
  for (int64_t t = 0; t < cv_.T; ++t)
    code_.transpose_rows(user_x_ + (t * HW + first) * in_, kXSrc, src_row, rows, plane, plane, fm_base + t * (c / k0_) * plane * frow_,
                         npu::kNoRegister, plane * k0_, k0_, map_ub(), map_ub_bytes(), Buffer::L1, take_pending_weights(), map_chunks(t));
}

void ConvEmitter::copy_image_in(int64_t slot, int64_t fm_base) {
  if (cv_.T > 1) return copy_depths_in(slot, fm_base);
  user_x_base();
  op(Opcode::Mul, {reg(kXBase), reg(npu::kRegCoreId), imm(2 * x_slot_bytes())});
  if (slot) op(Opcode::Add, {reg(kXBase), reg(kXBase), imm(slot * x_slot_bytes())});
  const int64_t HW = cv_.H * cv_.W;
  if (!x_to_l1()) flush_pending_weights();
  if (x_to_l1())  // planes -> the feature map's C1HWC0 place in L1
    code_.transpose_rows(user_x_, kXSrc, HW, orig_.C, HW, HW, fm_base, npu::kNoRegister, HW * k0_, k0_, map_ub(), map_ub_bytes(),
                         Buffer::L1, take_pending_weights(), map_chunks(0));
  else if (cv_.layout == Layout::Nchw)  // planes -> the C1HWC0 slot load_band reads
    code_.transpose_rows(user_x_, kXSrc, HW, orig_.C, HW, HW, X_.base, kXBase, HW * k0_, k0_, copy_ub(), copy_ub_bytes());
  else
    code_.resize_rows(user_x_, kXSrc, X_.base, kXBase, HW, orig_.C, cv_.C, DType::F16, copy_ub(), copy_ub_bytes());
}

// kYDst = the user's Y offset of image kImage (NCHW: and of the channel tile kKTile).
void ConvEmitter::user_y_base() {
  if (cv_.T > 1) image_of_depth(kYDst, orig_.K * y_plane() * eo_, P() * eo_);
  else op(Opcode::Mul, {reg(kYDst), reg(kImage), imm(cv_.G * orig_.K * P() * eo_)});
  if (cv_.layout != Layout::Nchw) return;
  op(Opcode::Mul, {reg(kTmp), reg(kKTile), imm(plan_.tn * y_plane() * eo_)});
  op(Opcode::Add, {reg(kYDst), reg(kYDst), reg(kTmp)});
}

// 3-D NCDHW: image kImage = (n, o); its T input depths o .. o + T - 1, each a C1HWC0 piece of the slot.
void ConvEmitter::copy_depths_in(int64_t slot, int64_t fm_base) {
  const int64_t HW = cv_.H * cv_.W, c = cv_.depth_channels();
  user_x_base();
  op(Opcode::Mul, {reg(kXBase), reg(npu::kRegCoreId), imm(2 * x_slot_bytes())});
  if (slot) op(Opcode::Add, {reg(kXBase), reg(kXBase), imm(slot * x_slot_bytes())});
  if (!x_to_l1()) flush_pending_weights();
  for (int64_t t = 0; t < cv_.T; ++t)
    if (x_to_l1())
      code_.transpose_rows(user_x_ + t * HW * in_, kXSrc, cv_.D * HW, c, HW, HW, fm_base + t * X_.tap_bytes, npu::kNoRegister, HW * k0_, k0_,
                           map_ub(), map_ub_bytes(), Buffer::L1, take_pending_weights(), map_chunks(t));
    else
      code_.transpose_rows(user_x_ + t * HW * in_, kXSrc, cv_.D * HW, c, HW, HW, X_.base + t * X_.tap_bytes, kXBase, HW * k0_, k0_, copy_ub(),
                           copy_ub_bytes());
}

// dst = (kImage / O) * per_n + (kImage % O) * per_o: image (n, o) of a 3-D convolution.
void ConvEmitter::image_of_depth(Reg dst, int64_t per_n, int64_t per_o) {
  op(Opcode::Div, {reg(kTmp), reg(kImage), imm(cv_.O)});
  op(Opcode::Mul, {reg(dst), reg(kTmp), imm(per_n)});
  op(Opcode::Mul, {reg(kTmp), reg(kTmp), imm(cv_.O)});
  op(Opcode::Sub, {reg(kTmp), reg(kImage), reg(kTmp)});
  op(Opcode::Mul, {reg(kTmp), reg(kTmp), imm(per_o)});
  op(Opcode::Add, {reg(dst), reg(dst), reg(kTmp)});
}

// The (image kImage, channel tile) block of the NHWC copy of Y (at Y_.base + y) to the user's Y.
void ConvEmitter::copy_image_out(Reg y) {
  if (!y_copied() || y_from_ub()) return;
  const int64_t tn = plan_.tn, valid = std::min(tn, orig_.K), plane = y_plane();
  user_y_base();
  if (cv_.layout == Layout::Nchw) {
    for (int64_t j = 0; j * n0_ < valid; ++j)  // per 16 channels: [P][16] f32 -> 16 rows of P
      code_.columns_to_rows_f32(Y_.base + j * n0_ * eo_, y, cv_.G * cv_.K, P(), std::min(n0_, valid - j * n0_),
                                user_y_ + j * n0_ * plane * eo_, kYDst, plane, copy_ub(), copy_ub_bytes());
  } else {
    code_.resize_rows(Y_.base, y, user_y_, kYDst, P(), cv_.K, orig_.K, cv_.out, copy_ub(), copy_ub_bytes());
  }
}

// NCHW: X and the weights transposed to NHWC / [C, R*S, K] scratch copies on the vector unit.
void ConvEmitter::nchw_in() {
  const int64_t user_x = X_.base, user_w = W_.base;
  X_.base = code_.place(cv_.x + "_nhwc", DType::F16, {cv_.N, cv_.H, cv_.W, cv_.C}, gm_);
  W_.base = code_.place(cv_.w + "_ckk", DType::F16, {cv_.C, RS(), cv_.K}, gm_);  // rows (c, q) of K
  W_.row_q = cv_.K, W_.row_c = RS() * cv_.K;
  user_y_ = Y_.base;
  Y_.base = code_.place(cv_.y + "_nhwc", cv_.out, {cv_.N, cv_.OH, cv_.OW, cv_.K}, gm_);
  const int64_t HW = cv_.H * cv_.W, crs = orig_.C * RS();
  X_.pixel_bytes = frow_, X_.block_bytes = HW * frow_;  // C1HWC0 images
  const int64_t need = std::max(code_.transpose_bytes(orig_.C, HW), code_.transpose_bytes(orig_.K, crs));
  for (int64_t n = 0; n <= orig_.N; ++n) {  // the images, then the weights (in UB regions of their own when all fit)
    const auto [ub, bytes] = code_.copy_region(n, orig_.N + 1, need);
    if (n < orig_.N) code_.transpose_rows(user_x + n * orig_.C * HW * in_, npu::kNoRegister, HW, orig_.C, HW, HW, X_.base + n * cv_.C * HW * in_, npu::kNoRegister, HW * k0_, k0_, ub, bytes);
    else code_.transpose_rows(user_w, npu::kNoRegister, crs, orig_.K, crs, cv_.C * RS(), W_.base, npu::kNoRegister, k0_, cv_.K, ub, bytes);
  }
  out_.notes.push_back(fmt::format("NCHW: X and the weights transposed to C1HWC0 / [C, R*S, K] scratch copies (channels padded "
                                   "to {} and {}) on the vector unit (16 x 16 vtranspose), the result back to NCHW; one core",
                                   cv_.C, cv_.K));
}

// Channel counts not multiples of the fractal: X and the weights copied with their channels padded.
void ConvEmitter::padded_in() {
  const int64_t user_x = X_.base, user_w = W_.base, cap_ub = m_.capacity(Buffer::UB);
  X_.base = code_.place(cv_.x + "_padded", DType::F16, {cv_.N, cv_.H, cv_.W, cv_.C}, gm_);
  W_.base = code_.place(cv_.w + "_padded", DType::F16, {cv_.R, cv_.S, cv_.C, cv_.K}, gm_);
  user_y_ = Y_.base;
  Y_.base = code_.place(cv_.y + "_padded", cv_.out, {cv_.N, cv_.OH, cv_.OW, cv_.K}, gm_);
  // X: rows of C -> rows of Cp, chunks of whole GM alignment units of rows (aligned sources).
  const int64_t rows = cv_.N * cv_.H * cv_.W, rows_aligned = code_.gm_align() / in_;
  int64_t cr = std::min(rows, (cap_ub / 2) / (cv_.C * in_));
  if (cr < rows) cr = cr / rows_aligned * rows_aligned;
  for (int64_t r0 = 0; r0 < rows; r0 += cr) {
    const int64_t n = std::min(cr, rows - r0);
    if (cv_.C > orig_.C) code_.zero_ub(0, n * cv_.C * in_);
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, user_x + r0 * orig_.C * in_), imm(n), imm(orig_.C * in_), imm(0),
                       imm((cv_.C - orig_.C) * in_)});
    op(Opcode::DmaOut, {at(Buffer::GM, X_.base + r0 * cv_.C * in_), at(Buffer::UB, 0), imm(1), imm(n * cv_.C * in_), imm(0), imm(0)});
  }
  // Weights: all R*S*C rows of K in UB's second half at once (beside X's chunks: no hand-off between
  // the copies), then C rows per kernel position.
  if (RS() * orig_.C * cv_.K * in_ > cap_ub / 2)
    return code_.refuse(unsupported("the weights do not fit the vector buffer for channel padding").what());
  if (cv_.K > orig_.K) code_.zero_ub(cap_ub / 2, RS() * orig_.C * cv_.K * in_);
  op(Opcode::DmaIn, {at(Buffer::UB, cap_ub / 2), at(Buffer::GM, user_w), imm(RS() * orig_.C), imm(orig_.K * in_), imm(0),
                     imm((cv_.K - orig_.K) * in_)});
  for (int64_t q = 0; q < RS(); ++q)
    op(Opcode::DmaOut, {at(Buffer::GM, W_.base + q * cv_.C * cv_.K * in_), at(Buffer::UB, cap_ub / 2 + q * orig_.C * cv_.K * in_), imm(1),
                        imm(orig_.C * cv_.K * in_), imm(0), imm(0)});
}

// Y: rows of Kp -> rows of K, chunks of whole GM alignment units of f32 rows (aligned destinations).
void ConvEmitter::padded_out() {
  const int64_t rows = cv_.N * P(), rows_aligned = code_.gm_align() / acc_;
  int64_t cr = std::min(rows, (m_.capacity(Buffer::UB) / 2) / (cv_.K * eo_));
  if (cr < rows) cr = cr / rows_aligned * rows_aligned;
  for (int64_t r0 = 0; r0 < rows; r0 += cr) {
    const int64_t n = std::min(cr, rows - r0);
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, Y_.base + r0 * cv_.K * eo_), imm(1), imm(n * cv_.K * eo_), imm(0), imm(0)});
    op(Opcode::DmaOut, {at(Buffer::GM, user_y_ + r0 * orig_.K * eo_), at(Buffer::UB, 0), imm(n), imm(orig_.K * eo_),
                        imm((cv_.K - orig_.K) * eo_), imm(0)});
  }
  out_.notes.push_back(fmt::format("channels {} -> {} padded to {} -> {} through UB on one core", orig_.C, orig_.K, cv_.C, cv_.K));
}

}  // namespace tessel::emit_npu::conv_detail
