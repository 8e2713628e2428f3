// The convolution's instruction helpers (conv_layout.h): GM placement and the layout transforms.
#include "compiler/emit_npu/conv_layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;


}  // namespace

void ConvCode::refuse(const std::string& why) {
  if (!refusal_) throw UserError(why);
  if (refusal_->empty()) *refusal_ = why;
}

int64_t ConvCode::place(const std::string& name, DType t, std::vector<int64_t> shape, npu::TensorRole role, int64_t& gm) {
  npu::TensorBinding b{name, t, std::move(shape), gm, role, {}};
  gm = round_up(gm + b.byte_size(), gm_align());
  p_.tensors.push_back(b);
  return b.gm_offset;
}

void ConvCode::resize_rows(int64_t src_gm, uint8_t src_reg, int64_t dst_gm, uint8_t dst_reg, int64_t rows, int64_t from, int64_t to,
                           DType t, int64_t ub, int64_t ub_bytes) {
  const int64_t eb = dtype_bytes(t), wide = std::max(from, to), rows_aligned = std::max<int64_t>(1, gm_align() / eb);
  int64_t cr = std::min(rows, ub_bytes / (wide * eb));
  if (cr < rows) cr = std::max<int64_t>(1, cr / rows_aligned * rows_aligned);
  for (int64_t r0 = 0; r0 < rows; r0 += cr) {
    const int64_t n = std::min(cr, rows - r0);
    if (to > from) {
      zero_ub(ub, n * to * eb, t == DType::F32 ? DType::F32 : DType::F16);
      op(Opcode::DmaIn, {at(Buffer::UB, ub), at(Buffer::GM, src_gm + r0 * from * eb, src_reg), imm(n), imm(from * eb), imm(0),
                         imm((to - from) * eb)});
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + r0 * to * eb, dst_reg), at(Buffer::UB, ub), imm(1), imm(n * to * eb), imm(0), imm(0)});
    } else {
      op(Opcode::DmaIn, {at(Buffer::UB, ub), at(Buffer::GM, src_gm + r0 * from * eb, src_reg), imm(1), imm(n * from * eb), imm(0), imm(0)});
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + r0 * to * eb, dst_reg), at(Buffer::UB, ub), imm(n), imm(to * eb),
                          imm((from - to) * eb), imm(0)});
    }
  }
}

void ConvCode::rows_to_columns_pieces(int64_t src_gm, int64_t dst_gm, int64_t rows, int64_t plane, int64_t src_row, int64_t plane_out,
                                      int64_t cols_valid, int64_t cols, DType t, uint8_t src_reg, uint8_t dst_reg) {
  const int64_t eb = dtype_bytes(t), lanes = m_.vector_lanes(t), per_block = m_.block_elements(t);
  const int64_t block = m_.vector_block_bytes, repeat = m_.vector_bytes_per_repeat, room = m_.capacity(Buffer::UB) - m_.fractal_bytes();
  const int64_t pitch = cols_valid == cols ? cols : cols_valid;  // dst rows in GM (as the one-piece transform writes them)
  auto out_cols = [&](int64_t rp) { return rp == rows ? cols : round_up(rp, per_block); };
  auto raw_of = [&](int64_t rp, int64_t pc) { return round_up(rp * round_up(pc, per_block) * eb, block); };
  int64_t rp = rows, pc = plane;
  while (raw_of(rp, pc) + pc * out_cols(rp) * eb > room) {
    if (pc > per_block && (pc >= rp || rp <= lanes)) pc = std::max(per_block, pc / 2 / per_block * per_block);
    else if (rp > lanes) rp = std::max(lanes, rp / 2 / lanes * lanes);
    else
      return refuse(fmt::format("kernel {}: the NPU backend does not map this convolution yet: a layout transform of {} x {} "
                                "elements does not fit the vector buffer ({} bytes left of UB's {})", k_.name, rows, plane, room, m_.capacity(Buffer::UB)));
  }
  const int64_t f16_block = m_.block_elements(DType::F16);
  const int64_t rep_chunk = m_.vector_max_repeat / f16_block * f16_block / per_block * per_block;
  const DType dup = t == DType::F32 ? DType::F32 : DType::F16;
  const int64_t out = raw_of(rp, pc), cp = out_cols(rp);
  for (int64_t r0 = 0; r0 < rows; r0 += rp) {
    const int64_t nr = std::min(rp, rows - r0), valid = rp == rows ? cols_valid : std::min(nr, cols_valid - r0);
    for (int64_t e0 = 0; e0 < plane; e0 += pc) {
      const int64_t ne = std::min(pc, plane - e0), ne_a = round_up(ne, per_block);
      full_mask();
      zero_ub(out, ne * cp * eb, dup);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src_gm + (r0 * src_row + e0) * eb, src_reg), imm(nr), imm(ne * eb),
                         imm((src_row - ne) * eb), imm((ne_a - ne) * eb)});
      for (int64_t r = 0; r < nr; ++r) {
        mask_lane(r % lanes);
        for (int64_t e = 0; e < ne; e += rep_chunk)
          op(Opcode::Vbrcb, {type(t), at(Buffer::UB, out + e * cp * eb + (r / lanes) * repeat), at(Buffer::UB, (r * ne_a + e) * eb),
                             imm(std::min(rep_chunk, ne - e)), imm(1), imm(cp * eb / block)});
      }
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + (e0 * pitch + r0) * eb, dst_reg), at(Buffer::UB, out), imm(ne), imm(valid * eb),
                          imm((cp - valid) * eb), imm((pitch - valid) * eb)});
    }
  }
  // rows past the plane (plane_out > plane) are zero
  full_mask();
  const int64_t zero_rows = plane_out - plane, per = std::max<int64_t>(1, room / (pitch * eb));
  for (int64_t z0 = 0; z0 < zero_rows; z0 += per) {
    const int64_t n = std::min(per, zero_rows - z0);
    zero_ub(0, n * pitch * eb, dup);
    op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + (plane + z0) * pitch * eb, dst_reg), at(Buffer::UB, 0), imm(1), imm(n * pitch * eb), imm(0),
                        imm(0)});
  }
}

