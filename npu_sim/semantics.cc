#include "npu_sim/semantics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa/base/error.h"
#include "isa/base/float_minmax.h"
#include "isa/base/bf16.h"
#include "isa/base/f16.h"
#include "isa/npu_footprint.h"

namespace tessel::npu_sim {
namespace {

using npu::Buffer;
using npu::Opcode;

[[noreturn]] void fault(const std::string& reason) { throw InstructionFault{reason}; }

DType type_operand(const IssuedInstruction& in, int i) { return in.instr->operands[i].dtype; }
Buffer buffer_operand(const IssuedInstruction& in, int i) { return in.instr->operands[i].buffer; }

}  // namespace

uint64_t cycles_for(uint64_t bytes, double bytes_per_cycle) {
  const double q = std::ceil(static_cast<double>(bytes) / bytes_per_cycle);
  if (!(q < static_cast<double>(kSaturatedCycles))) return kSaturatedCycles;  // NaN and infinity included
  return static_cast<uint64_t>(q);
}

namespace {

uint64_t ceil_div(uint64_t a, double b) { return cycles_for(a, b); }

// The dispatched instruction's operands, exactly: a broken operand rule is a fault.
class ExactValues final : public isa::OperandValues {
 public:
  explicit ExactValues(const IssuedInstruction& in) : in_(in) {}
  int64_t value(int operand) const override { return in_.value[operand]; }
  int64_t fmatrix(int field) const override { return in_.fmatrix[field]; }
  bool known_nonzero(int operand) const override { return in_.value[operand] != 0; }
  void reject(const std::string& rule) const override { fault(rule); }

 private:
  const IssuedInstruction& in_;
};

// Turns the footprint's patterns into the byte ranges of each access, checking that every access
// starts aligned and stays inside its buffer.
class AccessBuilder {
 public:
  AccessBuilder(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem)
      : m_(m), in_(in), mem_(mem) {}

  // Rejects an access that would end past its buffer, before any loop over its pieces runs (so
  // absurd counts fail fast instead of building huge footprints).
  void limit(const isa::AccessPattern& p) const {
    const int64_t start = in_.value[p.address_operand];
    const isa::WideInt end = start + p.span();
    if (end > static_cast<isa::WideInt>(size(p.buffer)))
      out_of_range(p.address_operand, p.buffer, static_cast<uint64_t>(std::max<int64_t>(0, start)), end);
  }

  Access build(const isa::AccessPattern& p) const {
    Access a;
    a.buffer = p.buffer;
    a.write = p.write;
    const uint64_t start = checked_start(p.address_operand);
    p.for_each_piece([&](isa::WideInt offset, isa::WideInt bytes) {
      add(a, start + static_cast<uint64_t>(offset), static_cast<uint64_t>(bytes));
    });
    finish(a, p.address_operand);
    return a;
  }

 private:
  uint64_t size(Buffer b) const { return mem_.size[static_cast<size_t>(b)]; }

  uint64_t checked_start(int operand) const {
    const Buffer b = buffer_operand(in_, operand);
    const int64_t start = in_.value[operand];
    if (start < 0) fault(fmt::format("operand {} addresses {}{:+} (negative offset)", operand + 1, npu::buffer_name(b), start));
    const uint32_t align = m_.buffer(b).alignment_bytes;
    if (start % align != 0)
      fault(fmt::format("operand {} address {}[{}] is not aligned to {} bytes ({} alignment_bytes)", operand + 1,
                        npu::buffer_name(b), start, align, m_.buffer(b).level_name));
    return static_cast<uint64_t>(start);
  }

  [[noreturn]] void out_of_range(int operand, Buffer b, uint64_t lo, isa::WideInt hi) const {
    const std::string end = hi > static_cast<isa::WideInt>(UINT64_MAX) ? std::string("2^64+") : std::to_string(static_cast<uint64_t>(hi));
    if (b == Buffer::GM)
      fault(fmt::format("operand {} reaches GM[{}, {}) beyond the GM the program's tensors declare ({} bytes)", operand + 1,
                        lo, end, size(b)));
    fault(fmt::format("operand {} reaches {}[{}, {}) beyond {} capacity_bytes {}", operand + 1, npu::buffer_name(b), lo,
                      end, m_.buffer(b).level_name, size(b)));
  }

  static void add(Access& a, uint64_t begin, uint64_t bytes) {
    if (bytes == 0) return;
    if (!a.ranges.empty() && a.ranges.back().end == begin) {
      a.ranges.back().end = begin + bytes;
    } else {
      a.ranges.push_back({begin, begin + bytes});
    }
  }

  // Sorts and merges the ranges (pieces in order, the common case, need neither) and sets the hull.
  void finish(Access& a, int operand) const {
    if (a.ranges.empty()) return;
    const auto by_begin = [](const Interval& x, const Interval& y) { return x.begin < y.begin; };
    bool disjoint_sorted = true;
    for (size_t i = 1; i < a.ranges.size() && disjoint_sorted; ++i) disjoint_sorted = a.ranges[i - 1].end < a.ranges[i].begin;
    if (!disjoint_sorted) {
      std::sort(a.ranges.begin(), a.ranges.end(), by_begin);
      std::vector<Interval> merged;
      for (const Interval& r : a.ranges) {
        if (!merged.empty() && r.begin <= merged.back().end) merged.back().end = std::max(merged.back().end, r.end);
        else merged.push_back(r);
      }
      a.ranges = std::move(merged);
    }
    a.lo = a.ranges.front().begin;
    a.hi = a.ranges.back().end;
    if (a.hi > size(a.buffer)) out_of_range(operand, a.buffer, a.lo, a.hi);
  }

