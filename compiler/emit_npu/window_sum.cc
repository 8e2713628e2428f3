// Stride-1 window sums over channel-last maps: see window_sum.h.
#include "compiler/emit_npu/window_sum.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

#include "compiler/emit_npu/window_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

class WindowSum : public WindowPlan {
  enum Reg : uint8_t { kRow = kFirstFree, kQj, kN, kP, kA, kB, kX, kY, kTmp };

 public:
  WindowSum(const kernel::Kernel& k, const isa::NpuMachine& m) : WindowPlan(k, m) {}

  std::string why_not() {
    if (std::string w = analyse(); !w.empty()) return "kernel " + k_.name + ": window sum: " + w;
    return "";
  }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw UserError(w);
    return emit_window(N_ * (P_ / Rt_) * qch_, kTmp, [] {}, [&](int cores, int64_t per) {
      return fmt::format(
          "window sum {}x{} (stride 1) over {} x {} x {} x {}: tiles of {} output row(s) x {} columns on {} core(s), {} tiles "
          "each; a tile's input rows converted to f32 once (not once per tap), taps added in UB, two value sets",
          KH_, KW_, N_, P_, Q_, C_, Rt_, Qc_, cores, per);
    });
  }

 private:
  std::string analyse() {
    const ir::Function* f = k_.function;
    if (!f || f->statements.empty()) return "no tensor IR attached";
    const ir::Statement& s = f->statements[0];
    if (s.reduction != ir::Reduction::Sum || !s.init || s.acc_type != DType::F32) return "not an f32 sum from 0";
    const ir::Expr* x = s.rhs.get();
    cast_ = x->kind == ir::ExprKind::Apply && x->op == ir::Op::Cast;
    if (cast_) x = x->args[0].get();
    if (x->kind != ir::ExprKind::Access) return "the sum is not of one read";
    if (!(cast_ ? x->type == DType::F16 && s.rhs->type == DType::F32 : x->type == DType::F32)) return "not f16 cast to f32 or f32";
    S_ = s.output;
    if (std::string w = match_read(s, *x, false); !w.empty()) return w;
    if (std::string w = bind_input(); !w.empty()) return w;
    if (Hin_ < P_ + KH_ - 1 || Win_ < Q_ + KW_ - 1) return "the read's shape";
    if (C_ % m_.block_elements(DType::F32)) return "channels not a whole number of f32 blocks";
    if (std::string w = analyse_epilogue(*f, outs_); !w.empty()) return w;
    return plan();
  }

  // The statements after the sum: element-wise over its indices, reading it and each other there.
  std::string analyse_epilogue(const ir::Function& f, const std::vector<std::string>& outs) {
    std::set<std::string> known = {S_};
    std::vector<ir::AffineExpr> idx;
    for (const std::string& v : outs) idx.push_back(ir::AffineExpr::index(v));
    for (size_t i = 1; i < f.statements.size(); ++i) {
      const ir::Statement& s = f.statements[i];
      if (s.reduction != ir::Reduction::None || s.out_indices != idx) return "statement " + s.name + " is not element-wise over the sum";
      for (const ir::IndexVar& d : s.domain)
        if (d.is_reduction) return "statement " + s.name + " reduces";
      std::string why;
      std::function<void(const ir::Expr&)> check = [&](const ir::Expr& e) {
        if (!why.empty()) return;
        if (e.kind == ir::ExprKind::IndexValue) why = "an index as a value";
        if (e.kind == ir::ExprKind::Access && (!known.count(e.name) || e.indices != idx)) why = "reads " + e.name + " elsewhere";
        if (e.kind == ir::ExprKind::Apply && (!maps_operator(e.op) || (e.type != DType::F32 && e.type != DType::F16)))
          why = "an operation the vector code does not map";
        for (const auto& a : e.args) check(*a);
      };
      check(*s.rhs);
      if (!why.empty()) return "statement " + s.name + ": " + why;
      known.insert(s.output);
      epilogue_regions_ += 1 + count_nodes(*s.rhs);
    }
    for (const kernel::GlobalTensor& t : k_.tensors) {
      if (t.temporary) continue;
      if (t.kind == ir::TensorKind::Output) {
        if (!known.count(t.name) || t.shape != out_shape_) return "output " + t.name + " is not over the sum's indices";
        stored_.push_back(t.name);
      } else if (t.name != X_) {
        return "input " + t.name + " besides the window's";
      }
    }
    return stored_.empty() ? "no output" : "";
  }

  // A tile: Rt output rows (Rt divides P: one image) x Qc columns (Qc divides Q). Of those whose two
  // value sets fit UB (and each value one instruction's repeats), the one with the least estimated
  // time per core: its tiles x max(vector repeats, GM bytes at the core's bandwidth, scalar
  // instructions, half the GM read latency), plus one GM read latency.
  std::string plan() {
    const int64_t lanes = m_.vector_lanes(DType::F32), xb = cast_ ? 2 : 4;
    const isa::NpuPathSpec& in = m_.path(Buffer::GM, Buffer::UB);
    const double bw = std::min(double(in.bandwidth_bytes_per_cycle), m_.gm_shared_bandwidth_bytes_per_cycle / std::max(1, m_.cores));
    double best = 0;
    for (int64_t qch : divisors(Q_)) {
      for (int64_t rt : divisors(P_)) {
        const int64_t qc = Q_ / qch, n = qc * C_, spitch = round_up(n, lanes), in_rows = KH_ + rt - 1;
        const int64_t pitch = round_up((qc + KW_ - 1) * C_, lanes);  // an input row: whole f32 repeats
        if (rt * spitch / lanes > max_repeat_) continue;
        const int64_t raw = round_up(in_rows * pitch * xb, m_.vector_block_bytes), conv = cast_ ? in_rows * pitch * 4 : 0;
        const int64_t set = raw + conv + (1 + epilogue_regions_) * rt * spitch * 4;
        if (2 * set > m_.capacity(Buffer::UB)) continue;
        const double tiles = double(N_ * (P_ / rt) * qch), per = std::ceil(tiles / m_.cores);
        const double vector = (cast_ ? double(in_rows * pitch / lanes) : 0) +
                              double(rt * (spitch / lanes)) * double(KH_ * KW_ - 1 + epilogue_regions_);
        const double bytes = double(in_rows * (qc + KW_ - 1) * C_ * xb + rt * n * 2 * int64_t(stored_.size()));
        // a tile's scalar work (its offsets twice, its instructions) and, with two value sets, half a
        // GM read latency where the tile's own work is shorter
        const double scalar = double(40 + rt * KH_ * KW_ + 2 * epilogue_regions_) * m_.scalar_cycles;
        const double t = per * std::max({vector, bytes / bw, scalar, double(in.latency_cycles) / 2}) + double(in.latency_cycles);
        if (qch_ == 0 || t < best) {
          best = t, qch_ = qch, Qc_ = qc, Rt_ = rt, pitch_ = pitch, spitch_ = spitch;
          chunk_ = rt * spitch, raw_bytes_ = raw, conv_bytes_ = conv, set_bytes_ = set;
        }
      }
    }
    return qch_ ? "" : "no tile of one output row fits the vector buffer";
  }

  // Tile `tile` (a register)'s GM offsets: kX (the window's first input element, bytes of X) and kY
  // (its first output element, in elements).
  void offsets(uint8_t tile) {
    const int64_t xb = cast_ ? 2 : 4, blocks = P_ / Rt_;
    op(Opcode::Div, {reg(kRow), reg(tile), imm(qch_)});  // row block n * blocks + b
    op(Opcode::Mul, {reg(kTmp), reg(kRow), imm(qch_)});
    op(Opcode::Sub, {reg(kQj), reg(tile), reg(kTmp)});
    op(Opcode::Div, {reg(kN), reg(kRow), imm(blocks)});
    op(Opcode::Mul, {reg(kTmp), reg(kN), imm(blocks)});
    op(Opcode::Sub, {reg(kP), reg(kRow), reg(kTmp)});
    op(Opcode::Mul, {reg(kP), reg(kP), imm(Rt_)});
    op(Opcode::Mul, {reg(kA), reg(kN), imm(Hin_)});
    op(Opcode::Add, {reg(kA), reg(kA), reg(kP)});
    op(Opcode::Mul, {reg(kA), reg(kA), imm(Win_ * C_ * xb)});
    op(Opcode::Mul, {reg(kB), reg(kQj), imm(Qc_ * C_ * xb)});
    op(Opcode::Add, {reg(kX), reg(kA), reg(kB)});
    op(Opcode::Mul, {reg(kA), reg(kRow), imm(Rt_ * Q_ * C_)});
    op(Opcode::Mul, {reg(kB), reg(kQj), imm(Qc_ * C_)});
    op(Opcode::Add, {reg(kY), reg(kA), reg(kB)});
  }

  void load(bool in_loop, int64_t d, int64_t set) override {
    tile_index(in_loop, d);
    offsets(kTile);
    const int64_t xb = cast_ ? 2 : 4, span = (Qc_ + KW_ - 1) * C_;
    op(Opcode::DmaIn, {at(Buffer::UB, set * set_bytes_), at(Buffer::GM, gm_.at(X_), kX), imm(KH_ + Rt_ - 1), imm(span * xb),
                       imm((Win_ * C_ - span) * xb), imm((pitch_ - span) * xb)});
  }

  // A tile's taps, element-wise statements and stores (its offsets from tile d).
  void compute(bool in_loop, int64_t d, int64_t set) override {
    const int64_t base = set * set_bytes_, n = Qc_ * C_, lanes = m_.vector_lanes(DType::F32);
    int64_t src = base;
    if (cast_) {  // each input element once: KH rows of pitch_ f16 -> f32
      src = base + raw_bytes_;
      const int64_t reps = (KH_ + Rt_ - 1) * pitch_ / lanes;
      for (int64_t r = 0; r < reps; r += max_repeat_)
        op(Opcode::Vconv, {type(DType::F32), type(DType::F16), at(Buffer::UB, src + r * bytes_per_repeat_),
                           at(Buffer::UB, base + r * bytes_per_repeat_ / 2), imm(std::min(max_repeat_, reps - r)), imm(1), imm(1),
                           imm(repeat_blocks_), imm(repeat_blocks_ / 2)});
    }
    region_base_ = base + raw_bytes_ + conv_bytes_;
    next_region_ = 0;
    const Value sum{false, 0, fresh_region(), DType::F32};
    // output row rr's tap i: input row rr + i / KW, column offset i % KW
    auto tap = [&](int64_t rr, int64_t i) { return src + ((rr + i / KW_) * pitch_ + (i % KW_) * C_) * 4; };
    const int64_t reps = spitch_ / lanes;
    for (int64_t rr = 0; rr < Rt_; ++rr) {
      const int64_t dst = sum.region + rr * spitch_ * 4;
      if (KH_ * KW_ == 1)
        op(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, tap(rr, 0)), Operand::float_(0), imm(reps), imm(1),
                           imm(1), imm(repeat_blocks_), imm(repeat_blocks_)});
      for (int64_t i = 1; i < KH_ * KW_; ++i)  // ((x00 + x01) + x02) + x10 ...: the interpreter's order
        op(Opcode::Vadd, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, i == 1 ? tap(rr, 0) : dst), at(Buffer::UB, tap(rr, i)),
                          imm(reps), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_), imm(repeat_blocks_)});
    }
    std::map<std::string, Value> values = {{S_, sum}};
    const ir::Function& f = *k_.function;
    for (size_t i = 1; i < f.statements.size(); ++i) {
      tensors_ = values;
      Value v = compile(*f.statements[i].rhs, Rt_ * spitch_);
      if (v.scalar) v = vector_of(v, Rt_ * spitch_);
      const ir::Tensor* t = f.find_tensor(f.statements[i].output);
      if (v.type != t->dtype) throw UserError("kernel " + k_.name + ": window sum: statement " + f.statements[i].name + " result type differs");
      values[t->name] = v;
    }
    tile_index(in_loop, d);
    offsets(kTile);
    for (const std::string& name : stored_) {
      const Value& v = values.at(name);
      const int64_t eb = dtype_bytes(v.type);
      op(Opcode::Mul, {reg(kTmp), reg(kY), imm(eb)});
      op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(name), kTmp), at(Buffer::UB, v.region), imm(Rt_), imm(n * eb), imm((spitch_ - n) * eb),
                          imm((Q_ - Qc_) * C_ * eb)});
    }
  }

  std::string S_;
  std::vector<std::string> stored_;
  bool cast_ = false;
  int64_t qch_ = 0, Qc_ = 0, Rt_ = 1, spitch_ = 0, pitch_ = 0, raw_bytes_ = 0, conv_bytes_ = 0, set_bytes_ = 0;
  int epilogue_regions_ = 0;
};

}  // namespace

std::string why_not_window_sum(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return WindowSum(kernel, machine).why_not();
}

NpuKernel emit_window_sum(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return WindowSum(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
