#include "compiler/npu_sync/footprint.h"

#include "isa/npu_machine.h"

#include <algorithm>
#include <array>
#include <limits>

#include "isa/base/error.h"

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

struct Geometry {  // sizes the footprints need: the machine model's (isa/npu_machine.h)
  int64_t fractal_bytes = 0, acc_fractal_bytes = 0, acc_fractal_elements = 0;
  int64_t block_bytes = 0, bytes_per_repeat = 0;
  std::array<int64_t, npu::kBufferCount> capacity{};
};

Geometry geometry(const isa::Hierarchy& h) {
  const isa::NpuMachine m = isa::npu_machine(h);
  Geometry g;
  g.fractal_bytes = m.cube_f16.a_fractal_bytes();
  g.acc_fractal_elements = m.cube_f16.acc_fractal_elements();
  g.acc_fractal_bytes = m.cube_f16.acc_fractal_bytes();
  g.block_bytes = m.vector_block_bytes;
  g.bytes_per_repeat = m.vector_bytes_per_repeat;
  for (int b = 0; b < npu::kBufferCount; ++b) g.capacity[b] = m.capacity(static_cast<Buffer>(b));
  return g;
}

class Analyser {
 public:
  Analyser(const npu::Program& p, const isa::Hierarchy& h) : p_(p), g_(geometry(h)), partner_(npu::match_loops(p)) {
    out_.accesses.resize(p.code.size());
    out_.trip_count.resize(p.code.size());
    for (auto& r : regs_) r = Range::of(0);
    regs_[npu::kRegCoreId] = {true, 0, std::max(0, p.cores - 1)};
    regs_[npu::kRegCoreCount] = Range::of(p.cores);
    int64_t gm_end = 0;
    for (const auto& t : p.tensors) gm_end = std::max(gm_end, t.gm_offset + t.byte_size());
    g_.capacity[static_cast<int>(Buffer::GM)] = gm_end;
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
    if (b.known && e.known && s.known && b.lo == b.hi && e.lo == e.hi && s.lo == s.hi && s.lo > 0)
      out_.trip_count[pc] = std::max<int64_t>(0, (e.lo - b.lo + s.lo - 1) / s.lo);
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
  }

