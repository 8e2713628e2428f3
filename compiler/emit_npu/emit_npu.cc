#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/depthwise.h"
#include "compiler/emit_npu/nest.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/emit_npu/transpose.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>

#include "isa/base/error.h"
#include "isa/npu_machine.h"
#include "compiler/tile/npu_gemm_plan.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;
using npu::Pipe;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }



// Registers of the generated code.
enum Reg : uint8_t {
  kTile = 1, kTileM, kTileN, kTmp, kGmA, kGmB, kChunk, kGmAChunk, kGmBChunk, kInit, kGmC, kCopy, kCopySrc, kCopyDst,
  kColumn2, kColumn4, kBatch, kRest
};

using Machine = isa::NpuMachine;

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
struct GemmShape : tile::GemmPlan {
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;                  // independent GEMMs, one after the other in GM
  int64_t a_off = 0, b_off = 0, c_off = 0;  // GM byte offsets
  DType out = DType::F32;
  bool int_out = false;  // i8 operands (converted to f16, exact) -> i32: the f32 accumulator converted on UB
  int cores = 1;
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
    int64_t chunk_rows = std::max<int64_t>(1, (m_.capacity(Buffer::UB) / 2) / dst_stride);
    chunk_rows = std::min(chunk_rows, rows);
    const int64_t region = round_up(chunk_rows * dst_stride, m_.vector_bytes_per_repeat);
    if (dst_stride > row_bytes) zero_ub(0, region);
    const int64_t full = rows / chunk_rows, rest = rows % chunk_rows;
    auto copy = [&](uint8_t base, int64_t src_off, int64_t dst_off, int64_t n) {
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src_off, base), imm(n), imm(row_bytes),
                         imm(src_stride - row_bytes), imm(dst_stride - row_bytes)});
      op(Opcode::DmaOut, {at(Buffer::GM, dst_off, base == npu::kNoRegister ? npu::kNoRegister : uint8_t(kCopyDst)), at(Buffer::UB, 0),
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

  // i8 [rows, cols] (row-major, GM offset aligned) -> f16 [rows, dst_cols] zero-padded (dst_cols a
  // multiple of the fractal), through UB: rows in chunks of a whole GM alignment unit of i8 rows (so
  // that every chunk's source is aligned), the i8 rows spread to dst_cols bytes, vconv to f16, out.
  void widen_i8(int64_t src, int64_t dst, int64_t rows, int64_t cols, int64_t dst_cols) {
    const int64_t lanes = m_.vector_lanes(DType::F16), unit = m_.granularity(Buffer::GM) / dtype_bytes(DType::I8);
    int64_t chunk_rows = std::max<int64_t>(unit, (m_.capacity(Buffer::UB) / 4) / dst_cols / unit * unit);
    chunk_rows = std::min(chunk_rows, std::max<int64_t>(1, m_.vector_max_repeat * lanes / dst_cols / unit * unit));
    chunk_rows = std::min(chunk_rows, rows);
    const int64_t narrow = round_up(chunk_rows * dst_cols, m_.vector_bytes_per_repeat);
    if (narrow + round_up(chunk_rows * dst_cols * dtype_bytes(DType::F16), m_.alignment(Buffer::UB)) > m_.capacity(Buffer::UB) ||
        chunk_rows * dst_cols > m_.vector_max_repeat * lanes)
      throw UserError("an i8 operand row of " + std::to_string(cols) + " elements does not fit the vector buffer");
    // vconv repeat strides in blocks: one repeat's f16 results and i8 sources
    const int64_t dst_blocks = lanes * dtype_bytes(DType::F16) / m_.vector_block_bytes;
    const int64_t src_blocks = lanes * dtype_bytes(DType::I8) / m_.vector_block_bytes;
    for (int64_t done = 0; done < rows; done += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - done);
      if (dst_cols > cols) zero_ub(0, narrow);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src + done * cols), imm(n), imm(cols), imm(0), imm(dst_cols - cols)});
      const int64_t elems = n * dst_cols;
      op(Opcode::Vconv, {type(DType::F16), type(DType::I8), at(Buffer::UB, narrow), at(Buffer::UB, 0),
                         imm((elems + lanes - 1) / lanes), imm(1), imm(1), imm(dst_blocks), imm(src_blocks)});
      op(Opcode::DmaOut, {at(Buffer::GM, dst + done * dst_cols * dtype_bytes(DType::F16)), at(Buffer::UB, narrow), imm(1),
                          imm(elems * dtype_bytes(DType::F16)), imm(0), imm(0)});
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
      const int64_t n = std::min<int64_t>(repeats - done, m_.vector_max_repeat);
      op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, offset + done * m_.vector_bytes_per_repeat), Operand::float_(0),
                        imm(n), imm(1), imm(m_.blocks_per_repeat())});
      done += n;
    }
  }

 private:
  npu::Program& p_;
  const Machine& m_;
};

