// Instruction helpers of the NPU convolution (conv.h) over the machine model: scratch tensors in
// GM, vector fills and lane masks, and the layout transforms on the vector unit that the NCHW and
// padded-channel copies use (rows -> columns, rows resized). A transform that cannot fit UB is the
// convolution's refusal (refuse: a UserError, or recorded in why_not_conv's dry run). Part of
// compiler/emit_npu, used by conv.cc only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/operands.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

class ConvCode {
 public:
  // `refusal` non-null: a dry run deciding whether the convolution maps (why_not_conv); the first
  // refusal's UserError text is recorded there instead of thrown, and the refused step emits nothing.
  ConvCode(const kernel::Kernel& k, const isa::NpuMachine& m, npu::Program& p, std::string* refusal = nullptr)
      : k_(k), m_(m), p_(p), refusal_(refusal) {}
  // Throws UserError(why), or records it (the first one) in a dry run.
  void refuse(const std::string& why);
  bool refused() const { return refusal_ && !refusal_->empty(); }
  void op(npu::Opcode o, std::vector<npu::Operand> v) { p_.add(o, std::move(v)); }
  int64_t gm_align() const { return m_.granularity(npu::Buffer::GM); }

  // A tensor in GM at `gm` (advanced past it, aligned).
  int64_t place(const std::string& name, DType t, std::vector<int64_t> shape, npu::TensorRole role, int64_t& gm);
  int64_t place(const std::string& name, DType t, std::vector<int64_t> shape, int64_t& gm) {
    return place(name, t, std::move(shape), npu::TensorRole::Scratch, gm);
  }
  void zero_ub(int64_t at_bytes, int64_t bytes, DType t = DType::F16) {
    const int64_t per_repeat = m_.vector_bytes_per_repeat, most = m_.vector_max_repeat;
    const int64_t reps = (bytes + per_repeat - 1) / per_repeat;
    for (int64_t done = 0; done < reps; done += most)
      op(npu::Opcode::Vdup, {type(t), at(npu::Buffer::UB, at_bytes + done * per_repeat), npu::Operand::float_(0),
                             imm(std::min<int64_t>(most, reps - done)), imm(1), imm(m_.blocks_per_repeat())});
  }
  // The mask register is written as two 64-bit halves (hi, lo).
  void mask_lane(int64_t lane) {
    const uint64_t bit = uint64_t(1) << (lane % kMaskHalfBits);
    op(npu::Opcode::SetVectorMask, {imm(lane >= kMaskHalfBits ? int64_t(bit) : 0), imm(lane < kMaskHalfBits ? int64_t(bit) : 0)});
  }
  void full_mask() { op(npu::Opcode::SetVectorMask, {imm(-1), imm(-1)}); }