  const isa::NpuMachine& m_;
  const IssuedInstruction& in_;
  const MemoryView& mem_;
};

// bf16 on the vector unit: moved (vdup, vsel, vselv, vbrcb, vtranspose) and converted by a vconv the
// description lists (`conversions`), never computed: the DaVinci vector unit has no bf16 ALU.
void check_bf16_rule(const isa::NpuMachine& m, const IssuedInstruction& in) {
  const Opcode op = in.instr->opcode;
  if (npu::opcode_info(op).pipe_rule != npu::PipeRule::V || op == Opcode::MovL0c) return;
  const auto& ops = in.instr->operands;
  if (op == Opcode::Vconv) {
    const DType to = ops[0].dtype, from = ops[1].dtype;
    if ((to == DType::BF16 || from == DType::BF16) && !m.conversion(from, to))
      fault(fmt::format("the vector unit of {} lists no conversion from {} to {} (its `conversions`)", m.target_name,
                        dtype_name(from), dtype_name(to)));
    return;
  }
  if (op == Opcode::Vdup || op == Opcode::Vsel || op == Opcode::Vselv || op == Opcode::Vbrcb || op == Opcode::Vtranspose) return;
  for (const auto& o : ops)
    if (o.kind == npu::OperandKind::ElementType && o.dtype == DType::BF16)
      fault(fmt::format("{} computes in bf16: the vector unit of {} has no bf16 arithmetic (convert to f32 with vconv)",
                        npu::mnemonic(op), m.target_name));
}

// Operand rules that are about the instruction's meaning, not about the bytes it touches.
void check_semantic_rules(const isa::NpuMachine& m, const IssuedInstruction& in) {
  check_bf16_rule(m, in);
  if (in.instr->opcode == Opcode::Vtranspose && in.value[3] % 2 != 0)
    fault("vtranspose takes two repeats per 16x16 block (an even repeat)");
  if (in.instr->opcode == Opcode::Load2d && in.value[7] != 0) {
    const DType t = type_operand(in, 0);
    if (t != DType::F16 && t != DType::BF16 && t != DType::I8)
      fault("transpose is defined for square 16-bit (f16, bf16) fractals and pairs of i8 fractals only");
    if (t == DType::I8 && in.value[4] % 2 != 0) fault("an i8 transpose moves pairs of fractals: inner must be even");
  }
}

InstructionCost copy_cost(const isa::NpuMachine& m, Buffer from, Buffer to, uint64_t bytes) {
  const isa::NpuPathSpec& p = m.path(from, to);
  if (!p.exists)
    fault(fmt::format("the target has no transfer path {} -> {}", npu::buffer_name(from), npu::buffer_name(to)));
  InstructionCost cost;
  cost.bytes = bytes;
  cost.path_from = static_cast<int>(from);
  cost.path_to = static_cast<int>(to);
  cost.occupancy_cycles = std::max<uint64_t>(1, ceil_div(bytes, p.bandwidth_bytes_per_cycle));
  cost.latency_cycles = p.latency_cycles;
  cost.uses_gm = from == Buffer::GM || to == Buffer::GM;
  return cost;
}

// The cube steps through m/m0 x k/k0 x n/n0 fractal products (the footprint checked the multiples).
InstructionCost cube_cost(const isa::NpuMachine& m, const IssuedInstruction& in) {
  const isa::CubeShape& s = m.cube(type_operand(in, 0));
  InstructionCost cost;
  const uint64_t steps = uint64_t(in.value[4] / s.m0) * uint64_t(in.value[5] / s.k0) * uint64_t(in.value[6] / s.n0);
  cost.occupancy_cycles = steps * s.cycles;
  cost.latency_cycles = m.cube_startup_cycles;
  cost.macs = steps * uint64_t(s.m0) * uint64_t(s.n0) * uint64_t(s.k0);
  cost.i8 = s.a == DType::I8;
  return cost;
}

// Cube instructions: their fractal steps; vector instructions: one cycle per repeat; every other
// instruction with accesses copies what it reads into what it writes.
InstructionCost instruction_cost(const isa::NpuMachine& m, const IssuedInstruction& in, const isa::Footprint& f) {
  const npu::OpcodeInfo& info = npu::opcode_info(in.instr->opcode);
  if (info.pipe_rule == npu::PipeRule::M) return cube_cost(m, in);
  if (in.instr->opcode == Opcode::Ld) {  // the scalar unit waits for its GM read (the GM -> UB path's latency)
    InstructionCost cost;
    cost.occupancy_cycles = m.scalar_cycles + m.path(Buffer::GM, Buffer::UB).latency_cycles;
    return cost;
  }
  if (info.repeat_operand >= 0) {
    InstructionCost cost;
    cost.occupancy_cycles = static_cast<uint64_t>(in.value[info.repeat_operand]);
    if (in.instr->opcode == Opcode::Vconv)  // a listed conversion: its cycles per repeat (the description's)
      if (const isa::VectorConversion* c = m.conversion(type_operand(in, 1), type_operand(in, 0)))
        cost.occupancy_cycles *= c->cycles_per_repeat;
    cost.repeats = cost.occupancy_cycles;
    cost.latency_cycles = m.vector_startup_cycles;
    return cost;
  }
  TESSEL_CHECK(f.count == 2 && !f.access[0].write && f.access[1].write,
               "a copy instruction reads one operand and writes one");
  InstructionCost cost = copy_cost(m, f.access[0].buffer, f.access[1].buffer, static_cast<uint64_t>(f.access[1].bytes()));
  if (cost.uses_gm) {  // GM moves whole granules: each burst is charged the granules it touches
    const isa::AccessPattern& g = f.access[0].buffer == Buffer::GM ? f.access[0] : f.access[1];
    const uint64_t gran = m.buffer(Buffer::GM).granularity_bytes, start = static_cast<uint64_t>(in.value[g.address_operand]);
    uint64_t lo = 0, hi = 0, touched = 0;
    bool open = false;
    auto close = [&] { if (open) touched += ceil_div(hi, gran) - lo / gran; };
    g.for_each_piece([&](isa::WideInt offset, isa::WideInt bytes) {
      const uint64_t a = start + static_cast<uint64_t>(offset), b = a + static_cast<uint64_t>(bytes);
      if (open && a == hi) { hi = b; return; }
      close();
      lo = a, hi = b, open = true;
    });
    close();
    cost.gm_bytes = touched * gran;
    const isa::NpuPathSpec& p = m.path(f.access[0].buffer, f.access[1].buffer);
    cost.occupancy_cycles = std::max<uint64_t>(1, ceil_div(cost.gm_bytes, p.bandwidth_bytes_per_cycle));
  }
  return cost;
}

// Elements one repeat processes for a vector instruction over `bytes`-sized elements.
int64_t lanes(const isa::NpuMachine& m, int element_bytes) { return m.vector_lanes(element_bytes); }

}  // namespace

void describe_instruction(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem,
                          std::vector<Access>& accesses, InstructionCost& cost) {
  accesses.clear();
  TESSEL_CHECK(npu::opcode_info(in.instr->opcode).access_count > 0,
               "describe_instruction called for a sync or scalar instruction");
  check_semantic_rules(m, in);
  const isa::Footprint f = isa::footprint(m, *in.instr, ExactValues(in));
  const AccessBuilder builder(m, in, mem);
  for (int i = 0; i < f.count; ++i) builder.limit(f.access[i]);
  for (int i = 0; i < f.count; ++i) accesses.push_back(builder.build(f.access[i]));
  cost = instruction_cost(m, in, f);
}

// ---------------------------------------------------------------- function

namespace {

float load_float(DType t, const uint8_t* p) {
  if (t == DType::F16 || t == DType::BF16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return t == DType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
  }
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

void store_float(DType t, uint8_t* p, float v) {
  if (t == DType::F16 || t == DType::BF16) {
    const uint16_t h = t == DType::F16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
    std::memcpy(p, &h, 2);
  } else {
    std::memcpy(p, &v, 4);
  }
}

int64_t load_int(DType t, const uint8_t* p) {
  if (t == DType::I8) return static_cast<int8_t>(*p);
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void store_int(DType t, uint8_t* p, int64_t v) {
  if (t == DType::I8) {
    *p = static_cast<uint8_t>(static_cast<int8_t>(std::clamp<int64_t>(v, INT8_MIN, INT8_MAX)));
    return;
  }
  const int32_t w = static_cast<int32_t>(static_cast<uint32_t>(v));  // i32 arithmetic wraps
  std::memcpy(p, &w, 4);
}

float float_op(Opcode op, float a, float b) {
  switch (op) {
    case Opcode::Vadd: case Opcode::Vadds: return a + b;
    case Opcode::Vsub: return a - b;
    case Opcode::Vmul: case Opcode::Vmuls: return a * b;
    case Opcode::Vdiv: return a / b;
    case Opcode::Vmod: return std::fmod(a, b);
    case Opcode::Vcmplt: return a < b ? 1.0f : 0.0f;
    case Opcode::Vcmple: return a <= b ? 1.0f : 0.0f;
    case Opcode::Vcmpeq: return a == b ? 1.0f : 0.0f;
    case Opcode::Vmax: case Opcode::Vmaxs: return nan_max(a, b);
    case Opcode::Vmin: return nan_min(a, b);
    case Opcode::Vrelu: return nan_max(a, 0.0f);
    case Opcode::Vabs: return std::fabs(a);
    case Opcode::Vexp: return std::exp(a);
    case Opcode::Vln: return std::log(a);
    case Opcode::Vsqrt: return std::sqrt(a);
    case Opcode::Vrsqrt: return 1.0f / std::sqrt(a);
    case Opcode::Vrec: return 1.0f / a;
    case Opcode::Vtanh: return std::tanh(a);
    default: TESSEL_CHECK(false, "float_op: not an element-wise vector opcode"); return 0;
  }
}

int64_t int_op(Opcode op, int64_t a, int64_t b) {
  switch (op) {
    // In 64 bits, wrapping (a scalar operand may be any int64); store_int then wraps to the element type.
    case Opcode::Vadd: case Opcode::Vadds: return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case Opcode::Vsub: return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    case Opcode::Vmul: case Opcode::Vmuls: return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case Opcode::Vdiv:
      if (b == 0) fault("integer division by zero");
      return b == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(a)) : a / b;  // INT_MIN / -1 wraps
    case Opcode::Vmod:
      if (b == 0) fault("integer division by zero");
      return b == -1 ? 0 : a % b;
    case Opcode::Vmax: case Opcode::Vmaxs: return std::max(a, b);
    case Opcode::Vmin: return std::min(a, b);
    case Opcode::Vcmplt: return a < b ? 1 : 0;
    case Opcode::Vcmple: return a <= b ? 1 : 0;
    case Opcode::Vcmpeq: return a == b ? 1 : 0;
    case Opcode::Vrelu: return std::max<int64_t>(a, 0);
    case Opcode::Vabs: return a < 0 ? -a : a;
    default: fault(std::string(npu::mnemonic(op)) + " is not defined on integers");
  }
}

bool lane_enabled(const isa::NpuMachine& m, const IssuedInstruction& in, int64_t lane) {
  const uint64_t bit = static_cast<uint64_t>(lane) % m.vector_mask_bits;
  return bit < 64 ? (in.mask_lo >> bit) & 1 : (in.mask_hi >> (bit - 64)) & 1;  // not hardware: two uint64 halves
}

// Byte address of lane `lane` of repeat `r` in a strided vector operand.
struct Strided {
  uint8_t* base;
  int64_t blk_stride, rep_stride;
  int elems_per_block, element_bytes;
  uint64_t block_bytes;
  uint8_t* at(int64_t r, int64_t lane) const {
    const int64_t blk = lane / elems_per_block, e = lane % elems_per_block;
    return base + (r * rep_stride + blk * blk_stride) * block_bytes + e * element_bytes;
  }
};

// A vector instruction's operands in the roles the table's access column gives them: the access
// it writes, those it reads (in order), and its repeat count.
struct VectorRoles {
  const npu::OperandAccess* dst = nullptr;
  std::array<const npu::OperandAccess*, 3> src{};
  int sources = 0;
  int64_t repeat = 0;
};

VectorRoles vector_roles(const IssuedInstruction& in) {
  const npu::OpcodeInfo& info = npu::opcode_info(in.instr->opcode);
  VectorRoles v;
  for (int i = 0; i < info.access_count; ++i) {
    const npu::OperandAccess& a = info.accesses[i];
    if (a.write()) v.dst = &a;
    else if (v.sources < 3) v.src[v.sources++] = &a;
  }
  TESSEL_CHECK(v.dst != nullptr && info.repeat_operand >= 0, "a vector instruction writes one operand and has a repeat");
  v.repeat = in.value[info.repeat_operand];
  return v;
}

// The strided operand of a Vector / VectorCast access: its element type, block and repeat strides
// are the access's parameters.
// The start of an access's operand in its buffer.
uint8_t* operand_base(const MemoryView& mem, const IssuedInstruction& in, const npu::OperandAccess& a) {
  return mem.base[static_cast<size_t>(buffer_operand(in, a.address))] + in.value[a.address];
}

Strided strided(const isa::NpuMachine& m, const MemoryView& mem, const IssuedInstruction& in,
                const npu::OperandAccess& a) {
  const int repeat = a.extent == npu::Extent::VectorCast ? 2 : 1;  // the repeat's parameter index
  const int eb = dtype_bytes(type_operand(in, a.param[0]));
  return {operand_base(mem, in, a), in.value[a.param[repeat + 1]], in.value[a.param[repeat + 2]],
          static_cast<int>(m.vector_block_bytes / eb), eb, m.vector_block_bytes};
}

// dst = op(src0, src1), or op(src, scalar) with one source (the scalar unused by unary ops).
void execute_elementwise(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const Opcode op = in.instr->opcode;
  const VectorRoles v = vector_roles(in);
  const DType t = type_operand(in, v.dst->param[0]);
  const bool is_float = dtype_is_float(t);
  const int64_t n = lanes(m, dtype_bytes(t));
  const int64_t repeat = v.repeat;
  const bool binary = v.sources == 2;
  const Strided dst = strided(m, mem, in, *v.dst), a = strided(m, mem, in, *v.src[0]);
  const Strided b = binary ? strided(m, mem, in, *v.src[1]) : a;
  // The scalar operand takes the operand type first (f16: rounded to nearest even).
  const float scalar_f = t == DType::F16 ? round_to_f16(static_cast<float>(in.scalar)) : static_cast<float>(in.scalar);
  const int64_t scalar_i = static_cast<int64_t>(in.scalar);
  for (int64_t r = 0; r < repeat; ++r)
    for (int64_t l = 0; l < n; ++l) {
      const bool on = lane_enabled(m, in, l);
      if (op == Opcode::Vsel) {
        uint8_t* src = on ? a.at(r, l) : b.at(r, l);
        std::memmove(dst.at(r, l), src, dtype_bytes(t));
        continue;
      }
      if (!on) continue;
      if (is_float) {
        const float x = load_float(t, a.at(r, l));
        const float y = binary ? load_float(t, b.at(r, l)) : scalar_f;
        store_float(t, dst.at(r, l), float_op(op, x, y));
      } else {
        const int64_t x = load_int(t, a.at(r, l));
        const int64_t y = binary ? load_int(t, b.at(r, l)) : scalar_i;
        store_int(t, dst.at(r, l), int_op(op, x, y));
      }
    }
}

int64_t round_to_int(float v) { return static_cast<int64_t>(std::nearbyint(static_cast<double>(v))); }

void execute_vconv(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const VectorRoles v = vector_roles(in);
  const DType td = type_operand(in, v.dst->param[0]), ts = type_operand(in, v.src[0]->param[0]);
  const int64_t n = lanes(m, std::max(dtype_bytes(td), dtype_bytes(ts)));
  const Strided dst = strided(m, mem, in, *v.dst), src = strided(m, mem, in, *v.src[0]);
  for (int64_t r = 0; r < v.repeat; ++r)
    for (int64_t l = 0; l < n; ++l) {
      if (!lane_enabled(m, in, l)) continue;
      const uint8_t* s = src.at(r, l);
      uint8_t* d = dst.at(r, l);
      if (dtype_is_float(ts)) {
        const float v = load_float(ts, s);
        if (dtype_is_float(td)) store_float(td, d, v);
        else store_int(td, d, std::isnan(v) ? 0 : std::clamp<int64_t>(round_to_int(std::clamp(v, -3e9f, 3e9f)), INT32_MIN, INT32_MAX));
      } else {
        const int64_t v = load_int(ts, s);
        // i32 -> f16 through f32 is exact rounding: f32 has more than 2 x 11 + 2 bits.
        if (dtype_is_float(td)) store_float(td, d, static_cast<float>(v));
        else store_int(td, d, std::clamp<int64_t>(v, td == DType::I8 ? INT8_MIN : INT32_MIN, td == DType::I8 ? INT8_MAX : INT32_MAX));
      }
    }
}

void execute_reduce(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const VectorRoles v = vector_roles(in);
  const DType t = type_operand(in, v.src[0]->param[0]);
  const int64_t n = lanes(m, dtype_bytes(t));
  const Strided src = strided(m, mem, in, *v.src[0]);
  uint8_t* dst = operand_base(mem, in, *v.dst);
  const bool sum = in.instr->opcode == Opcode::Vcadd;
  for (int64_t r = 0; r < v.repeat; ++r) {
    if (dtype_is_float(t)) {
      float acc = sum ? 0.0f : -INFINITY;
      for (int64_t l = 0; l < n; ++l)
        if (lane_enabled(m, in, l)) acc = sum ? acc + load_float(t, src.at(r, l)) : nan_max(acc, load_float(t, src.at(r, l)));
      store_float(t, dst + r * dtype_bytes(t), acc);
    } else {
      int64_t acc = sum ? 0 : INT64_MIN;
      for (int64_t l = 0; l < n; ++l)
        if (lane_enabled(m, in, l)) acc = sum ? acc + load_int(t, src.at(r, l)) : std::max(acc, load_int(t, src.at(r, l)));
      store_int(t, dst + r * dtype_bytes(t), acc == INT64_MIN ? INT32_MIN : acc);
    }
  }
}

void execute_vbrcb(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const VectorRoles v = vector_roles(in);
  const int eb = dtype_bytes(type_operand(in, v.dst->param[0]));
  const int64_t n = lanes(m, eb);
  const Strided dst = strided(m, mem, in, *v.dst);
  const uint8_t* src = operand_base(mem, in, *v.src[0]);
  std::vector<uint8_t> values(src, src + v.repeat * eb);  // read before any write (dst may overlap)
  for (int64_t r = 0; r < v.repeat; ++r)
    for (int64_t l = 0; l < n; ++l)
      if (lane_enabled(m, in, l)) std::memcpy(dst.at(r, l), values.data() + r * eb, eb);
}

// dst = cond != 0 ? src0 : src1, lane by lane (disabled lanes unchanged).
void execute_vselv(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const VectorRoles v = vector_roles(in);
  const DType t = type_operand(in, v.dst->param[0]);
  const int eb = dtype_bytes(t);
  const int64_t n = lanes(m, eb);
  const Strided dst = strided(m, mem, in, *v.dst), c = strided(m, mem, in, *v.src[0]), a = strided(m, mem, in, *v.src[1]),
                b = strided(m, mem, in, *v.src[2]);
  for (int64_t r = 0; r < v.repeat; ++r)
    for (int64_t l = 0; l < n; ++l) {
      if (!lane_enabled(m, in, l)) continue;
      const bool on = dtype_is_float(t) ? load_float(t, c.at(r, l)) != 0.0f : load_int(t, c.at(r, l)) != 0;
      std::memmove(dst.at(r, l), on ? a.at(r, l) : b.at(r, l), eb);
    }
}

// Block b (repeats 2b, 2b + 1: element e = (repeat - 2b) * lanes + lane, row e / 16, column e % 16)
// of dst = block b of src transposed; read before any write.
void execute_vtranspose(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const VectorRoles v = vector_roles(in);
  const int eb = dtype_bytes(type_operand(in, v.dst->param[0]));
  const int64_t n = lanes(m, eb);
  const Strided dst = strided(m, mem, in, *v.dst), src = strided(m, mem, in, *v.src[0]);
  std::vector<uint8_t> block(static_cast<size_t>(2 * n * eb));
  for (int64_t b = 0; b + 1 < v.repeat; b += 2) {
    for (int64_t e = 0; e < 2 * n; ++e) std::memcpy(block.data() + e * eb, src.at(b + e / n, e % n), eb);
    for (int64_t e = 0; e < 2 * n; ++e) {
      const int64_t t = (e % 16) * 16 + e / 16;  // (row, column) -> (column, row)
      std::memcpy(dst.at(b + t / n, t % n), block.data() + e * eb, eb);
    }
  }
}

void execute_vdup(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const VectorRoles v = vector_roles(in);
  const DType t = type_operand(in, v.dst->param[0]);
  const int64_t n = lanes(m, dtype_bytes(t));
  const Strided dst = strided(m, mem, in, *v.dst);
  for (int64_t r = 0; r < v.repeat; ++r)
    for (int64_t l = 0; l < n; ++l) {
      if (!lane_enabled(m, in, l)) continue;
      if (dtype_is_float(t)) store_float(t, dst.at(r, l), static_cast<float>(in.scalar));
      else store_int(t, dst.at(r, l), static_cast<int64_t>(in.scalar));
    }
}

void execute_dma(const IssuedInstruction& in, const MemoryView& mem) {
  uint8_t* dst = mem.base[static_cast<size_t>(buffer_operand(in, 0))] + in.value[0];
  const uint8_t* src = mem.base[static_cast<size_t>(buffer_operand(in, 1))] + in.value[1];
  const int64_t n = in.value[2], len = in.value[3], sg = in.value[4], dg = in.value[5];
  for (int64_t i = 0; i < n; ++i) std::memmove(dst + i * (len + dg), src + i * (len + sg), len);
}

// ND rows x cols (row stride in elements) -> NZ: column blocks of C0 = fractal_row_bytes / esize
// columns, each block holding every row as fractal_row_bytes contiguous bytes.
void execute_dma_nz(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const int eb = dtype_bytes(type_operand(in, 0));
  uint8_t* dst = mem.base[static_cast<size_t>(buffer_operand(in, 1))] + in.value[1];
  const uint8_t* src = mem.base[static_cast<size_t>(Buffer::GM)] + in.value[2];
  const int64_t rows = in.value[3], cols = in.value[4], stride = in.value[5];
  const int64_t row_bytes = m.fractal_row_bytes, c0 = row_bytes / eb;
  for (int64_t cb = 0; cb < cols / c0; ++cb)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + (cb * rows + r) * row_bytes, src + (r * stride + cb * c0) * eb, row_bytes);
}

void execute_load2d(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  uint8_t* dst = mem.base[static_cast<size_t>(buffer_operand(in, 1))] + in.value[1];
  const uint8_t* src = mem.base[static_cast<size_t>(Buffer::L1)] + in.value[2];
  const int64_t outer = in.value[3], inner = in.value[4], so = in.value[5], si = in.value[6];
  const bool transpose = in.value[7] != 0;
  const uint64_t fb = m.fractal_bytes();
  const int side = static_cast<int>(m.fractal_rows());  // f16 fractals are square
  if (transpose && type_operand(in, 0) == DType::I8) {
    // Units (o, i), (o, i + 1), i even: the two source fractals stacked (2 x fractal_rows rows of
    // fractal_row_bytes bytes: a square of bytes) are transposed byte by byte; the result's first
    // fractal_rows rows go to destination fractal o * inner + i, the rest to the next one.
    const int64_t n = 2 * side, row = m.fractal_row_bytes;
    TESSEL_CHECK(row == n, "an i8 fractal pair is not a square of bytes");
    // not hardware: host scratch for one pair, checked against its bytes
    uint8_t block[2 * 4096], tmp[2 * 4096];
    TESSEL_CHECK(2 * fb <= sizeof block, "fractal pair larger than the transpose scratch");
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; i += 2) {
        std::memcpy(block, src + (o * so + i * si) * fb, fb);
        std::memcpy(block + fb, src + (o * so + (i + 1) * si) * fb, fb);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < n; ++c) tmp[c * n + r] = block[r * n + c];
        std::memcpy(dst + (o * inner + i) * fb, tmp, 2 * fb);
      }
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const uint8_t* s = src + (o * so + i * si) * fb;
      uint8_t* d = dst + (o * inner + i) * fb;
      if (!transpose) {
        std::memmove(d, s, fb);
        continue;
      }
      // not hardware: host scratch for one fractal, checked against the fractal bytes below
      uint8_t tmp[4096];
      TESSEL_CHECK(fb <= sizeof tmp, "fractal larger than the transpose scratch");
      for (int r = 0; r < side; ++r)
        for (int c = 0; c < side; ++c) std::memcpy(tmp + (c * side + r) * 2, s + (r * side + c) * 2, 2);
      std::memcpy(d, tmp, fb);
    }
}

void execute_load3d(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const auto& f = in.fmatrix;
  const int64_t H = f[0], W = f[1], pt = f[2], pb = f[3], pl = f[4], pr = f[5], sh = f[6], sw = f[7], kh = f[8],
                kw = f[9], dh = f[10], dw = f[11];
  const int64_t out_w = (W + pl + pr - dw * (kw - 1) - 1) / sw + 1;
  (void)pb;
  const int64_t c0 = m.fractal_row_bytes / 2, rows = m.fractal_rows();
  uint8_t* dst = mem.base[static_cast<size_t>(buffer_operand(in, 1))] + in.value[1];
  const uint8_t* src = mem.base[static_cast<size_t>(Buffer::L1)] + in.value[2];
  const int64_t p0 = in.value[4], pc = in.value[5], k0 = in.value[6], kc = in.value[7];
  const uint64_t fb = m.fractal_bytes();
  for (int64_t pi = 0; pi < pc / rows; ++pi)
    for (int64_t kj = 0; kj < kc; ++kj) {
      const int64_t q = k0 + kj, c1 = q / (kh * kw), kr = (q / kw) % kh, ks = q % kw;
      uint8_t* frac = dst + (pi * kc + kj) * fb;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t p = p0 + pi * rows + r, oh = p / out_w, ow = p % out_w;
        const int64_t h = oh * sh - pt + kr * dh, w = ow * sw - pl + ks * dw;
        uint8_t* row = frac + r * m.fractal_row_bytes;
        if (h < 0 || h >= H || w < 0 || w >= W) std::memset(row, 0, m.fractal_row_bytes);
        else std::memcpy(row, src + ((c1 * H + h) * W + w) * c0 * 2, m.fractal_row_bytes);
      }
    }
}