// The GEMM main loop for one plan (GemmShape): tile indices per core, the K chunks through the L1
// ring (loads interleaved with the compute in program order), the operand tiles through the L0
// rings, the cube's mmads and each accumulator block's write-back through UB.
class GemmLoop {
 public:
  GemmLoop(npu::Program& p, const Machine& m, const GemmShape& g)
      : p_(p), m_(m), g_(g), cube_(m.cube_f16), in_(dtype_bytes(cube_.a)), acc_(dtype_bytes(cube_.acc)) {
    eo_ = dtype_bytes(g.out);
    tiles_m_ = g.M / g.tm, tiles_n_ = g.N / g.tn, tiles_ = g.batch * tiles_m_ * tiles_n_, chunks_ = g.K / g.tk;
    // On-chip layout: halves of each double-buffered tile.
    l1_a_ = g.tm * g.tk * in_;
    l1_half_ = round_up(l1_a_ + g.tk * g.tn * in_, m.alignment(Buffer::L1));
    l0a_half_ = round_up(g.tm0 * g.tk0 * in_, m.operand_alignment()), l0b_half_ = round_up(g.tk0 * g.tn0 * in_, m.operand_alignment());
    sub_c_ = g.tm0 * g.tn0 * acc_;
    ub_half_ = round_up(g.tm0 * g.tn0 * (g.epilogue ? acc_ : eo_), m.alignment(Buffer::UB));
    epilogue_base_ = round_up((g.double_ub ? 2 : 1) * ub_half_, m.alignment(Buffer::UB));
    // One tile per core needs no tile loop (and no sync carried from one tile to the next).
    tile_loop_ = tiles_ > g.cores;
    pieces_ = g.tk / g.tk0;
    a_tile_bytes_ = g.tm0 * g.tk0 * in_, b_tile_bytes_ = g.tk0 * g.tn0 * in_;
    moved_ = g.epilogue || g.int_out ? cube_.acc : g.out;
    column_bytes_ = g.tm0 * cube_.n0 * acc_;  // one column block in L0C (NZ: contiguous)
    blocks_m_ = g.tm / g.tm0, blocks_n_ = g.tn / g.tn0;
  }

  void run() {
    if (tile_loop_) op(Opcode::Loop, {reg(kTile), reg(npu::kRegCoreId), imm(tiles_), reg(npu::kRegCoreCount)});
    else op(Opcode::Mov, {reg(kTile), reg(npu::kRegCoreId)});
    tile_origins();
    if (!g_.double_l1) single_buffered();
    else pipelined();
    if (tile_loop_) op(Opcode::EndLoop, {});
  }

 private:
  // What a queued DMA brings: A tile (kk, i) (j < 0) or B tiles (kk, j..) (i < 0); j = -2: all.
  struct Dma {
    int64_t chunk, kk, i, j;
    std::function<void()> emit;
  };
  enum class Order { Pieces, Fine, Blocks };

  void op(Opcode o, std::vector<Operand> operands) { p_.add(o, std::move(operands)); }