  // Rows (planes) of `plane` elements -> columns: src [rows][plane] (NCHW planes, f16 or f32) in GM,
  // dst [group][plane][cols] with column `row % rows_per_group` of row; used for NCHW -> NHWC (X,
  // rows = channels, cols = padded channels) and for the weights [K][C R S] -> [C R S][Kp] (one
  // group). Chunks of groups keep every GM start aligned; the columns past the rows stay 0.
  // src rows hold `src_row` elements in GM (the first `plane` taken), dst rows `cols` in UB of which
  // `cols_valid` go to GM; `plane_out` >= plane dst rows per group (the rest 0).
  // src_reg / dst_reg: base registers added to the GM addresses (a core's own image or copy).
  void rows_to_columns(int64_t src_gm, int64_t dst_gm, int64_t groups, int64_t rows, int64_t plane, int64_t src_row,
                       int64_t plane_out, int64_t cols_valid, int64_t cols, DType t, uint8_t src_reg = npu::kNoRegister,
                       uint8_t dst_reg = npu::kNoRegister);
  // One group too large for UB: the same transform in pieces of rows x plane elements (rows in whole
  // vector repeats of columns), each piece's columns written with the GM row pitch.
  void rows_to_columns_pieces(int64_t src_gm, int64_t dst_gm, int64_t rows, int64_t plane, int64_t src_row, int64_t plane_out,
                              int64_t cols_valid, int64_t cols, DType t, uint8_t src_reg, uint8_t dst_reg);
  // f16 rows -> 32-byte columns with the vector unit's 16 x 16 transposes (vtranspose), rows in
  // groups of 16 (a fractal row of channels): src row r (r < rows) holds `plane` elements at
  // src_gm + r * src_row elements; element (r, e) goes to dst_gm + ((r / 16) * dst_block + e * dst_pitch
  // + r % 16) elements, rows past `rows` (to the next 16) as 0, and dst rows e in [plane, plane_out)
  // as 0 (those need dst_block == 16: one group spans every row). Used for NCHW planes -> C1HWC0
  // (dst_block = plane x 16, dst_pitch = 16) and the weights [K][C R S] -> [C R S][tn] (dst_block 16,
  // dst_pitch tn). Per group of 16 rows and chunk of elements: the rows by one DMA (a row pitch of
  // the chunk in UB), one vtranspose per 16 x 16 square (rows a pitch apart), one DMA out. The
  // chunks (as large as half of [ub, ub + ub_bytes) allows, no larger than the plane) take turns in
  // as many UB slots as the region holds (two at least), and the first slots' loads are all issued
  // before the first transpose, the next chunk's load after each chunk's transposes: the loads
  // stream on MTE2 while the vector unit works (emitted load, transpose, load, a slot's next load
  // waited for the vector queue). `after_loads`, if given, is emitted after those first loads (the
  // weights' transposes behind the map's loads). dst_buffer: GM, or L1 (a feature map straight into
  // its C1HWC0 place; dst_gm is then an L1 offset). `deferred` (plane_out == plane only): each
  // chunk's transposes, copy out and the next load are not emitted but appended, in order, as
  // (group of 16 rows, emitter), for the caller to emit in that order where it likes (the cube's
  // slices between them, so the scalar pipe reaches a slice's mmads before every transpose).
  using DeferredChunks = std::vector<std::pair<int64_t, std::function<void()>>>;
  void transpose_rows(int64_t src_gm, uint8_t src_reg, int64_t src_row, int64_t rows, int64_t plane, int64_t plane_out, int64_t dst_gm,
                      uint8_t dst_reg, int64_t dst_block, int64_t dst_pitch, int64_t ub, int64_t ub_bytes,
                      npu::Buffer dst_buffer = npu::Buffer::GM, const std::function<void()>& after_loads = {},
                      DeferredChunks* deferred = nullptr);
  // UB bytes one slot of transpose_rows takes for a plane of `plane` elements in [ub, ub + ub_bytes).
  int64_t transpose_slot_bytes(int64_t plane, int64_t ub_bytes) const;
  // UB bytes transpose_rows of `rows` rows of a plane of `plane` elements takes at most (a slot per
  // group of 16 rows), given the whole buffer.
  int64_t transpose_bytes(int64_t rows, int64_t plane) const;
  // UB bytes columns_to_rows_f32 of `pixels` pixels takes in one piece.
  int64_t columns_to_rows_bytes(int64_t pixels) const;
  // The UB region (offset, bytes) of copy i of `calls` independent copies that each take at most
  // `need` bytes: a region of its own when every copy's fits (the copies then overlap: no region
  // handed from one to the next), else the whole buffer (one after the other).
  std::pair<int64_t, int64_t> copy_region(int64_t i, int64_t calls, int64_t need) const;
  // NCHW weights [K][C T R S] (at w_gm, row length crs = C T R S) of output-channel tile `tile_reg`
  // (tn channels, the first `k` of all valid) transposed into their L1 fractals at l1 ([t c1][R S]
  // [tn / 16] fractals, rows (c, t, q) of 16 output channels): per group of 16 output channels its
  // rows by one DMA into UB (row pitch `pitch` elements), one vtranspose per square, per (c, t) its
  // R S rows to their fractal rows in L1. The groups take turns in `slots` UB slots of 2 x 16 x
  // pitch elements from ub. Emits the first slots' loads (src_reg: the tile's rows) and returns
  // the rest (transposes, copies to L1, the later groups' loads) for the caller to emit.
  std::function<void()> weights_to_l1(int64_t w_gm, uint8_t tile_reg, uint8_t src_reg, int64_t crs, int64_t k, int64_t tn, int64_t c,
                                      int64_t taps, int64_t rs, int64_t pitch, int64_t ub, int64_t slots, int64_t l1);
  // Depthwise on the cube: group g = tile_reg (one fractal of channels) has per kernel position q
  // the diagonal fractal diag(Wt[q][16 g .. 16 g + 15]), built in UB from `ub` and moved to L1 at
  // l1: the tile's rs values per channel from GM (w_gm; NCHW Wt[C][R S], else Wt[R S][G 16]), each
  // broadcast along its fractal row (vbrcb, the first 16 lanes enabled), times the identity (two
  // vmuls: each fractal's rows 0-7 and 8-15 against the identity's, source repeat stride 0); exact
  // (w x 1, w x 0). col_reg: the group's GM offset; group_reg (NHWC): its channels within a pixel.
  // `refusal`: the text refused when the fractals do not fit UB.
  void diagonal_weights(bool nchw, int64_t rs, int64_t groups, int64_t w_gm, uint8_t tile_reg, uint8_t col_reg, uint8_t group_reg,
                        int64_t ub, int64_t l1, const std::string& refusal);
  // f32 columns -> rows: src holds `pixels` rows of 16 f32 (row p at src_gm + p * src_pitch
  // elements), dst gets channel c < channels as a row at dst_gm + c * dst_pitch elements (pixel p at
  // + p): an NHWC result block back to NCHW. Per 16 x 16 f32 block three 16-bit transposes
  // (vtranspose moves 2-byte elements): pixels into the rows' lanes, then the channels with the two
  // halves of each value apart, then halves and pixels together again, channel rows out; chunks of
  // pixels alternate between two UB halves.
  // The three transposes of one 16 x 16 f32 block: src holds 16 pixel rows of 16 f32 (64 bytes
  // each) in UB, out gets 16 channel rows of the 16 pixels, `pitch` vector blocks apart; t1, t2:
  // scratch of one such block each.
  void f32_block_to_rows(int64_t src, int64_t out, int64_t pitch, int64_t t1, int64_t t2);
  void columns_to_rows_f32(int64_t src_gm, uint8_t src_reg, int64_t src_pitch, int64_t pixels, int64_t channels, int64_t dst_gm,
                           uint8_t dst_reg, int64_t dst_pitch, int64_t ub, int64_t ub_bytes);
  // f32 [images][pixels][src_pitch] -> [images][channels][pixels] by columns_to_rows_f32 per image and
  // 16 channels, each copy in a UB region of its own when every one's fits (copy_region).
  void images_columns_to_rows_f32(int64_t src_gm, int64_t dst_gm, int64_t images, int64_t pixels, int64_t channels, int64_t src_pitch);
  // Rows of `from` elements -> rows of `to` (zero-padded or cut), through UB [ub, ub + ub_bytes) in
  // chunks of whole GM alignment units of rows; GM addresses plus the base registers.
  void resize_rows(int64_t src_gm, uint8_t src_reg, int64_t dst_gm, uint8_t dst_reg, int64_t rows, int64_t from, int64_t to, DType t,
                   int64_t ub, int64_t ub_bytes);

 private:
  static constexpr int64_t kMaskHalfBits = 64;  // not hardware: the width of one mask operand (int64)
  const kernel::Kernel& k_;
  const isa::NpuMachine& m_;
  npu::Program& p_;
  std::string* refusal_ = nullptr;
};

}  // namespace tessel::emit_npu
