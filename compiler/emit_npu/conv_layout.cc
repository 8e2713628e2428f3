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

int64_t ConvCode::transpose_slot_bytes(int64_t plane, int64_t ub_bytes) const {
  const int64_t side = m_.block_elements(DType::F16), square = side * side * dtype_bytes(DType::F16);
  const int64_t squares = std::min(ub_bytes / 2 / (2 * square), (plane + side - 1) / side);
  return 2 * squares * square;
}

int64_t ConvCode::transpose_bytes(int64_t rows, int64_t plane) const {
  const int64_t side = m_.block_elements(DType::F16);
  return (rows + side - 1) / side * transpose_slot_bytes(plane, m_.capacity(Buffer::UB));
}

int64_t ConvCode::columns_to_rows_bytes(int64_t pixels) const {
  const int64_t side = m_.block_elements(DType::F16), block = side * side * dtype_bytes(DType::F32);
  return 2 * block + 4 * ((pixels + side - 1) / side) * block;  // scratch, two halves of raw + out blocks
}

std::pair<int64_t, int64_t> ConvCode::copy_region(int64_t i, int64_t calls, int64_t need) const {
  const int64_t cap = m_.capacity(Buffer::UB), align = std::max<int64_t>(m_.fractal_bytes(), 32);
  const int64_t part = cap / std::max<int64_t>(1, calls) / align * align;
  if (need <= part) return {i * part, part};
  return {0, cap};
}

void ConvCode::transpose_rows(int64_t src_gm, uint8_t src_reg, int64_t src_row, int64_t rows, int64_t plane, int64_t plane_out,
                              int64_t dst_gm, uint8_t dst_reg, int64_t dst_block, int64_t dst_pitch, int64_t ub, int64_t ub_bytes,
                              npu::Buffer dst_buffer, const std::function<void()>& after_loads, DeferredChunks* deferred) {
  TESSEL_CHECK(!deferred || plane_out <= plane, "transpose_rows: deferred chunks with zero rows past the plane");
  const int64_t eb = dtype_bytes(DType::F16), side = m_.block_elements(DType::F16), piece = side * eb;  // 16 elements, 32 bytes
  const int64_t square = side * piece, repeats_per_square = square / m_.vector_bytes_per_repeat;
  const int64_t rep_blocks = m_.vector_bytes_per_repeat / m_.vector_block_bytes;
  const int64_t per_half = std::min(ub_bytes / 2 / (2 * square), (plane + side - 1) / side);  // 16 x 16 squares per chunk
  if (per_half < 1 || repeats_per_square * 1 > m_.vector_max_repeat)
    return refuse(fmt::format("kernel {}: the NPU backend does not map this convolution yet: a transpose of {} x {} elements "
                              "does not fit the vector buffer ({} bytes)", k_.name, rows, plane, ub_bytes));
  const int64_t chunk = per_half * side, pitch_blocks = chunk * eb / m_.vector_block_bytes, slot_bytes = 2 * per_half * square;
  struct Chunk {
    int64_t g, e0;
  };
  std::vector<Chunk> chunks;
  for (int64_t g = 0; g * side < rows; ++g)
    for (int64_t e0 = 0; e0 < plane; e0 += chunk) chunks.push_back({g, e0});
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(int64_t(chunks.size()), ub_bytes / slot_bytes));
  auto raw_of = [=](size_t i) { return ub + int64_t(i % size_t(slots)) * slot_bytes; };
  auto load = [=, this](size_t i) {
    const auto [g, e0] = chunks[i];
    const int64_t nrows = std::min(side, rows - g * side), ne = std::min(chunk, plane - e0), raw = raw_of(i);
    if (nrows < side) {
      full_mask();
      zero_ub(raw, side * chunk * eb);
    }
    // the group's rows in one DMA, each row `chunk` elements apart in UB
    op(npu::Opcode::DmaIn, {at(npu::Buffer::UB, raw), at(npu::Buffer::GM, src_gm + (g * side * src_row + e0) * eb, src_reg), imm(nrows),
                            imm(ne * eb), imm((src_row - ne) * eb), imm((chunk - ne) * eb)});
  };
  for (size_t i = 0; i < std::min(chunks.size(), size_t(slots)); ++i) load(i);
  if (after_loads) after_loads();
  auto finish = [=, this](size_t i) {
    const auto [g, e0] = chunks[i];
    const int64_t ne = std::min(chunk, plane - e0), squares = (ne + side - 1) / side;
    const int64_t raw = raw_of(i), out = raw + per_half * square;
    // one 16 x 16 square per instruction: its rows a row pitch apart, its transpose contiguous
    for (int64_t s0 = 0; s0 < squares; ++s0)
      op(npu::Opcode::Vtranspose, {type(DType::F16), at(npu::Buffer::UB, out + s0 * square), at(npu::Buffer::UB, raw + s0 * piece),
                                   imm(repeats_per_square), imm(1), imm(pitch_blocks), imm(rep_blocks), imm(rep_blocks * pitch_blocks)});
    const int64_t dst = dst_gm + (g * dst_block + e0 * dst_pitch) * eb;
    if (dst_pitch == side)
      op(npu::Opcode::DmaOut, {at(dst_buffer, dst, dst_reg), at(npu::Buffer::UB, out), imm(1), imm(ne * piece), imm(0), imm(0)});
    else
      op(npu::Opcode::DmaOut, {at(dst_buffer, dst, dst_reg), at(npu::Buffer::UB, out), imm(ne), imm(piece), imm(0),
                               imm((dst_pitch - side) * eb)});
    if (i + size_t(slots) < chunks.size()) load(i + size_t(slots));
  };
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (deferred) deferred->push_back({chunks[i].g, [finish, i] { finish(i); }});
    else finish(i);
  }
  int64_t half = int64_t(chunks.size()) % 2;
  if (plane_out <= plane) return;
  TESSEL_CHECK(dst_block == side, "transpose_rows: zero rows past the plane need one group across every row");
  const int64_t bytes = (plane_out - plane) * dst_pitch * eb, room = ub_bytes / 2 / piece * piece;
  full_mask();
  for (int64_t z0 = 0; z0 < bytes; z0 += room) {
    const int64_t n = std::min(room, bytes - z0), at_ub = ub + half * ub_bytes / 2;
    half ^= 1;
    zero_ub(at_ub, n);
    op(npu::Opcode::DmaOut, {at(dst_buffer, dst_gm + plane * dst_pitch * eb + z0, dst_reg), at(npu::Buffer::UB, at_ub), imm(1), imm(n),
                             imm(0), imm(0)});
  }
}