// C (NZ, f32) = [C +] A (ZZ) x B (ZN) of 16-bit float operands (f16, or bf16 where the cube lists
// it: each converted to f32 exactly, so every product of two is exact in f32). Operands are unpacked
// into dense row-major scratch so the inner loop runs over contiguous n; each C element accumulates
// its k products in ascending k.
void execute_mmad_f16(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const DType type = type_operand(in, 0);
  const isa::CubeShape& s = m.cube(type);
  const auto value = [type](uint16_t h) { return type == DType::BF16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h); };
  const int64_t M = in.value[4], K = in.value[5], N = in.value[6];
  const int64_t mf = M / s.m0, kf = K / s.k0, nf = N / s.n0;
  const uint8_t* a = mem.base[static_cast<size_t>(Buffer::L0A)] + in.value[2];
  const uint8_t* b = mem.base[static_cast<size_t>(Buffer::L0B)] + in.value[3];
  uint8_t* c = mem.base[static_cast<size_t>(Buffer::L0C)] + in.value[1];
  thread_local std::vector<float> da, db, dc;
  da.resize(M * K);
  db.resize(K * N);
  dc.resize(M * N);
  for (int64_t mi = 0; mi < mf; ++mi)
    for (int64_t ki = 0; ki < kf; ++ki) {
      const uint8_t* frac = a + (mi * kf + ki) * s.m0 * s.k0 * 2;
      for (int r = 0; r < s.m0; ++r)
        for (int q = 0; q < s.k0; ++q) {
          uint16_t h;
          std::memcpy(&h, frac + (r * s.k0 + q) * 2, 2);
          da[(mi * s.m0 + r) * K + ki * s.k0 + q] = value(h);
        }
    }
  for (int64_t ki = 0; ki < kf; ++ki)
    for (int64_t ni = 0; ni < nf; ++ni) {
      const uint8_t* frac = b + (ki * nf + ni) * s.k0 * s.n0 * 2;
      for (int col = 0; col < s.n0; ++col)
        for (int q = 0; q < s.k0; ++q) {
          uint16_t h;
          std::memcpy(&h, frac + (col * s.k0 + q) * 2, 2);
          db[(ki * s.k0 + q) * N + ni * s.n0 + col] = value(h);
        }
    }
  const bool init = in.value[7] != 0;
  for (int64_t ni = 0; ni < nf; ++ni)
    for (int64_t mi = 0; mi < mf; ++mi) {
      const float* frac = reinterpret_cast<const float*>(c + (ni * mf + mi) * s.m0 * s.n0 * 4);
      for (int r = 0; r < s.m0; ++r)
        for (int col = 0; col < s.n0; ++col)
          dc[(mi * s.m0 + r) * N + ni * s.n0 + col] = init ? 0.0f : frac[r * s.n0 + col];
    }
  // With N a multiple of 16 (n0 on davinci targets) a fixed-length inner loop vectorises at -O2.
  constexpr int kLanes = 16;  // not hardware: the host loop's unrolled width
  const int64_t lanes = N % kLanes == 0 ? kLanes : 1;
  for (int64_t i = 0; i < M && lanes == 1; ++i)
    for (int64_t q = 0; q < K; ++q)
      for (int64_t j = 0; j < N; ++j) dc[i * N + j] += da[i * K + q] * db[q * N + j];
  for (int64_t i = 0; i < M && lanes == kLanes; ++i) {
    float* crow = dc.data() + i * N;
    const float* arow = da.data() + i * K;
    for (int64_t q = 0; q < K; ++q) {
      const float av = arow[q];
      const float* brow = db.data() + q * N;
      for (int64_t jb = 0; jb < N; jb += kLanes) {
        float* __restrict c16 = crow + jb;
        const float* __restrict b16 = brow + jb;
        for (int j = 0; j < kLanes; ++j) c16[j] += av * b16[j];
      }
    }
  }
  for (int64_t ni = 0; ni < nf; ++ni)
    for (int64_t mi = 0; mi < mf; ++mi) {
      float* frac = reinterpret_cast<float*>(c + (ni * mf + mi) * s.m0 * s.n0 * 4);
      for (int r = 0; r < s.m0; ++r)
        for (int col = 0; col < s.n0; ++col) frac[r * s.n0 + col] = dc[(mi * s.m0 + r) * N + ni * s.n0 + col];
    }
}