void ConvCode::rows_to_columns(int64_t src_gm, int64_t dst_gm, int64_t groups, int64_t rows, int64_t plane, int64_t src_row,
                               int64_t plane_out, int64_t cols_valid, int64_t cols, DType t, uint8_t src_reg, uint8_t dst_reg) {
  const int64_t eb = dtype_bytes(t), lanes = m_.vector_lanes(t), per_block = m_.block_elements(t);
  const int64_t block = m_.vector_block_bytes, align = gm_align(), repeat = m_.vector_bytes_per_repeat;
  const int64_t plane_a = round_up(plane, per_block), cap = m_.capacity(Buffer::UB);
  // Chunks of `step` groups keep the GM starts of source and destination aligned.
  int64_t step = 1;
  while (groups > 1 && ((step * rows * src_row * eb) % align || (step * plane_out * cols_valid * eb) % align)) ++step;
  const int64_t raw_bytes = rows * plane_a * eb, out_bytes = plane_out * cols * eb;
  // UB keeps one f16 fractal spare past the two regions (as the layout transform always has)
  int64_t chunk = (cap - m_.fractal_bytes()) / (raw_bytes + out_bytes) / step * step;
  if (chunk < 1 && groups == 1)
    return rows_to_columns_pieces(src_gm, dst_gm, rows, plane, src_row, plane_out, cols_valid, cols, t, src_reg, dst_reg);
  if (chunk < std::min(groups, step))
    return refuse(fmt::format("kernel {}: the NPU backend does not map this convolution yet: a layout transform of {} x {} "
                              "elements does not fit the vector buffer ({} groups of {} bytes needed at once, UB holds {})",
                              k_.name, rows, plane, std::min(groups, step), raw_bytes + out_bytes, cap));
  chunk = std::min(chunk, groups);
  // repeats per vbrcb: a multiple of an f16 block's elements (so of every dtype's) within the repeat
  // limit, so that every chunk's source starts on a block
  const int64_t f16_block = m_.block_elements(DType::F16);
  const int64_t rep_chunk = m_.vector_max_repeat / f16_block * f16_block / per_block * per_block;
  const DType dup = t == DType::F32 ? DType::F32 : DType::F16;
  for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
    const int64_t g = std::min(chunk, groups - g0), out = round_up(g * raw_bytes, block);
    full_mask();
    zero_ub(out, g * out_bytes, dup);
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src_gm + g0 * rows * src_row * eb, src_reg), imm(g * rows), imm(plane * eb),
                       imm((src_row - plane) * eb), imm((plane_a - plane) * eb)});
    for (int64_t r = 0; r < rows; ++r) {
      mask_lane(r % lanes);
      for (int64_t gi = 0; gi < g; ++gi)
        for (int64_t e0 = 0; e0 < plane; e0 += rep_chunk)
          op(Opcode::Vbrcb, {type(t), at(Buffer::UB, out + (gi * plane_out + e0) * cols * eb + (r / lanes) * repeat),
                             at(Buffer::UB, ((gi * rows + r) * plane_a + e0) * eb), imm(std::min(rep_chunk, plane - e0)), imm(1),
                             imm(cols * eb / block)});
    }
    if (cols_valid == cols)
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + g0 * plane_out * cols * eb, dst_reg), at(Buffer::UB, out), imm(1), imm(g * out_bytes),
                          imm(0), imm(0)});
    else
      op(Opcode::DmaOut, {at(Buffer::GM, dst_gm + g0 * plane_out * cols_valid * eb, dst_reg), at(Buffer::UB, out), imm(g * plane_out),
                          imm(cols_valid * eb), imm((cols - cols_valid) * eb), imm(0)});
  }
  full_mask();
}

}  // namespace tessel::emit_npu
