#include "compiler/npu_sync/footprint.h"

#include <algorithm>
#include <array>
#include <limits>

#include "isa/base/error.h"
#include "isa/npu_footprint.h"
#include "isa/npu_machine.h"

namespace tessel::npu_sync {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;
using npu::OperandKind;

constexpr int64_t kHuge = int64_t(1) << 50;

// An integer interval; `known == false` is "any value".
struct Range {
  bool known = false;
  int64_t lo = 0, hi = 0;
  static Range of(int64_t v) { return {true, v, v}; }
  static Range any() { return {}; }
  bool operator==(const Range& o) const { return known == o.known && (!known || (lo == o.lo && hi == o.hi)); }
};

Range join(const Range& a, const Range& b) {
  if (!a.known || !b.known) return Range::any();
  return {true, std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

Range clamp(int64_t lo, int64_t hi) {
  if (lo < -kHuge || hi > kHuge) return Range::any();
  return {true, lo, hi};
}

Range arith(Opcode op, const Range& x, const Range& y) {
  if (!x.known || !y.known) return Range::any();
  auto corners = [&](auto f) {
    const int64_t v[4] = {f(x.lo, y.lo), f(x.lo, y.hi), f(x.hi, y.lo), f(x.hi, y.hi)};
    return clamp(*std::min_element(v, v + 4), *std::max_element(v, v + 4));
  };
  if (std::max({std::abs(x.lo), std::abs(x.hi), std::abs(y.lo), std::abs(y.hi)}) > (int64_t(1) << 30))
    return Range::any();
  switch (op) {
    case Opcode::Add: return clamp(x.lo + y.lo, x.hi + y.hi);
    case Opcode::Sub: return clamp(x.lo - y.hi, x.hi - y.lo);
    case Opcode::Mul: return corners([](int64_t a, int64_t b) { return a * b; });
    case Opcode::Div:
      if (y.lo <= 0 && y.hi >= 0) return Range::any();
      return corners([](int64_t a, int64_t b) { return a / b; });
    case Opcode::Shl:
      if (y.lo < 0 || y.hi > 30) return Range::any();
      return corners([](int64_t a, int64_t b) { return a * (int64_t(1) << b); });
    case Opcode::Seq:
    case Opcode::Slt: return {true, 0, 1};
    default: return Range::any();
  }
}

class Analyser {
 public:
  Analyser(const npu::Program& p, const isa::Hierarchy& h)
      : p_(p), machine_(isa::npu_machine(h)), partner_(npu::match_loops(p)) {
    out_.accesses.resize(p.code.size());
    out_.trip_count.resize(p.code.size());
    out_.min_trip_count.assign(p.code.size(), 0);
    for (auto& r : regs_) r = Range::of(0);
    regs_[npu::kRegCoreId] = {true, 0, std::max(0, p.cores - 1)};
    regs_[npu::kRegCoreCount] = Range::of(p.cores);
    for (int b = 0; b < npu::kBufferCount; ++b) capacity_[b] = machine_.capacity(static_cast<Buffer>(b));
    int64_t gm_end = 0;
    for (const auto& t : p.tensors) gm_end = std::max(gm_end, t.gm_offset + t.byte_size());
    capacity_[static_cast<int>(Buffer::GM)] = gm_end;
  }

  StaticFootprints run() {
    walk(0, static_cast<int>(p_.code.size()), true);
    return std::move(out_);
  }

 private:
  Range value(const Operand& o) const {
    if (o.kind == OperandKind::Register) return regs_[o.reg];
    if (o.kind == OperandKind::Immediate) return Range::of(o.imm);
    return Range::any();
  }
  int64_t max_of(const Operand& o) const {
    Range r = value(o);
    return r.known ? std::max<int64_t>(r.hi, 0) : kHuge;
  }

  // Executes [begin, end) abstractly; records footprints when `record`.
  void walk(int begin, int end, bool record) {
    for (int pc = begin; pc < end; ++pc) {
      const npu::Instruction& in = p_.code[pc];
      if (in.opcode == Opcode::Loop) {
        loop(pc, record);
        pc = partner_[pc];
        continue;
      }
      step(pc, record);
    }
  }

  void loop(int pc, bool record) {
    const auto& ops = p_.code[pc].operands;
    const uint8_t var = ops[0].reg;
    const Range b = value(ops[1]), e = value(ops[2]), s = value(ops[3]);
    // Recorded in the final walk only, whose register ranges hold over every run of the loop (the
    // enclosing loops' fixpoints): an earlier round may see a narrower range.
    if (record) {
      const bool exact = b.known && e.known && s.known && b.lo == b.hi && e.lo == e.hi && s.lo == s.hi && s.lo > 0;
      out_.trip_count[pc] = exact ? std::optional<int64_t>(std::max<int64_t>(0, (e.lo - b.lo + s.lo - 1) / s.lo))
                                  : std::nullopt;
      // at least: the shortest span over the longest step (0 when any bound is unknown)
      out_.min_trip_count[pc] = b.known && e.known && s.known && s.lo > 0
                                    ? std::max<int64_t>(0, (e.lo - b.hi + s.hi - 1) / s.hi)
                                    : 0;
    }
    const Range iter = (b.known && e.known) ? Range{true, b.lo, std::max(b.lo, e.hi - 1)} : Range::any();
    const int body = pc + 1, end = partner_[pc];
    // Fixpoint over the registers the body changes: join with the state after one more iteration,
    // widening to "any" after a few rounds.
    std::array<Range, npu::kRegisterCount> entry = regs_;
    for (int round = 0;; ++round) {
      regs_ = entry;
      regs_[var] = iter;
      forget(var);
      walk(body, end, false);
      bool changed = false;
      for (int r = 0; r < npu::kRegisterCount; ++r) {
        if (r == var) continue;
        Range j = join(entry[r], regs_[r]);
        if (!(j == entry[r])) {
          entry[r] = round >= 3 ? Range::any() : j;
          changed = true;
        }
      }
      if (!changed) break;
    }
    regs_ = entry;
    regs_[var] = iter;
    forget(var);
    walk(body, end, record);
    for (int r = 0; r < npu::kRegisterCount; ++r) regs_[r] = join(entry[r], regs_[r]);
    regs_[var] = Range::any();
  }

  void step(int pc, bool record) {
    const npu::Instruction& in = p_.code[pc];
    const auto& o = in.operands;
    switch (in.opcode) {
      case Opcode::Mov: regs_[o[0].reg] = value(o[1]); forget(o[0].reg); return;
      case Opcode::Add: case Opcode::Sub: case Opcode::Mul: case Opcode::Div:
      case Opcode::Shl: case Opcode::Seq: case Opcode::Slt: {
        Range r = arith(in.opcode, value(o[1]), value(o[2]));
        const uint8_t d = o[0].reg;
        const bool reg1 = o[1].kind == OperandKind::Register, imm2 = o[2].kind == OperandKind::Immediate;
        // x - (x / d) * d, the remainder: [0, d - 1] for x >= 0 (intervals alone lose the relation).
        std::optional<Pattern> made;
        if (in.opcode == Opcode::Div && reg1 && imm2 && o[2].imm > 0) made = Pattern{Pattern::Quotient, o[1].reg, o[2].imm};
        if (in.opcode == Opcode::Mul && reg1 && imm2 && pattern_[o[1].reg] &&
            pattern_[o[1].reg]->kind == Pattern::Quotient && pattern_[o[1].reg]->divisor == o[2].imm)
          made = Pattern{Pattern::Rounded, pattern_[o[1].reg]->of, o[2].imm};
        if (in.opcode == Opcode::Sub && reg1 && o[2].kind == OperandKind::Register && pattern_[o[2].reg] &&
            pattern_[o[2].reg]->kind == Pattern::Rounded && pattern_[o[2].reg]->of == o[1].reg) {
          const Range x = value(o[1]);
          if (x.known && x.lo >= 0) r = {true, 0, pattern_[o[2].reg]->divisor - 1};
        }
        regs_[d] = r;
        forget(d);
        pattern_[d] = made;
        return;
      }
      case Opcode::SetFmatrix:
        for (int i = 0; i < 12; ++i) fmatrix_[i] = max_of(o[i]);
        return;
      default: break;
    }
    if (record) footprint(pc);
    if (in.opcode == Opcode::Ld) {  // a value read from memory: any i32
      regs_[o[0].reg] = {true, INT32_MIN, INT32_MAX};
      forget(o[0].reg);
    }
  }

  // The hull of `extent` bytes starting at address operand `o`, clipped to the buffer.
  void touch(int pc, const Operand& o, bool write, int64_t extent) {
    const Buffer b = o.buffer;
    const int64_t cap = capacity_[static_cast<int>(b)];
    ByteRange r{b, write, 0, cap};
    Range base = o.reg == npu::kNoRegister ? Range::of(0) : regs_[o.reg];
    if (base.known && extent < kHuge) {
      r.begin = std::max<int64_t>(0, base.lo + o.imm);
      r.end = std::min<int64_t>(cap, base.hi + o.imm + extent);
    }
    if (r.end <= r.begin) return;
    auto& list = out_.accesses[pc];
    for (auto& x : list)
      if (x.buffer == r.buffer && x.write == r.write) {
        x.begin = std::min(x.begin, r.begin);
        x.end = std::max(x.end, r.end);
        return;
      }
    list.push_back(r);
  }

  // The operands' values as the footprint definition sees them: the upper bounds of their ranges
  // (kHuge where unknown); the formulas are monotone, so the extents bound every instance.
  class UpperBounds final : public isa::OperandValues {
   public:
    UpperBounds(const Analyser& a, const npu::Instruction& in) : a_(a), in_(in) {}
    int64_t value(int operand) const override { return a_.max_of(in_.operands[operand]); }
    int64_t fmatrix(int field) const override { return a_.fmatrix_[field]; }
    bool known_nonzero(int operand) const override {
      const Range r = a_.value(in_.operands[operand]);
      return r.known && r.lo == r.hi && r.lo != 0;
    }
    void reject(const std::string&) const override {}  // bounds, not instances: no rule applies

   private:
    const Analyser& a_;
    const npu::Instruction& in_;
  };

  void footprint(int pc) {
    const npu::Instruction& in = p_.code[pc];
    const isa::Footprint f = isa::footprint(machine_, in, UpperBounds(*this, in));
    for (int i = 0; i < f.count; ++i) {
      const isa::AccessPattern& a = f.access[i];
      const isa::WideInt span = a.unbounded ? kHuge : std::min<isa::WideInt>(a.span(), kHuge);
      touch(pc, in.operands[a.address_operand], a.write, static_cast<int64_t>(span));
    }
  }

  // How a register was computed from another one, while both keep their values.
  struct Pattern {
    enum Kind { Quotient, Rounded } kind;  // of / divisor, (of / divisor) * divisor
    uint8_t of;
    int64_t divisor;
  };
  void forget(uint8_t written) {
    pattern_[written].reset();
    for (auto& p : pattern_)
      if (p && p->of == written) p.reset();
  }

  const npu::Program& p_;
  std::array<std::optional<Pattern>, npu::kRegisterCount> pattern_{};
  isa::NpuMachine machine_;
  std::array<int64_t, npu::kBufferCount> capacity_{};  // GM: up to the end of the last tensor
  std::vector<int> partner_;
  std::array<Range, npu::kRegisterCount> regs_;
  std::array<int64_t, 12> fmatrix_{};
  StaticFootprints out_;
};

}  // namespace

StaticFootprints analyse_footprints(const npu::Program& program, const isa::Hierarchy& target) {
  return Analyser(program, target).run();
}

bool conflict(const std::vector<ByteRange>& a, const std::vector<ByteRange>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (x.buffer == y.buffer && (x.write || y.write) && x.begin < y.end && y.begin < x.end) return true;
  return false;
}

}  // namespace tessel::npu_sync