void execute_mmad_i8(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const isa::CubeShape& s = m.cube_i8;
  const int64_t M = in.value[4], K = in.value[5], N = in.value[6];
  const int64_t mf = M / s.m0, kf = K / s.k0, nf = N / s.n0;
  const int8_t* a = reinterpret_cast<const int8_t*>(mem.base[static_cast<size_t>(Buffer::L0A)] + in.value[2]);
  const int8_t* b = reinterpret_cast<const int8_t*>(mem.base[static_cast<size_t>(Buffer::L0B)] + in.value[3]);
  int32_t* c = reinterpret_cast<int32_t*>(mem.base[static_cast<size_t>(Buffer::L0C)] + in.value[1]);
  const bool init = in.value[7] != 0;
  for (int64_t mi = 0; mi < mf; ++mi)
    for (int64_t ni = 0; ni < nf; ++ni) {
      int32_t* cf = c + (ni * mf + mi) * s.m0 * s.n0;
      for (int r = 0; r < s.m0; ++r)
        for (int col = 0; col < s.n0; ++col) {
          int32_t acc = init ? 0 : cf[r * s.n0 + col];
          for (int64_t ki = 0; ki < kf; ++ki) {
            const int8_t* af = a + (mi * kf + ki) * s.m0 * s.k0 + r * s.k0;
            const int8_t* bf = b + (ki * nf + ni) * s.k0 * s.n0 + col * s.k0;
            for (int q = 0; q < s.k0; ++q) acc += int32_t(af[q]) * int32_t(bf[q]);
          }
          cf[r * s.n0 + col] = acc;
        }
    }
}

