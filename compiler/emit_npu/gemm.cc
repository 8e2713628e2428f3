// The GEMM path of the NPU emitter (emit_npu.h; README "Matmul kernels"): a matched matmul node
// C[M,N] (+)= A[M,K] * B[K,N] (batched, operands stored either way, an optional fused element-wise
// epilogue) carried out on the cube: setup_gemm decides everything first (the operands' form, the
// epilogue, the strides, the tile policy's plan, the broadcast tensors' registers, the tails'
// copies) and returns "" or the UserError text of why the GEMM path does not take the kernel;
// (gemm_setup.h) emit_gemm carries the setup out: GM placement, GemmLoop (tile origins per core, the L1 ring, DMA
// interleaving, the L0 rings, mmads, the accumulator's write-back through UB) and, for sizes that
// are not whole fractals, either tails in place on every core (GemmSetup::in_place: guards after
// the operands, K-minor operands' columns past K zero-filled in L1, the tiles in classes whose
// write-back clips the columns past N) or, where that cannot be, zero-padded copies on one core
// (Builder).
#include "compiler/emit_npu/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>

#include "compiler/emit_npu/gemm_setup.h"
#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/tile/npu_gemm_plan.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

using namespace gemm_detail;

namespace {


using npu::Buffer;
using npu::Opcode;
using npu::Operand;
using npu::Pipe;


// Policy bound: UB region sets the fused epilogue's column blocks take in turn (GemmLoop).
// not hardware: more sets than the loads in flight they hide buy nothing
constexpr int64_t kMostEpilogueSets = 8;


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
    TESSEL_CHECK(widen_i8_refusal(m_, rows, cols, dst_cols).empty(), "emit_npu: i8 rows that do not fit UB (setup_gemm refuses them)");
    const int64_t lanes = m_.vector_lanes(DType::F16);
    const int64_t chunk_rows = widen_i8_chunk_rows(m_, rows, dst_cols);
    const int64_t narrow = round_up(chunk_rows * dst_cols, m_.vector_bytes_per_repeat);
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
  // padded side. In: the tensor's batch*rows rows of row_bytes, in memory order (batch b's row r is
  // row b * batch_step + r * row_step: the batch anywhere), each at an aligned UB row of dst_stride
  // -> [batch, rows_p, cols_p] (rows past `rows` left as the scratch tensor's zeros); out: the
  // reverse, clipped. Both fit UB (checked by the caller).
  void batched_pad_in(int64_t src, int64_t dst, int64_t batch, int64_t rows, int64_t rows_p, int64_t row_bytes, int64_t dst_stride,
                      int64_t row_step, int64_t batch_step) {
    if (dst_stride > row_bytes) zero_ub(0, round_up(batch * rows * dst_stride, m_.vector_bytes_per_repeat));
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, src), imm(batch * rows), imm(row_bytes), imm(0), imm(dst_stride - row_bytes)});
    for (int64_t b = 0; b < batch; ++b) {
      const Operand to = at(Buffer::GM, dst + b * rows_p * dst_stride), from = at(Buffer::UB, b * batch_step * dst_stride);
      if (row_step == 1) op(Opcode::DmaOut, {to, from, imm(1), imm(rows * dst_stride), imm(0), imm(0)});
      else op(Opcode::DmaOut, {to, from, imm(rows), imm(dst_stride), imm((row_step - 1) * dst_stride), imm(0)});
    }
  }
  void batched_pad_out(int64_t src, int64_t dst, int64_t batch, int64_t rows, int64_t rows_p, int64_t row_bytes, int64_t src_stride,
                       int64_t row_step, int64_t batch_step) {
    for (int64_t b = 0; b < batch; ++b) {
      const Operand to = at(Buffer::UB, b * batch_step * src_stride), from = at(Buffer::GM, src + b * rows_p * src_stride);
      if (row_step == 1) op(Opcode::DmaIn, {to, from, imm(1), imm(rows * src_stride), imm(0), imm(0)});
      else op(Opcode::DmaIn, {to, from, imm(rows), imm(src_stride), imm(0), imm((row_step - 1) * src_stride)});
    }
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
      : p_(p), m_(m), g_(g), cube_(m.cube(g.operand)), in_(dtype_bytes(cube_.a)), acc_(dtype_bytes(cube_.acc)) {
    eo_ = dtype_bytes(g.out);
    tiles_m_ = g.M / g.tm, tiles_n_ = g.N / g.tn, tiles_ = g.batch * tiles_m_ * tiles_n_, chunks_ = g.K / g.tk;
    // On-chip layout: halves of each double-buffered tile.
    l1_a_ = g.tm * g.tk * in_;
    l1_half_ = round_up(l1_a_ + g.tk * g.tn * in_, m.alignment(Buffer::L1));
    l0a_half_ = round_up(g.tm0 * g.tk0 * in_, m.operand_alignment()), l0b_half_ = round_up(g.tk0 * g.tn0 * in_, m.operand_alignment());
    sub_c_ = g.tm0 * g.tn0 * acc_;
    ub_half_ = round_up(g.tm0 * g.tn0 * (g.epilogue ? acc_ : eo_), m.alignment(Buffer::UB));
    epilogue_base_ = round_up((g.double_ub ? 2 : 1) * ub_half_, m.alignment(Buffer::UB));
    // The epilogue's UB regions, as many sets as fit (up to kMostEpilogueSets) taken in turn by
    // the column blocks: a block's broadcast loads (GM latency) need not wait for the vector work
    // of the block before it.
    const UbLayout ub = ub_layout(m, g);
    epilogue_set_ = ub.epilogue_set, epilogue_sets_ = ub.epilogue_sets, zeros_ub_ = ub.zeros;
    split_ = ub.split;
    // One tile per core needs no tile loop (and no sync carried from one tile to the next).
    tile_loop_ = tiles_ > g.cores;
    pieces_ = g.tk / g.tk0;
    a_tile_bytes_ = g.tm0 * g.tk0 * in_, b_tile_bytes_ = g.tk0 * g.tn0 * in_;
    moved_ = g.epilogue || g.int_out ? cube_.acc : g.out;
    column_bytes_ = g.tm0 * cube_.n0 * acc_;  // one column block in L0C (NZ: contiguous)
    blocks_m_ = g.tm / g.tm0, blocks_n_ = g.tn / g.tn0;
    k_fill_ = g.real_k && (!g.a_transposed() || g.b_transposed());
    b_by_columns_ = g.tn0 == cube_.n0 && !g.b_transposed() && !pairs() && pieces_ > 1 && turn_bound(g.tk0 * g.tn * in_);
  }

  // What UB holds beyond the write-back halves (from epilogue_base_ on): the epilogue's region sets
  // and, where K-minor operands' columns past K are filled, a zero region at the end (the fills'
  // source: L1 is written from UB by MTE3, off the GM and MTE2's way), if it fits beside one set.
  // Where the column blocks are more than the sets, the sets split (SplitSets): the regions the
  // broadcast loads write (GemmEpilogue::load_ub_bytes), one per block, apart from the evaluation's
  // other regions, which the blocks take in turn. A tile's loads can then all be queued ahead
  // (ResNet-50's 196 x 128 -> 512 + residual on davinci-910: 4 column blocks of 64 x 16 a core, 2
  // whole sets of 76 KiB; blocks 2 and 3 issued their loads after block 0's and 1's evaluation and
  // waited out the GM latency).
  struct SplitSets {
    int64_t evaluation = 0, evaluations = 0;  // bytes and count of the evaluation sets (from epilogue_base_)
    int64_t loads_base = 0, loads = 0, loads_count = 0;  // the loads sets: first, bytes, count
  };
  struct UbLayout {
    int64_t epilogue_set = 0, epilogue_sets = 1;
    int64_t zeros = -1, zero_bytes = 0;  // UB offset of the zero region, -1: none (the fills read the GM zeros)
    SplitSets split;
  };
  static int64_t k_fill_bytes(const Machine& m, const GemmShape& g) {
    return round_up(std::max(g.tm0, g.tn0) * g.tk0 * dtype_bytes(m.cube(g.operand).a), m.vector_bytes_per_repeat);
  }
  static UbLayout ub_layout(const Machine& m, const GemmShape& g) {
    UbLayout u;
    const int64_t align = m.alignment(Buffer::UB), cap = m.capacity(Buffer::UB), eo = dtype_bytes(g.out);
    const int64_t ub_half = round_up(g.tm0 * g.tn0 * (g.epilogue ? dtype_bytes(m.cube(g.operand).acc) : eo), align);
    const int64_t base = round_up((g.double_ub ? 2 : 1) * ub_half, align);
    int64_t free = cap - base;
    if (g.real_k && (!g.a_transposed() || g.b_transposed())) {
      const int64_t zero = round_up(k_fill_bytes(m, g), align);
      const int64_t keep = g.epilogue ? round_up(g.epilogue->ub_bytes(g.tm0), align) : 0;
      if (zero + keep <= free) u.zeros = cap - zero, u.zero_bytes = zero, free -= zero;
    }
    if (g.epilogue) {
      u.epilogue_set = round_up(g.epilogue->ub_bytes(g.tm0), align);
      u.epilogue_sets = std::clamp<int64_t>(free / u.epilogue_set, 1, kMostEpilogueSets);
      const int64_t region = g.tm0 * m.cube(g.operand).n0 * dtype_bytes(DType::F32);
      SplitSets& sp = u.split;
      sp.loads = round_up(g.epilogue->load_ub_bytes(g.tm0), align);
      sp.evaluation = round_up(g.epilogue->ub_bytes(g.tm0) - g.epilogue->load_ub_bytes(g.tm0) + region, align);
      sp.evaluations = std::clamp<int64_t>(free / sp.evaluation, 0, 2);
      sp.loads_base = base + sp.evaluations * sp.evaluation;
      sp.loads_count = std::clamp<int64_t>((free - sp.evaluations * sp.evaluation) / sp.loads, 0, kMostEpilogueSets);
      if (sp.evaluations == 0 || sp.loads_count <= u.epilogue_sets) sp = SplitSets{};
    }
    return u;
  }

  // Tile t runs on core t mod cores. Tiles that are all alike run in one loop (or one per core);
  // with an N tail in place the tiles are numbered class by class — the whole tile columns, then
  // the last one — and each class is its own loop, so that its columns' clipping is known when its
  // code is emitted. (Rows past M need no class: C's rows past M are a guard.)
  void run() {
    if (zeros_ub_ >= 0) zero_ub(zeros_ub_, k_fill_bytes(m_, g_));
    const std::vector<TileClass> classes = tile_classes();
    if (classes.size() == 1) {
      rows_ = classes[0].rows, cols_ = classes[0].cols;
      if (tile_loop_) op(Opcode::Loop, {reg(kTile), reg(npu::kRegCoreId), imm(tiles_), reg(npu::kRegCoreCount)});
      else op(Opcode::Mov, {reg(kTile), reg(npu::kRegCoreId)});
      tile_origins(classes[0]);
      tile_body();
      if (tile_loop_) op(Opcode::EndLoop, {});
      return;
    }
    for (const TileClass& c : classes) {
      tile_loop_ = c.tiles > g_.cores;
      rows_ = c.rows, cols_ = c.cols;
      // this core's first tile of the class: first + ((core_id - first) mod cores)
      const int64_t cores = g_.cores, lift = (c.first + cores - 1) / cores * cores - c.first;
      op(Opcode::Add, {reg(kTmp), reg(npu::kRegCoreId), imm(lift)});
      op(Opcode::Div, {reg(kRest), reg(kTmp), imm(cores)});
      op(Opcode::Mul, {reg(kRest), reg(kRest), imm(cores)});
      op(Opcode::Sub, {reg(kTmp), reg(kTmp), reg(kRest)});
      op(Opcode::Add, {reg(kTmp), reg(kTmp), imm(c.first)});
      op(Opcode::Loop, {reg(kTile), reg(kTmp), imm(c.first + c.tiles), imm(cores)});
      tile_origins(c);
      tile_body();
      op(Opcode::EndLoop, {});
    }
  }

 private:
  // Tiles alike: global indices [first, first + tiles), batch-major over count_m x count_n tiles
  // from tile (first_m, first_n); each has `rows` x `cols` valid outputs.
  struct TileClass {
    int64_t first = 0, tiles = 0, first_m = 0, count_m = 0, first_n = 0, count_n = 0, rows = 0, cols = 0;
  };
  std::vector<TileClass> tile_classes() const {
    struct Group {
      int64_t first, count, valid;
    };
    auto groups = [](int64_t tiles, int64_t tile, int64_t valid) {
      const int64_t last = valid - (tiles - 1) * tile;  // in (0, tile]
      std::vector<Group> out;
      if (last == tile) return std::vector<Group>{{0, tiles, tile}};
      if (tiles > 1) out.push_back({0, tiles - 1, tile});
      out.push_back({tiles - 1, 1, last});
      return out;
    };
    std::vector<TileClass> classes;
    int64_t first = 0;
    for (const Group& c : groups(tiles_n_, g_.tn, g_.valid_n())) {
      classes.push_back({first, g_.batch * tiles_m_ * c.count, 0, tiles_m_, c.first, c.count, g_.tm, c.valid});
      first += classes.back().tiles;
    }
    return classes;
  }

  void zero_ub(int64_t offset, int64_t bytes) {
    const int64_t repeats = bytes / m_.vector_bytes_per_repeat;
    for (int64_t done = 0; done < repeats;) {
      const int64_t n = std::min<int64_t>(repeats - done, m_.vector_max_repeat);
      op(Opcode::Vdup, {type(DType::F16), at(Buffer::UB, offset + done * m_.vector_bytes_per_repeat), Operand::float_(0), imm(n), imm(1),
                        imm(m_.blocks_per_repeat())});
      done += n;
    }
  }

  void tile_body() {
    if (!g_.double_l1) single_buffered();
    else pipelined();
  }

  // What a queued DMA brings: A tile (kk, i) (j < 0) or B tiles (kk, j..) (i < 0); j = -2: all.
  struct Dma {
    int64_t chunk, kk, i, j;
    std::function<void()> emit;
    bool epilogue = false;  // the tile's epilogue loads (queue_epilogue_loads)
  };
  enum class Order { Pieces, Fine, Blocks };

  void op(Opcode o, std::vector<Operand> operands) { p_.add(o, std::move(operands)); }

  // The tile's row / column indices and the GM bases of its A rows, B columns and C block.
  void tile_origins(const TileClass& c) {
    const GemmShape& g = g_;
    uint8_t within = kTile;  // tile index inside one GEMM of the batch
    if (c.first) {
      op(Opcode::Sub, {reg(kRest), reg(kTile), imm(c.first)});
      within = kRest;
    }
    if (g.batch > 1) {
      op(Opcode::Div, {reg(kBatch), reg(within), imm(c.count_m * c.count_n)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(c.count_m * c.count_n)});
      op(Opcode::Sub, {reg(kRest), reg(within), reg(kTmp)});
      within = kRest;
    }
    op(Opcode::Div, {reg(kTileM), reg(within), imm(c.count_n)});
    op(Opcode::Mul, {reg(kTmp), reg(kTileM), imm(c.count_n)});
    op(Opcode::Sub, {reg(kTileN), reg(within), reg(kTmp)});
    if (c.first_m) op(Opcode::Add, {reg(kTileM), reg(kTileM), imm(c.first_m)});
    if (c.first_n) op(Opcode::Add, {reg(kTileN), reg(kTileN), imm(c.first_n)});
    op(Opcode::Mul, {reg(kGmA), reg(kTileM), imm(g.tm * g.a_sm * in_)});
    op(Opcode::Mul, {reg(kGmB), reg(kTileN), imm(g.tn * g.b_sn * in_)});
    op(Opcode::Mul, {reg(kGmC), reg(kTileM), imm(g.tm * g.c_sm * eo_)});
    op(Opcode::Mul, {reg(kTmp), reg(kTileN), imm(g.tn * eo_)});
    op(Opcode::Add, {reg(kGmC), reg(kGmC), reg(kTmp)});
    if (!g.batch_dims.empty()) {  // the batch's index per batch dimension (kRest), outermost first
      int64_t after = g.batch;
      for (size_t d = 0; d < g.batch_dims.size(); ++d) {
        const GemmShape::BatchDim& b = g.batch_dims[d];
        after /= b.extent;
        uint8_t index = kBatch;  // the last dimension's index is what remains
        if (d + 1 < g.batch_dims.size()) {
          op(Opcode::Div, {reg(kRest), reg(kBatch), imm(after)});
          op(Opcode::Mul, {reg(kTmp), reg(kRest), imm(after)});
          op(Opcode::Sub, {reg(kBatch), reg(kBatch), reg(kTmp)});
          index = kRest;
        }
        const std::pair<uint8_t, int64_t> bases[] = {{kGmA, b.a * in_}, {kGmB, b.b * in_}, {kGmC, b.c * eo_}};
        for (const auto& [base, bytes] : bases) {
          if (!bytes) continue;
          op(Opcode::Mul, {reg(kTmp), reg(index), imm(bytes)});
          op(Opcode::Add, {reg(base), reg(base), reg(kTmp)});
        }
      }
    } else if (g.batch > 1) {
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.a_sb * in_)});
      op(Opcode::Add, {reg(kGmA), reg(kGmA), reg(kTmp)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.b_sb * in_)});
      op(Opcode::Add, {reg(kGmB), reg(kGmB), reg(kTmp)});
      op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(g.c_sb * eo_)});
      op(Opcode::Add, {reg(kGmC), reg(kGmC), reg(kTmp)});
    }
    for (const auto& [name, t] : g.broadcast) {  // byte offset of the tile's first element in each broadcast tensor
      op(Opcode::Mul, {reg(t.reg), reg(kTileN), imm(g.tn * t.s_n * t.eb)});
      if (t.s_m) {
        op(Opcode::Mul, {reg(kTmp), reg(kTileM), imm(g.tm * t.s_m * t.eb)});
        op(Opcode::Add, {reg(t.reg), reg(t.reg), reg(kTmp)});
      }
      if (t.s_b && g.batch > 1) {
        op(Opcode::Mul, {reg(kTmp), reg(kBatch), imm(t.s_b * t.eb)});
        op(Opcode::Add, {reg(t.reg), reg(t.reg), reg(kTmp)});
      }
    }
  }

  // L1 slot layout (per K chunk): operand tile by operand tile, each contiguous NZ — A piece kk
  // (tk0 columns of K) row block i (tm0 rows), then B piece kk column block j (tn0 columns) — so
  // that one operand tile can be loaded and computed on without the rest of the chunk, and every
  // load2d reads one contiguous range (the sync pass's footprints are intervals). A transposed
  // operand's tile is the NZ of its GM block as stored (A^T: tk0 rows of tm0; B^T: tn0 rows of
  // tk0), whose fractals are already in the L0 order: load2d then transposes A's fractals and
  // copies B's (ZN fractals are B^T's row-major ones).
  // With B's operand tiles one fractal column wide (b_by_columns_), B's tiles are column-major
  // ([j][kk]): a chunk of B is then the NZ of its tk rows, loaded by one DMA (whole_chunk).
  int64_t a_at(int64_t kk, int64_t i) const { return (kk * blocks_m_ + i) * a_tile_bytes_; }
  int64_t b_at(int64_t kk, int64_t j) const {
    return l1_a_ + (b_by_columns_ ? j * pieces_ + kk : kk * blocks_n_ + j) * b_tile_bytes_;
  }
  // One DMA brings a whole chunk of A (one row block, K-major: the pieces' NZ tiles are the chunk's
  // NZ) or of B (b_by_columns_) where a piece's copies are bound by their turns at the shared GM
  // and the turns' rounding costs (each DMA holds it ceil(bytes / its width) cycles on each core:
  // davinci-910's 2-4 KiB pieces on 32 cores took 64 of the 87 B/cycle a core's share allows);
  // elsewhere the pieces let the cube start sooner (davinci-310's 1x1 14x14x256 -> 1024: 12 cycles).
  bool turn_bound(int64_t bytes) const {
    const double shared = m_.gm_shared_bandwidth_bytes_per_cycle, own = m_.path(Buffer::GM, Buffer::L1).bandwidth_bytes_per_cycle;
    const double turns = std::ceil(double(bytes) / shared);
    return shared > 0 && own > 0 && double(g_.cores) * turns > double(bytes) / own && 4 * turns >= 5 * double(bytes) / shared;
  }
  bool whole_chunk_a() const {
    return blocks_m_ == 1 && !g_.a_transposed() && !pairs() && !k_fill_ && pieces_ > 1 && turn_bound(a_tile_bytes_);
  }
  bool whole_chunk_b() const { return b_by_columns_; }
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
    // Does the operand tile at K piece kk cross K (stored K-minor: its columns past K filled)?
    auto crosses_k = [&](int64_t kk) {
      if (!k_fill_ || (chunk + 1) * g.tk <= g.valid_k()) return false;
      TESSEL_CHECK(chunk == chunk_offset, "emit_npu: the chunk crossing K is loaded from the tile's own GM bases");
      return chunk * g.tk + (kk + 1) * g.tk0 > g.valid_k();
    };
    auto a_tile = [&](int64_t kk, int64_t i) {
      const int64_t k0 = chunk_offset * g.tk + kk * g.tk0;  // first column of A
      const Operand gm = at(Buffer::GM, g.a_off + (i * g.tm0 * g.a_sm + k0 * g.a_sk) * in_, a_base);
      if (!g.a_transposed() && crosses_k(kk)) {
        pending_.push_back({chunk, kk, i, -1, [this, fill = k_minor_fill(l1 + a_at(kk, i), gm, g.tm0, g.a_sm, k0)] { emit(fill); }});
        return;
      }
      std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + a_at(kk, i)), gm};
      if (g.a_transposed()) ops.insert(ops.end(), {imm(g.tk0), imm(g.tm0), imm(g.a_sk)});
      else ops.insert(ops.end(), {imm(g.tm0), imm(g.tk0), imm(g.a_sm)});
      pending_.push_back({chunk, kk, i, -1, [this, ops] { op(Opcode::DmaInNz, ops); }});
    };
    auto b_tiles = [&](int64_t kk, int64_t j, int64_t cols) {
      const int64_t k0 = chunk_offset * g.tk + kk * g.tk0;  // first row of B
      if (g.b_transposed()) {  // one DMA per operand tile: tn0 rows of B^T, contiguous NZ in L1
        for (int64_t jj = j; jj < j + cols / g.tn0; ++jj) {
          const Operand gm = at(Buffer::GM, g.b_off + (k0 * g.b_sk + jj * g.tn0 * g.b_sn) * in_, b_base);
          if (crosses_k(kk)) {
            pending_.push_back({chunk, kk, -1, jj, [this, fill = k_minor_fill(l1 + b_at(kk, jj), gm, g.tn0, g.b_sn, k0)] { emit(fill); }});
            continue;
          }
          std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + b_at(kk, jj)), gm, imm(g.tn0), imm(g.tk0), imm(g.b_sn)};
          pending_.push_back({chunk, kk, -1, jj, [this, ops] { op(Opcode::DmaInNz, ops); }});
        }
        return;
      }
      std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + b_at(kk, j)),
                               at(Buffer::GM, g.b_off + (k0 * g.b_sk + j * g.tn0) * in_, b_base), imm(g.tk0), imm(cols), imm(g.b_sk)};
      pending_.push_back({chunk, kk, -1, cols == g.tn ? -2 : j, [this, ops] { op(Opcode::DmaInNz, ops); }});
    };
    if (order == Order::Blocks) {  // what accumulator block (i, j) needs first: A row block i, B column block j
      // (where a chunk's pieces are one copy, so are a block's: A's one row block, B's column block
      // j, whose operand tiles lie one after the other in L1: the NZ of its tk rows. In a tile of
      // one block whose A comes in pieces, B's pieces stay: the cube starts on A's and B's first
      // while the rest land; ResNet-50's 784 x 256 -> 64 on davinci-910 lost 27 cycles to a whole B.)
      const int64_t k0 = chunk_offset * g.tk;
      const bool whole_b = whole_chunk_b() && (blocks_m_ * blocks_n_ > 1 || whole_chunk_a());
      for (int64_t j = 0; j < blocks_n_; ++j)
        for (int64_t i = 0; i < blocks_m_; ++i) {
          if (j == 0 && whole_chunk_a()) {
            std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + a_at(0, i)), at(Buffer::GM, g.a_off + k0 * g.a_sk * in_, a_base),
                                     imm(g.tm0), imm(g.tk), imm(g.a_sm)};
            pending_.push_back({chunk, 0, i, -1, [this, ops] { op(Opcode::DmaInNz, ops); }});
          } else if (j == 0) {
            for (int64_t kk = 0; kk < pieces_; ++kk) a_tile(kk, i);
          }
          if (i == 0 && whole_b) {
            std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + b_at(0, j)),
                                     at(Buffer::GM, g.b_off + (k0 * g.b_sk + j * g.tn0) * in_, b_base), imm(g.tk), imm(g.tn0), imm(g.b_sk)};
            pending_.push_back({chunk, 0, -1, j, [this, ops] { op(Opcode::DmaInNz, ops); }});
          } else if (i == 0) {
            for (int64_t kk = 0; kk < pieces_; ++kk) b_tiles(kk, j, g.tn0);
          }
        }
      return;
    }
    if (whole_chunk_a() || whole_chunk_b()) {  // (the tail's chunks by blocks: per operand tile, the first block sooner)
      const int64_t k0 = chunk_offset * g.tk;  // first column of A, first row of B
      if (whole_chunk_a()) {
        std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + a_at(0, 0)), at(Buffer::GM, g.a_off + k0 * g.a_sk * in_, a_base),
                                 imm(g.tm0), imm(g.tk), imm(g.a_sm)};
        pending_.push_back({chunk, 0, 0, -1, [this, ops] { op(Opcode::DmaInNz, ops); }});
      }
      if (whole_chunk_b()) {
        std::vector<Operand> ops{type(cube_.a), at(Buffer::L1, l1 + b_at(0, 0)), at(Buffer::GM, g.b_off + k0 * g.b_sk * in_, b_base),
                                 imm(g.tk), imm(g.tn), imm(g.b_sk)};
        pending_.push_back({chunk, 0, -1, -2, [this, ops] { op(Opcode::DmaInNz, ops); }});
      }
      for (int64_t kk = 0; kk < pieces_; ++kk) {
        for (int64_t i = 0; !whole_chunk_a() && i < blocks_m_; ++i) a_tile(kk, i);
        if (!whole_chunk_b()) b_tiles(kk, 0, g.tn);
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

  using Instructions = std::vector<std::pair<Opcode, std::vector<Operand>>>;
  void emit(const Instructions& code) {
    for (const auto& [o, operands] : code) op(o, operands);
  }

  // An operand tile stored K-minor (A [m][k], B^T [n][k]) whose K columns [k0, k0 + tk0) cross K:
  // `rows` x tk0, NZ at L1 `dst`, from GM `gm` (rows `stride` elements apart). The whole fractal
  // column blocks below K come in as usual (dma_in_nz), zeros from the zero scratch over the rest,
  // then the part-filled column block's columns below K, one burst per row (GM takes any address).
  // The zeros from UB (MTE3) are emitted at once, ahead of the write-backs queued after them on
  // MTE3; the DMAs from GM are returned for the load queue.
  Instructions k_minor_fill(int64_t dst, Operand gm, int64_t rows, int64_t stride, int64_t k0) {
    const int64_t row_bytes = m_.fractal_row_bytes, c0 = row_bytes / in_;  // elements per fractal row
    const int64_t valid = std::clamp<int64_t>(g_.valid_k() - k0, 0, g_.tk0), whole = valid / c0 * c0, part = valid - whole;
    const int64_t rest = dst + whole / c0 * rows * row_bytes;
    const int64_t zero = (g_.tk0 - whole) / c0 * rows * row_bytes;
    Instructions code;
    if (whole) code.push_back({Opcode::DmaInNz, {type(cube_.a), at(Buffer::L1, dst), gm, imm(rows), imm(whole), imm(stride)}});
    if (zeros_ub_ >= 0) op(Opcode::DmaOut, {at(Buffer::L1, rest), at(Buffer::UB, zeros_ub_), imm(1), imm(zero), imm(0), imm(0)});
    else code.push_back({Opcode::DmaIn, {at(Buffer::L1, rest), at(Buffer::GM, g_.zeros), imm(1), imm(zero), imm(0), imm(0)}});
    if (part)
      code.push_back({Opcode::DmaIn, {at(Buffer::L1, rest), Operand::addr(Buffer::GM, gm.imm + whole * in_, gm.reg), imm(rows),
                                      imm(part * in_), imm((stride - part) * in_), imm(row_bytes - part * in_)}});
    return code;
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
  // A: L1 fractal (r, c) of the NZ tile at c * rows + r; ZZ wants (r, c) at r * (tk0 / k0) + c. A^T
  // is stored as its k x m NZ, whose fractal (c, r) sits at r * (tk0 / k0) + c: the ZZ index, each
  // fractal transposed. B: ZN wants fractal (r, c) at r * (tn0 / n0) + c, transposed; B^T's NZ has
  // it there already, in the column-major order ZN wants.
  int64_t load_a(int64_t slot, int64_t kk, int64_t i) {
    const int64_t l0a = (l0a_step_++ % g_.l0a_slots) * l0a_half_, rows = g_.tm0 / cube_.m0, cols = g_.tk0 / cube_.k0;
    const Operand src = at(Buffer::L1, slot_at(slot) + a_at(kk, i));
    if (g_.a_transposed() && pairs()) {
      // i8 A^T: per k slice ki, the pairs (2 ki, 2 ki + 1) of each 32-column block are its m rows
      // 0..15 and 16..31; the slices go one after the other ([ki][mi], each slice ZZ), one mmad each
      for (int64_t ki = 0; ki < cols; ++ki)
        op(Opcode::Load2d, {type(cube_.a), at(Buffer::L0A, l0a + ki * rows * cube_.a_fractal_bytes()),
                            at(Buffer::L1, slot_at(slot) + a_at(kk, i) + 2 * ki * cube_.a_fractal_bytes()), imm(rows / 2), imm(2),
                            imm(2 * cols), imm(1), imm(1)});
    } else if (g_.a_transposed())
      op(Opcode::Load2d, {type(cube_.a), at(Buffer::L0A, l0a), src, imm(rows), imm(cols), imm(cols), imm(1), imm(1)});
    else
      op(Opcode::Load2d, {type(cube_.a), at(Buffer::L0A, l0a), src, imm(rows), imm(cols), imm(1), imm(rows), imm(0)});
    return l0a;
  }
  int64_t load_b(int64_t slot, int64_t kk, int64_t j) {
    const int64_t l0b = (l0b_step_++ % g_.l0b_slots) * l0b_half_;
    load_b_columns(at(Buffer::L0B, l0b), slot, kk, j, 0, g_.tn0 / cube_.n0);
    return l0b;
  }
  // i8 fractals are transposed in pairs (a k0 x k0 square of bytes: isa/README.md, load2d).
  bool pairs() const { return cube_.a == DType::I8; }
  // Column blocks [first, first + count) of B's operand tile (kk, j) into L0B at `dst`.
  void load_b_columns(Operand dst, int64_t slot, int64_t kk, int64_t j, int64_t first, int64_t count) {
    const int64_t rows = g_.tk0 / cube_.k0, cols = g_.tn0 / cube_.n0, fractal = cube_.b_fractal_bytes();
    const int64_t tile = slot_at(slot) + b_at(kk, j);
    if (!g_.b_transposed() && pairs()) {  // per k slice ki: its pairs of 16-row fractals (2 ki, 2 ki + 1) of each 32-column block
      TESSEL_CHECK(first == 0 && count == cols, "emit_npu: i8 B tiles are loaded whole");
      for (int64_t ki = 0; ki < rows; ++ki)
        op(Opcode::Load2d, {type(cube_.a), npu::Operand::addr(dst.buffer, dst.imm + ki * cols * fractal), at(Buffer::L1, tile + 2 * ki * fractal),
                            imm(cols / 2), imm(2), imm(2 * rows), imm(1), imm(1)});
      return;
    }
    if (g_.b_transposed())
      op(Opcode::Load2d, {type(cube_.a), dst, at(Buffer::L1, tile + first * fractal), imm(rows), imm(count), imm(cols), imm(1), imm(0)});
    else
      op(Opcode::Load2d, {type(cube_.a), dst, at(Buffer::L1, tile + first * rows * fractal), imm(rows), imm(count), imm(1), imm(rows),
                          imm(1)});
  }
  int64_t block_at(int64_t i, int64_t j) const { return (j * blocks_m_ + i) * sub_c_; }  // accumulator block in L0C
  void mmad(int64_t i, int64_t j, int64_t l0a, int64_t l0b, Operand init) { mmad_at(block_at(i, j), l0a, l0b, g_.tn0, init); }
  // C (L0C) (+)= the A operand tile at l0a x the B operand tile of n columns at l0b; an i8 A^T tile
  // holds its k slices one after the other (load_a): one mmad per slice.
  void mmad_at(int64_t c, int64_t l0a, int64_t l0b, int64_t n, Operand init) {
    if (!(g_.a_transposed() && pairs())) {
      op(Opcode::Mmad, {type(cube_.a), at(Buffer::L0C, c), at(Buffer::L0A, l0a), at(Buffer::L0B, l0b), imm(g_.tm0), imm(g_.tk0), imm(n), init});
      return;
    }
    for (int64_t ki = 0; ki < g_.tk0 / cube_.k0; ++ki)
      op(Opcode::Mmad, {type(cube_.a), at(Buffer::L0C, c), at(Buffer::L0A, l0a + ki * (g_.tm0 / cube_.m0) * cube_.a_fractal_bytes()),
                        at(Buffer::L0B, l0b + ki * (n / cube_.n0) * cube_.b_fractal_bytes()), imm(g_.tm0), imm(cube_.k0), imm(n),
                        ki == 0 ? init : imm(0)});
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

  // Where column block jj of accumulator block (i, j)'s broadcast values are in GM.
  std::map<std::string, GemmEpilogue::BroadcastSource> epilogue_sources(int64_t i, int64_t j, int64_t jj) const {
    const GemmShape& g = g_;
    std::map<std::string, GemmEpilogue::BroadcastSource> sources;
    for (const auto& [name, t] : g.broadcast)
      sources[name] = {at(Buffer::GM, t.gm + (i * g.tm0 * t.s_m + (j * g.tn0 + jj * cube_.n0) * t.s_n) * t.eb, t.reg), t.s_m != 0,
                       t.s_n != 0, t.s_m * t.eb};
    return sources;
  }

  // The tile's epilogue loads (every column block's broadcast values, each block its own UB set)
  // queued as one entry right after the first chunk's DMAs, so that they land while the cube runs
  // instead of after the last chunk (their GM latency and, on many cores, each DMA's turn at the
  // shared GM were the write-back's wait). Only where the tile's blocks fit the sets and the tile
  // is not in a loop (its sets would be those of the tile before it); write_back takes them.
  void queue_epilogue_loads() {
    const GemmShape& g = g_;
    prefetched_.clear();
    if (!g.epilogue || g.broadcast.empty() || tile_loop_) return;
    std::vector<std::array<int64_t, 4>> blocks;  // i, j, jj, rows moved: write_back's order
    for (int64_t j = 0; j < blocks_n_; ++j)
      for (int64_t i = 0; i < blocks_m_; ++i) {
        const int64_t rows = std::clamp<int64_t>(rows_ - i * g.tm0, 0, g.tm0);
        for (int64_t jj = 0; jj < g.tn0 / cube_.n0; ++jj)
          if (rows > 0 && std::clamp<int64_t>(cols_ - j * g.tn0 - jj * cube_.n0, 0, cube_.n0) > 0)
            blocks.push_back({i, j, jj, round_up(rows, cube_.m0)});
      }
    const int64_t n = static_cast<int64_t>(blocks.size());
    const bool split = n > epilogue_sets_ && n <= split_.loads_count;
    if (blocks.empty() || (n > epilogue_sets_ && !split)) return;
    npu::Program code;
    std::map<int64_t, std::vector<GemmEpilogue::BlockLoads>> by_rows;  // (the edge row block's rows apart)
    for (size_t b = 0; b < blocks.size(); ++b) {
      const auto& [i, j, jj, rows] = blocks[b];
      const int64_t set = split ? -1 : epilogue_base_ + (epilogue_step_++ % epilogue_sets_) * epilogue_set_;
      const int64_t loads = split ? split_.loads_base + static_cast<int64_t>(b) * split_.loads : -1;
      prefetched_[{i, j, jj}] = {set, loads};
      by_rows[rows].push_back({set, loads, epilogue_sources(i, j, jj)});
    }
    for (const auto& [rows, loads] : by_rows) g.epilogue->emit_loads(code, rows, loads);
    size_t after = 0;  // after the first chunk's DMAs
    for (size_t n = 0; n < pending_.size(); ++n)
      if (pending_[n].chunk == 0) after = n + 1;
    Dma d{0, pieces_ - 1, blocks_m_ - 1, -2, [this, code = std::move(code.code)] {
            for (const npu::Instruction& in : code) op(in.opcode, in.operands);
          }};
    d.epilogue = true;
    pending_.insert(pending_.begin() + static_cast<std::ptrdiff_t>(after), std::move(d));
  }

  // Write-back of accumulator block (i, j) through UB (ping-pong) to GM, moved one fractal column
  // block at a time (MTE3 starts after a quarter of the move; i32 results: the whole block,
  // converted). `columns`: emits the mmads of column block jj before its move (null: none).
  // Edge tiles (tails in place): only the block's rows below rows_ and columns below cols_ are
  // moved and written (the rows in whole fractals, the columns one burst per row).
  void write_back(int64_t i, int64_t j, const std::function<void(int64_t)>& columns = nullptr) {
    const GemmShape& g = g_;
    const int64_t c = block_at(i, j), n0 = cube_.n0, em = dtype_bytes(moved_);
    const int64_t ub = g.double_ub ? (ub_step_++ % 2) * ub_half_ : 0;
    const int64_t rows = std::clamp<int64_t>(rows_ - i * g.tm0, 0, g.tm0), moved_rows = round_up(rows, cube_.m0);
    if (g.int_out) convert_block_to_i32(c, ub);
    for (int64_t jj = 0; jj < g.tn0 / n0; ++jj) {
      if (columns) columns(jj);
      const int64_t cols = std::clamp<int64_t>(cols_ - j * g.tn0 - jj * n0, 0, n0);
      if (rows == 0 || cols == 0) continue;
      const int64_t gm = g.c_off + (i * g.tm0 * g.c_sm + j * g.tn0 + jj * n0) * eo_;
      int64_t src = ub + jj * g.tm0 * n0 * em;
      if (!g.int_out)
        op(Opcode::MovL0c, {type(moved_), at(Buffer::UB, src), at(Buffer::L0C, c + jj * column_bytes_), imm(moved_rows / cube_.m0), imm(0)});
      if (g.epilogue) {
        if (moved_ == DType::I32) widen_to_f32(src, moved_rows * n0);
        const auto ahead = prefetched_.find({i, j, jj});
        if (ahead != prefetched_.end()) {  // its loads queued ahead: make sure they are emitted
          while (std::any_of(pending_.begin(), pending_.end(), [](const Dma& d) { return d.epilogue; })) emit_pending(1);
          const auto [set, loads] = ahead->second;
          const int64_t evaluation = loads < 0 ? set : epilogue_base_ + (evaluation_step_++ % split_.evaluations) * split_.evaluation;
          src = g.epilogue->emit_block(p_, src, moved_rows, evaluation, epilogue_sources(i, j, jj), GemmEpilogue::Part::Compute, loads);
        } else {
          const int64_t set = epilogue_base_ + (epilogue_step_++ % epilogue_sets_) * epilogue_set_;
          src = g.epilogue->emit_block(p_, src, moved_rows, set, epilogue_sources(i, j, jj));
        }
      }
      op(Opcode::DmaOut, {at(Buffer::GM, gm, kGmC), at(Buffer::UB, src), imm(rows), imm(cols * eo_), imm((n0 - cols) * eo_),
                          imm((g.c_sm - cols) * eo_)});
    }
  }

  // i32 accumulators under a fused epilogue (which reads f32): converted in place, rounding to
  // nearest as the interpreter's f32(C) does.
  void widen_to_f32(int64_t ub, int64_t elements) {
    const int64_t lanes = m_.vector_lanes(DType::F32), block = m_.blocks_per_repeat();
    for (int64_t done = 0; done < elements;) {
      const int64_t n = std::min<int64_t>(elements - done, m_.vector_max_repeat * lanes);
      op(Opcode::Vconv, {type(DType::F32), type(DType::I32), at(Buffer::UB, ub + done * acc_), at(Buffer::UB, ub + done * acc_),
                         imm((n + lanes - 1) / lanes), imm(1), imm(1), imm(block), imm(block)});
      done += n;
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
          load_b_columns(at(Buffer::L0B, l0b), slots[h], kk, j, jj, 1);
          mmad_at(c + jj * column_bytes_, a[h * pieces_ + kk], l0b, cube_.n0, kk == 0 && h == 0 ? first : imm(0));
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
        if (j == blocks_n_ - 1 && i == blocks_m_ - 1 && !tile_loop_ && g.tn0 > cube_.n0 && !g.int_out && tiles <= g.l0a_slots &&
            !(pairs() && (g.a_transposed() || !g.b_transposed()))) {  // (i8 transposes: whole tiles, fewer instructions)
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
    op(Opcode::Mul, {reg(kGmAChunk), reg(kChunk), imm(chunks_per_step * g_.tk * g_.a_sk * in_)});
    op(Opcode::Add, {reg(kGmAChunk), reg(kGmAChunk), reg(kGmA)});
    op(Opcode::Mul, {reg(kGmBChunk), reg(kChunk), imm(chunks_per_step * g_.tk * g_.b_sk * in_)});
    op(Opcode::Add, {reg(kGmBChunk), reg(kGmBChunk), reg(kGmB)});
  }

  // One L1 slot: the chunks one after the other, the write-back after the last.
  void single_buffered() {
    if (chunks_ <= 1) {
      load(0, kGmA, kGmB, 0, 0, Order::Blocks);
      compute_blocks({0}, imm(1));
      return;
    }
    // (a chunk crossing K, its columns past K filled, is loaded from constant offsets after the loop)
    op(Opcode::Loop, {reg(kChunk), imm(0), imm(k_fill_ ? chunks_ - 1 : chunks_), imm(1)});
    op(Opcode::Seq, {reg(kInit), reg(kChunk), imm(0)});
    chunk_bases(1);
    load(0, kGmAChunk, kGmBChunk, 0, 0, Order::Pieces);
    compute(0, 0, reg(kInit));
    op(Opcode::EndLoop, {});
    if (k_fill_) {
      load(0, kGmA, kGmB, chunks_ - 1, chunks_ - 1, Order::Pieces);
      compute(chunks_ - 1, 0, imm(0));
    }
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
    prefetched_.clear();
    if (peeled >= 1 || body_end <= 0) queue_epilogue_loads();  // (chunk 0 straight-line code)
    for (int64_t c = 0; c < peeled; ++c) {
      load_static(c + ahead + 1);
      compute(c, c % S, imm(c == 0 ? 1 : 0));
    }
    // The loop: chunks peeled .. peeled + S * iterations - 1 (slot of chunk c: c % S).
    int64_t iterations = body_end > peeled ? (body_end - peeled) / S : 0;
    // The loop loads chunks up to peeled + S iterations + ahead - 1: all below K's chunks (a ring
    // deeper than the tail's chunks + 1, plan_gemm's choose_l1_ring, would otherwise load up to
    // S - 1 - tail_chunks chunks past K: reads past A and B, into the output other cores write),
    // and not the one crossing K when its columns past K are filled (that load is straight-line code).
    const int64_t loadable = k_fill_ ? chunks_ - 1 : chunks_;
    iterations = std::min(iterations, std::max<int64_t>(0, (loadable - ahead - peeled) / S));
    if (iterations > 0) {
      op(Opcode::Loop, {reg(kChunk), imm(0), imm(iterations), imm(1)});
      chunk_bases(S);
      for (int64_t p = 0; p < S; ++p) {  // chunk c = peeled + S r + p; loads c + S - 1 (< chunks: the bound above)
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
  int64_t epilogue_set_ = 0, epilogue_sets_ = 1, epilogue_step_ = 0, zeros_ub_ = -1, evaluation_step_ = 0;
  SplitSets split_;
  bool tile_loop_ = false, k_fill_ = false, b_by_columns_ = false;
  int64_t rows_ = 0, cols_ = 0;  // valid rows and columns of the tiles being emitted
  int64_t pieces_ = 0, a_tile_bytes_ = 0, b_tile_bytes_ = 0, column_bytes_ = 0, blocks_m_ = 0, blocks_n_ = 0;
  DType moved_ = DType::F32;
  std::deque<Dma> pending_;
  int64_t l0a_step_ = 0, l0b_step_ = 0, ub_step_ = 0;
  // (i, j, jj) -> its UB set and, where the sets split, its loads set (else -1): loads queued ahead
  std::map<std::array<int64_t, 3>, std::array<int64_t, 2>> prefetched_;
};


// Tails: the zero-padded copies in, the main loop on the padded sizes (one core: cores do not
// synchronise with each other), the output copied back.
void emit_gemm_tails(npu::Program& p, const Machine& m, GemmSetup& s, int64_t a_user, int64_t b_user, int64_t c_user,
                     const std::function<int64_t(const std::string&, DType, std::vector<int64_t>, npu::TensorRole)>& place,
                     std::vector<std::string>& notes) {
  GemmShape& g = s.g;
  const int64_t M = s.M, N = s.N, K = s.K, nb = g.batch, ib = dtype_bytes(g.operand), eo = dtype_bytes(g.out);
  const TailCopies t = tail_copies(g, M, N, K);
  const StoredMatrix &a = t.a, &b = t.b, &c = t.c;
  const int64_t ar = t.ar, ac = t.ac, br = t.br, bc = t.bc;
  g.a_off = place(s.A->name + "_padded", g.operand, {nb, ar, ac}, npu::TensorRole::Scratch);
  g.b_off = place(s.B->name + "_padded", g.operand, {nb, br, bc}, npu::TensorRole::Scratch);
  g.c_off = place(s.C->name + "_padded", g.out, {nb, g.M, g.N}, npu::TensorRole::Scratch);
  (g.a_transposed() ? g.a_sk : g.a_sm) = ac, g.a_sb = ar * ac;
  (g.b_transposed() ? g.b_sn : g.b_sk) = bc, g.b_sb = br * bc;
  g.c_sm = g.N, g.c_sb = g.M * g.N;
  p.cores = g.cores = 1;
  Builder build(p, m);
  if (g.int_out) {
    build.widen_i8(a_user, g.a_off, a.rows, a.cols, ac);
    build.widen_i8(b_user, g.b_off, b.rows, b.cols, bc);
  } else if (nb > 1) {
    build.batched_pad_in(a_user, g.a_off, nb, a.rows, ar, a.cols * ib, ac * ib, a.row_step(), a.batch_step());
    build.batched_pad_in(b_user, g.b_off, nb, b.rows, br, b.cols * ib, bc * ib, b.row_step(), b.batch_step());
  } else {
    build.padded_copy(a_user, g.a_off, a.rows, a.cols * ib, a.cols * ib, ac * ib);
    build.padded_copy(b_user, g.b_off, b.rows, b.cols * ib, b.cols * ib, bc * ib);
  }
  GemmLoop(p, m, g).run();
  if (nb > 1) build.batched_pad_out(g.c_off, c_user, nb, M, g.M, N * eo, g.N * eo, c.row_step(), c.batch_step());
  else build.padded_copy(g.c_off, c_user, M, N * eo, g.N * eo, N * eo);
  notes.push_back(fmt::format("tails: {}x{}x{} padded to {}x{}x{} through UB on one core", M, N, K, g.M, g.N, g.K));
}

}  // namespace

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

std::string why_not_gemm(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, const isa::Hierarchy& target) {
  GemmSetup s;
  return setup_gemm(k, mm, m, target, s);
}

NpuKernel emit_gemm(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, const isa::Hierarchy& target) {
  GemmSetup s;
  if (std::string why = setup_gemm(k, mm, m, target, s); !why.empty()) throw UserError(why);
  GemmShape& g = s.g;
  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  out.macs = uint64_t(g.batch) * s.M * s.N * s.K;
  gemm_notes(m, s, out.notes);
  int64_t gm = 0;
  auto place = [&](const std::string& name, DType t, std::vector<int64_t> shape, npu::TensorRole role) {
    npu::TensorBinding b{name, t, shape, gm, role, {}};
    gm = round_up(gm + b.byte_size(), m.granularity(Buffer::GM));
    p.tensors.push_back(b);
    return b.gm_offset;
  };
  // in place: what the edge tiles read past a tensor's end, as a guard right after it
  auto guard = [&](const std::string& name, DType t, int64_t elements) {
    if (s.in_place && elements > 0) place(name + "_guard", t, {elements}, npu::TensorRole::Scratch);
  };
  auto elements = [](const kernel::GlobalTensor& t) {
    return std::accumulate(t.shape.begin(), t.shape.end(), int64_t(1), std::multiplies<int64_t>());
  };
  const int64_t a_user = place(s.A->name, s.A->dtype, s.A->shape, npu::TensorRole::In);
  guard(s.A->name, s.A->dtype, (g.a_transposed() ? (g.K - 1) * g.a_sk + g.M : (g.M - 1) * g.a_sm + g.K) - elements(*s.A));
  const int64_t b_user = place(s.B->name, s.B->dtype, s.B->shape, npu::TensorRole::In);
  guard(s.B->name, s.B->dtype, (g.b_transposed() ? (g.N - 1) * g.b_sn + g.K : (g.K - 1) * g.b_sk + g.N) - elements(*s.B));
  const int64_t c_user = place(s.C->name, g.out, s.C->shape, npu::TensorRole::Out);
  guard(s.C->name, g.out, (g.M - s.M) * g.c_sm);  // the rows past M, written and never read
  if (s.epilogue) {
    for (const std::string& name : s.epilogue->broadcasts()) {
      const kernel::GlobalTensor* t = k.find_tensor(name);
      const GemmShape::Broadcast& b = g.broadcast.at(name);
      g.broadcast.at(name).gm = place(name, t->dtype, t->shape, npu::TensorRole::In);
      if (b.s_m) guard(name, t->dtype, (g.M - s.M) * b.s_m);
    }
    // Column blocks past N read up to one block of elements beyond a broadcast tensor's end: keep them in GM.
    place("guard", DType::F32, {m.cube_f16.n0}, npu::TensorRole::Scratch);
    out.notes.push_back("fused epilogue on UB per " + std::to_string(m.cube_f16.n0) + "-column block: " +
                        std::to_string(s.epilogue->broadcasts().size()) + " broadcast tensor(s), output " + s.C->name);
  }
  if (s.aligned || s.in_place) {
    g.a_off = a_user, g.b_off = b_user, g.c_off = c_user;
    const int64_t tiles = g.batch * (g.M / g.tm) * (g.N / g.tn);
    g.cores = static_cast<int>(std::min<int64_t>(m.cores, tiles));
    p.cores = g.cores;
    if (s.in_place) in_place_notes(s, out.notes);
    if (g.real_k && (!g.a_transposed() || g.b_transposed()) && GemmLoop::ub_layout(m, g).zeros < 0)
      g.zeros = place("zeros", g.operand, {std::max(g.tm0, g.tn0) * g.tk0}, npu::TensorRole::Scratch);
    GemmLoop(p, m, g).run();
  } else {
    emit_gemm_tails(p, m, s, a_user, b_user, c_user, place, out.notes);
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(Pipe::All)});
  out.notes.push_back(fmt::format("{} output tiles over {} core(s)", g.batch * (g.M / g.tm) * (g.N / g.tn), p.cores));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu
