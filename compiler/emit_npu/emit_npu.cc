#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/emit_npu/transpose.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>

#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;
using npu::Pipe;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The largest multiple of `unit` that is <= limit and divides n (n a multiple of unit).
int64_t dividing_tile(int64_t n, int64_t limit, int64_t unit) {
  for (int64_t t = std::max(unit, limit / unit * unit); t >= unit; t -= unit)
    if (n % t == 0) return t;
  return unit;
}


// Registers of the generated code.
enum Reg : uint8_t {
  kTile = 1, kTileM, kTileN, kTmp, kGmA, kGmB, kChunk, kGmAChunk, kGmBChunk, kInit, kGmC, kCopy, kCopySrc, kCopyDst,
  kColumn2, kColumn4, kBatch, kRest
};

// What the machine offers, read once from the description by role.
struct Machine {
  int64_t m0 = 16, n0 = 16, k0 = 16;     // cube fractal (f16)
  int64_t fractal_bytes = 512;            // one L0A / L0B fractal
  int64_t acc_fractal_bytes = 1024;       // one L0C fractal
  int64_t cap_l1 = 0, cap_l0a = 0, cap_l0b = 0, cap_l0c = 0, cap_ub = 0;
  int64_t gm_align = 32, ub_align = 32, l0c_align = 1024, l0_align = 512;
  int64_t vector_bytes_per_repeat = 256, vector_max_repeat = 255;
  int cores = 1;
};

Machine machine(const isa::Hierarchy& h) {
  Machine m;
  bool cube = false;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const isa::MatrixShape& s : u->shapes)
      if (s.a == DType::F16 && s.acc == DType::F32) {
        m.m0 = s.m, m.n0 = s.n, m.k0 = s.k;
        cube = true;
      }
  if (!cube) throw UserError(h.source_file + ": the NPU backend needs a matrix unit with an f16 x f16 -> f32 shape");
  m.fractal_bytes = m.m0 * m.k0 * 2;
  m.acc_fractal_bytes = m.m0 * m.n0 * 4;
  m.cap_l1 = h.level(isa::Role::Stage).capacity_bytes;
  m.cap_l0a = h.level(isa::Role::OperandA).capacity_bytes;
  m.cap_l0b = h.level(isa::Role::OperandB).capacity_bytes;
  m.cap_l0c = h.level(isa::Role::Accumulator).capacity_bytes;
  m.cap_ub = h.level(isa::Role::Vector).capacity_bytes;
  m.gm_align = h.level(isa::Role::Global).alignment_bytes;
  m.ub_align = h.level(isa::Role::Vector).alignment_bytes;
  m.l0c_align = h.level(isa::Role::Accumulator).alignment_bytes;
  m.l0_align = std::max(h.level(isa::Role::OperandA).alignment_bytes, h.level(isa::Role::OperandB).alignment_bytes);
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Vector)) {
    m.vector_bytes_per_repeat = u->bytes_per_repeat;
    m.vector_max_repeat = u->max_repeat;
  }
  m.cores = static_cast<int>(h.cores);
  return m;
}

const kernel::Node* find_matmul(const kernel::Kernel& k) {
  const kernel::Node* found = nullptr;
  int count = 0;
  kernel::for_each_node(k.body, [&](const kernel::Node& n, int) {
    if (n.kind == kernel::NodeKind::Matmul) {
      if (!found) found = &n;
      ++count;
    }
  });
  if (count > 1) {
    for (const kernel::Node* n = found; n;) {  // several nodes of one statement are fine
      bool same = true;
      kernel::for_each_node(k.body, [&](const kernel::Node& m, int) {
        if (m.kind == kernel::NodeKind::Matmul && m.matmul.statement != n->matmul.statement) same = false;
      });
      if (!same) throw UserError("kernel " + k.name + ": the NPU backend maps one matmul statement per kernel");
      break;
    }
  }
  return found;
}

// A GEMM C[M,N] (+)= A[M,K] * B[K,N] on row-major GM tensors whose sizes are multiples of the tile.
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;                  // independent GEMMs, one after the other in GM
  int64_t tm = 0, tn = 0, tk = 0;     // stage (L1 / L0C) tile
  int64_t tm0 = 0, tn0 = 0, tk0 = 0;  // operand (L0A / L0B) tile
  int64_t a_off = 0, b_off = 0, c_off = 0;  // GM byte offsets
  DType out = DType::F32;
  bool int_out = false;  // i8 operands (converted to f16, exact) -> i32: the f32 accumulator converted on UB
  int cores = 1;
  bool double_l1 = true, double_l0 = true, double_ub = true;
  GemmEpilogue* epilogue = nullptr;                      // fused statements after the matmul
  std::map<std::string, std::pair<int64_t, int>> broadcast;  // [N] tensor -> GM offset, element bytes
};

class Builder {
 public:
  Builder(npu::Program& p, const Machine& m) : p_(p), m_(m) {}
  void op(Opcode o, std::vector<Operand> operands) { p_.add(o, std::move(operands)); }

  // Copies `rows` rows of `row_bytes` from GM[src] (row stride src_stride) to GM[dst] (row stride
  // dst_stride >= row_bytes, the rest of each row zero) through UB, `chunk_rows` rows at a time.
  void padded_copy(int64_t src, int64_t dst, int64_t rows, int64_t row_bytes, int64_t src_stride, int64_t dst_stride) {
    int64_t chunk_rows = std::max<int64_t>(1, (m_.cap_ub / 2) / dst_stride);
    chunk_rows = std::min(chunk_rows, rows);
    const int64_t region = round_up(chunk_rows * dst_stride, m_.vector_bytes_per_repeat);
    if (dst_stride > row_bytes) zero_ub(0, region);
    const int64_t full = rows / chunk_rows, rest = rows % chunk_rows;
    auto copy = [&](uint8_t base, int64_t src_off, int64_t dst_off, int64_t n) {
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src_off, base), imm(n), imm(row_bytes),
                         imm(src_stride - row_bytes), imm(dst_stride - row_bytes)});
      op(Opcode::DmaOut, {at(Buffer::GM, dst_off, base == npu::kNoRegister ? npu::kNoRegister : kCopyDst), at(Buffer::UB, 0),
                          imm(1), imm(n * dst_stride), imm(0), imm(0)});
    };
    if (full > 1) {
      op(Opcode::Loop, {reg(kCopy), imm(0), imm(full), imm(1)});
      op(Opcode::Mul, {reg(kCopySrc), reg(kCopy), imm(chunk_rows * src_stride)});
      op(Opcode::Mul, {reg(kCopyDst), reg(kCopy), imm(chunk_rows * dst_stride)});
      copy(kCopySrc, src, dst, chunk_rows);
      op(Opcode::EndLoop, {});
    } else if (full == 1) {
      copy(npu::kNoRegister, src, dst, chunk_rows);
    }
    if (rest) copy(npu::kNoRegister, src + full * chunk_rows * src_stride, dst + full * chunk_rows * dst_stride, rest);
  }

  // i8 [rows, cols] (row-major, GM offset 32-byte aligned) -> f16 [rows, dst_cols] zero-padded
  // (dst_cols a multiple of 16), through UB: rows in chunks of a multiple of 32 (so that every
  // chunk's source is aligned), the i8 rows spread to dst_cols bytes, vconv to f16, out.
  void widen_i8(int64_t src, int64_t dst, int64_t rows, int64_t cols, int64_t dst_cols) {
    const int64_t lanes = m_.vector_bytes_per_repeat / 2;
    int64_t chunk_rows = std::max<int64_t>(32, (m_.cap_ub / 4) / dst_cols / 32 * 32);
    chunk_rows = std::min(chunk_rows, std::max<int64_t>(1, m_.vector_max_repeat * lanes / dst_cols / 32 * 32));
    chunk_rows = std::min(chunk_rows, rows);
    const int64_t narrow = round_up(chunk_rows * dst_cols, m_.vector_bytes_per_repeat);
    if (narrow + round_up(chunk_rows * dst_cols * 2, 32) > m_.cap_ub || chunk_rows * dst_cols > m_.vector_max_repeat * lanes)
      throw UserError("an i8 operand row of " + std::to_string(cols) + " elements does not fit the vector buffer");
    for (int64_t done = 0; done < rows; done += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - done);
      if (dst_cols > cols) zero_ub(0, narrow);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src + done * cols), imm(n), imm(cols), imm(0), imm(dst_cols - cols)});
      const int64_t elems = n * dst_cols;
      op(Opcode::Vconv, {type(DType::F16), type(DType::I8), at(Buffer::UB, narrow), at(Buffer::UB, 0),
                         imm((elems + lanes - 1) / lanes), imm(1), imm(1), imm(8), imm(4)});
      op(Opcode::DmaOut, {at(Buffer::GM, dst + done * dst_cols * 2), at(Buffer::UB, narrow), imm(1), imm(elems * 2), imm(0), imm(0)});
    }
  }

  // Batched tails: per-batch offsets of the unpadded tensors are not aligned, so the whole batch
  // goes through UB in one aligned DMA on the unpadded side and one aligned DMA per batch on the
  // padded side. In: [batch*rows, cols] -> [batch, rows_p, cols_p] (rows past `rows` left as the
  // scratch tensor's zeros); out: the reverse, clipped. Both fit UB (checked by the caller).
  void batched_pad_in(int64_t src, int64_t dst, int64_t batch, int64_t rows, int64_t rows_p, int64_t row_bytes, int64_t dst_stride) {
    if (dst_stride > row_bytes) zero_ub(0, round_up(batch * rows * dst_stride, m_.vector_bytes_per_repeat));
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src), imm(batch * rows), imm(row_bytes), imm(0), imm(dst_stride - row_bytes)});
    for (int64_t b = 0; b < batch; ++b)
      op(Opcode::DmaOut, {at(Buffer::GM, dst + b * rows_p * dst_stride), at(Buffer::UB, b * rows * dst_stride), imm(1),
                          imm(rows * dst_stride), imm(0), imm(0)});
  }
  void batched_pad_out(int64_t src, int64_t dst, int64_t batch, int64_t rows, int64_t rows_p, int64_t row_bytes, int64_t src_stride) {
    for (int64_t b = 0; b < batch; ++b)
      op(Opcode::DmaIn, {at(Buffer::UB, b * rows * src_stride), at(Buffer::GM, src + b * rows_p * src_stride), imm(1),
                         imm(rows * src_stride), imm(0), imm(0)});
    op(Opcode::DmaOut, {at(Buffer::GM, dst), at(Buffer::UB, 0), imm(batch * rows), imm(row_bytes), imm(src_stride - row_bytes), imm(0)});
  }

  void zero_ub(int64_t offset, int64_t bytes) {
    const int64_t repeats = bytes / m_.vector_bytes_per_repeat;
    for (int64_t done = 0; done < repeats;) {
      const int64_t n = std::min(repeats - done, m_.vector_max_repeat);
      op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, offset + done * m_.vector_bytes_per_repeat), Operand::float_(0),
                        imm(n), imm(1), imm(8)});
      done += n;
    }
  }

  void gemm(const GemmShape& g) {
    const int64_t tiles_m = g.M / g.tm, tiles_n = g.N / g.tn, tiles = g.batch * tiles_m * tiles_n, chunks = g.K / g.tk;
    const int64_t eo = dtype_bytes(g.out);
    // On-chip layout: halves of each double-buffered tile.
    const int64_t l1_a = g.tm * g.tk * 2, l1_b = g.tk * g.tn * 2;
    const int64_t l1_half = round_up(l1_a + l1_b, 32);
    const int64_t l0a_half = round_up(g.tm0 * g.tk0 * 2, m_.l0_align), l0b_half = round_up(g.tk0 * g.tn0 * 2, m_.l0_align);
    const int64_t sub_c = g.tm0 * g.tn0 * 4;
    const int64_t ub_half = round_up(g.tm0 * g.tn0 * (g.epilogue ? 4 : eo), m_.ub_align);
    epilogue_base_ = round_up((g.double_ub ? 2 : 1) * ub_half, m_.ub_align);
    l0a_step_ = l0b_step_ = ub_step_ = 0;

    // One tile per core needs no tile loop (and no sync carried from one tile to the next).
    const bool tile_loop = tiles > g.cores;
    if (tile_loop) op(Opcode::Loop, {reg(kTile), reg(npu::kRegCoreId), imm(tiles), reg(npu::kRegCoreCount)});
    else op(Opcode::Mov, {reg(kTile), reg(npu::kRegCoreId)});
    uint8_t within = kTile;  // tile index inside one GEMM of the batch
    if (g.batch > 1) {
      op(Opcode::Div, {reg(kBatch), reg(kTile), imm(tiles_m * tiles_n)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(tiles_m * tiles_n)});
      op(Opcode::Sub, {reg(kRest), reg(kTile), reg(kTmp)});
      within = kRest;
    }
    op(Opcode::Div, {reg(kTileM), reg(within), imm(tiles_n)});
    op(Opcode::Mul, {reg(kTmp), reg(kTileM), imm(tiles_n)});
    op(Opcode::Sub, {reg(kTileN), reg(within), reg(kTmp)});
    op(Opcode::Mul, {reg(kGmA), reg(kTileM), imm(g.tm * g.K * 2)});
    op(Opcode::Mul, {reg(kGmB), reg(kTileN), imm(g.tn * 2)});
    op(Opcode::Mul, {reg(kGmC), reg(kTileM), imm(g.tm * g.N * eo)});
    op(Opcode::Mul, {reg(kTmp), reg(kTileN), imm(g.tn * eo)});
    op(Opcode::Add, {reg(kGmC), reg(kGmC), reg(kTmp)});
    if (g.batch > 1) {
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.M * g.K * 2)});
      op(Opcode::Add, {reg(kGmA), reg(kGmA), reg(kTmp)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.K * g.N * 2)});
      op(Opcode::Add, {reg(kGmB), reg(kGmB), reg(kTmp)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.M * g.N * eo)});
      op(Opcode::Add, {reg(kGmC), reg(kGmC), reg(kTmp)});
    }
    if (g.epilogue) {  // byte offsets of the tile's first column in [N] tensors of 2 and 4 bytes
      op(Opcode::Mul, {reg(kColumn2), reg(kTileN), imm(g.tn * 2)});
      op(Opcode::Mul, {reg(kColumn4), reg(kTileN), imm(g.tn * 4)});
    }

    // A K chunk is loaded (MTE2) into one L1 half and computed (MTE1 + M) from it. The loads are
    // issued one chunk ahead in program order, so the scalar pipe dispatches the next chunk's copy
    // before the current chunk's compute fills the queues (software pipelining).
    auto load = [&](int half, uint8_t a_base, uint8_t b_base, int64_t chunk_offset, bool split = false) {
      const int64_t l1 = g.double_l1 ? half * l1_half : 0;
      if (split && g.tk > g.tk0) {
        // The first chunk in operand-tile pieces of K (A: column blocks are contiguous in NZ; B: one
        // copy per column block), so the cube starts after the first piece instead of the chunk.
        // Order: A's first piece, then B column block by column block, then A's other pieces.
        const int64_t pieces = g.tk / g.tk0;
        auto a_piece = [&](int64_t piece) {
          op(Opcode::DmaInNz, {type(DType::F16), at(Buffer::L1, l1 + piece * g.tm * g.tk0 * 2),
                               at(Buffer::GM, g.a_off + (chunk_offset * g.tk + piece * g.tk0) * 2, a_base), imm(g.tm),
                               imm(g.tk0), imm(g.K)});
        };
        a_piece(0);
        for (int64_t cb = 0; cb < g.tn / m_.n0; ++cb)
          for (int64_t piece = 0; piece < pieces; ++piece) {
            const int64_t k0 = chunk_offset * g.tk + piece * g.tk0;
            op(Opcode::DmaInNz, {type(DType::F16), at(Buffer::L1, l1 + l1_a + (cb * g.tk + piece * g.tk0) * m_.n0 * 2),
                                 at(Buffer::GM, g.b_off + (k0 * g.N + cb * m_.n0) * 2, b_base), imm(g.tk0), imm(m_.n0), imm(g.N)});
          }
        for (int64_t piece = 1; piece < pieces; ++piece) a_piece(piece);
        return;
      }
      op(Opcode::DmaInNz, {type(DType::F16), at(Buffer::L1, l1), at(Buffer::GM, g.a_off + chunk_offset * g.tk * 2, a_base),
                           imm(g.tm), imm(g.tk), imm(g.K)});
      op(Opcode::DmaInNz, {type(DType::F16), at(Buffer::L1, l1 + l1_a),
                           at(Buffer::GM, g.b_off + chunk_offset * g.tk * g.N * 2, b_base), imm(g.tk), imm(g.tn), imm(g.N)});
    };
    // block_major (the last chunk): each accumulator block completes in turn, so its move to UB
    // and GM overlaps the cube's work on the next block.
    // block_major_halves: the last chunks (one per listed L1 half), block by block.
    auto compute_blocks = [&](const std::vector<int>& halves, Operand first) {
      for (int64_t j = 0; j < g.tn / g.tn0; ++j)
        for (int64_t i = 0; i < g.tm / g.tm0; ++i)
          for (size_t h = 0; h < halves.size(); ++h) {
            const int64_t l1 = g.double_l1 ? halves[h] * l1_half : 0;
            for (int64_t kk = 0; kk < g.tk / g.tk0; ++kk) {
              const int64_t a_frac = kk * (g.tk0 / m_.k0) * (g.tm / m_.m0) + i * (g.tm0 / m_.m0);
              const int64_t l0a = g.double_l0 ? (l0a_step_++ % 2) * l0a_half : 0;
              op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0A, l0a), at(Buffer::L1, l1 + a_frac * m_.fractal_bytes),
                                  imm(g.tm0 / m_.m0), imm(g.tk0 / m_.k0), imm(1), imm(g.tm / m_.m0), imm(0)});
              const int64_t b_frac = j * (g.tn0 / m_.n0) * (g.tk / m_.k0) + kk * (g.tk0 / m_.k0);
              const int64_t l0b = g.double_l0 ? (l0b_step_++ % 2) * l0b_half : 0;
              op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0B, l0b), at(Buffer::L1, l1 + l1_a + b_frac * m_.fractal_bytes),
                                  imm(g.tk0 / m_.k0), imm(g.tn0 / m_.n0), imm(1), imm(g.tk / m_.k0), imm(1)});
              const int64_t c = (j * (g.tm / g.tm0) + i) * sub_c;
              op(Opcode::Mmad, {type(DType::F16), at(Buffer::L0C, c), at(Buffer::L0A, l0a), at(Buffer::L0B, l0b), imm(g.tm0),
                                imm(g.tk0), imm(g.tn0), kk == 0 && h == 0 ? first : imm(0)});
            }
          }
    };
    auto compute = [&](int half, Operand first, bool block_major = false) {
      const int64_t l1 = g.double_l1 ? half * l1_half : 0;
      if (block_major) {
        compute_blocks({half}, first);
        return;
      }
      for (int64_t kk = 0; kk < g.tk / g.tk0; ++kk)
        for (int64_t i = 0; i < g.tm / g.tm0; ++i) {
          const int64_t a_frac = kk * (g.tk0 / m_.k0) * (g.tm / m_.m0) + i * (g.tm0 / m_.m0);
          const int64_t l0a = g.double_l0 ? (l0a_step_++ % 2) * l0a_half : 0;
          op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0A, l0a), at(Buffer::L1, l1 + a_frac * m_.fractal_bytes),
                              imm(g.tm0 / m_.m0), imm(g.tk0 / m_.k0), imm(1), imm(g.tm / m_.m0), imm(0)});
          for (int64_t j = 0; j < g.tn / g.tn0; ++j) {
            const int64_t b_frac = j * (g.tn0 / m_.n0) * (g.tk / m_.k0) + kk * (g.tk0 / m_.k0);
            const int64_t l0b = g.double_l0 ? (l0b_step_++ % 2) * l0b_half : 0;
            op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0B, l0b), at(Buffer::L1, l1 + l1_a + b_frac * m_.fractal_bytes),
                                imm(g.tk0 / m_.k0), imm(g.tn0 / m_.n0), imm(1), imm(g.tk / m_.k0), imm(1)});
            const int64_t c = (j * (g.tm / g.tm0) + i) * sub_c;
            op(Opcode::Mmad, {type(DType::F16), at(Buffer::L0C, c), at(Buffer::L0A, l0a), at(Buffer::L0B, l0b), imm(g.tm0),
                              imm(g.tk0), imm(g.tn0), kk == 0 ? first : imm(0)});
          }
        }
    };
    if (!g.double_l1) {
      if (chunks > 1) {
        op(Opcode::Loop, {reg(kChunk), imm(0), imm(chunks), imm(1)});
        op(Opcode::Seq, {reg(kInit), reg(kChunk), imm(0)});
        op(Opcode::Mul, {reg(kGmAChunk), reg(kChunk), imm(g.tk * 2)});
        op(Opcode::Add, {reg(kGmAChunk), reg(kGmAChunk), reg(kGmA)});
        op(Opcode::Mul, {reg(kGmBChunk), reg(kChunk), imm(g.tk * g.N * 2)});
        op(Opcode::Add, {reg(kGmBChunk), reg(kGmBChunk), reg(kGmB)});
        load(0, kGmAChunk, kGmBChunk, 0);
        compute(0, reg(kInit));
        op(Opcode::EndLoop, {});
      } else {
        load(0, kGmA, kGmB, 0);
        compute(0, imm(1));
      }
    } else {
      // Software pipeline over the chunks c (L1 half c % 2): load c + 1, compute c. Chunk 0 is peeled
      // (its loads are waited for right before its own MTE1 loads, not before a loop), then pairs of
      // chunks in a loop, then the last one or two chunks; the last is computed block by block.
      load(0, kGmA, kGmB, 0, /*split=*/!tile_loop);  // split pieces need more event ids: only where no tile loop carries them
      if (chunks > 1) load(1, kGmA, kGmB, 1);
      compute(0, imm(1), chunks == 1);
      const int64_t iterations = chunks >= 2 ? (chunks - 2) / 2 : 0;  // computes c, c+1 and loads c+1, c+2
      if (iterations > 0) {
        op(Opcode::Loop, {reg(kChunk), imm(0), imm(iterations), imm(1)});
        op(Opcode::Mul, {reg(kGmAChunk), reg(kChunk), imm(2 * g.tk * 2)});
        op(Opcode::Add, {reg(kGmAChunk), reg(kGmAChunk), reg(kGmA)});
        op(Opcode::Mul, {reg(kGmBChunk), reg(kChunk), imm(2 * g.tk * g.N * 2)});
        op(Opcode::Add, {reg(kGmBChunk), reg(kGmBChunk), reg(kGmB)});
        load(0, kGmAChunk, kGmBChunk, 2);  // chunk c + 1 = 2 + 2r
        compute(1, imm(0));                // chunk c = 1 + 2r
        load(1, kGmAChunk, kGmBChunk, 3);  // chunk c + 2
        compute(0, imm(0));                // chunk c + 1
        op(Opcode::EndLoop, {});
      }
      const int64_t c = 1 + 2 * iterations;  // next chunk to compute (odd: L1 half 1)
      if (c + 1 == chunks - 1) {
        load(0, kGmA, kGmB, c + 1);
        compute(1, imm(0));
        compute(0, imm(0), true);
      } else if (c == chunks - 1) {
        compute(1, imm(0), true);
      }
    }
    // Epilogue: every operand-level block of the accumulator through UB (ping-pong) to GM.
    for (int64_t j = 0; j < g.tn / g.tn0; ++j)
      for (int64_t i = 0; i < g.tm / g.tm0; ++i) {
        const int64_t c = (j * (g.tm / g.tm0) + i) * sub_c;
        const int64_t ub = g.double_ub ? (ub_step_++ % 2) * ub_half : 0;
        const DType moved = g.epilogue || g.int_out ? DType::F32 : g.out;
        const int64_t em = dtype_bytes(moved);
        op(Opcode::MovL0c, {type(moved), at(Buffer::UB, ub), at(Buffer::L0C, c), imm(g.tm0 * g.tn0 / (m_.m0 * m_.n0)), imm(0)});
        if (g.int_out) {  // integer-valued f32 (|x| <= 2^24) -> i32 in place: exact
          const int64_t lanes = m_.vector_bytes_per_repeat / 4;
          for (int64_t done = 0; done < g.tm0 * g.tn0;) {
            const int64_t n = std::min(g.tm0 * g.tn0 - done, m_.vector_max_repeat * lanes);
            op(Opcode::Vconv, {type(DType::I32), type(DType::F32), at(Buffer::UB, ub + done * 4), at(Buffer::UB, ub + done * 4),
                               imm((n + lanes - 1) / lanes), imm(1), imm(1), imm(8), imm(8)});
            done += n;
          }
        }
        for (int64_t jj = 0; jj < g.tn0 / m_.n0; ++jj) {
          const int64_t gm = g.c_off + (i * g.tm0 * g.N + j * g.tn0 + jj * m_.n0) * eo;
          int64_t src = ub + jj * g.tm0 * m_.n0 * em;
          if (g.epilogue) {
            std::map<std::string, Operand> columns;
            for (const auto& [name, where] : g.broadcast)
              columns[name] = at(Buffer::GM, where.first + (j * g.tn0 + jj * m_.n0) * where.second,
                                 where.second == 2 ? kColumn2 : kColumn4);
            src = g.epilogue->emit_block(p_, src, g.tm0, epilogue_base_, columns);
          }
          op(Opcode::DmaOut, {at(Buffer::GM, gm, kGmC), at(Buffer::UB, src), imm(g.tm0),
                              imm(m_.n0 * eo), imm(0), imm((g.N - m_.n0) * eo)});
        }
      }
    if (tile_loop) op(Opcode::EndLoop, {});
  }

 private:
  npu::Program& p_;
  const Machine& m_;
  int64_t l0a_step_ = 0, l0b_step_ = 0, ub_step_ = 0, epilogue_base_ = 0;
};