void execute_mov_l0c(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const DType t = type_operand(in, 0);
  const bool relu = in.value[4] != 0;
  const int64_t count = in.value[3] * m.cube_f16.m0 * m.cube_f16.n0;
  uint8_t* dst = mem.base[static_cast<size_t>(Buffer::UB)] + in.value[1];
  const uint8_t* src = mem.base[static_cast<size_t>(Buffer::L0C)] + in.value[2];
  for (int64_t i = 0; i < count; ++i) {
    if (t == DType::I32) {
      int32_t v;
      std::memcpy(&v, src + i * 4, 4);
      if (relu && v < 0) v = 0;
      std::memcpy(dst + i * 4, &v, 4);
    } else {
      float v;
      std::memcpy(&v, src + i * 4, 4);
      if (relu && v < 0) v = 0.0f;
      store_float(t, dst + i * dtype_bytes(t), v);
    }
  }
}

}  // namespace

int64_t scalar_load(const IssuedInstruction& in, const MemoryView& mem) {
  const uint8_t* gm = mem.base[static_cast<size_t>(Buffer::GM)];
  if (!gm) return 0;  // timing-only: no bytes
  return load_int(DType::I32, gm + in.value[2]);
}

void execute_instruction(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  switch (in.instr->opcode) {
    case Opcode::DmaIn:
    case Opcode::DmaOut: execute_dma(in, mem); return;
    case Opcode::DmaInNz: execute_dma_nz(m, in, mem); return;
    case Opcode::Load2d: execute_load2d(m, in, mem); return;
    case Opcode::Load3d: execute_load3d(m, in, mem); return;
    case Opcode::Mmad:
      if (type_operand(in, 0) == DType::I8) execute_mmad_i8(m, in, mem);
      else execute_mmad_f16(m, in, mem);
      return;
    case Opcode::MovL0c: execute_mov_l0c(m, in, mem); return;
    case Opcode::Vconv: execute_vconv(m, in, mem); return;
    case Opcode::Vcadd:
    case Opcode::Vcmax: execute_reduce(m, in, mem); return;
    case Opcode::Vdup: execute_vdup(m, in, mem); return;
    case Opcode::Vbrcb: execute_vbrcb(m, in, mem); return;
    case Opcode::Vselv: execute_vselv(m, in, mem); return;
    case Opcode::Vtranspose: execute_vtranspose(m, in, mem); return;
    case Opcode::Ld: return;  // writes a register: the simulator's scalar pipe reads the value (scalar_load)
    default: execute_elementwise(m, in, mem); return;
  }
}

}  // namespace tessel::npu_sim
