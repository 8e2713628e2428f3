// Group statistics kernels on the vector unit: see group_stats.h.
#include "compiler/emit_npu/group_stats.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <set>

#include "compiler/emit_npu/pointwise.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

enum Reg : uint8_t { kGroup = 1, kN, kG, kX, kP, kTmp };
enum class Shape { Full, Group, Param };
enum class Kind { Full, Group, Reduce };

class GroupStats : public VectorCode {
 public:
  GroupStats(const kernel::Kernel& k, const isa::NpuMachine& m) : VectorCode(k, m), lanes_(m.vector_lanes(DType::F32)) {}

  std::string why_not() {
    if (std::string w = analyse(); !w.empty()) return "kernel " + k_.name + ": group statistics: " + w;
    return "";
  }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw UserError(w);
    NpuKernel out;
    npu::Program& p = begin_program(out);
    for (const npu::TensorBinding& t : p.tensors) gm_[t.name] = t.gm_offset;
    const int64_t groups = N_ * G_;
    p.cores = static_cast<int>(std::min<int64_t>(groups, m_.cores));
    op(Opcode::Loop, {reg(kGroup), reg(npu::kRegCoreId), imm(groups), reg(npu::kRegCoreCount)});
    op(Opcode::Div, {reg(kN), reg(kGroup), imm(G_)});
    op(Opcode::Mul, {reg(kTmp), reg(kN), imm(G_)});
    op(Opcode::Sub, {reg(kG), reg(kGroup), reg(kTmp)});
    op(Opcode::Mul, {reg(kX), reg(kN), imm(I_ * G_ * E_ * 4)});
    op(Opcode::Mul, {reg(kP), reg(kG), imm(E_ * 4)});
    op(Opcode::Add, {reg(kX), reg(kX), reg(kP)});
    emit_group();
    op(Opcode::EndLoop, {});
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format(
        "group statistics over {} x {} x {} x {} (groups (n, g) over (i, e)): {} group(s) per core on {} core(s), a group's "
        "values kept in UB through every statement ({} slot(s) of {} bytes), chunks of {} rows, per-group values one repeat each",
        N_, I_, G_, E_, (groups + p.cores - 1) / p.cores, p.cores, slots_, slot_bytes_, rows_));
    npu::validate_program(p);
    return out;
  }

 private:
  // ---- the form ----
  std::string analyse() {
    const ir::Function* f = k_.function;
    if (!f || f->statements.size() < 2) return "fewer than two statements";
    const ir::Tensor* full = nullptr;
    for (const ir::Tensor& t : f->tensors)
      if (t.shape.size() == 4) full = &t;
    if (!full) return "no 4-d tensor";
    const std::vector<int64_t> fs = sizes_of(*full);
    N_ = fs[0], I_ = fs[1], G_ = fs[2], E_ = fs[3];
    for (const ir::Tensor& t : f->tensors) {
      if (t.dtype != DType::F32) return "tensor " + t.name + " is not f32";
      const std::vector<int64_t> s = sizes_of(t);
      if (s == fs) shapes_[t.name] = Shape::Full;
      else if (s == std::vector<int64_t>{N_, G_} && t.kind != ir::TensorKind::Input) shapes_[t.name] = Shape::Group;
      else if (s == std::vector<int64_t>{G_, E_} && t.kind == ir::TensorKind::Input) shapes_[t.name] = Shape::Param;
      else return "tensor " + t.name + " is neither [N, I, G, E], a per-group value nor a [G, E] parameter";
      if (t.kind == ir::TensorKind::Output && shapes_[t.name] != Shape::Full) return "output " + t.name + " is not [N, I, G, E]";
      if (t.kind == ir::TensorKind::Input && shapes_[t.name] == Shape::Group) return "per-group input " + t.name;
    }
    if (E_ > lanes_ || lanes_ % E_ || E_ % m_.block_elements(DType::F32)) return "E does not divide a repeat in whole blocks";
    bool reduces = false;
    for (const ir::Statement& s : f->statements) {
      if (std::string w = classify(s); !w.empty()) return "statement " + s.name + ": " + w;
      reduces |= kinds_.back() == Kind::Reduce;
    }
    if (!reduces) return "no per-group sum";
    return plan(*f);
  }

  static bool plain(const std::vector<ir::AffineExpr>& idx) {
    for (const ir::AffineExpr& e : idx)
      if (e.index_coeffs.size() != 1 || e.index_coeffs.begin()->second != 1 || !e.param_coeffs.empty() || e.constant || e.has_div())
        return false;
    return true;
  }

  // The statement's kind (appended to kinds_); every read at its place: full at (n, i, g, e), per
  // group at (n, g), parameters at (g, e).
  std::string classify(const ir::Statement& s) {
    const Shape out = shapes_.at(s.output);
    std::vector<ir::AffineExpr> full_idx;
    Kind kind;
    if (s.reduction != ir::Reduction::None) {
      if (s.reduction != ir::Reduction::Sum || !s.init || out != Shape::Group) return "a reduction other than a per-group sum";
      kind = Kind::Reduce;
    } else {
      kind = out == Shape::Full ? Kind::Full : Kind::Group;
      if (kind == Kind::Full) full_idx = s.out_indices;
    }
    if (!plain(s.out_indices)) return "output indices are not plain";
    for (const ir::IndexVar& d : s.domain)
      if (d.lo.evaluate({}, k_.sizes) != 0) return "an index not from 0";
    std::string why;
    std::function<void(const ir::Expr&)> check = [&](const ir::Expr& e) {
      if (!why.empty()) return;
      if (e.kind == ir::ExprKind::IndexValue) why = "an index as a value";
      if (e.kind == ir::ExprKind::Apply && !maps_operator(e.op)) why = "an operation the vector code does not map";
      if (e.kind == ir::ExprKind::Access) {
        const Shape sh = shapes_.at(e.name);
        if (sh == Shape::Full) {
          if (kind == Kind::Group) why = "a per-group statement reads " + e.name;
          if (full_idx.empty()) full_idx = e.indices;
          if (e.indices != full_idx) why = "reads " + e.name + " at other indices";
        } else if (sh == Shape::Param && kind == Kind::Group) {
          why = "a per-group statement reads " + e.name;
        }
        reads_.push_back({&e, sh});
      }
      for (const auto& a : e.args) check(*a);
    };
    check(*s.rhs);
    if (!why.empty()) return why;
    if (kind != Kind::Group) {
      if (full_idx.size() != 4 || !plain(full_idx)) return "no full read at (n, i, g, e)";
      const std::vector<ir::AffineExpr> group_idx = {full_idx[0], full_idx[2]}, param_idx = {full_idx[2], full_idx[3]};
      if (kind == Kind::Reduce) {
        if (s.out_indices != group_idx) return "not a sum over (i, e) per (n, g)";
        for (const ir::IndexVar& d : s.domain)
          if (d.is_reduction && !(ir::AffineExpr::index(d.name) == full_idx[1] || ir::AffineExpr::index(d.name) == full_idx[3]))
            return "a sum over other indices";
        if (s.domain.size() != 4) return "not a sum over (i, e) per (n, g)";
      }
      for (const auto& [e, sh] : reads_)
        if ((sh == Shape::Group && e->indices != group_idx) || (sh == Shape::Param && e->indices != param_idx))
          return "reads " + e->name + " at other indices";
    } else {
      for (const auto& [e, sh] : reads_)
        if (sh == Shape::Group && e->indices != s.out_indices) return "reads " + e->name + " at other indices";
    }
    reads_.clear();
    kinds_.push_back(kind);
    return "";
  }

  // ---- the plan: full values in slots of a group each, chunks of rows ----
  std::string plan(const ir::Function& f) {
    std::map<std::string, size_t> last_read;
    for (size_t i = 0; i < f.statements.size(); ++i) {
      std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
        if (e.kind == ir::ExprKind::Access) last_read[e.name] = i;
        for (const auto& a : e.args) walk(*a);
      };
      walk(*f.statements[i].rhs);
    }
    // every full value keeps one slot from its statement to its last read; a statement's result takes
    // the slot of a value it reads last (in place), else a new one
    std::map<int, std::string> owner;
    int temps = 0;
    for (const ir::Tensor& t : f.tensors)
      if (t.kind == ir::TensorKind::Input && shapes_.at(t.name) == Shape::Full) owner[slots_] = t.name, slot_of_[t.name] = slots_++;
    for (size_t i = 0; i < f.statements.size(); ++i) {
      const ir::Statement& s = f.statements[i];
      temps = std::max(temps, count_nodes(*s.rhs) + 2);
      if (kinds_[i] != Kind::Full) continue;
      int slot = -1;
      for (const auto& [sl, name] : owner)
        if (last_read.count(name) && last_read.at(name) == i && !is_output(name)) slot = sl;
      if (slot < 0) slot = slots_++;
      owner[slot] = s.output;
      slot_of_[s.output] = slot;
    }
    slot_bytes_ = round_up(I_ * E_ * 4, m_.vector_block_bytes);
    const int64_t small = int64_t(f.statements.size() + f.tensors.size() + 64) * bytes_per_repeat_;
    for (int64_t rows = I_; rows >= 1; --rows) {
      if (I_ % rows || rows * E_ % lanes_ || rows * E_ / lanes_ > max_repeat_) continue;
      chunk_ = rows * E_;
      if (slots_ * slot_bytes_ + temps * chunk_ * 4 + small <= m_.capacity(Buffer::UB) && chunk_ <= 64 * lanes_) {
        rows_ = rows;
        temps_ = temps;
        return "";
      }
    }
    return "a group's values do not fit the vector buffer";
  }

  bool is_output(const std::string& name) const {
    const kernel::GlobalTensor* t = k_.find_tensor(name);
    return t && !t->temporary && t->kind == ir::TensorKind::Output;
  }

  // ---- emission ----
  int64_t slot_region(const std::string& name, int64_t chunk) const { return slot_of_.at(name) * slot_bytes_ + chunk * chunk_ * 4; }

  // The group's statements in order (GM offsets: kX its first element of X, kP its parameters' row).
  void emit_group() {
    const ir::Function& f = *k_.function;
    const int64_t temps_base = slots_ * slot_bytes_;
    small_ = temps_base + temps_ * chunk_ * 4;
    group_values_.clear();
    for (const ir::Tensor& t : f.tensors)  // parameters: their E values repeated over one repeat
      if (shapes_.at(t.name) == Shape::Param) {
        const int64_t r = take_small();
        for (int64_t c = 0; c < lanes_ / E_; ++c)
          op(Opcode::DmaIn, {at(Buffer::UB, r + c * E_ * 4), at(Buffer::GM, gm_.at(t.name), kP), imm(1), imm(E_ * 4), imm(0), imm(0)});
        group_values_[t.name] = Value{false, 0, r, DType::F32, false, true};
      }
    const int64_t chunks = I_ / rows_, row_bytes = G_ * E_ * 4;
    for (const ir::Tensor& t : f.tensors)
      if (t.kind == ir::TensorKind::Input && shapes_.at(t.name) == Shape::Full)
        for (int64_t c = 0; c < chunks; ++c)
          op(Opcode::DmaIn, {at(Buffer::UB, slot_region(t.name, c)), at(Buffer::GM, gm_.at(t.name) + c * rows_ * row_bytes, kX), imm(rows_),
                             imm(E_ * 4), imm((G_ - 1) * E_ * 4), imm(0)});
    for (size_t i = 0; i < f.statements.size(); ++i) {
      const ir::Statement& s = f.statements[i];
      region_base_ = temps_base;
      if (kinds_[i] == Kind::Group) {
        next_region_ = 0;
        group_values_[s.output] = persist(*s.rhs, take_small());
        continue;
      }
      hoist(*s.rhs);
      if (kinds_[i] == Kind::Reduce) {
        group_values_[s.output] = reduce(*s.rhs, chunks);
        continue;
      }
      for (int64_t c = 0; c < chunks; ++c) {
        bind_chunk(c);
        const int64_t dst = slot_region(s.output, c);
        forced_ = dst, top_ = s.rhs.get(), next_region_ = 0;
        Value v = compile(*s.rhs, chunk_);
        forced_ = -1, top_ = nullptr;
        if (v.scalar || v.region != dst) copy(dst, v, chunk_);
        if (is_output(s.output))
          op(Opcode::DmaOut, {at(Buffer::GM, gm_.at(s.output) + c * rows_ * row_bytes, kX), at(Buffer::UB, dst), imm(rows_), imm(E_ * 4),
                              imm(0), imm((G_ - 1) * E_ * 4)});
      }
    }
  }

  int64_t take_small() {
    const int64_t r = small_;
    small_ += bytes_per_repeat_;
    return r;
  }

  // Full values of chunk c (their slots), per-group values and parameters (one repeat, stride 0).
  void bind_chunk(int64_t c) {
    tensors_ = group_values_;
    for (const auto& [name, sl] : slot_of_) tensors_[name] = Value{false, 0, slot_region(name, c), DType::F32};
  }

  // dst (n elements) = v: a constant by vdup, a value by an exact copy (x * 1 keeps -0 and NaN).
  void copy(int64_t dst, const Value& v, int64_t n) {
    if (v.scalar) {
      op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, dst), Operand::float_(v.constant), imm(repeats(n, DType::F32)), imm(1),
                        imm(repeat_blocks_)});
      return;
    }
    op(Opcode::Vmuls, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, v.region), Operand::float_(1), imm(repeats(n, DType::F32)),
                       imm(1), imm(1), imm(repeat_blocks_), imm(source_stride(v))});
  }

  // A per-group expression once (one repeat) into `region`, as a value read with repeat stride 0.
  Value persist(const ir::Expr& e, int64_t region) {
    tensors_ = group_values_;
    forced_ = region, top_ = &e;
    Value v = compile(e, lanes_);
    forced_ = -1, top_ = nullptr;
    if (v.scalar || v.region != region) copy(region, v, lanes_);
    return Value{false, 0, region, DType::F32, false, true};
  }

  // Maximal subexpressions of e that read per-group values and constants only: computed once.
  void hoist(const ir::Expr& e) {
    hoisted_.clear();
    std::function<bool(const ir::Expr&)> group_only = [&](const ir::Expr& x) {
      if (x.kind == ir::ExprKind::Access) return shapes_.at(x.name) == Shape::Group;
      bool all = true;
      for (const auto& a : x.args) all = group_only(*a) && all;
      return all && x.kind != ir::ExprKind::IndexValue;
    };
    std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& x) {
      if (x.kind == ir::ExprKind::Apply && group_only(x)) {
        region_base_ = slots_ * slot_bytes_, next_region_ = 0;
        hoisted_[&x] = persist(x, take_small());
        return;
      }
      for (const auto& a : x.args) walk(*a);
    };
    walk(e);
    region_base_ = slots_ * slot_bytes_;
  }

  Value compile(const ir::Expr& e, int64_t n) override {
    if (const auto it = hoisted_.find(&e); it != hoisted_.end()) return it->second;
    return VectorCode::compile(e, n);
  }
  int64_t result_region(const ir::Expr& e, const std::vector<Value>& a) override {
    (void)a;
    return &e == top_ && forced_ >= 0 ? forced_ : fresh_region();
  }

  // Sum over the group of e: each chunk's repeats folded pairwise into one, added into a one-repeat
  // accumulator, whose lanes vcadd adds; broadcast back to a repeat.
  Value reduce(const ir::Expr& e, int64_t chunks) {
    const int64_t acc = take_small(), lane = take_small(), result = take_small();
    op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, acc), Operand::float_(0), imm(1), imm(1), imm(repeat_blocks_)});
    for (int64_t c = 0; c < chunks; ++c) {
      bind_chunk(c);
      next_region_ = 0;
      Value v = compile(e, chunk_);
      if (v.scalar) v = vector_of(v, chunk_);
      int64_t reps = chunk_ / lanes_, src = v.region;
      const int64_t tmp = fresh_region();
      while (reps > 1) {  // halves added pairwise (out of place first: v may be a full value)
        const int64_t h = reps / 2;
        op(Opcode::Vadd, {type(DType::F32), at(Buffer::UB, tmp), at(Buffer::UB, src), at(Buffer::UB, src + h * bytes_per_repeat_), imm(h),
                          imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(v.pattern && src == v.region ? 0 : repeat_blocks_),
                          imm(v.pattern && src == v.region ? 0 : repeat_blocks_)});
        if (reps % 2)
          op(Opcode::Vadd, {type(DType::F32), at(Buffer::UB, tmp), at(Buffer::UB, tmp), at(Buffer::UB, src + (reps - 1) * bytes_per_repeat_),
                            imm(1), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_), imm(repeat_blocks_)});
        reps = h, src = tmp;
      }
      op(Opcode::Vadd, {type(DType::F32), at(Buffer::UB, acc), at(Buffer::UB, acc), at(Buffer::UB, src), imm(1), imm(1), imm(1), imm(1),
                        imm(repeat_blocks_), imm(repeat_blocks_), imm(repeat_blocks_)});
    }
    op(Opcode::Vcadd, {type(DType::F32), at(Buffer::UB, lane), at(Buffer::UB, acc), imm(1), imm(1), imm(repeat_blocks_)});
    op(Opcode::Vbrcb, {type(DType::F32), at(Buffer::UB, result), at(Buffer::UB, lane), imm(1), imm(1), imm(repeat_blocks_)});
    return Value{false, 0, result, DType::F32, false, true};
  }

  const int64_t lanes_;
  int64_t N_ = 0, I_ = 0, G_ = 0, E_ = 0, rows_ = 0, slot_bytes_ = 0, small_ = 0;
  int slots_ = 0, temps_ = 0;
  std::map<std::string, Shape> shapes_;
  std::vector<Kind> kinds_;
  std::vector<std::pair<const ir::Expr*, Shape>> reads_;
  std::map<std::string, int> slot_of_;
  std::map<std::string, Value> group_values_;
  std::map<const ir::Expr*, Value> hoisted_;
  std::map<std::string, int64_t> gm_;
  int64_t forced_ = -1;
  const ir::Expr* top_ = nullptr;
};

}  // namespace

std::string why_not_group_stats(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return GroupStats(kernel, machine).why_not();
}

NpuKernel emit_group_stats(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return GroupStats(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