int64_t align_to(int64_t x, int64_t a) { return round_up(x, a); }

// Chooses the tiles: the kernel's boxes rounded up to the cube's fractal, shrunk to divide the
// (padded) sizes and to fit the levels, then whether each level can hold two halves.
void choose_tiles(GemmShape& g, const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m,
                  std::vector<std::string>& notes) {
  const kernel::Buffer& a0 = k.buffers.at(mm.a);
  const kernel::Buffer& b0 = k.buffers.at(mm.b);
  const kernel::Buffer& c = k.buffers.at(mm.c);
  int64_t tk = 0;
  for (const auto& b : k.buffers)
    if (b.role == isa::Role::Stage && b.tensor == mm.a_tensor && b.extents.size() >= 2) tk = b.extents.back();
  if (tk == 0) tk = a0.extents.back();
  auto last2 = [](const kernel::Buffer& b, int i) { return b.extents[b.extents.size() - 2 + i]; };
  g.tm = dividing_tile(g.M, round_up(last2(c, 0), m.m0), m.m0);
  g.tn = dividing_tile(g.N, round_up(last2(c, 1), m.n0), m.n0);
  g.tk = dividing_tile(g.K, round_up(tk, m.k0), m.k0);
  g.tm0 = dividing_tile(g.tm, round_up(last2(a0, 0), m.m0), m.m0);
  g.tk0 = dividing_tile(g.tk, round_up(last2(a0, 1), m.k0), m.k0);
  g.tn0 = dividing_tile(g.tn, round_up(last2(b0, 1), m.n0), m.n0);
  const int64_t eo = dtype_bytes(g.out);
  // Fit single buffers first (shrinking the stage tile), then decide on double buffering.
  while (g.tm * g.tn * 4 > m.cap_l0c && g.tm > m.m0) g.tm = dividing_tile(g.M, g.tm / 2, m.m0);
  while (g.tn * g.tm * 4 > m.cap_l0c && g.tn > m.n0) g.tn = dividing_tile(g.N, g.tn / 2, m.n0);
  while ((g.tm * g.tk + g.tk * g.tn) * 2 > m.cap_l1 && g.tk > m.k0) g.tk = dividing_tile(g.K, g.tk / 2, m.k0);
  g.tm0 = dividing_tile(g.tm, g.tm0, m.m0);
  g.tn0 = dividing_tile(g.tn, g.tn0, m.n0);
  g.tk0 = dividing_tile(g.tk, g.tk0, m.k0);
  while (g.tm0 * g.tk0 * 2 > m.cap_l0a && g.tk0 > m.k0) g.tk0 = dividing_tile(g.tk, g.tk0 / 2, m.k0);
  while (g.tk0 * g.tn0 * 2 > m.cap_l0b && g.tn0 > m.n0) g.tn0 = dividing_tile(g.tn, g.tn0 / 2, m.n0);
  while (g.tm0 * g.tn0 * eo > m.cap_ub && g.tm0 > m.m0) g.tm0 = dividing_tile(g.tm, g.tm0 / 2, m.m0);
  if (g.tm * g.tn * 4 > m.cap_l0c || (g.tm * g.tk + g.tk * g.tn) * 2 > m.cap_l1 || g.tm0 * g.tk0 * 2 > m.cap_l0a ||
      g.tk0 * g.tn0 * 2 > m.cap_l0b)
    throw UserError(fmt::format("kernel {}: no tile of {}x{}x{} fits the NPU's buffers", k.name, g.M, g.N, g.K));
  g.double_l1 = 2 * align_to((g.tm * g.tk + g.tk * g.tn) * 2, 32) <= m.cap_l1;
  g.double_l0 = 2 * align_to(g.tm0 * g.tk0 * 2, m.l0_align) <= m.cap_l0a && 2 * align_to(g.tk0 * g.tn0 * 2, m.l0_align) <= m.cap_l0b;
  const int64_t moved = g.tm0 * g.tn0 * (g.epilogue ? 4 : eo), extra = g.epilogue ? g.epilogue->ub_bytes(g.tm0) : 0;
  if (align_to(moved, m.ub_align) + extra > m.cap_ub)
    throw UserError(fmt::format("kernel {}: the epilogue of a {}x{} operand tile does not fit the vector buffer", k.name, g.tm0, g.tn0));
  g.double_ub = 2 * align_to(moved, m.ub_align) + extra <= m.cap_ub;
  notes.push_back(fmt::format("stage tile {}x{}x{} (L1 {}, L0C), operand tile {}x{}x{} (L0A/L0B {}), UB {}", g.tm, g.tn,
                              g.tk, g.double_l1 ? "double-buffered" : "single", g.tm0, g.tn0, g.tk0,
                              g.double_l0 ? "double-buffered" : "single", g.double_ub ? "double-buffered" : "single"));
}

NpuKernel emit_gemm(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, const isa::Hierarchy& target) {
  const kernel::GlobalTensor* A = k.find_tensor(mm.a_tensor);
  const kernel::GlobalTensor* B = k.find_tensor(mm.b_tensor);
  const kernel::GlobalTensor* C = k.find_tensor(mm.c_tensor);
  auto unsupported = [&](const std::string& why) {
    return UserError("kernel " + k.name + ": the NPU backend does not map this matmul yet: " + why);
  };
  if (!A || !B || A->temporary || B->temporary) throw unsupported("A and B must be global inputs");
  std::unique_ptr<GemmEpilogue> epilogue;
  if (!C) epilogue = std::make_unique<GemmEpilogue>(k, target, mm.statement, mm.c_tensor);
  else if (C->kind != ir::TensorKind::Output) throw unsupported("the accumulator is a global temporary");
  if (epilogue) C = k.find_tensor(epilogue->output());
  const size_t rank = A->shape.size();
  if (rank < 2 || rank > 3 || B->shape.size() != rank || C->shape.size() != rank) throw unsupported("operand ranks");
  if (rank == 3 && (B->shape[0] != A->shape[0] || C->shape[0] != A->shape[0] || epilogue))
    throw unsupported("batched matmul whose batch is not the leading dimension of all three tensors");
  if (mm.a_layout != kernel::Layout::RowMajor || mm.b_layout != kernel::Layout::RowMajor)
    throw unsupported("transposed operands");
  // i8 x i8 -> i32: computed on the f16 cube (every i8 is an f16, every product |p| <= 2^14 is exact,
  // every partial sum is an integer of magnitude <= K * 2^14 <= 2^24 for K <= 1024, so exact in f32).
  const bool i8 = A->dtype == DType::I8 && B->dtype == DType::I8;
  if (i8) {
    if (C->dtype != DType::I32 || epilogue || A->shape.size() != 2) throw unsupported("i8 operands other than a plain i8 x i8 -> i32 GEMM");
    if (A->shape[1] > 1024) throw unsupported("i8 GEMM with K > 1024 (the f32 accumulation would no longer be exact)");
  } else {
    if (mm.in_type != DType::F16 || A->dtype != DType::F16 || B->dtype != DType::F16)
      throw unsupported("operands other than f16");
    if (C->dtype != DType::F32 && C->dtype != DType::F16) throw unsupported("an output other than f32 / f16");
  }
  for (const auto& t : k.tensors) {
    const bool broadcast = epilogue && std::count(epilogue->broadcasts().begin(), epilogue->broadcasts().end(), t.name);
    if (t.name != A->name && t.name != B->name && t.name != C->name && !broadcast) throw unsupported("extra tensor " + t.name);
  }

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  const int64_t M = A->shape[rank - 2], K = A->shape[rank - 1], N = B->shape[rank - 1];
  GemmShape g;
  g.batch = rank == 3 ? A->shape[0] : 1;
  out.macs = uint64_t(g.batch) * M * N * K;
  g.out = C->dtype;
  g.int_out = i8;
  g.epilogue = epilogue.get();
  const bool aligned = M % m.m0 == 0 && N % m.n0 == 0 && K % m.k0 == 0 && !i8;
  g.M = round_up(M, m.m0), g.N = round_up(N, m.n0), g.K = round_up(K, m.k0);
  choose_tiles(g, k, mm, m, out.notes);
  const int64_t eo = dtype_bytes(g.out);
  int64_t gm = 0;
  auto place = [&](const std::string& name, DType t, std::vector<int64_t> shape, npu::TensorRole role) {
    npu::TensorBinding b{name, t, shape, gm, role, {}};
    gm = align_to(gm + b.byte_size(), m.gm_align);
    p.tensors.push_back(b);
    return b.gm_offset;
  };
  const int64_t a_user = place(A->name, A->dtype, A->shape, npu::TensorRole::In);
  const int64_t b_user = place(B->name, B->dtype, B->shape, npu::TensorRole::In);
  const int64_t c_user = place(C->name, g.out, C->shape, npu::TensorRole::Out);
  if (epilogue) {
    for (const std::string& name : epilogue->broadcasts()) {
      const kernel::GlobalTensor* t = k.find_tensor(name);
      g.broadcast[name] = {place(name, t->dtype, t->shape, npu::TensorRole::In), dtype_bytes(t->dtype)};
    }
    // Column blocks past N read up to 16 elements beyond a broadcast tensor's end: keep them in GM.
    place("guard", DType::F32, {16}, npu::TensorRole::Scratch);
    out.notes.push_back("fused epilogue on UB per 16-column block: " + std::to_string(epilogue->broadcasts().size()) +
                        " broadcast tensor(s), output " + C->name);
  }
  Builder build(p, m);
  if (aligned) {
    g.a_off = a_user, g.b_off = b_user, g.c_off = c_user;
    const int64_t tiles = g.batch * (g.M / g.tm) * (g.N / g.tn);
    g.cores = static_cast<int>(std::min<int64_t>(m.cores, tiles));
    p.cores = g.cores;
    build.gemm(g);
  } else {
    // Tails: zero-padded copies in scratch tensors, one core (cores do not synchronise with each other).
    const int64_t nb = g.batch;
    if (nb > 1 && std::max({nb * M * g.K * 2, nb * K * g.N * 2, nb * M * g.N * eo}) > m.cap_ub)
      throw unsupported("batched matmul with tails whose batch does not fit the vector buffer in one piece");
    g.a_off = place(A->name + "_padded", DType::F16, {nb, g.M, g.K}, npu::TensorRole::Scratch);
    g.b_off = place(B->name + "_padded", DType::F16, {nb, g.K, g.N}, npu::TensorRole::Scratch);
    g.c_off = place(C->name + "_padded", g.out, {nb, g.M, g.N}, npu::TensorRole::Scratch);
    p.cores = g.cores = 1;
    if (i8) {
      build.widen_i8(a_user, g.a_off, M, K, g.K);
      build.widen_i8(b_user, g.b_off, K, N, g.N);
    }
    if (nb > 1) {
      build.batched_pad_in(a_user, g.a_off, nb, M, g.M, K * 2, g.K * 2);
      build.batched_pad_in(b_user, g.b_off, nb, K, g.K, N * 2, g.N * 2);
    }
    for (int64_t b = 0; b < nb && !i8 && nb == 1; ++b) {
      build.padded_copy(a_user + b * M * K * 2, g.a_off + b * g.M * g.K * 2, M, K * 2, K * 2, g.K * 2);
      build.padded_copy(b_user + b * K * N * 2, g.b_off + b * g.K * g.N * 2, K, N * 2, N * 2, g.N * 2);
    }
    build.gemm(g);
    if (nb > 1) build.batched_pad_out(g.c_off, c_user, nb, M, g.M, N * eo, g.N * eo);
    for (int64_t b = 0; b < nb && nb == 1; ++b)
      build.padded_copy(g.c_off + b * g.M * g.N * eo, c_user + b * M * N * eo, M, N * eo, g.N * eo, N * eo);
    out.notes.push_back(fmt::format("tails: {}x{}x{} padded to {}x{}x{} through UB on one core", M, N, K, g.M, g.N, g.K));
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(Pipe::All)});
  out.notes.push_back(fmt::format("{} output tiles over {} core(s)", g.batch * (g.M / g.tm) * (g.N / g.tn), p.cores));
  npu::validate_program(p);
  return out;
}

}  // namespace

