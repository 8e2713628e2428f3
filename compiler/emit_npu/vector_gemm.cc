// Contractions on the vector unit: see vector_gemm.h.
#include "compiler/emit_npu/vector_gemm.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <tuple>

#include "compiler/emit_npu/pointwise.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

enum Reg : uint8_t {
  kCoreLoop = 1, kCoreLoop2, kCoreM, kCoreN, kCoreA, kCoreB, kCoreC, kRowLoop, kRowA, kRowC, kColLoop, kColB, kColC,
  kPair, kPairA, kPairB, kTmp, kTmpB
};

// The kernel read as a vector contraction: sizes, element strides and offsets, and the plan.
struct Form {
  std::string a, b, c;          // the global tensors
  int64_t M = 0, N = 0, K = 0;
  int64_t a_m = 0, a_k = 0, b_k = 0, c_m = 0;  // element strides (N is unit-stride in B and C)
  int64_t a_base = 0, b_base = 0;
  bool a_rows = true;           // A's k is unit-stride: chunks of A are R rows of Kc (else Kc rows of R)
  // Plan: a grid of gm x gn cores, mc rows x nc columns each (the last row / column of the grid
  // the rest: tail_rows / tail_cols, 0 when even); blocks of R x Nb; chunks of Kc.
  int64_t gm = 0, gn = 0, mc = 0, nc = 0, full_m = 0, full_n = 0, tail_rows = 0, tail_cols = 0;
  int64_t R = 0, Nb = 0, Kc = 0;
  int64_t eb = 4;               // operand element bytes: f32, or bf16 (converted to f32 in UB as loaded)
};

class VectorGemm : public VectorCode {
 public:
  VectorGemm(const kernel::Kernel& k, const isa::NpuMachine& m)
      : VectorCode(k, m), lanes_(m.vector_lanes(DType::F32)), block_(m.vector_block_bytes) {}