std::function<void()> ConvCode::weights_to_l1(int64_t w_gm, uint8_t tile_reg, uint8_t src_reg, int64_t crs, int64_t k, int64_t tn,
                                              int64_t c, int64_t taps, int64_t rs, int64_t pitch, int64_t ub, int64_t slots, int64_t l1) {
  const int64_t k0 = m_.cube_f16.k0, n0 = m_.cube_f16.n0, eb = dtype_bytes(DType::F16), frow = m_.fractal_row_bytes;
  const int64_t fractal = m_.fractal_bytes(), sq = k0 * frow, slot_bytes = 2 * pitch * k0 * eb;
  const int64_t blocks = pitch * eb / m_.vector_block_bytes, rep_blocks = m_.vector_bytes_per_repeat / m_.vector_block_bytes;
  const int64_t c1d = c / k0, groups = (std::min(tn, k) + k0 - 1) / k0;
  op(Opcode::Mul, {reg(src_reg), reg(tile_reg), imm(tn * crs * eb)});
  auto raw_of = [=](int64_t g) { return ub + (g % slots) * slot_bytes; };
  auto load = [=, this](int64_t g) {
    const int64_t rows = std::min(k0, k - g * k0), raw = raw_of(g);
    if (rows < k0) {
      full_mask();
      zero_ub(raw, k0 * pitch * eb);
    }
    op(Opcode::DmaIn, {at(Buffer::UB, raw), at(Buffer::GM, w_gm + g * k0 * crs * eb, src_reg), imm(rows), imm(crs * eb), imm(0),
                       imm((pitch - crs) * eb)});
  };
  for (int64_t g = 0; g < std::min(groups, slots); ++g) load(g);
  return [=, this] {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t raw = raw_of(g), out = raw + pitch * k0 * eb;
      for (int64_t s = 0; s * k0 < crs; ++s)
        op(Opcode::Vtranspose, {type(DType::F16), at(Buffer::UB, out + s * sq), at(Buffer::UB, raw + s * frow),
                                imm(sq / m_.vector_bytes_per_repeat), imm(1), imm(blocks), imm(rep_blocks), imm(rep_blocks * blocks)});
      for (int64_t ci = 0; ci < c; ++ci)
        for (int64_t t = 0; t < taps; ++t)
          op(Opcode::DmaOut, {at(Buffer::L1, l1 + (((t * c1d + ci / k0) * rs) * (tn / n0) + g) * fractal + (ci % k0) * frow),
                              at(Buffer::UB, out + (ci * taps + t) * rs * frow), imm(rs), imm(frow), imm(0), imm((tn / n0) * fractal - frow)});
      if (g + slots < groups) load(g + slots);
    }
  };
}

void ConvCode::diagonal_weights(bool nchw, int64_t rs, int64_t groups, int64_t w_gm, uint8_t tile_reg, uint8_t col_reg, uint8_t group_reg,
                                int64_t ub, int64_t l1, const std::string& refusal) {
  const int64_t k0 = m_.cube_f16.k0, eb = dtype_bytes(DType::F16), frow = m_.fractal_row_bytes, fractal = m_.fractal_bytes();
  const int64_t repeat = m_.vector_bytes_per_repeat, block = m_.vector_block_bytes;
  const int64_t raw = round_up(rs * frow, repeat), diag = ub + raw, ident = diag + rs * fractal;
  const int64_t lanes = m_.vector_lanes(DType::F16), rows_per_repeat = lanes / k0;
  if (ident + fractal > m_.capacity(Buffer::UB) || rs > m_.vector_max_repeat || fractal != 2 * repeat) return refuse(refusal);
  // NCHW Wt[C][R S]: the group's 16 rows of R S values, in one piece
  op(Opcode::Mul, {reg(col_reg), reg(tile_reg), imm(nchw ? k0 * rs * eb : k0 * eb)});
  if (!nchw) op(Opcode::Mov, {reg(group_reg), reg(col_reg)});  // the group's channels within a pixel (image_bases)
  if (nchw)
    op(Opcode::DmaIn, {at(Buffer::UB, ub), at(Buffer::GM, w_gm, col_reg), imm(1), imm(k0 * rs * eb), imm(0), imm(0)});
  else
    op(Opcode::DmaIn, {at(Buffer::UB, ub), at(Buffer::GM, w_gm, col_reg), imm(rs), imm(k0 * eb), imm((groups - 1) * k0 * eb), imm(0)});
  full_mask();
  zero_ub(ident, fractal);
  for (int64_t h = 0; h < fractal / repeat; ++h) {  // the identity's ones, rows_per_repeat rows per repeat
    uint64_t lo = 0, hi = 0;
    for (int64_t i = 0; i < rows_per_repeat; ++i) {
      const int64_t lane = i * k0 + h * rows_per_repeat + i;
      (lane < 64 ? lo : hi) |= uint64_t(1) << (lane % 64);  // not hardware: the mask operand's int64 halves
    }
    op(Opcode::SetVectorMask, {imm(int64_t(hi)), imm(int64_t(lo))});
    op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, ident + h * repeat), Operand::float_(1), imm(1), imm(1), imm(repeat / block)});
  }
  op(Opcode::SetVectorMask, {imm(0), imm(int64_t((uint64_t(1) << k0) - 1))});  // one fractal row's lanes
  const int64_t per = m_.vector_max_repeat / k0 * k0;
  for (int64_t e = 0; e < rs * k0; e += per)
    op(Opcode::Vbrcb, {type(DType::F16), at(Buffer::UB, diag + e * frow), at(Buffer::UB, ub + e * eb), imm(std::min(per, rs * k0 - e)),
                       imm(1), imm(frow / block)});
  full_mask();
  // NHWC: rows [q][c] in place; NCHW: rows [c][q] gathered into [q][c] (source block stride R S rows)
  const int64_t out = nchw ? ident + fractal : diag, row_blocks = frow / block;
  if (nchw && out + rs * fractal > m_.capacity(Buffer::UB)) return refuse(refusal);
  for (int64_t h = 0; h < fractal / repeat; ++h) {
    const int64_t src = nchw ? diag + h * rows_per_repeat * rs * frow : diag + h * repeat;
    op(Opcode::Vmul, {type(DType::F16), at(Buffer::UB, out + h * repeat), at(Buffer::UB, src), at(Buffer::UB, ident + h * repeat), imm(rs),
                      imm(1), imm(nchw ? rs * row_blocks : 1), imm(1), imm(fractal / block), imm(nchw ? row_blocks : fractal / block), imm(0)});
  }
  op(Opcode::DmaOut, {at(Buffer::L1, l1), at(Buffer::UB, out), imm(1), imm(rs * fractal), imm(0), imm(0)});
}