NpuKernel emit_npu(const kernel::Kernel& k, const isa::Hierarchy& target) {
  if (target.kind != isa::TargetKind::Npu) throw UserError(target.source_file + ": not an NPU description");
  const Machine m = machine(target);
  if (is_nhwc_convolution(k)) return emit_conv(k, target);
  if (is_depthwise_convolution(k)) return emit_depthwise(k, target);
  const kernel::Node* mm = find_matmul(k);
  if (mm) return emit_gemm(k, mm->matmul, m, target);
  if (k.function && k.function->statements.size() == 1 && k.function->statements[0].rhs->kind == ir::ExprKind::Access &&
      k.function->statements[0].out_indices != k.function->statements[0].rhs->indices)
    return emit_transpose(k, target);
  if (k.function && k.function->statements.size() == 1 && k.function->statements[0].rhs->kind == ir::ExprKind::Apply &&
      k.function->statements[0].rhs->op == ir::Op::Select)
    return emit_one_hot(k, target);
  try {
    return emit_pointwise(k, target);
  } catch (const UserError& pointwise) {
    try {
      return emit_channels(k, target);
    } catch (const UserError& channels) {
      try {
        return emit_rows(k, target);
      } catch (const UserError& rows) {
        throw UserError(std::string(pointwise.what()) + "; " + channels.what() + "; " + rows.what());
      }
    }
  }
}

}  // namespace tessel::emit_npu