  // The tile's row / column indices and the GM bases of its A rows, B columns and C block.
  void tile_origins() {
    const GemmShape& g = g_;
    uint8_t within = kTile;  // tile index inside one GEMM of the batch
    if (g.batch > 1) {
      op(Opcode::Div, {reg(kBatch), reg(kTile), imm(tiles_m_ * tiles_n_)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(tiles_m_ * tiles_n_)});
      op(Opcode::Sub, {reg(kRest), reg(kTile), reg(kTmp)});
      within = kRest;
    }
    op(Opcode::Div, {reg(kTileM), reg(within), imm(tiles_n_)});
    op(Opcode::Mul, {reg(kTmp), reg(kTileM), imm(tiles_n_)});
    op(Opcode::Sub, {reg(kTileN), reg(within), reg(kTmp)});
    op(Opcode::Mul, {reg(kGmA), reg(kTileM), imm(g.tm * g.K * in_)});
    op(Opcode::Mul, {reg(kGmB), reg(kTileN), imm(g.tn * in_)});
    op(Opcode::Mul, {reg(kGmC), reg(kTileM), imm(g.tm * g.N * eo_)});
    op(Opcode::Mul, {reg(kTmp), reg(kTileN), imm(g.tn * eo_)});
    op(Opcode::Add, {reg(kGmC), reg(kGmC), reg(kTmp)});
    if (g.batch > 1) {
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.M * g.K * in_)});
      op(Opcode::Add, {reg(kGmA), reg(kGmA), reg(kTmp)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.K * g.N * in_)});
      op(Opcode::Add, {reg(kGmB), reg(kGmB), reg(kTmp)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.M * g.N * eo_)});
      op(Opcode::Add, {reg(kGmC), reg(kGmC), reg(kTmp)});
    }
    if (g.epilogue) {  // byte offsets of the tile's first column in [N] tensors of 2 and 4 bytes
      op(Opcode::Mul, {reg(kColumn2), reg(kTileN), imm(g.tn * dtype_bytes(DType::F16))});
      op(Opcode::Mul, {reg(kColumn4), reg(kTileN), imm(g.tn * dtype_bytes(DType::F32))});
    }
  }

  // L1 slot layout (per K chunk): operand tile by operand tile, each contiguous NZ — A piece kk
  // (tk0 columns of K) row block i (tm0 rows), then B piece kk column block j (tn0 columns) — so
  // that one operand tile can be loaded and computed on without the rest of the chunk, and every
  // load2d reads one contiguous range (the sync pass's footprints are intervals).
  int64_t a_at(int64_t kk, int64_t i) const { return (kk * blocks_m_ + i) * a_tile_bytes_; }
  int64_t b_at(int64_t kk, int64_t j) const { return l1_a_ + (kk * blocks_n_ + j) * b_tile_bytes_; }
  int64_t slot_at(int64_t slot) const { return g_.double_l1 ? slot * l1_half_ : 0; }

  // A K chunk is loaded (MTE2) into one L1 slot and computed (MTE1 + M) from it. The scalar pipe
  // dispatches in program order into queues of bounded depth, so the program interleaves the
  // pipes in the order they should run: a load's DMAs are queued (`pending_`) and emitted inside
  // the compute before it — each DMA of the chunk being computed right before the first mmad that
  // needs it, the DMAs of later chunks spread evenly over the mmads (software pipelining without
  // starving one queue while another is full).
  // Fine: one DMA per operand tile, in the order the cube needs them (the first chunk: the cube
  // starts after one operand tile of A and of B instead of a whole piece); otherwise one DMA per
  // piece of B and per operand tile of A.
  void load(int64_t slot, uint8_t a_base, uint8_t b_base, int64_t chunk_offset, int64_t chunk, Order order) {
    const GemmShape& g = g_;
    const int64_t l1 = slot_at(slot);
    auto a_tile = [&](int64_t kk, int64_t i) {
      const int64_t k0 = chunk_offset * g.tk + kk * g.tk0;  // first column of A
      std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + a_at(kk, i)),
                               at(Buffer::GM, g.a_off + (i * g.tm0 * g.K + k0) * in_, a_base), imm(g.tm0), imm(g.tk0), imm(g.K)};
      pending_.push_back({chunk, kk, i, -1, [this, ops] { op(Opcode::DmaInNz, ops); }});
    };
    auto b_tiles = [&](int64_t kk, int64_t j, int64_t cols) {
      const int64_t k0 = chunk_offset * g.tk + kk * g.tk0;  // first row of B
      std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + b_at(kk, j)),
                               at(Buffer::GM, g.b_off + (k0 * g.N + j * g.tn0) * in_, b_base), imm(g.tk0), imm(cols), imm(g.N)};
      pending_.push_back({chunk, kk, -1, cols == g.tn ? -2 : j, [this, ops] { op(Opcode::DmaInNz, ops); }});
    };
    if (order == Order::Blocks) {  // what accumulator block (i, j) needs first: A row block i, B column block j
      for (int64_t j = 0; j < blocks_n_; ++j)
        for (int64_t i = 0; i < blocks_m_; ++i) {
          if (j == 0)
            for (int64_t kk = 0; kk < pieces_; ++kk) a_tile(kk, i);
          if (i == 0)
            for (int64_t kk = 0; kk < pieces_; ++kk) b_tiles(kk, j, g.tn0);
        }
      return;
    }
    for (int64_t kk = 0; kk < pieces_; ++kk) {
      a_tile(kk, 0);
      if (order == Order::Fine) {
        for (int64_t j = 0; j < blocks_n_; ++j) b_tiles(kk, j, g.tn0);
      } else {
        b_tiles(kk, 0, g.tn);  // NZ of tk0 rows: the column blocks j one after the other, as laid out
      }
      for (int64_t i = 1; i < blocks_m_; ++i) a_tile(kk, i);
    }
  }

  void emit_pending(size_t n) {
    for (; n > 0 && !pending_.empty(); --n) {
      pending_.front().emit();
      pending_.pop_front();
    }
  }

  // Before mmad (kk, i, j) of `chunk`, the `left`-th last mmad of this compute: the pending DMAs
  // it needs (a prefix of its chunk's, in load order), then a share of the later chunks' DMAs.
  void flush(int64_t chunk, int64_t kk, int64_t i, int64_t j, int64_t left) {
    auto needed = [&](const Dma& d) {
      if (d.chunk != chunk) return false;
      if (d.kk != kk) return d.kk < kk;
      return d.j < 0 ? d.i <= i : (d.j == -2 || d.j <= j);
    };
    size_t last = 0;
    for (size_t n = 0; n < pending_.size(); ++n)
      if (needed(pending_[n])) last = n + 1;
    emit_pending(last);
    size_t later = 0;
    for (const Dma& d : pending_) later += d.chunk > chunk;
    emit_pending((later + left - 1) / std::max<int64_t>(left, 1));
  }

  // One operand tile from the chunk in L1 slot `slot` into the L0A / L0B rings.
  int64_t load_a(int64_t slot, int64_t kk, int64_t i) {
    const int64_t l0a = (l0a_step_++ % g_.l0a_slots) * l0a_half_;
    op(Opcode::Load2d, {type(cube_.a), at(Buffer::L0A, l0a), at(Buffer::L1, slot_at(slot) + a_at(kk, i)), imm(g_.tm0 / cube_.m0),
                        imm(g_.tk0 / cube_.k0), imm(1), imm(g_.tm0 / cube_.m0), imm(0)});
    return l0a;
  }
  int64_t load_b(int64_t slot, int64_t kk, int64_t j) {
    const int64_t l0b = (l0b_step_++ % g_.l0b_slots) * l0b_half_;
    op(Opcode::Load2d, {type(cube_.a), at(Buffer::L0B, l0b), at(Buffer::L1, slot_at(slot) + b_at(kk, j)), imm(g_.tk0 / cube_.k0),
                        imm(g_.tn0 / cube_.n0), imm(1), imm(g_.tk0 / cube_.k0), imm(1)});
    return l0b;
  }
  int64_t block_at(int64_t i, int64_t j) const { return (j * blocks_m_ + i) * sub_c_; }  // accumulator block in L0C
  void mmad(int64_t i, int64_t j, int64_t l0a, int64_t l0b, Operand init) {
    op(Opcode::Mmad, {type(cube_.a), at(Buffer::L0C, block_at(i, j)), at(Buffer::L0A, l0a), at(Buffer::L0B, l0b), imm(g_.tm0),
                      imm(g_.tk0), imm(g_.tn0), init});
  }

  // i32 results: the whole block moved, its integer-valued f32 (|x| <= 2^24) converted in place: exact.
  void convert_block_to_i32(int64_t c, int64_t ub) {
    const GemmShape& g = g_;
    op(Opcode::MovL0c, {type(moved_), at(Buffer::UB, ub), at(Buffer::L0C, c), imm(g.tm0 * g.tn0 / cube_.acc_fractal_elements()), imm(0)});
    const int64_t lanes = m_.vector_lanes(DType::F32), block = m_.blocks_per_repeat();
    for (int64_t done = 0; done < g.tm0 * g.tn0;) {
      const int64_t n = std::min<int64_t>(g.tm0 * g.tn0 - done, m_.vector_max_repeat * lanes);
      op(Opcode::Vconv, {type(DType::I32), type(DType::F32), at(Buffer::UB, ub + done * acc_), at(Buffer::UB, ub + done * acc_),
                         imm((n + lanes - 1) / lanes), imm(1), imm(1), imm(block), imm(block)});
      done += n;
    }
  }

  // Write-back of accumulator block (i, j) through UB (ping-pong) to GM, moved one fractal column
  // block at a time (MTE3 starts after a quarter of the move; i32 results: the whole block,
  // converted). `columns`: emits the mmads of column block jj before its move (null: none).
  void write_back(int64_t i, int64_t j, const std::function<void(int64_t)>& columns = nullptr) {
    const GemmShape& g = g_;
    const int64_t c = block_at(i, j), n0 = cube_.n0, em = dtype_bytes(moved_);
    const int64_t ub = g.double_ub ? (ub_step_++ % 2) * ub_half_ : 0;
    if (g.int_out) convert_block_to_i32(c, ub);
    for (int64_t jj = 0; jj < g.tn0 / n0; ++jj) {
      if (columns) columns(jj);
      const int64_t gm = g.c_off + (i * g.tm0 * g.N + j * g.tn0 + jj * n0) * eo_;
      int64_t src = ub + jj * g.tm0 * n0 * em;
      if (!g.int_out)
        op(Opcode::MovL0c, {type(moved_), at(Buffer::UB, src), at(Buffer::L0C, c + jj * column_bytes_), imm(g.tm0 / cube_.m0), imm(0)});
      if (g.epilogue) {
        std::map<std::string, Operand> cols;
        for (const auto& [name, where] : g.broadcast)
          cols[name] = at(Buffer::GM, where.first + (j * g.tn0 + jj * n0) * where.second,
                          where.second == dtype_bytes(DType::F16) ? kColumn2 : kColumn4);
        src = g.epilogue->emit_block(p_, src, g.tm0, epilogue_base_, cols);
      }
      op(Opcode::DmaOut, {at(Buffer::GM, gm, kGmC), at(Buffer::UB, src), imm(g.tm0), imm(n0 * eo_), imm(0), imm((g.N - n0) * eo_)});
    }
  }

  // The last block column block by column block (mmads one fractal wide, its A operand tiles loaded
  // once into the L0A ring): its columns complete one after the other, so only the last one's move
  // and write-back follow the cube.
  void last_block_by_columns(const std::vector<int64_t>& slots, int64_t i, int64_t j, Operand first) {
    const GemmShape& g = g_;
    std::vector<int64_t> a;
    for (size_t h = 0; h < slots.size(); ++h)
      for (int64_t kk = 0; kk < pieces_; ++kk) a.push_back(load_a(slots[h], kk, i));
    const int64_t c = block_at(i, j);
    write_back(i, j, [&](int64_t jj) {
      for (size_t h = 0; h < slots.size(); ++h)
        for (int64_t kk = 0; kk < pieces_; ++kk) {
          const int64_t l0b = (l0b_step_++ % g.l0b_slots) * l0b_half_;
          op(Opcode::Load2d, {type(cube_.a), at(Buffer::L0B, l0b), at(Buffer::L1, slot_at(slots[h]) + b_at(kk, j) + jj * g.tk0 * cube_.n0 * in_),
                              imm(g.tk0 / cube_.k0), imm(1), imm(1), imm(g.tk0 / cube_.k0), imm(1)});
          op(Opcode::Mmad, {type(cube_.a), at(Buffer::L0C, c + jj * column_bytes_), at(Buffer::L0A, a[h * pieces_ + kk]),
                            at(Buffer::L0B, l0b), imm(g.tm0), imm(g.tk0), imm(cube_.n0), kk == 0 && h == 0 ? first : imm(0)});
        }
    });
  }

  // The chunks in `slots` (ascending K), one accumulator block after the other, each block's
  // write-back right after its last mmad in program order: it runs (V, MTE3) while the cube
  // computes the next block. The last block column block by column block, except in a tile loop
  // (there the next tile's start hides the drain).
  void compute_blocks(const std::vector<int64_t>& slots, Operand first) {
    const GemmShape& g = g_;
    const int64_t tiles = static_cast<int64_t>(slots.size()) * pieces_;
    for (int64_t j = 0; j < blocks_n_; ++j)
      for (int64_t i = 0; i < blocks_m_; ++i) {
        // The pending DMAs this block needs (a prefix: loaded in block order), the rest later.
        size_t last = 0;
        for (size_t n = 0; n < pending_.size(); ++n)
          if (pending_[n].j < 0 ? pending_[n].i <= i || j > 0 : pending_[n].j == -2 || pending_[n].j <= j) last = n + 1;
        emit_pending(last);
        if (j == blocks_n_ - 1 && i == blocks_m_ - 1 && !tile_loop_ && g.tn0 > cube_.n0 && !g.int_out && tiles <= g.l0a_slots) {
          last_block_by_columns(slots, i, j, first);
          continue;
        }
        for (size_t h = 0; h < slots.size(); ++h)
          for (int64_t kk = 0; kk < pieces_; ++kk) {
            const int64_t l0a = load_a(slots[h], kk, i);
            mmad(i, j, l0a, load_b(slots[h], kk, j), kk == 0 && h == 0 ? first : imm(0));
          }
        write_back(i, j);
      }
  }

  // One chunk, piece by piece (the order of its loads): A's operand tile reused across the columns.
  void compute(int64_t chunk, int64_t slot, Operand first) {
    int64_t left = pieces_ * blocks_m_ * blocks_n_;
    for (int64_t kk = 0; kk < pieces_; ++kk)
      for (int64_t i = 0; i < blocks_m_; ++i) {
        flush(chunk, kk, i, 0, left);
        const int64_t l0a = load_a(slot, kk, i);
        for (int64_t j = 0; j < blocks_n_; ++j) {
          flush(chunk, kk, i, j, left--);
          mmad(i, j, l0a, load_b(slot, kk, j), kk == 0 ? first : imm(0));
        }
      }
  }

  // The chunk's GM bases: kGmA / kGmB advanced by `chunks_per_step` chunks per kChunk.
  void chunk_bases(int64_t chunks_per_step) {
    op(Opcode::Mul, {reg(kGmAChunk), reg(kChunk), imm(chunks_per_step * g_.tk * in_)});
    op(Opcode::Add, {reg(kGmAChunk), reg(kGmAChunk), reg(kGmA)});
    op(Opcode::Mul, {reg(kGmBChunk), reg(kChunk), imm(chunks_per_step * g_.tk * g_.N * in_)});
    op(Opcode::Add, {reg(kGmBChunk), reg(kGmBChunk), reg(kGmB)});
  }

  // One L1 slot: the chunks one after the other, the write-back after the last.
  void single_buffered() {
    if (chunks_ <= 1) {
      load(0, kGmA, kGmB, 0, 0, Order::Blocks);
      compute_blocks({0}, imm(1));
      return;
    }
    op(Opcode::Loop, {reg(kChunk), imm(0), imm(chunks_), imm(1)});
    op(Opcode::Seq, {reg(kInit), reg(kChunk), imm(0)});
    chunk_bases(1);
    load(0, kGmAChunk, kGmBChunk, 0, 0, Order::Pieces);
    compute(0, 0, reg(kInit));
    op(Opcode::EndLoop, {});
    for (int64_t j = 0; j < blocks_n_; ++j)
      for (int64_t i = 0; i < blocks_m_; ++i) write_back(i, j);
  }

  // Software pipeline over the chunks c (L1 slot c % S, S = l1_slots): the loads run S - 1 chunks
  // ahead (load c + S - 1 is queued before computing c: its slot is the one chunk c - 1 freed). The
  // first `peeled` chunks are straight-line code (their loads are waited for right before their
  // own MTE1 loads, not all at a loop's entry), the middle chunks run in a loop unrolled S times
  // (every L1 address a constant), the last tail_chunks chunks are computed block by block.
  void pipelined() {
    const GemmShape& g = g_;
    const int64_t S = g.l1_slots, ahead = S - 1, body_end = chunks_ - g.tail_chunks;  // chunks [0, body_end) chunk-wise
    int64_t loaded = 0;
    auto load_static = [&](int64_t upto) {  // queues the loads of chunks < upto not queued yet
      for (; loaded < std::min(upto, chunks_); ++loaded)
        load(loaded % S, kGmA, kGmB, loaded, loaded,
             loaded >= body_end ? Order::Blocks : loaded == 0 && !tile_loop_ ? Order::Fine : Order::Pieces);
    };
    load_static(ahead);
    const int64_t peeled = std::min(g.peeled, body_end);
    for (int64_t c = 0; c < peeled; ++c) {
      load_static(c + ahead + 1);
      compute(c, c % S, imm(c == 0 ? 1 : 0));
    }
    // The loop: chunks peeled .. peeled + S * iterations - 1 (slot of chunk c: c % S).
    const int64_t iterations = body_end > peeled ? (body_end - peeled) / S : 0;
    if (iterations > 0) {
      op(Opcode::Loop, {reg(kChunk), imm(0), imm(iterations), imm(1)});
      chunk_bases(S);
      for (int64_t p = 0; p < S; ++p) {  // chunk c = peeled + S r + p; loads c + S - 1 (< chunks: body_end <= chunks - 1)
        load((peeled + p + ahead) % S, kGmAChunk, kGmBChunk, peeled + p + ahead, peeled + p + ahead, Order::Pieces);
        compute(peeled + p, (peeled + p) % S, imm(0));
      }
      op(Opcode::EndLoop, {});
      loaded = peeled + S * iterations + ahead;
    }
    for (int64_t c = peeled + S * iterations; c < body_end; ++c) {
      load_static(c + ahead + 1);
      compute(c, c % S, imm(0));
    }
    load_static(chunks_);
    std::vector<int64_t> tail;
    for (int64_t c = std::max<int64_t>(0, body_end); c < chunks_; ++c) tail.push_back(c % S);
    compute_blocks(tail, imm(body_end <= 0 ? 1 : 0));
  }

  npu::Program& p_;
  const Machine& m_;
  const GemmShape& g_;
  const isa::CubeShape& cube_;
  const int64_t in_, acc_;  // operand and accumulator element bytes
  int64_t eo_ = 0, tiles_m_ = 0, tiles_n_ = 0, tiles_ = 0, chunks_ = 0;
  int64_t l1_a_ = 0, l1_half_ = 0, l0a_half_ = 0, l0b_half_ = 0, sub_c_ = 0, ub_half_ = 0, epilogue_base_ = 0;
  bool tile_loop_ = false;
  int64_t pieces_ = 0, a_tile_bytes_ = 0, b_tile_bytes_ = 0, column_bytes_ = 0, blocks_m_ = 0, blocks_n_ = 0;
  DType moved_ = DType::F32;
  std::deque<Dma> pending_;
  int64_t l0a_step_ = 0, l0b_step_ = 0, ub_step_ = 0;
};