void ConvCode::f32_block_to_rows(int64_t src, int64_t out, int64_t pitch, int64_t t1, int64_t t2) {
  const int64_t side = m_.block_elements(DType::F16), piece = m_.vector_block_bytes;
  const int64_t row_pieces = side * dtype_bytes(DType::F32) / piece, rep_blocks = m_.vector_bytes_per_repeat / piece;
  const npu::Operand f16 = type(DType::F16);
  // pixels into lanes: row (channel k, half h) at t1 piece 2k + h holds the block's 16 pixels' halves
  for (int64_t k3 = 0; k3 < row_pieces; ++k3)
    op(npu::Opcode::Vtranspose, {f16, at(npu::Buffer::UB, t1 + k3 * side * piece), at(npu::Buffer::UB, src + k3 * piece), imm(2), imm(1),
                                 imm(row_pieces), imm(rep_blocks), imm(side * row_pieces / 2)});
  // per half h, the 16 channels into lanes: t2 piece 16 p3 + 2 p_lo + h holds pixel p's 16 halves h
  for (int64_t h = 0; h < 2; ++h)
    op(npu::Opcode::Vtranspose, {f16, at(npu::Buffer::UB, t2 + h * piece), at(npu::Buffer::UB, t1 + h * piece), imm(2), imm(2), imm(2),
                                 imm(side), imm(side)});
  // per 8 pixels, (half, pixel) into lanes: channel k's row, 8 whole f32 values per piece
  for (int64_t p3 = 0; p3 < row_pieces; ++p3)
    op(npu::Opcode::Vtranspose, {f16, at(npu::Buffer::UB, out + p3 * piece), at(npu::Buffer::UB, t2 + p3 * side * piece), imm(2), imm(pitch),
                                 imm(1), imm(rep_blocks * pitch), imm(rep_blocks)});
}

void ConvCode::columns_to_rows_f32(int64_t src_gm, uint8_t src_reg, int64_t src_pitch, int64_t pixels, int64_t channels, int64_t dst_gm,
                                   uint8_t dst_reg, int64_t dst_pitch, int64_t ub, int64_t ub_bytes) {
  const int64_t eb = dtype_bytes(DType::F32), side = m_.block_elements(DType::F16), piece = m_.vector_block_bytes;
  const int64_t row_pieces = side * eb / piece, block = side * side * eb;  // one f32 row of 16: 2 pieces; a 16 x 16 f32 block
  const int64_t rep_blocks = m_.vector_bytes_per_repeat / piece;             // rows per repeat of a 16 x 16 16-bit transpose
  const int64_t scratch = 2 * block, nb = (ub_bytes - scratch) / 2 / (2 * block);
  if (row_pieces != 2 || 2 * rep_blocks != side || nb < 1 || channels > side)
    return refuse(fmt::format("kernel {}: the NPU backend does not map this convolution yet: an f32 transpose of {} x {} elements "
                              "does not fit the vector buffer ({} bytes)", k_.name, pixels, channels, ub_bytes));
  const int64_t t1 = ub, t2 = ub + block, pitch = nb * row_pieces;  // out rows: nb blocks of pixels, in pieces
  int64_t half = 0;
  for (int64_t p0 = 0; p0 < pixels; p0 += nb * side) {
    const int64_t np = std::min(nb * side, pixels - p0), blocks = (np + side - 1) / side;
    const int64_t raw = ub + scratch + half * 2 * nb * block, out = raw + nb * block;
    half ^= 1;
    op(npu::Opcode::DmaIn, {at(npu::Buffer::UB, raw), at(npu::Buffer::GM, src_gm + p0 * src_pitch * eb, src_reg), imm(np), imm(side * eb),
                            imm((src_pitch - side) * eb), imm(0)});
    for (int64_t b = 0; b < blocks; ++b) f32_block_to_rows(raw + b * block, out + b * row_pieces * piece, pitch, t1, t2);
    op(npu::Opcode::DmaOut, {at(npu::Buffer::GM, dst_gm + p0 * eb, dst_reg), at(npu::Buffer::UB, out), imm(channels), imm(np * eb),
                             imm((pitch * piece) - np * eb), imm((dst_pitch - np) * eb)});
  }
}

void ConvCode::images_columns_to_rows_f32(int64_t src_gm, int64_t dst_gm, int64_t images, int64_t pixels, int64_t channels,
                                          int64_t src_pitch) {
  const int64_t side = m_.block_elements(DType::F16), groups = (channels + side - 1) / side, eb = dtype_bytes(DType::F32);
  for (int64_t i = 0; i < images * groups; ++i) {
    const int64_t n = i / groups, j = i % groups;
    const auto [ub, bytes] = copy_region(i, images * groups, columns_to_rows_bytes(pixels));
    columns_to_rows_f32(src_gm + (n * pixels * src_pitch + j * side) * eb, npu::kNoRegister, src_pitch, pixels, std::min(side, channels - j * side),
                        dst_gm + (n * channels + j * side) * pixels * eb, npu::kNoRegister, pixels, ub, bytes);
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