  std::string why_not() {
    if (std::string w = analyse(); !w.empty()) return "kernel " + k_.name + ": vector contraction: " + w;
    return "";
  }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw UserError(w);
    NpuKernel out;
    npu::Program& p = begin_program(out);
    for (const npu::TensorBinding& t : p.tensors) gm_[t.name] = t.gm_offset;
    p.cores = static_cast<int>(f_.gm * f_.gn);
    op(Opcode::Div, {reg(kCoreM), reg(npu::kRegCoreId), imm(f_.gn)});
    op(Opcode::Mul, {reg(kTmp), reg(kCoreM), imm(f_.gn)});
    op(Opcode::Sub, {reg(kCoreN), reg(npu::kRegCoreId), reg(kTmp)});
    op(Opcode::Mul, {reg(kCoreA), reg(kCoreM), imm(f_.mc * f_.a_m * f_.eb)});
    op(Opcode::Mul, {reg(kCoreB), reg(kCoreN), imm(f_.nc * 4)});
    op(Opcode::Mul, {reg(kCoreC), reg(kCoreM), imm(f_.mc * f_.c_m * 4)});
    op(Opcode::Add, {reg(kCoreC), reg(kCoreC), reg(kCoreB)});
    if (f_.eb != 4) op(Opcode::Mul, {reg(kCoreB), reg(kCoreN), imm(f_.nc * f_.eb)});
    // Each (rows, columns) variant of the grid runs where its condition holds: a loop of one trip
    // there, none elsewhere (index < full: begin index, end full, step full; index == full: begin
    // full - index, end 1, step 1).
    auto when = [&](uint8_t loop, uint8_t index, int64_t full, bool tail, const std::function<void()>& body) {
      if (tail) {
        op(Opcode::Sub, {reg(kTmp), imm(full), reg(index)});
        op(Opcode::Loop, {reg(loop), reg(kTmp), imm(1), imm(1)});
      } else {
        op(Opcode::Loop, {reg(loop), reg(index), imm(full), imm(full)});
      }
      body();
      op(Opcode::EndLoop, {});
    };
    for (const bool row_tail : {false, true}) {
      const int64_t rows = row_tail ? f_.tail_rows : f_.mc;
      if (rows == 0 || (!row_tail && f_.full_m == 0)) continue;
      for (const bool col_tail : {false, true}) {
        const int64_t cols = col_tail ? f_.tail_cols : f_.nc;
        if (cols == 0 || (!col_tail && f_.full_n == 0)) continue;
        auto body = [&] { emit_rows(rows, cols); };
        const bool row_all = !row_tail && f_.tail_rows == 0, col_all = !col_tail && f_.tail_cols == 0;
        if (row_all && col_all) body();
        else if (row_all) when(kCoreLoop2, kCoreN, f_.full_n, col_tail, body);
        else if (col_all) when(kCoreLoop, kCoreM, f_.full_m, row_tail, body);
        else when(kCoreLoop, kCoreM, f_.full_m, row_tail, [&] { when(kCoreLoop2, kCoreN, f_.full_n, col_tail, body); });
      }
    }
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.macs = uint64_t(f_.M) * uint64_t(f_.N) * uint64_t(f_.K);
    out.notes.push_back(fmt::format(
        "vector contraction {}x{}x{} {} on {} core(s) ({} x {}: {} rows x {} columns each): blocks of {} rows x {} columns, "
        "k in chunks of {} (two buffers), A broadcast by vbrcb once per value, vmul + vadd per k",
        f_.M, f_.N, f_.K, f_.eb == 4 ? "f32" : "bf16 (operands converted to f32 in UB as loaded)", p.cores, f_.gm, f_.gn, f_.mc,
        f_.nc, f_.R, f_.Nb, f_.Kc));
    npu::validate_program(p);
    return out;
  }

 private:
  std::string analyse() {
    if (!k_.function || k_.function->statements.size() != 1) return "not one statement";
    if (!k_.contraction) return "no matched contraction";
    const kernel::Contraction& c = *k_.contraction;
    if (!c.batch.empty() || c.m.size() != 1 || c.n.size() != 1 || c.k.size() != 1)
      return "not one M, N and K index without a batch";
    // bf16 operands: loaded as they are, converted to f32 in UB (the description's conversion; exact)
    const bool bf16 = c.a.dtype == DType::BF16 && c.b.dtype == DType::BF16 && m_.conversion(DType::BF16, DType::F32);
    if ((!bf16 && (c.a.dtype != DType::F32 || c.b.dtype != DType::F32)) || c.acc_type != DType::F32)
      return "operands not f32 (or bf16 the vector unit converts)";
    f_.eb = dtype_bytes(c.a.dtype);
    const isa::CubeShape& cube = m_.cube(c.a.dtype);
    if (cube.exists && cube.a == c.a.dtype) return "the cube takes it";
    if (c.a.producer || c.b.producer || c.a.guard || c.b.guard || !c.epilogue.empty() || !c.inlined.empty())
      return "padding or an epilogue";
    if (!c.plain_output || c.stored_outputs.size() != 1) return "the output is not a plain [M, N] tensor";
    for (const kernel::GlobalTensor& t : k_.tensors)
      if (t.temporary) return "global temporary " + t.name;
    f_.a = c.a.tensor, f_.b = c.b.tensor, f_.c = c.stored_outputs[0].first;
    if (c.stored_outputs[0].second != DType::F32) return "the output is not f32";
    f_.M = c.m[0].extent, f_.N = c.n[0].extent, f_.K = c.k[0].extent;
    if (f_.M < 1 || f_.N < 1 || f_.K < 1) return "an empty size";
    auto coeff = [](const std::map<std::string, int64_t>& m, const std::string& v) {
      const auto it = m.find(v);
      return it == m.end() ? int64_t(0) : it->second;
    };
    const std::string& mv = c.m[0].var, &nv = c.n[0].var, &kv = c.k[0].var;
    f_.a_m = coeff(c.a.coeff, mv), f_.a_k = coeff(c.a.coeff, kv), f_.b_k = coeff(c.b.coeff, kv), f_.c_m = coeff(c.out_coeff, mv);
    f_.a_base = c.a.base, f_.b_base = c.b.base;
    if (coeff(c.b.coeff, nv) != 1 || coeff(c.out_coeff, nv) != 1) return "N is not unit-stride in B and C";
    if (f_.M == 1) f_.a_m = std::max<int64_t>(f_.a_m, f_.a_k == 1 ? f_.K : 1), f_.c_m = std::max<int64_t>(f_.c_m, f_.N);
    if (f_.K == 1) f_.a_k = std::max<int64_t>(f_.a_k, f_.a_m == 1 ? f_.M : 1), f_.b_k = std::max<int64_t>(f_.b_k, f_.N);
    f_.a_rows = f_.a_k == 1;
    if (f_.a_rows ? f_.a_m < f_.K : !(f_.a_m == 1 && f_.a_k >= f_.M)) return "A has no unit-stride dimension";
    if (f_.b_k < f_.N || f_.c_m < f_.N) return "rows of B or C overlap";
    return plan();
  }

  // UB bytes of one block of R rows x nb columns with chunks of kc.
  // (bf16 operands: each chunk's A and B loaded as they are into two more buffers, A's f32 buffers
  // whole repeats, which the conversions write.)
  int64_t ub_bytes(int64_t R, int64_t nb, int64_t kc) const {
    const int64_t nbp = round_up(nb, lanes_), araw = a_elements(R, kc), a32 = round_up(a_converted(R, kc) * 4, block_);
    const int64_t staged = f_.eb == 4 ? 0 : 2 * (round_up(a_converted(R, kc) * f_.eb, block_) + kc * nbp * f_.eb);
    return 2 * R * nbp * 4 + 2 * kc * nbp * 4 + 2 * a32 + araw * block_ + staged;
  }
  // Elements of one chunk of A in UB: rows padded to whole blocks (of the operand as loaded).
  int64_t a_elements(int64_t R, int64_t kc) const {
    const int64_t per_block = block_ / f_.eb;
    return f_.a_rows ? R * round_up(kc, per_block) : kc * round_up(R, per_block);
  }
  // A chunk's elements in its f32 buffer: bf16 ones converted by whole repeats.
  int64_t a_converted(int64_t R, int64_t kc) const {
    return f_.eb == 4 ? a_elements(R, kc) : round_up(a_elements(R, kc), lanes_);
  }

  // The core grid: gm row parts x gn column parts (whole repeats), the one whose per-core time
  // (vector repeats: 2 per 64 MACs and one per A value broadcast; or its GM reads, per core and
  // shared) is least, then the fewest cores.
  void plan_grid() {
    const int64_t cores = m_.cores, per_core = int64_t(m_.path(Buffer::GM, Buffer::UB).bandwidth_bytes_per_cycle);
    const double shared = m_.gm_shared_bandwidth_bytes_per_cycle;
    double best = 0;
    for (int64_t gn = 1; gn <= std::min(cores, (f_.N + lanes_ - 1) / lanes_); ++gn) {
      const int64_t nc = round_up((f_.N + gn - 1) / gn, lanes_), gn_used = (f_.N + nc - 1) / nc;
      const int64_t gm = std::min(f_.M, cores / gn_used), mc = (f_.M + gm - 1) / gm, gm_used = (f_.M + mc - 1) / mc;
      const double vector = double(mc) * double(f_.K) * double(2 * nc / lanes_ + 1);
      const double bytes = double(f_.K) * double(nc + mc) * double(f_.eb);
      const double gm_time = std::max(per_core > 0 ? bytes / double(per_core) : 0.0,
                                      shared > 0 ? bytes * double(gm_used * gn_used) / shared : 0.0);
      const double t = std::max(vector, gm_time) * (1 + 1e-9 * double(gm_used * gn_used));
      if (f_.gm == 0 || t < best) best = t, f_.gm = gm_used, f_.gn = gn_used, f_.mc = mc, f_.nc = nc;
    }
    f_.nc = std::min(f_.nc, f_.N);
    f_.full_m = f_.M / f_.mc, f_.tail_rows = f_.M % f_.mc;
    f_.full_n = f_.N / f_.nc, f_.tail_cols = f_.N % f_.nc;
  }

  // The grid, then the fewest blocks (R x Nb) of a core's share whose buffers fit UB with the
  // longest chunks.
  std::string plan() {
    plan_grid();
    const int64_t cap = m_.capacity(Buffer::UB), np = round_up(f_.nc, lanes_);
    std::tuple<int64_t, int64_t, int64_t> best{INT64_MAX, 0, 0};  // (blocks, -Kc, R)
    for (int64_t kc0 : {32, 16, 8}) {
      const int64_t kc = std::min(kc0, f_.K);
      for (int64_t cs = 1; cs <= np / lanes_; ++cs) {
        const int64_t nb = round_up((f_.nc + cs - 1) / cs, lanes_);
        if (nb / lanes_ > max_repeat_) continue;
        int64_t R = std::min<int64_t>(f_.mc, max_repeat_);
        while (R > 0 && ub_bytes(R, std::min(nb, f_.nc), kc) > cap) --R;
        if (R == 0) continue;
        const int64_t rb = (f_.mc + R - 1) / R;
        R = (f_.mc + rb - 1) / rb;
        const std::tuple<int64_t, int64_t, int64_t> score{rb * ((f_.nc + nb - 1) / nb), -kc, R};
        if (score < best) best = score, f_.R = R, f_.Nb = std::min(nb, f_.nc), f_.Kc = kc;
        if (rb == 1) break;  // more column blocks only add blocks
      }
    }
    return f_.R ? "" : "no block fits the vector buffer";
  }

  // A core's `rows` x `cols` share (GM offsets of its first row and column in kCoreA, kCoreB,
  // kCoreC): blocks of R rows.
  void emit_rows(int64_t rows, int64_t cols) {
    const int64_t R = std::min(f_.R, rows), full = rows / R, tail = rows % R;
    const int64_t a_step = R * f_.a_m * f_.eb, c_step = R * f_.c_m * 4;
    if (full > 1) {
      op(Opcode::Loop, {reg(kRowLoop), imm(0), imm(full), imm(1)});
      op(Opcode::Mul, {reg(kRowA), reg(kRowLoop), imm(a_step)});
      op(Opcode::Add, {reg(kRowA), reg(kRowA), reg(kCoreA)});
      op(Opcode::Mul, {reg(kRowC), reg(kRowLoop), imm(c_step)});
      op(Opcode::Add, {reg(kRowC), reg(kRowC), reg(kCoreC)});
      emit_columns(R, cols);
      op(Opcode::EndLoop, {});
    } else if (full == 1) {
      op(Opcode::Add, {reg(kRowA), reg(kCoreA), imm(0)});
      op(Opcode::Add, {reg(kRowC), reg(kCoreC), imm(0)});
      emit_columns(R, cols);
    }
    if (tail > 0) {
      op(Opcode::Add, {reg(kRowA), reg(kCoreA), imm(full * a_step)});
      op(Opcode::Add, {reg(kRowC), reg(kCoreC), imm(full * c_step)});
      emit_columns(tail, cols);
    }
  }

  // A block row's `cols` columns (B offset in kColB, C offset in kColC): blocks of Nb columns.
  void emit_columns(int64_t R, int64_t cols) {
    const int64_t nb = std::min(f_.Nb, cols), full = cols / nb, tail = cols % nb, step = nb * 4, b_step = nb * f_.eb;
    if (full > 1) {
      op(Opcode::Loop, {reg(kColLoop), imm(0), imm(full), imm(1)});
      op(Opcode::Mul, {reg(kTmp), reg(kColLoop), imm(step)});
      op(Opcode::Mul, {reg(kTmpB), reg(kColLoop), imm(b_step)});
      op(Opcode::Add, {reg(kColB), reg(kTmpB), reg(kCoreB)});
      op(Opcode::Add, {reg(kColC), reg(kTmp), reg(kRowC)});
      emit_block(R, nb);
      op(Opcode::EndLoop, {});
    } else {
      op(Opcode::Add, {reg(kColB), reg(kCoreB), imm(0)});
      op(Opcode::Add, {reg(kColC), reg(kRowC), imm(0)});
      emit_block(R, nb);
    }
    if (tail > 0) {
      op(Opcode::Add, {reg(kColB), reg(kCoreB), imm(full * b_step)});
      op(Opcode::Add, {reg(kColC), reg(kRowC), imm(full * step)});
      emit_block(R, tail);
    }
  }

  // UB regions of a block (fixed for the kernel: sized for R x Nb x Kc).
  struct Regions {
    int64_t c = 0, t = 0, b[2] = {0, 0}, a[2] = {0, 0}, abc = 0;
    int64_t sb[2] = {0, 0}, sa[2] = {0, 0};  // bf16 operands: the chunks as loaded (else b, a)
  };
  Regions regions() const {
    Regions g;
    const int64_t nbp = round_up(f_.Nb, lanes_), araw = round_up(a_converted(f_.R, f_.Kc) * 4, block_);
    int64_t at_ = 0;
    auto take = [&](int64_t bytes) { const int64_t r = at_; at_ += round_up(bytes, block_); return r; };
    g.c = take(f_.R * nbp * 4), g.t = take(f_.R * nbp * 4);
    g.b[0] = take(f_.Kc * nbp * 4), g.b[1] = take(f_.Kc * nbp * 4);
    g.a[0] = take(araw), g.a[1] = take(araw);
    g.abc = take(a_elements(f_.R, f_.Kc) * block_);
    for (int i = 0; i < 2; ++i) {
      g.sb[i] = f_.eb == 4 ? g.b[i] : take(f_.Kc * nbp * f_.eb);
      g.sa[i] = f_.eb == 4 ? g.a[i] : take(a_converted(f_.R, f_.Kc) * f_.eb);
    }
    return g;
  }

  // Splits `repeats` repeats into instructions of at most max_repeat: emit(first repeat, count).
  // `step`: at most max_repeat, a multiple of what each piece's start must be.
  template <typename F>
  void in_pieces(int64_t repeats, F&& emit, int64_t step = 0) {
    if (step <= 0) step = max_repeat_;
    for (int64_t r = 0; r < repeats; r += step) emit(r, std::min(step, repeats - r));
  }

  // One block of R rows x nb columns: C = 0, then every chunk of k, then the store.
  void emit_block(int64_t R, int64_t nb) {
    const Regions g = regions();
    const int64_t nbp = round_up(nb, lanes_), J = nbp / lanes_;
    in_pieces(R * J, [&](int64_t r, int64_t n) {
      op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, g.c + r * bytes_per_repeat_), Operand::float_(0), imm(n), imm(1),
                        imm(repeat_blocks_)});
    });
    const int64_t Kc = f_.Kc, chunks = (f_.K + Kc - 1) / Kc, full = f_.K / Kc;
    auto kc_of = [&](int64_t i) { return std::min(Kc, f_.K - i * Kc); };
    // chunk i's loads: GM offsets from `a_reg` / `b_reg` plus chunk `rel` chunks on
    auto load = [&](int64_t i, int64_t rel, uint8_t a_reg, uint8_t b_reg) {
      load_chunk(g, R, nb, nbp, kc_of(i), i % 2, rel * Kc, a_reg, b_reg);
    };
    load(0, 0, kRowA, kColB);
    if (chunks > 1) load(1, 1, kRowA, kColB);
    int64_t first = 0;
    const int64_t pairs = full >= 6 ? (full - 2) / 2 : 0;  // chunks 2p, 2p+1 and the loads of 2p+2, 2p+3
    if (pairs > 0) {
      op(Opcode::Loop, {reg(kPair), imm(0), imm(pairs), imm(1)});
      op(Opcode::Mul, {reg(kPairA), reg(kPair), imm(2 * Kc * f_.a_k * f_.eb)});
      op(Opcode::Add, {reg(kPairA), reg(kPairA), reg(kRowA)});
      op(Opcode::Mul, {reg(kPairB), reg(kPair), imm(2 * Kc * f_.b_k * f_.eb)});
      op(Opcode::Add, {reg(kPairB), reg(kPairB), reg(kColB)});
      for (int64_t h = 0; h < 2; ++h) {
        compute_chunk(g, R, nbp, Kc, h);
        load(h, 2 + h, kPairA, kPairB);
      }
      op(Opcode::EndLoop, {});
      first = 2 * pairs;
    }
    for (int64_t i = first; i < chunks; ++i) {
      compute_chunk(g, R, nbp, kc_of(i), i % 2);
      if (i + 2 < chunks) load(i + 2, i + 2, kRowA, kColB);
    }
    op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(f_.c), kColC), at(Buffer::UB, g.c), imm(R), imm(nb * 4), imm((nbp - nb) * 4),
                        imm((f_.c_m - nb) * 4)});
  }

  // A chunk of kc values of k into buffer `buf`: A's R x kc values (rows padded to whole blocks)
  // and B's kc rows of nb columns (rows nbp apart). `k0`: the chunk's first k relative to the registers.
  void load_chunk(const Regions& g, int64_t R, int64_t nb, int64_t nbp, int64_t kc, int64_t buf, int64_t k0, uint8_t a_reg,
                  uint8_t b_reg) {
    const int64_t eb = f_.eb, per_block = block_ / eb;
    const int64_t a_gm = gm_.at(f_.a) + (f_.a_base + k0 * f_.a_k) * eb;
    if (f_.a_rows) {
      const int64_t kp = round_up(kc, per_block);
      op(Opcode::DmaIn, {at(Buffer::UB, g.sa[buf]), at(Buffer::GM, a_gm, a_reg), imm(R), imm(kc * eb), imm((f_.a_m - kc) * eb),
                         imm((kp - kc) * eb)});
    } else {
      const int64_t rp = round_up(R, per_block);
      op(Opcode::DmaIn, {at(Buffer::UB, g.sa[buf]), at(Buffer::GM, a_gm, a_reg), imm(kc), imm(R * eb), imm((f_.a_k - R) * eb),
                         imm((rp - R) * eb)});
    }
    const int64_t b_gm = gm_.at(f_.b) + (f_.b_base + k0 * f_.b_k) * eb;
    op(Opcode::DmaIn, {at(Buffer::UB, g.sb[buf]), at(Buffer::GM, b_gm, b_reg), imm(kc), imm(nb * eb), imm((f_.b_k - nb) * eb),
                       imm((nbp - nb) * eb)});
  }

  // bf16 operands: a chunk's A and B as loaded converted to f32 in place of the f32 buffers (whole
  // repeats of lanes_ elements; the padding converted too, never read).
  void convert_chunk(const Regions& g, int64_t R, int64_t nbp, int64_t kc, int64_t buf) {
    if (f_.eb == 4) return;
    const int64_t src_blocks = lanes_ * f_.eb / block_, dst_blocks = bytes_per_repeat_ / block_;
    auto convert = [&](int64_t dst, int64_t src, int64_t elements) {
      in_pieces((elements + lanes_ - 1) / lanes_, [&](int64_t r, int64_t n) {
        op(Opcode::Vconv, {type(DType::F32), type(DType::BF16), at(Buffer::UB, dst + r * bytes_per_repeat_),
                           at(Buffer::UB, src + r * lanes_ * f_.eb), imm(n), imm(1), imm(1), imm(dst_blocks), imm(src_blocks)});
      });
    };
    convert(g.a[buf], g.sa[buf], a_elements(R, kc));
    convert(g.b[buf], g.sb[buf], kc * nbp);
  }

  // A chunk's products and sums: A's values to a block each (vbrcb), then per k the products of
  // the A blocks (block stride 0) and B's row (repeat stride 0), added into C.
  void compute_chunk(const Regions& g, int64_t R, int64_t nbp, int64_t kc, int64_t buf) {
    convert_chunk(g, R, nbp, kc, buf);
    const int64_t per_block = block_ / 4, pad = block_ / f_.eb, J = nbp / lanes_, row_blocks = nbp * 4 / block_;
    const int64_t values = a_elements(R, kc);
    in_pieces(values, [&](int64_t r, int64_t n) {
      op(Opcode::Vbrcb, {type(DType::F32), at(Buffer::UB, g.abc + r * block_), at(Buffer::UB, g.a[buf] + r * 4), imm(n), imm(0),
                         imm(1)});
    }, max_repeat_ / per_block * per_block);  // each piece's source on a block
    // block of A(m, k): m * am + k * ak
    const int64_t am = f_.a_rows ? round_up(kc, pad) : 1, ak = f_.a_rows ? 1 : round_up(R, pad);
    for (int64_t k = 0; k < kc; ++k) {
      const int64_t b_row = g.b[buf] + k * nbp * 4;
      if (R < J) {  // an instruction per row: J repeats along the row
        for (int64_t m = 0; m < R; ++m)
          op(Opcode::Vmul, {type(DType::F32), at(Buffer::UB, g.t + m * nbp * 4), at(Buffer::UB, g.abc + (m * am + k * ak) * block_),
                            at(Buffer::UB, b_row), imm(J), imm(1), imm(0), imm(1), imm(repeat_blocks_), imm(0), imm(repeat_blocks_)});
      } else {  // an instruction per repeat column: R repeats down the rows
        for (int64_t j = 0; j < J; ++j)
          in_pieces(R, [&](int64_t r, int64_t n) {
            op(Opcode::Vmul, {type(DType::F32), at(Buffer::UB, g.t + r * nbp * 4 + j * bytes_per_repeat_),
                              at(Buffer::UB, g.abc + (r * am + k * ak) * block_), at(Buffer::UB, b_row + j * bytes_per_repeat_),
                              imm(n), imm(1), imm(0), imm(1), imm(row_blocks), imm(am), imm(0)});
          });
      }
      in_pieces(R * J, [&](int64_t r, int64_t n) {
        const int64_t o = r * bytes_per_repeat_;
        op(Opcode::Vadd, {type(DType::F32), at(Buffer::UB, g.c + o), at(Buffer::UB, g.c + o), at(Buffer::UB, g.t + o), imm(n),
                          imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_), imm(repeat_blocks_)});
      });
    }
  }

  const int64_t lanes_, block_;
  Form f_;
  std::map<std::string, int64_t> gm_;
};

}  // namespace

std::string why_not_vector_gemm(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return VectorGemm(kernel, machine).why_not();
}

NpuKernel emit_vector_gemm(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return VectorGemm(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