// The GEMM tile policy's request from the kernel's boxes: the accumulator's m x n, A's stage k (or
// its operand box's), A's operand m x k and B's operand n.
tile::GemmRequest gemm_request(const GemmShape& g, const kernel::Kernel& k, const kernel::MatmulOp& mm) {
  const kernel::Buffer& a0 = k.buffers.at(mm.a);
  const kernel::Buffer& b0 = k.buffers.at(mm.b);
  const kernel::Buffer& c = k.buffers.at(mm.c);
  int64_t tk = 0;
  for (const auto& b : k.buffers)
    if (b.role == isa::Role::Stage && b.tensor == mm.a_tensor && b.extents.size() >= 2) tk = b.extents.back();
  if (tk == 0) tk = a0.extents.back();
  auto last2 = [](const kernel::Buffer& b, int i) { return b.extents[b.extents.size() - 2 + i]; };
  tile::GemmRequest r;
  r.M = g.M, r.N = g.N, r.K = g.K;
  r.box_m = last2(c, 0), r.box_n = last2(c, 1), r.box_k = tk;
  r.box_m0 = last2(a0, 0), r.box_k0 = last2(a0, 1), r.box_n0 = last2(b0, 1);
  r.out = g.out, r.int_out = g.int_out, r.has_epilogue = g.epilogue != nullptr;
  if (g.epilogue) r.epilogue_ub_bytes = [e = g.epilogue](int64_t rows) { return e->ub_bytes(rows); };
  return r;
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
    // not hardware: 2^24 / 2^14, the exactness of the f32 sums
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
  const bool aligned = M % m.cube_f16.m0 == 0 && N % m.cube_f16.n0 == 0 && K % m.cube_f16.k0 == 0 && !i8;
  g.M = round_up(M, m.cube_f16.m0), g.N = round_up(N, m.cube_f16.n0), g.K = round_up(K, m.cube_f16.k0);
  const tile::GemmPlanResult planned = tile::plan_gemm(gemm_request(g, k, mm), m);
  if (planned.no_fit) throw UserError("kernel " + k.name + ": " + planned.no_fit->what());
  static_cast<tile::GemmPlan&>(g) = *planned.plan;
  out.notes.insert(out.notes.end(), g.notes.begin(), g.notes.end());
  const int64_t eo = dtype_bytes(g.out);
  int64_t gm = 0;
  auto place = [&](const std::string& name, DType t, std::vector<int64_t> shape, npu::TensorRole role) {
    npu::TensorBinding b{name, t, shape, gm, role, {}};
    gm = round_up(gm + b.byte_size(), m.granularity(Buffer::GM));
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
    // Column blocks past N read up to one block of elements beyond a broadcast tensor's end: keep them in GM.
    place("guard", DType::F32, {m.cube_f16.n0}, npu::TensorRole::Scratch);
    out.notes.push_back("fused epilogue on UB per " + std::to_string(m.cube_f16.n0) + "-column block: " + std::to_string(epilogue->broadcasts().size()) +
                        " broadcast tensor(s), output " + C->name);
  }
  Builder build(p, m);
  if (aligned) {
    g.a_off = a_user, g.b_off = b_user, g.c_off = c_user;
    const int64_t tiles = g.batch * (g.M / g.tm) * (g.N / g.tn);
    g.cores = static_cast<int>(std::min<int64_t>(m.cores, tiles));
    p.cores = g.cores;
    GemmLoop(p, m, g).run();
  } else {
    // Tails: zero-padded copies in scratch tensors, one core (cores do not synchronise with each other).
    const int64_t nb = g.batch;
    if (nb > 1 && std::max({nb * M * g.K * 2, nb * K * g.N * 2, nb * M * g.N * eo}) > m.capacity(Buffer::UB))
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
    GemmLoop(p, m, g).run();
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

// The vector-unit mappings of kernels without a matmul, in the order they are tried: the first
// whose why_not accepts the kernel maps it (their forms exclude each other: element-wise reads at
// the output's indices, channel-last and last-axis rows at row or channel indices, a transpose is
// one permuted copy, a one-hot one select on i32 indices). Each why_not checks its mapping's
// preconditions without throwing and says why it does not apply; a kernel none accepts is one
// UserError listing every reason.
struct VectorMapping {
  std::string (*why_not)(const kernel::Kernel&, const Machine&);
  NpuKernel (*emit)(const kernel::Kernel&, const isa::Hierarchy&);
};
constexpr VectorMapping kVectorMappings[] = {
    {why_not_pointwise, emit_pointwise}, {why_not_channels, emit_channels}, {why_not_rows, emit_rows},
    {why_not_transpose, emit_transpose}, {why_not_one_hot, emit_one_hot}, {why_not_nest, emit_nest},
};

}  // namespace

NpuKernel emit_npu(const kernel::Kernel& k, const isa::Hierarchy& target) {
  if (target.kind != isa::TargetKind::Npu) throw UserError(target.source_file + ": not an NPU description");
  const Machine m = isa::npu_machine(target);
  // The templates below read affine index, range and shape forms only: a function with floor
  // division or modulo anywhere goes to the general vector lowering, which splits divided indices.
  if (const std::string use = ir::division_use(*k.function); !use.empty()) {
    if (const std::string why = why_not_nest(k, m); !why.empty())
      throw UserError(why + " (the only NPU mapping of floor division or modulo: " + use + ")");
    return emit_nest(k, target);
  }
  if (is_nhwc_convolution(k, m)) return emit_conv(k, target);
  if (why_not_depthwise(k, m).empty()) return emit_depthwise(k, target);
  const kernel::Node* mm = find_matmul(k);
  if (mm) return emit_gemm(k, mm->matmul, m, target);
  std::string reasons;
  for (const VectorMapping& mapping : kVectorMappings) {
    const std::string why = mapping.why_not(k, m);
    if (why.empty()) return mapping.emit(k, target);
    reasons += (reasons.empty() ? "" : "; ") + why;
  }
  throw UserError(reasons);
}

}  // namespace tessel::emit_npu