  // The hull of `extent` bytes starting at address operand `o`, clipped to the buffer.
  void touch(int pc, const Operand& o, bool write, int64_t extent) {
    const Buffer b = o.buffer;
    const int64_t cap = g_.capacity[static_cast<int>(b)];
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

  // Span in bytes of a strided vector operand: (repeat-1)*rep + (blocks-1)*blk + 1 blocks.
  int64_t vector_span(int64_t repeat, int64_t blocks, const Operand& blk, const Operand& rep) const {
    return ((repeat - 1) * max_of(rep) + (blocks - 1) * max_of(blk) + 1) * g_.block_bytes;
  }
  int64_t blocks_per_repeat(int element_bytes, int64_t lanes) const {
    return std::max<int64_t>(1, lanes * element_bytes / g_.block_bytes);
  }

  void footprint(int pc) {
    const npu::Instruction& in = p_.code[pc];
    const auto& o = in.operands;
    const auto type_bytes = [&](int i) { return int64_t(dtype_bytes(o[i].dtype)); };
    switch (in.opcode) {
      case Opcode::DmaIn:
      case Opcode::DmaOut: {
        const int64_t n = max_of(o[2]), len = max_of(o[3]);
        touch(pc, o[1], false, n < kHuge && len < kHuge ? (n - 1) * (len + max_of(o[4])) + len : kHuge);
        touch(pc, o[0], true, n < kHuge && len < kHuge ? (n - 1) * (len + max_of(o[5])) + len : kHuge);
        return;
      }
      case Opcode::DmaInNz: {
        const int64_t eb = type_bytes(0), rows = max_of(o[3]), cols = max_of(o[4]), stride = max_of(o[5]);
        touch(pc, o[2], false, ((rows - 1) * stride + cols) * eb);
        touch(pc, o[1], true, rows * cols * eb);
        return;
      }
      case Opcode::Load2d: {
        const int64_t outer = max_of(o[3]), inner = max_of(o[4]);
        touch(pc, o[2], false, ((outer - 1) * max_of(o[5]) + (inner - 1) * max_of(o[6]) + 1) * g_.fractal_bytes);
        touch(pc, o[1], true, outer * inner * g_.fractal_bytes);
        return;
      }
      case Opcode::Load3d: {
        const int64_t rows = g_.fractal_bytes / g_.block_bytes;  // fractal rows (16)
        const bool geometry_known = fmatrix_[0] > 0 && fmatrix_[0] < kHuge && fmatrix_[1] > 0 && fmatrix_[1] < kHuge;
        touch(pc, o[2], false, geometry_known ? max_of(o[3]) * fmatrix_[0] * fmatrix_[1] * 2 : kHuge);
        touch(pc, o[1], true, (max_of(o[5]) / std::max<int64_t>(1, rows)) * max_of(o[7]) * g_.fractal_bytes);
        return;
      }
      case Opcode::Mmad: {
        const int64_t eb = type_bytes(0);
        const int64_t m = max_of(o[4]), k = max_of(o[5]), n = max_of(o[6]);
        touch(pc, o[2], false, m * k * eb);
        touch(pc, o[3], false, k * n * eb);
        const int64_t c_bytes = m * n * (g_.acc_fractal_bytes / g_.acc_fractal_elements);
        const Range init = value(o[7]);
        if (!(init.known && init.lo == init.hi && init.lo != 0)) touch(pc, o[1], false, c_bytes);
        touch(pc, o[1], true, c_bytes);
        return;
      }
      case Opcode::MovL0c: {
        const int64_t n = max_of(o[3]);
        touch(pc, o[2], false, n * g_.acc_fractal_bytes);
        touch(pc, o[1], true, n * g_.acc_fractal_elements * type_bytes(0));
        return;
      }
      case Opcode::Vconv: {
        const int64_t ed = type_bytes(0), es = type_bytes(1), repeat = max_of(o[4]);
        const int64_t lanes = g_.bytes_per_repeat / std::max(ed, es);
        touch(pc, o[3], false, vector_span(repeat, blocks_per_repeat(es, lanes), o[6], o[8]));
        touch(pc, o[2], true, vector_span(repeat, blocks_per_repeat(ed, lanes), o[5], o[7]));
        return;
      }
      case Opcode::Vcadd:
      case Opcode::Vcmax: {
        const int64_t eb = type_bytes(0), repeat = max_of(o[3]);
        touch(pc, o[2], false, vector_span(repeat, blocks_per_repeat(eb, g_.bytes_per_repeat / eb), o[4], o[5]));
        touch(pc, o[1], true, repeat * eb);
        return;
      }
      case Opcode::Vbrcb: {  // reads `repeat` contiguous elements, writes one repeat per element
        const int64_t eb = type_bytes(0), repeat = max_of(o[3]);
        touch(pc, o[2], false, repeat * eb);
        touch(pc, o[1], true, vector_span(repeat, blocks_per_repeat(eb, g_.bytes_per_repeat / eb), o[4], o[5]));
        return;
      }
      case Opcode::Vdup: {
        const int64_t eb = type_bytes(0), repeat = max_of(o[3]);
        touch(pc, o[1], true, vector_span(repeat, blocks_per_repeat(eb, g_.bytes_per_repeat / eb), o[4], o[5]));
        return;
      }
      case Opcode::Vadd: case Opcode::Vsub: case Opcode::Vmul: case Opcode::Vdiv:
      case Opcode::Vmax: case Opcode::Vmin: case Opcode::Vsel: {
        const int64_t eb = type_bytes(0), repeat = max_of(o[4]);
        const int64_t bpr = blocks_per_repeat(eb, g_.bytes_per_repeat / eb);
        touch(pc, o[2], false, vector_span(repeat, bpr, o[6], o[9]));
        touch(pc, o[3], false, vector_span(repeat, bpr, o[7], o[10]));
        touch(pc, o[1], true, vector_span(repeat, bpr, o[5], o[8]));
        return;
      }
      case Opcode::Vadds: case Opcode::Vmuls: case Opcode::Vmaxs: {
        const int64_t eb = type_bytes(0), repeat = max_of(o[4]);
        const int64_t bpr = blocks_per_repeat(eb, g_.bytes_per_repeat / eb);
        touch(pc, o[2], false, vector_span(repeat, bpr, o[6], o[8]));
        touch(pc, o[1], true, vector_span(repeat, bpr, o[5], o[7]));
        return;
      }
      case Opcode::Vrelu: case Opcode::Vabs: case Opcode::Vexp: case Opcode::Vln: case Opcode::Vsqrt:
      case Opcode::Vrsqrt: case Opcode::Vrec: case Opcode::Vtanh: {
        const int64_t eb = type_bytes(0), repeat = max_of(o[3]);
        const int64_t bpr = blocks_per_repeat(eb, g_.bytes_per_repeat / eb);
        touch(pc, o[2], false, vector_span(repeat, bpr, o[5], o[7]));
        touch(pc, o[1], true, vector_span(repeat, bpr, o[4], o[6]));
        return;
      }
      default: return;  // scalar, loops, sync
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
  Geometry g_;
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
