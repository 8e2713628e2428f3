#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/depthwise.h"
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
  int64_t l1_slots = 2;      // K chunks in flight in L1 (a ring; 2 = ping-pong)
  int64_t tail_chunks = 1;   // the last chunks, computed block by block so the write-back overlaps the cube
  int64_t l0a_slots = 2, l0b_slots = 2;  // operand tiles in flight in L0A / L0B (rings)
  int64_t peeled = 1;        // chunks computed before the chunk loop (in straight-line code)
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

  // i8 [rows, cols] (row-major, GM offset 32-byte aligned) -> f16 [rows, dst_cols] zero-padded
  // (dst_cols a multiple of 16), through UB: rows in chunks of a multiple of 32 (so that every
  // chunk's source is aligned), the i8 rows spread to dst_cols bytes, vconv to f16, out.
  void widen_i8(int64_t src, int64_t dst, int64_t rows, int64_t cols, int64_t dst_cols) {
    const int64_t lanes = m_.vector_bytes_per_repeat / 2;
    int64_t chunk_rows = std::max<int64_t>(32, (m_.capacity(Buffer::UB) / 4) / dst_cols / 32 * 32);
    chunk_rows = std::min(chunk_rows, std::max<int64_t>(1, m_.vector_max_repeat * lanes / dst_cols / 32 * 32));
    chunk_rows = std::min(chunk_rows, rows);
    const int64_t narrow = round_up(chunk_rows * dst_cols, m_.vector_bytes_per_repeat);
    if (narrow + round_up(chunk_rows * dst_cols * 2, 32) > m_.capacity(Buffer::UB) || chunk_rows * dst_cols > m_.vector_max_repeat * lanes)
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
      const int64_t n = std::min<int64_t>(repeats - done, m_.vector_max_repeat);
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
    const int64_t l0a_half = round_up(g.tm0 * g.tk0 * 2, m_.operand_alignment()), l0b_half = round_up(g.tk0 * g.tn0 * 2, m_.operand_alignment());
    const int64_t sub_c = g.tm0 * g.tn0 * 4;
    const int64_t ub_half = round_up(g.tm0 * g.tn0 * (g.epilogue ? 4 : eo), m_.alignment(Buffer::UB));
    epilogue_base_ = round_up((g.double_ub ? 2 : 1) * ub_half, m_.alignment(Buffer::UB));
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

    // L1 slot layout (per K chunk): operand tile by operand tile, each contiguous NZ — A piece kk
    // (tk0 columns of K) row block i (tm0 rows), then B piece kk column block j (tn0 columns) — so
    // that one operand tile can be loaded and computed on without the rest of the chunk, and every
    // load2d reads one contiguous range (the sync pass's footprints are intervals).
    const int64_t pieces = g.tk / g.tk0;
    const int64_t a_tile_bytes = g.tm0 * g.tk0 * 2, b_tile_bytes = g.tk0 * g.tn0 * 2;
    auto a_at = [&](int64_t kk, int64_t i) { return (kk * (g.tm / g.tm0) + i) * a_tile_bytes; };
    auto slot_at = [&](int64_t slot) { return g.double_l1 ? slot * l1_half : 0; };
    // A K chunk is loaded (MTE2) into one L1 slot and computed (MTE1 + M) from it. The scalar pipe
    // dispatches in program order into queues of bounded depth, so the program interleaves the
    // pipes in the order they should run: a load's DMAs are queued (`pending`) and emitted inside
    // the compute before it — each DMA of the chunk being computed right before the first mmad that
    // needs it, the DMAs of later chunks spread evenly over the mmads (software pipelining without
    // starving one queue while another is full).
    // fine: one DMA per operand tile, in the order the cube needs them (the first chunk: the cube
    // starts after one operand tile of A and of B instead of a whole piece); otherwise one DMA per
    // piece of B and per operand tile of A.
    struct Dma {
      int64_t chunk, kk, i, j;  // what it brings: A tile (kk, i) (j < 0) or B tiles (kk, j..) (i < 0); j = -2: all
      std::function<void()> emit;
    };
    std::deque<Dma> pending;
    enum class Order { Pieces, Fine, Blocks };
    auto load = [&](int64_t slot, uint8_t a_base, uint8_t b_base, int64_t chunk_offset, int64_t chunk, Order order) {
      const int64_t l1 = slot_at(slot);
      auto a_tile = [&](int64_t kk, int64_t i) {
        const int64_t k0 = chunk_offset * g.tk + kk * g.tk0;  // first column of A
        std::vector<Operand> ops{type(DType::F16), at(Buffer::L1, l1 + a_at(kk, i)),
                                 at(Buffer::GM, g.a_off + (i * g.tm0 * g.K + k0) * 2, a_base), imm(g.tm0), imm(g.tk0), imm(g.K)};
        pending.push_back({chunk, kk, i, -1, [this, ops] { op(Opcode::DmaInNz, ops); }});
      };
      auto b_tiles = [&](int64_t kk, int64_t j, int64_t cols) {
        const int64_t k0 = chunk_offset * g.tk + kk * g.tk0;  // first row of B
        std::vector<Operand> ops{type(DType::F16), at(Buffer::L1, l1 + l1_a + (kk * (g.tn / g.tn0) + j) * b_tile_bytes),
                                 at(Buffer::GM, g.b_off + (k0 * g.N + j * g.tn0) * 2, b_base), imm(g.tk0), imm(cols), imm(g.N)};
        pending.push_back({chunk, kk, -1, cols == g.tn ? -2 : j, [this, ops] { op(Opcode::DmaInNz, ops); }});
      };
      if (order == Order::Blocks) {  // what accumulator block (i, j) needs first: A row block i, B column block j
        for (int64_t j = 0; j < g.tn / g.tn0; ++j)
          for (int64_t i = 0; i < g.tm / g.tm0; ++i) {
            if (j == 0)
              for (int64_t kk = 0; kk < pieces; ++kk) a_tile(kk, i);
            if (i == 0)
              for (int64_t kk = 0; kk < pieces; ++kk) b_tiles(kk, j, g.tn0);
          }
        return;
      }
      for (int64_t kk = 0; kk < pieces; ++kk) {
        a_tile(kk, 0);
        if (order == Order::Fine) {
          for (int64_t j = 0; j < g.tn / g.tn0; ++j) b_tiles(kk, j, g.tn0);
        } else {
          b_tiles(kk, 0, g.tn);  // NZ of tk0 rows: the column blocks j one after the other, as laid out
        }
        for (int64_t i = 1; i < g.tm / g.tm0; ++i) a_tile(kk, i);
      }
    };
    // Before mmad (kk, i, j) of `chunk`, the `left`-th last mmad of this compute: the pending DMAs
    // it needs (a prefix of its chunk's, in load order), then a share of the later chunks' DMAs.
    auto flush = [&](int64_t chunk, int64_t kk, int64_t i, int64_t j, int64_t left) {
      auto needed = [&](const Dma& d) {
        if (d.chunk != chunk) return false;
        if (d.kk != kk) return d.kk < kk;
        return d.j < 0 ? d.i <= i : (d.j == -2 || d.j <= j);
      };
      size_t last = 0;
      for (size_t n = 0; n < pending.size(); ++n)
        if (needed(pending[n])) last = n + 1;
      for (size_t n = 0; n < last; ++n) {
        pending.front().emit();
        pending.pop_front();
      }
      size_t later = 0;
      for (const Dma& d : pending) later += d.chunk > chunk;
      for (size_t n = (later + left - 1) / std::max<int64_t>(left, 1); n > 0 && !pending.empty(); --n) {
        pending.front().emit();
        pending.pop_front();
      }
    };
    // One mmad of operand tile (kk, i, j) from the chunk in L1 slot `slot`, through the L0 rings.
    auto load_a = [&](int64_t slot, int64_t kk, int64_t i) {
      const int64_t l0a = (l0a_step_++ % g.l0a_slots) * l0a_half;
      op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0A, l0a), at(Buffer::L1, slot_at(slot) + a_at(kk, i)),
                          imm(g.tm0 / m_.cube_f16.m0), imm(g.tk0 / m_.cube_f16.k0), imm(1), imm(g.tm0 / m_.cube_f16.m0), imm(0)});
      return l0a;
    };
    auto load_b = [&](int64_t slot, int64_t kk, int64_t j) {
      const int64_t l0b = (l0b_step_++ % g.l0b_slots) * l0b_half;
      op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0B, l0b),
                          at(Buffer::L1, slot_at(slot) + l1_a + (kk * (g.tn / g.tn0) + j) * b_tile_bytes),
                          imm(g.tk0 / m_.cube_f16.k0), imm(g.tn0 / m_.cube_f16.n0), imm(1), imm(g.tk0 / m_.cube_f16.k0), imm(1)});
      return l0b;
    };
    auto mmad = [&](int64_t i, int64_t j, int64_t l0a, int64_t l0b, Operand init) {
      op(Opcode::Mmad, {type(DType::F16), at(Buffer::L0C, (j * (g.tm / g.tm0) + i) * sub_c), at(Buffer::L0A, l0a),
                        at(Buffer::L0B, l0b), imm(g.tm0), imm(g.tk0), imm(g.tn0), init});
    };
    // Write-back of accumulator block (i, j) through UB (ping-pong) to GM, moved one 16-column block
    // at a time (MTE3 starts after a quarter of the move; i32 results: the whole block, converted).
    // `columns`: emits the mmads of column block jj before its move (-1: none; the last block).
    const DType moved = g.epilogue || g.int_out ? DType::F32 : g.out;
    const int64_t em = dtype_bytes(moved);
    const int64_t column_bytes = g.tm0 * m_.cube_f16.n0 * 4;  // one column block in L0C (NZ: contiguous)
    auto write_back = [&](int64_t i, int64_t j, const std::function<void(int64_t)>& columns = nullptr) {
      const int64_t c = (j * (g.tm / g.tm0) + i) * sub_c;
      const int64_t ub = g.double_ub ? (ub_step_++ % 2) * ub_half : 0;
      if (g.int_out) {  // integer-valued f32 (|x| <= 2^24) -> i32 in place: exact
        op(Opcode::MovL0c, {type(moved), at(Buffer::UB, ub), at(Buffer::L0C, c), imm(g.tm0 * g.tn0 / (m_.cube_f16.m0 * m_.cube_f16.n0)), imm(0)});
        const int64_t lanes = m_.vector_bytes_per_repeat / 4;
        for (int64_t done = 0; done < g.tm0 * g.tn0;) {
          const int64_t n = std::min(g.tm0 * g.tn0 - done, m_.vector_max_repeat * lanes);
          op(Opcode::Vconv, {type(DType::I32), type(DType::F32), at(Buffer::UB, ub + done * 4), at(Buffer::UB, ub + done * 4),
                             imm((n + lanes - 1) / lanes), imm(1), imm(1), imm(8), imm(8)});
          done += n;
        }
      }
      for (int64_t jj = 0; jj < g.tn0 / m_.cube_f16.n0; ++jj) {
        if (columns) columns(jj);
        const int64_t gm = g.c_off + (i * g.tm0 * g.N + j * g.tn0 + jj * m_.cube_f16.n0) * eo;
        int64_t src = ub + jj * g.tm0 * m_.cube_f16.n0 * em;
        if (!g.int_out)
          op(Opcode::MovL0c, {type(moved), at(Buffer::UB, src), at(Buffer::L0C, c + jj * column_bytes), imm(g.tm0 / m_.cube_f16.m0), imm(0)});
        if (g.epilogue) {
          std::map<std::string, Operand> columns;
          for (const auto& [name, where] : g.broadcast)
            columns[name] = at(Buffer::GM, where.first + (j * g.tn0 + jj * m_.cube_f16.n0) * where.second,
                               where.second == 2 ? kColumn2 : kColumn4);
          src = g.epilogue->emit_block(p_, src, g.tm0, epilogue_base_, columns);
        }
        op(Opcode::DmaOut, {at(Buffer::GM, gm, kGmC), at(Buffer::UB, src), imm(g.tm0),
                            imm(m_.cube_f16.n0 * eo), imm(0), imm((g.N - m_.cube_f16.n0) * eo)});
      }
    };
    const int64_t blocks_m = g.tm / g.tm0, blocks_n = g.tn / g.tn0;
    // The chunks in `slots` (ascending K), one accumulator block after the other, each block's
    // write-back right after its last mmad in program order: it runs (V, MTE3) while the cube
    // computes the next block. The last block column block by column block (mmads 16 columns
    // wide, its A operand tiles loaded once into the L0A ring): its columns complete one after the
    // other, so only the last one's move and write-back follow the cube (not in a tile loop: there
    // the next tile's start hides the drain).
    auto compute_blocks = [&](const std::vector<int64_t>& slots, Operand first) {
      const int64_t tiles = static_cast<int64_t>(slots.size()) * pieces;
      for (int64_t j = 0; j < blocks_n; ++j)
        for (int64_t i = 0; i < blocks_m; ++i) {
          // The pending DMAs this block needs (a prefix: loaded in block order), the rest later.
          size_t last = 0;
          for (size_t n = 0; n < pending.size(); ++n)
            if (pending[n].j < 0 ? pending[n].i <= i || j > 0 : pending[n].j == -2 || pending[n].j <= j) last = n + 1;
          for (size_t n = 0; n < last; ++n) {
            pending.front().emit();
            pending.pop_front();
          }
          if (j == blocks_n - 1 && i == blocks_m - 1 && !tile_loop && g.tn0 > m_.cube_f16.n0 && !g.int_out && tiles <= g.l0a_slots) {
            std::vector<int64_t> a;
            for (size_t h = 0; h < slots.size(); ++h)
              for (int64_t kk = 0; kk < pieces; ++kk) a.push_back(load_a(slots[h], kk, i));
            const int64_t c = (j * (g.tm / g.tm0) + i) * sub_c;
            write_back(i, j, [&](int64_t jj) {
              for (size_t h = 0; h < slots.size(); ++h)
                for (int64_t kk = 0; kk < pieces; ++kk) {
                  const int64_t l0b = (l0b_step_++ % g.l0b_slots) * l0b_half;
                  op(Opcode::Load2d, {type(DType::F16), at(Buffer::L0B, l0b),
                                      at(Buffer::L1, slot_at(slots[h]) + l1_a + (kk * (g.tn / g.tn0) + j) * b_tile_bytes +
                                                         jj * g.tk0 * m_.cube_f16.n0 * 2),
                                      imm(g.tk0 / m_.cube_f16.k0), imm(1), imm(1), imm(g.tk0 / m_.cube_f16.k0), imm(1)});
                  op(Opcode::Mmad, {type(DType::F16), at(Buffer::L0C, c + jj * column_bytes), at(Buffer::L0A, a[h * pieces + kk]),
                                    at(Buffer::L0B, l0b), imm(g.tm0), imm(g.tk0), imm(m_.cube_f16.n0),
                                    kk == 0 && h == 0 ? first : imm(0)});
                }
            });
            continue;
          }
          for (size_t h = 0; h < slots.size(); ++h)
            for (int64_t kk = 0; kk < pieces; ++kk) {
              const int64_t l0a = load_a(slots[h], kk, i);
              mmad(i, j, l0a, load_b(slots[h], kk, j), kk == 0 && h == 0 ? first : imm(0));
            }
          write_back(i, j);
        }
    };
    // One chunk, piece by piece (the order of its loads): A's operand tile reused across the columns.
    auto compute = [&](int64_t chunk, int64_t slot, Operand first) {
      int64_t left = pieces * blocks_m * blocks_n;
      for (int64_t kk = 0; kk < pieces; ++kk)
        for (int64_t i = 0; i < blocks_m; ++i) {
          flush(chunk, kk, i, 0, left);
          const int64_t l0a = load_a(slot, kk, i);
          for (int64_t j = 0; j < blocks_n; ++j) {
            flush(chunk, kk, i, j, left--);
            mmad(i, j, l0a, load_b(slot, kk, j), kk == 0 ? first : imm(0));
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
        load(0, kGmAChunk, kGmBChunk, 0, 0, Order::Pieces);
        compute(0, 0, reg(kInit));
        op(Opcode::EndLoop, {});
        for (int64_t j = 0; j < blocks_n; ++j)
          for (int64_t i = 0; i < blocks_m; ++i) write_back(i, j);
      } else {
        load(0, kGmA, kGmB, 0, 0, Order::Blocks);
        compute_blocks({0}, imm(1));
      }
    } else {
      // Software pipeline over the chunks c (L1 slot c % S, S = l1_slots): the loads run S - 1
      // chunks ahead (load c + S - 1 is queued before computing c: its slot is the one chunk c - 1
      // freed). The first `peeled` chunks are straight-line code (their loads are waited for right
      // before their own MTE1 loads, not all at a loop's entry), the middle chunks run in a loop
      // unrolled S times (every L1 address a constant), the last tail_chunks chunks are computed
      // block by block.
      const int64_t S = g.l1_slots, ahead = S - 1, body_end = chunks - g.tail_chunks;  // chunks [0, body_end) chunk-wise
      int64_t loaded = 0;
      auto load_static = [&](int64_t upto) {  // queues the loads of chunks < upto not queued yet
        for (; loaded < std::min(upto, chunks); ++loaded)
          load(loaded % S, kGmA, kGmB, loaded, loaded,
               loaded >= body_end ? Order::Blocks : loaded == 0 && !tile_loop ? Order::Fine : Order::Pieces);
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
        op(Opcode::Mul, {reg(kGmAChunk), reg(kChunk), imm(S * g.tk * 2)});
        op(Opcode::Add, {reg(kGmAChunk), reg(kGmAChunk), reg(kGmA)});
        op(Opcode::Mul, {reg(kGmBChunk), reg(kChunk), imm(S * g.tk * g.N * 2)});
        op(Opcode::Add, {reg(kGmBChunk), reg(kGmBChunk), reg(kGmB)});
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
      load_static(chunks);
      std::vector<int64_t> tail;
      for (int64_t c = std::max<int64_t>(0, body_end); c < chunks; ++c) tail.push_back(c % S);
      compute_blocks(tail, imm(body_end <= 0 ? 1 : 0));
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
  g.tm = dividing_tile(g.M, round_up(last2(c, 0), m.cube_f16.m0), m.cube_f16.m0);
  g.tn = dividing_tile(g.N, round_up(last2(c, 1), m.cube_f16.n0), m.cube_f16.n0);
  g.tk = dividing_tile(g.K, round_up(tk, m.cube_f16.k0), m.cube_f16.k0);
  g.tm0 = dividing_tile(g.tm, round_up(last2(a0, 0), m.cube_f16.m0), m.cube_f16.m0);
  g.tk0 = dividing_tile(g.tk, round_up(last2(a0, 1), m.cube_f16.k0), m.cube_f16.k0);
  g.tn0 = dividing_tile(g.tn, round_up(last2(b0, 1), m.cube_f16.n0), m.cube_f16.n0);
  const int64_t eo = dtype_bytes(g.out);
  // Fit single buffers first (shrinking the stage tile), then decide on double buffering.
  while (g.tm * g.tn * 4 > m.capacity(Buffer::L0C) && g.tm > m.cube_f16.m0) g.tm = dividing_tile(g.M, g.tm / 2, m.cube_f16.m0);
  while (g.tn * g.tm * 4 > m.capacity(Buffer::L0C) && g.tn > m.cube_f16.n0) g.tn = dividing_tile(g.N, g.tn / 2, m.cube_f16.n0);
  while ((g.tm * g.tk + g.tk * g.tn) * 2 > m.capacity(Buffer::L1) && g.tk > m.cube_f16.k0) g.tk = dividing_tile(g.K, g.tk / 2, m.cube_f16.k0);
  g.tm0 = dividing_tile(g.tm, g.tm0, m.cube_f16.m0);
  g.tn0 = dividing_tile(g.tn, g.tn0, m.cube_f16.n0);
  g.tk0 = dividing_tile(g.tk, g.tk0, m.cube_f16.k0);
  while (g.tm0 * g.tk0 * 2 > m.capacity(Buffer::L0A) && g.tk0 > m.cube_f16.k0) g.tk0 = dividing_tile(g.tk, g.tk0 / 2, m.cube_f16.k0);
  while (g.tk0 * g.tn0 * 2 > m.capacity(Buffer::L0B) && g.tn0 > m.cube_f16.n0) g.tn0 = dividing_tile(g.tn, g.tn0 / 2, m.cube_f16.n0);
  while (g.tm0 * g.tn0 * eo > m.capacity(Buffer::UB) && g.tm0 > m.cube_f16.m0) g.tm0 = dividing_tile(g.tm, g.tm0 / 2, m.cube_f16.m0);
  if (g.tm * g.tn * 4 > m.capacity(Buffer::L0C) || (g.tm * g.tk + g.tk * g.tn) * 2 > m.capacity(Buffer::L1) || g.tm0 * g.tk0 * 2 > m.capacity(Buffer::L0A) ||
      g.tk0 * g.tn0 * 2 > m.capacity(Buffer::L0B))
    throw UserError(fmt::format("kernel {}: no tile of {}x{}x{} fits the NPU's buffers", k.name, g.M, g.N, g.K));
  g.double_l1 = 2 * align_to((g.tm * g.tk + g.tk * g.tn) * 2, 32) <= m.capacity(Buffer::L1);
  g.double_l0 = 2 * align_to(g.tm0 * g.tk0 * 2, m.operand_alignment()) <= m.capacity(Buffer::L0A) && 2 * align_to(g.tk0 * g.tn0 * 2, m.operand_alignment()) <= m.capacity(Buffer::L0B);
  const int64_t moved = g.tm0 * g.tn0 * (g.epilogue ? 4 : eo), extra = g.epilogue ? g.epilogue->ub_bytes(g.tm0) : 0;
  if (align_to(moved, m.alignment(Buffer::UB)) + extra > m.capacity(Buffer::UB))
    throw UserError(fmt::format("kernel {}: the epilogue of a {}x{} operand tile does not fit the vector buffer", k.name, g.tm0, g.tn0));
  g.double_ub = 2 * align_to(moved, m.alignment(Buffer::UB)) + extra <= m.capacity(Buffer::UB);
  notes.push_back(fmt::format("stage tile {}x{}x{} (L1 {}, L0C), operand tile {}x{}x{} (L0A/L0B {}), UB {}", g.tm, g.tn,
                              g.tk, g.double_l1 ? "double-buffered" : "single", g.tm0, g.tn0, g.tk0,
                              g.double_l0 ? "double-buffered" : "single", g.double_ub ? "double-buffered" : "single"));
  // The last `tail_chunks` K chunks are computed one accumulator block (tm0 x tn0) at a time, so that
  // each block's write-back (mov_l0c to UB, dma_out to GM) runs while the cube computes the next
  // block. They must all be in L1 at once while the next chunk loads: an L1 ring of tail_chunks + 1
  // slots. Block by block, A and B operand tiles are loaded once per mmad (not A once per row of
  // blocks), so MTE1 may bound it: the count minimises a model of the time from the description's
  // numbers — chunks - L chunks in order (the slower of cube and MTE1), then per block the slower of
  // its L chunks' compute and its write-back, plus the last block's write-back; or, where the GM
  // loads are slower, those plus what follows the last chunk's first DMA (load_bound).
  const int64_t chunks = g.K / g.tk;
  const int64_t blocks = (g.tm / g.tm0) * (g.tn / g.tn0), pieces = g.tk / g.tk0;
  const int64_t slot = align_to((g.tm * g.tk + g.tk * g.tn) * 2, 32);
  g.l1_slots = g.double_l1 ? 2 : 1;
  g.tail_chunks = 1;
  if (g.double_l1 && m.path(Buffer::L0C, Buffer::UB).bandwidth_bytes_per_cycle > 0 && m.path(Buffer::UB, Buffer::GM).bandwidth_bytes_per_cycle > 0 && m.path(Buffer::L1, Buffer::L0A).bandwidth_bytes_per_cycle > 0 && m.path(Buffer::L1, Buffer::L0B).bandwidth_bytes_per_cycle > 0 && blocks > 1) {
    auto cycles = [](double bytes, double bw) { return static_cast<int64_t>(std::ceil(bytes / bw)); };
    const int64_t block = g.tm0 * g.tn0;
    const int64_t em = g.epilogue || g.int_out ? 4 : eo;
    const int64_t write_back = std::max(cycles(block * em, m.path(Buffer::L0C, Buffer::UB).bandwidth_bytes_per_cycle), cycles(block * eo, m.path(Buffer::UB, Buffer::GM).bandwidth_bytes_per_cycle));
    // MTE1 per load2d: its bytes plus the wait and set of its flags.
    const int64_t load_a = cycles(g.tm0 * g.tk0 * 2, m.path(Buffer::L1, Buffer::L0A).bandwidth_bytes_per_cycle) + 2 * m.set_flag_cycles;
    const int64_t load_b = cycles(g.tk0 * g.tn0 * 2, m.path(Buffer::L1, Buffer::L0B).bandwidth_bytes_per_cycle) + 2 * m.set_flag_cycles;
    const int64_t cube_block = (g.tm0 / m.cube_f16.m0) * (g.tn0 / m.cube_f16.n0) * (g.tk / m.cube_f16.k0) * m.cube_f16.cycles;  // one block, one chunk
    const int64_t in_order = std::max(blocks * cube_block, pieces * (g.tm / g.tm0) * (load_a + (g.tn / g.tn0) * load_b));
    const int64_t by_block = std::max(cube_block, pieces * (load_a + load_b));
    const int64_t most = std::max<int64_t>(1, std::min(chunks, m.capacity(Buffer::L1) / slot - 1));
    // The model, in cycles from the first DMA: the chunks before the tail end after their compute
    // (cube-bound) or after their loads plus one chunk's compute (GM-bound); then block by block: a
    // block computes once the cube is free and its data is in (the last chunk's DMAs come in block
    // order: A row block, B column block), its move to UB and write-back follow (the last block's
    // move one 16-column block at a time).
    const int64_t load = m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle > 0 ? cycles(slot, m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle) : 0, lat = m.path(Buffer::GM, Buffer::L1).latency_cycles;
    const int64_t move = cycles(block * em, m.path(Buffer::L0C, Buffer::UB).bandwidth_bytes_per_cycle), out = cycles(block * eo, m.path(Buffer::UB, Buffer::GM).bandwidth_bytes_per_cycle);
    auto model = [&](int64_t l) {
      int64_t cube_free = std::max(lat + (chunks - l) * in_order, chunks > l ? lat + (chunks - l) * load + in_order : lat);
      int64_t written = 0;
      for (int64_t j = 0; j < g.tn / g.tn0; ++j)
        for (int64_t i = 0; i < g.tm / g.tm0; ++i) {
          const int64_t bytes = (j == 0 ? (i + 1) * g.tm0 : g.tm) * g.tk * 2 + (j + 1) * g.tk * g.tn0 * 2;
          const int64_t data = load > 0 ? lat + (chunks - 1) * load + cycles(bytes, m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle) : 0;
          const int64_t begin = std::max(cube_free, data), columns = g.tn0 / m.cube_f16.n0;
          cube_free = begin + l * by_block;
          if (j == g.tn / g.tn0 - 1 && i == g.tm / g.tm0 - 1) {  // the last block: column block by column block
            for (int64_t jj = 0; jj < columns; ++jj)
              written = std::max(written, begin + l * by_block * (jj + 1) / columns + move / columns + m.path(Buffer::L0C, Buffer::UB).latency_cycles) +
                        out / columns;
          } else {
            written = std::max(written, cube_free + move / columns + m.path(Buffer::L0C, Buffer::UB).latency_cycles) + out;
          }
        }
      return written;
    };
    // The smallest L within 0.5 % of the model's best: every further chunk by blocks costs MTE1 and
    // flag hand-offs that the model only estimates.
    std::vector<int64_t> t(most + 1, 0);
    for (int64_t l = 1; l <= most; ++l) t[l] = model(l);
    const int64_t best = *std::min_element(t.begin() + 1, t.end());
    for (int64_t l = most; l >= 1; --l)
      if (200 * t[l] <= 201 * best) g.tail_chunks = l;
    g.l1_slots = g.tail_chunks + 1;
    notes.push_back(fmt::format("last {} K chunk(s) block by block: a {}x{} block's write-back {} cycles vs its compute {} "
                                "cycles per chunk; L1 ring of {} chunks",
                                g.tail_chunks, g.tm0, g.tn0, write_back, by_block, g.l1_slots));
  }
  // The chunk loop's first iterations compute chunks loaded before it, so the loop waits for all of
  // them at its entry: peel chunks until those loads are done by then (the cube being faster than
  // the loads: every chunk computed gains compute - load cycles on them). At most 16 (code size).
  if (g.double_l1) {
    const int64_t compute = (g.tm / m.cube_f16.m0) * (g.tn / m.cube_f16.n0) * (g.tk / m.cube_f16.k0) * m.cube_f16.cycles;
    const int64_t load = m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle > 0 ? static_cast<int64_t>(std::ceil(slot / m.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle)) : compute;
    const int64_t ahead = g.l1_slots - 1;
    // Loads at least as slow as the cube: the cube never gains on them, the entry wait always costs
    // (ahead - 1) loads: peel as many as the bound allows.
    g.peeled = compute > load ? std::clamp<int64_t>((m.path(Buffer::GM, Buffer::L1).latency_cycles + ahead * load + compute - load - 1) / (compute - load), 1, 16)
                              : 16;
  }
  // Operand tiles: rings of up to 4 tiles so that the MTE1 loads run ahead of the cube by more than
  // one (their latency hidden where the cube and MTE1 are equally busy: the block-by-block tail);
  // the number divides the loads of one loop body (every unrolled address the same each iteration).
  auto ring = [&](int64_t cap, int64_t tile, int64_t per_body) {
    int64_t n = std::min<int64_t>(4, cap / align_to(tile, m.operand_alignment()));
    while (n > 2 && per_body % n) --n;
    return n;
  };
  const int64_t a_per_chunk = (g.tk / g.tk0) * (g.tm / g.tm0);
  if (g.double_l0) {
    g.l0a_slots = ring(m.capacity(Buffer::L0A), g.tm0 * g.tk0 * 2, g.l1_slots * a_per_chunk);
    g.l0b_slots = ring(m.capacity(Buffer::L0B), g.tk0 * g.tn0 * 2, g.l1_slots * a_per_chunk * (g.tn / g.tn0));
  } else {
    g.l0a_slots = g.l0b_slots = 1;
  }
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
  const bool aligned = M % m.cube_f16.m0 == 0 && N % m.cube_f16.n0 == 0 && K % m.cube_f16.k0 == 0 && !i8;
  g.M = round_up(M, m.cube_f16.m0), g.N = round_up(N, m.cube_f16.n0), g.K = round_up(K, m.cube_f16.k0);
  choose_tiles(g, k, mm, m, out.notes);
  const int64_t eo = dtype_bytes(g.out);
  int64_t gm = 0;
  auto place = [&](const std::string& name, DType t, std::vector<int64_t> shape, npu::TensorRole role) {
    npu::TensorBinding b{name, t, shape, gm, role, {}};
    gm = align_to(gm + b.byte_size(), m.alignment(Buffer::GM));
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
    {why_not_transpose, emit_transpose}, {why_not_one_hot, emit_one_hot},
};

}  // namespace

NpuKernel emit_npu(const kernel::Kernel& k, const isa::Hierarchy& target) {
  if (target.kind != isa::TargetKind::Npu) throw UserError(target.source_file + ": not an NPU description");
  const Machine m = isa::npu_machine(target);
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
