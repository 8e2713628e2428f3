// Strided window maxima and minima over channel-last maps: see window_max.h.
#include "compiler/emit_npu/window_max.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/window_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// One column phase (input columns w = sw * k + ph): the slots k = lo .. Q - 1 + hi its taps read
// (tap t reads slot q + a, a = floor((t + ow) / sw)), those inside X (first .. last) and its place
// in an input row's region.
struct Phase {
  bool used = false;
  int64_t lo = 0, hi = 0, first = 0, last = -1, offset = 0;
  int64_t slots(int64_t q) const { return q + hi - lo; }
};

class WindowMax : public WindowPlan {
  enum Reg : uint8_t { kN = kFirstFree, kB, kRow, kY, kTmp, kOk, kLe, kGuard };

 public:
  WindowMax(const kernel::Kernel& k, const isa::NpuMachine& m) : WindowPlan(k, m) {}

  std::string why_not() { return message(analyse(), "window max"); }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw UserError(w);
    return emit_window(N_ * blocks_, kTmp, [&] { zero_outside_columns(); }, [&](int cores, int64_t per) {
      return fmt::format(
          "window {} {}x{} (stride {}x{}) over {} x {} x {} x {}: tiles of {} output row(s) x {} columns on {} core(s), {} tiles "
          "each; an input row in by one DMA per column phase, the taps as whole repeats of {} elements, two value sets",
          min_ ? "min" : "max", KH_, KW_, sh_, sw_, N_, P_, Q_, C_, Rt_, Q_, cores, per, Q_ * C_);
    });
  }

 private:
  std::string analyse() {
    const ir::Function* f = k_.function;
    if (!f || f->statements.size() != 1) return "not one statement";
    const ir::Statement& s = f->statements[0];
    if ((s.reduction != ir::Reduction::Max && s.reduction != ir::Reduction::Min) || !s.init) return "not a maximum or minimum";
    min_ = s.reduction == ir::Reduction::Min;
    const ir::Expr* x = s.rhs.get();
    if (x->kind != ir::ExprKind::Access) return "not of one read";
    dtype_ = x->type;
    if ((dtype_ != DType::F16 && dtype_ != DType::F32) || s.acc_type != dtype_) return "not f16 or f32 throughout";
    Y_ = s.output;
    if (std::string w = match_read(s, *x, true); !w.empty()) return w;
    if (KH_ * KW_ < 2) return "no window";
    if (std::string w = bind_input(); !w.empty()) return w;
    for (const kernel::GlobalTensor& t : k_.tensors) {
      if (t.temporary) continue;
      if (t.kind == ir::TensorKind::Output ? t.name != Y_ || t.shape != out_shape_ : t.name != X_) return "tensors besides the read and the result";
    }
    if (C_ * dtype_bytes(dtype_) % m_.vector_block_bytes) return "channels not a whole number of vector blocks";
    plan_phases();
    return plan();
  }

  // The column phases the taps read and an input row's region: the phases' planes in turn, whole
  // repeats in all.
  void plan_phases() {
    phases_.assign(static_cast<size_t>(sw_), Phase{});
    for (int64_t t = 0; t < KW_; ++t) {
      const int64_t u = t + ow_, a = floor_div(u, sw_);
      Phase& ph = phases_[static_cast<size_t>(u - a * sw_)];
      ph.lo = ph.used ? std::min(ph.lo, a) : a, ph.hi = ph.used ? std::max(ph.hi, a) : a, ph.used = true;
    }
    const int64_t eb = dtype_bytes(dtype_);
    int64_t at_byte = 0;
    for (int64_t i = 0; i < sw_; ++i) {
      Phase& ph = phases_[static_cast<size_t>(i)];
      if (!ph.used) continue;
      ph.first = std::max<int64_t>(ph.lo, 0), ph.last = std::min(Q_ - 1 + ph.hi, floor_div(Win_ - 1 - i, sw_));
      ph.offset = at_byte;
      at_byte += ph.slots(Q_) * C_ * eb;
    }
    row_bytes_ = round_up(at_byte, bytes_per_repeat_);
  }

  // Rt output rows per tile (Rt divides P): of those whose two value sets fit UB, the one with the
  // least estimated time per core: its tiles x max(vector repeats, GM bytes at the core's share of
  // the bandwidth, scalar instructions, half the GM read latency), plus the read and write latencies.
  std::string plan() {
    const isa::NpuPathSpec& in = m_.path(Buffer::GM, Buffer::UB);
    const isa::NpuPathSpec& out = m_.path(Buffer::UB, Buffer::GM);
    const double bw = std::min(double(in.bandwidth_bytes_per_cycle), m_.gm_shared_bandwidth_bytes_per_cycle / std::max(1, m_.cores));
    const int64_t eb = dtype_bytes(dtype_), lanes = m_.vector_lanes(dtype_), opitch = round_up(Q_ * C_, lanes);
    int64_t valid_bytes = 0;
    for (const Phase& ph : phases_)
      if (ph.used) valid_bytes += std::max<int64_t>(0, ph.last - ph.first + 1) * C_ * eb;
    double best = 0;
    for (int64_t rt : divisors(P_)) {
      const int64_t rows = sh_ * (rt - 1) + KH_, set = rows * row_bytes_ + rt * opitch * eb + bytes_per_repeat_;
      if (2 * set > m_.capacity(Buffer::UB)) continue;
      const double tiles = double(N_ * (P_ / rt)), per = std::ceil(tiles / m_.cores);
      const double vector = double(rt * (KH_ * KW_ - 1) * (opitch / lanes));
      const double bytes = double(rows * valid_bytes + rt * Q_ * C_ * eb);
      const double scalar = double(40 + rows * (8 + 4 * sw_) + rt * KH_ * KW_) * m_.scalar_cycles;
      const double t = per * std::max({vector, bytes / bw, scalar, double(in.latency_cycles) / 2}) + double(in.latency_cycles) +
                       double(out.latency_cycles);
      if (Rt_ == 0 || t < best) best = t, Rt_ = rt, rows_ = rows, opitch_ = opitch, set_bytes_ = set;
    }
    if (!Rt_) return "no tile of one output row fits the vector buffer";
    blocks_ = P_ / Rt_;
    return "";
  }

  int64_t out_offset() const { return rows_ * row_bytes_; }

  // vdup of 0 over `bytes` from UB byte `from` (whole repeats: they may run on into
  // bytes that a later copy or vdup writes).
  void zero(int64_t from, int64_t bytes) {
    const int64_t reps = (bytes + bytes_per_repeat_ - 1) / bytes_per_repeat_;
    for (int64_t r = 0; r < reps; r += max_repeat_)
      op(Opcode::Vdup, {type(dtype_), at(Buffer::UB, from + r * bytes_per_repeat_), Operand::float_(0),
                        imm(std::min(max_repeat_, reps - r)), imm(1), imm(repeat_blocks_)});
  }

  // The slots of every plane outside X's columns, in both value sets: no copy writes them.
  void zero_outside_columns() {
    const int64_t cb = C_ * dtype_bytes(dtype_);
    for (int64_t set = 0; set < 2; ++set)
      for (int64_t ir = 0; ir < rows_; ++ir)
        for (const Phase& ph : phases_) {
          if (!ph.used) continue;
          const int64_t row = set * set_bytes_ + ir * row_bytes_ + ph.offset, end = ph.lo + ph.slots(Q_);
          if (ph.first > ph.last) {
            zero(row, ph.slots(Q_) * cb);
            continue;
          }
          if (ph.first > ph.lo) zero(row, (ph.first - ph.lo) * cb);
          if (ph.last + 1 < end) zero(row + (ph.last + 1 - ph.lo) * cb, (end - ph.last - 1) * cb);
        }
  }

  // kTile's image kN, row block kB, the byte offsets of its first input row in X (kRow: negative
  // above a zero border) and of its first output element in Y (kY).
  void offsets() {
    const int64_t eb = dtype_bytes(dtype_);
    op(Opcode::Div, {reg(kN), reg(kTile), imm(blocks_)});
    op(Opcode::Mul, {reg(kTmp), reg(kN), imm(blocks_)});
    op(Opcode::Sub, {reg(kB), reg(kTile), reg(kTmp)});
    op(Opcode::Mul, {reg(kRow), reg(kN), imm(Hin_)});
    op(Opcode::Mul, {reg(kTmp), reg(kB), imm(sh_ * Rt_)});
    op(Opcode::Add, {reg(kRow), reg(kRow), reg(kTmp)});
    op(Opcode::Add, {reg(kRow), reg(kRow), imm(oh_)});
    op(Opcode::Mul, {reg(kRow), reg(kRow), imm(Win_ * C_ * eb)});
    op(Opcode::Mul, {reg(kY), reg(kTile), imm(Rt_ * Q_ * C_ * eb)});
  }

  // Input row ir of the tile in set `set`: one DMA per phase with columns inside X.
  void copy_row(int64_t set, int64_t ir) {
    const int64_t cb = C_ * dtype_bytes(dtype_);
    for (int64_t i = 0; i < sw_; ++i) {
      const Phase& ph = phases_[static_cast<size_t>(i)];
      if (!ph.used || ph.first > ph.last) continue;
      const int64_t n = ph.last - ph.first + 1, dst = set * set_bytes_ + ir * row_bytes_ + ph.offset + (ph.first - ph.lo) * cb;
      const Operand src = at(Buffer::GM, gm_.at(X_) + ir * Win_ * cb + (sw_ * ph.first + i) * cb, kRow);
      if (sw_ == 1)
        op(Opcode::DmaIn, {at(Buffer::UB, dst), src, imm(1), imm(n * cb), imm(0), imm(0)});
      else
        op(Opcode::DmaIn, {at(Buffer::UB, dst), src, imm(n), imm(cb), imm((sw_ - 1) * cb), imm(0)});
    }
  }

  // The tile's input rows: copied where inside X, else zeroed; a row that is inside for some row
  // blocks and not others decides at run time (kB against its first and last block inside).
  void load(bool in_loop, int64_t d, int64_t set) override {
    tile_index(in_loop, d);
    offsets();
    const int64_t step = sh_ * Rt_;
    for (int64_t ir = 0; ir < rows_; ++ir) {
      const int64_t lo = floor_div(-oh_ - ir + step - 1, step), hi = floor_div(Hin_ - 1 - oh_ - ir, step);
      const int64_t region = set * set_bytes_ + ir * row_bytes_;
      if (lo > hi || hi < 0 || lo > blocks_ - 1) {
        zero(region, row_bytes_);
        continue;
      }
      if (lo <= 0 && hi >= blocks_ - 1) {
        copy_row(set, ir);
        continue;
      }
      op(Opcode::Mov, {reg(kOk), imm(1)});
      if (lo > 0) {  // kOk = !(kB < lo)
        op(Opcode::Slt, {reg(kTmp), reg(kB), imm(lo)});
        op(Opcode::Sub, {reg(kOk), imm(1), reg(kTmp)});
      }
      if (hi < blocks_ - 1) {  // kOk &= !(hi < kB)
        op(Opcode::Slt, {reg(kTmp), imm(hi), reg(kB)});
        op(Opcode::Sub, {reg(kLe), imm(1), reg(kTmp)});
        op(Opcode::Mul, {reg(kOk), reg(kOk), reg(kLe)});
      }
      op(Opcode::Loop, {reg(kGuard), imm(0), reg(kOk), imm(1)});
      copy_row(set, ir);
      op(Opcode::EndLoop, {});
      op(Opcode::Loop, {reg(kGuard), reg(kOk), imm(1), imm(1)});
      zero(region, row_bytes_);
      op(Opcode::EndLoop, {});
    }
  }

  // Each output row: the vmax (vmin) of its taps in the order (r, t), then the tile's store.
  void compute(bool in_loop, int64_t d, int64_t set) override {
    const int64_t eb = dtype_bytes(dtype_), cb = C_ * eb, base = set * set_bytes_, reps = opitch_ / m_.vector_lanes(dtype_);
    const Opcode o = min_ ? Opcode::Vmin : Opcode::Vmax;
    for (int64_t rr = 0; rr < Rt_; ++rr) {
      std::vector<int64_t> taps;
      for (int64_t r = 0; r < KH_; ++r)
        for (int64_t t = 0; t < KW_; ++t) {
          const int64_t u = t + ow_, a = floor_div(u, sw_);
          const Phase& ph = phases_[static_cast<size_t>(u - a * sw_)];
          taps.push_back(base + (sh_ * rr + r) * row_bytes_ + ph.offset + (a - ph.lo) * cb);
        }
      const int64_t dst = base + out_offset() + rr * opitch_ * eb;
      for (int64_t c = 0; c < reps; c += max_repeat_) {
        const int64_t off = c * bytes_per_repeat_, n = std::min(max_repeat_, reps - c);
        for (size_t i = 1; i < taps.size(); ++i)
          op(o, {type(dtype_), at(Buffer::UB, dst + off), at(Buffer::UB, (i == 1 ? taps[0] : dst) + off), at(Buffer::UB, taps[i] + off),
                 imm(n), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_), imm(repeat_blocks_)});
      }
    }
    tile_index(in_loop, d);
    op(Opcode::Mul, {reg(kY), reg(kTile), imm(Rt_ * Q_ * cb)});
    const int64_t n = Q_ * cb;
    if (opitch_ * eb == n)
      op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(Y_), kY), at(Buffer::UB, base + out_offset()), imm(1), imm(Rt_ * n), imm(0), imm(0)});
    else
      op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(Y_), kY), at(Buffer::UB, base + out_offset()), imm(Rt_), imm(n), imm(opitch_ * eb - n),
                          imm(0)});
  }

  std::string Y_;
  DType dtype_ = DType::F16;
  bool min_ = false;
  int64_t Rt_ = 0, rows_ = 0, blocks_ = 0, opitch_ = 0, row_bytes_ = 0, set_bytes_ = 0;
  std::vector<Phase> phases_;
};

}  // namespace

std::string why_not_window_max(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return WindowMax(kernel, machine).why_not();
}

NpuKernel emit_window_max(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return WindowMax(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
