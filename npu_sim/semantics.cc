#include "npu_sim/semantics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa/base/error.h"
#include "isa/base/f16.h"

namespace tessel::npu_sim {
namespace {

using npu::Buffer;
using npu::Opcode;

[[noreturn]] void fault(const std::string& reason) { throw InstructionFault{reason}; }

using I128 = __int128;

enum class VectorForm { Binary, WithScalar, Unary, Other };

// The operand format in isa/npu_isa.def decides the form of a vector instruction.
VectorForm vector_form(Opcode op) {
  const npu::OpcodeInfo& info = npu::opcode_info(op);
  if (info.pipe_rule != npu::PipeRule::V) return VectorForm::Other;
  if (info.format == "t,a,a,a,v,v,v,v,v,v,v") return VectorForm::Binary;
  if (info.format == "t,a,a,f,v,v,v,v,v") return VectorForm::WithScalar;
  if (info.format == "t,a,a,v,v,v,v,v") return VectorForm::Unary;
  return VectorForm::Other;
}

DType type_operand(const IssuedInstruction& in, int i) { return in.instr->operands[i].dtype; }
Buffer buffer_operand(const IssuedInstruction& in, int i) { return in.instr->operands[i].buffer; }

uint64_t ceil_div(uint64_t a, double b) { return static_cast<uint64_t>(std::ceil(static_cast<double>(a) / b)); }

int64_t positive(const IssuedInstruction& in, int i, const char* what) {
  const int64_t v = in.value[i];
  if (v <= 0) fault(fmt::format("{} must be positive, got {}", what, v));
  return v;
}

int64_t non_negative(const IssuedInstruction& in, int i, const char* what) {
  const int64_t v = in.value[i];
  if (v < 0) fault(fmt::format("{} must not be negative, got {}", what, v));
  return v;
}

class FootprintBuilder {
 public:
  FootprintBuilder(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem,
                   std::vector<Access>& accesses)
      : m_(m), in_(in), mem_(mem), accesses_(accesses) {}

  // Starts the access of address operand `operand`; add ranges relative to its start.
  void begin(int operand, bool write) {
    const Buffer b = buffer_operand(in_, operand);
    const int64_t start = in_.value[operand];
    if (start < 0) fault(fmt::format("operand {} addresses {}{:+} (negative offset)", operand + 1, npu::buffer_name(b), start));
    const uint32_t align = m_.buffer(b).alignment_bytes;
    if (start % align != 0)
      fault(fmt::format("operand {} address {}[{}] is not aligned to {} bytes ({} alignment_bytes)", operand + 1,
                        npu::buffer_name(b), start, align, m_.buffer(b).level_name));
    Access a;
    a.buffer = b;
    a.write = write;
    accesses_.push_back(std::move(a));
    start_ = static_cast<uint64_t>(start);
    operand_ = operand;
  }
  // Rejects an operand whose accesses would end past its buffer, before any loop over them runs
  // (so absurd counts fail fast instead of building huge footprints). 128-bit: no overflow.
  void limit(int operand, __int128 extent_bytes) {
    const Buffer b = buffer_operand(in_, operand);
    const __int128 end = static_cast<__int128>(in_.value[operand]) + extent_bytes;
    if (end > static_cast<__int128>(mem_.size[static_cast<size_t>(b)]))
      out_of_range(operand, b, static_cast<uint64_t>(std::max<int64_t>(0, in_.value[operand])), end);
  }
  [[noreturn]] void out_of_range(int operand, Buffer b, uint64_t lo, __int128 hi) const {
    const std::string end = hi > static_cast<__int128>(UINT64_MAX) ? std::string("2^64+") : std::to_string(static_cast<uint64_t>(hi));
    const uint64_t size = mem_.size[static_cast<size_t>(b)];
    if (b == Buffer::GM)
      fault(fmt::format("operand {} reaches GM[{}, {}) beyond the GM the program's tensors declare ({} bytes)", operand + 1,
                        lo, end, size));
    fault(fmt::format("operand {} reaches {}[{}, {}) beyond {} capacity_bytes {}", operand + 1, npu::buffer_name(b), lo,
                      end, m_.buffer(b).level_name, size));
  }
  void add(uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return;
    Access& a = accesses_.back();
    const uint64_t b = start_ + offset, e = b + bytes;
    if (!a.ranges.empty() && a.ranges.back().end == b) {
      a.ranges.back().end = e;
    } else {
      a.ranges.push_back({b, e});
    }
  }
  void end() {
    Access& a = accesses_.back();
    if (a.ranges.empty()) return;
    const auto by_begin = [](const Interval& x, const Interval& y) { return x.begin < y.begin; };
    bool disjoint_sorted = true;  // the common case (bursts, rows, blocks in order): nothing to merge
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
    const uint64_t limit = mem_.size[static_cast<size_t>(a.buffer)];
    if (a.hi > limit) out_of_range(operand_, a.buffer, a.lo, a.hi);
  }
  // A strided vector operand: `repeat` repeats of `blocks` blocks.
  void vector_operand(int operand, bool write, int64_t repeat, int64_t blocks, int64_t blk_stride, int64_t rep_stride) {
    begin(operand, write);
    const uint64_t bb = m_.vector_block_bytes;
    for (int64_t r = 0; r < repeat; ++r)
      for (int64_t b = 0; b < blocks; ++b) add(static_cast<uint64_t>(r * rep_stride + b * blk_stride) * bb, bb);
    end();
  }

 private:
  const isa::NpuMachine& m_;
  const IssuedInstruction& in_;
  const MemoryView& mem_;
  std::vector<Access>& accesses_;
  uint64_t start_ = 0;
  int operand_ = 0;
};

void copy_cost(const isa::NpuMachine& m, Buffer from, Buffer to, uint64_t bytes, InstructionCost& cost) {
  const isa::NpuPathSpec& p = m.path(from, to);
  if (!p.exists)
    fault(fmt::format("the target has no transfer path {} -> {}", npu::buffer_name(from), npu::buffer_name(to)));
  cost.bytes = bytes;
  cost.path_from = static_cast<int>(from);
  cost.path_to = static_cast<int>(to);
  cost.occupancy_cycles = std::max<uint64_t>(1, ceil_div(bytes, p.bandwidth_bytes_per_cycle));
  cost.latency_cycles = p.latency_cycles;
  cost.uses_gm = from == Buffer::GM || to == Buffer::GM;
}

void check_repeat(const isa::NpuMachine& m, int64_t repeat) {
  if (repeat < 1 || repeat > static_cast<int64_t>(m.vector_max_repeat))
    fault(fmt::format("repeat {} is outside 1..{} (vector max_repeat)", repeat, m.vector_max_repeat));
}

void vector_cost(const isa::NpuMachine& m, int64_t repeat, InstructionCost& cost) {
  cost.occupancy_cycles = static_cast<uint64_t>(repeat);
  cost.latency_cycles = m.vector_startup_cycles;
}

int64_t blocks_per_repeat(const isa::NpuMachine& m, int element_bytes, int64_t elements) {
  return std::max<int64_t>(1, elements * element_bytes / m.vector_block_bytes);
}

// Elements one repeat processes for a vector instruction over `bytes`-sized elements.
int64_t lanes(const isa::NpuMachine& m, int element_bytes) { return m.vector_bytes_per_repeat / element_bytes; }

struct MmadShape {
  int64_t mf, kf, nf;
  uint64_t a_frac_bytes, b_frac_bytes, c_frac_bytes;
  isa::CubeShape shape;
};

MmadShape mmad_shape(const isa::NpuMachine& m, const IssuedInstruction& in) {
  const DType t = type_operand(in, 0);
  const isa::CubeShape& s = m.cube(t);
  if (!s.exists) fault(fmt::format("the target's cube has no {} shape", dtype_name(t)));
  const int64_t mm = positive(in, 4, "m"), kk = positive(in, 5, "k"), nn = positive(in, 6, "n");
  if (mm % s.m0 || kk % s.k0 || nn % s.n0)
    fault(fmt::format("m, k, n = {}, {}, {} must be multiples of the cube shape {}x{}x{}", mm, kk, nn, s.m0, s.k0, s.n0));
  const int acc_bytes = 4;
  const int eb = dtype_bytes(t);
  return {mm / s.m0, kk / s.k0, nn / s.n0, uint64_t(s.m0) * s.k0 * eb, uint64_t(s.k0) * s.n0 * eb,
          uint64_t(s.m0) * s.n0 * acc_bytes, s};
}

}  // namespace

void describe_instruction(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem,
                          std::vector<Access>& accesses, InstructionCost& cost) {
  accesses.clear();
  cost = {};
  FootprintBuilder fp(m, in, mem, accesses);
  const Opcode op = in.instr->opcode;
  switch (op) {
    case Opcode::DmaIn:
    case Opcode::DmaOut: {
      const int64_t n = positive(in, 2, "nburst"), len = positive(in, 3, "burst_bytes");
      const int64_t sg = non_negative(in, 4, "src_gap_bytes"), dg = non_negative(in, 5, "dst_gap_bytes");
      fp.limit(1, I128(n - 1) * (len + sg) + len);
      fp.limit(0, I128(n - 1) * (len + dg) + len);
      fp.begin(1, false);
      for (int64_t i = 0; i < n; ++i) fp.add(uint64_t(i * (len + sg)), uint64_t(len));
      fp.end();
      fp.begin(0, true);
      for (int64_t i = 0; i < n; ++i) fp.add(uint64_t(i * (len + dg)), uint64_t(len));
      fp.end();
      copy_cost(m, buffer_operand(in, 1), buffer_operand(in, 0), uint64_t(n * len), cost);
      return;
    }
    case Opcode::DmaInNz: {
      const int eb = dtype_bytes(type_operand(in, 0));
      const int64_t rows = positive(in, 3, "rows"), cols = positive(in, 4, "cols");
      const int64_t stride = positive(in, 5, "src_row_stride_elements");
      if (rows % m.fractal_rows() || (cols * eb) % m.fractal_row_bytes)
        fault(fmt::format("rows {} must be a multiple of {} and cols {} x {} bytes a multiple of {} (fractal)", rows,
                          m.fractal_rows(), cols, eb, m.fractal_row_bytes));
      if (stride < cols) fault(fmt::format("src_row_stride_elements {} is smaller than cols {}", stride, cols));
      fp.limit(2, (I128(rows - 1) * stride + cols) * eb);
      fp.limit(1, I128(rows) * cols * eb);
      fp.begin(2, false);
      for (int64_t r = 0; r < rows; ++r) fp.add(uint64_t(r * stride * eb), uint64_t(cols * eb));
      fp.end();
      fp.begin(1, true);
      fp.add(0, uint64_t(rows * cols * eb));
      fp.end();
      copy_cost(m, Buffer::GM, buffer_operand(in, 1), uint64_t(rows * cols * eb), cost);
      return;
    }
    case Opcode::Load2d: {
      const int64_t outer = positive(in, 3, "outer"), inner = positive(in, 4, "inner");
      const int64_t so = non_negative(in, 5, "src_outer_stride"), si = non_negative(in, 6, "src_inner_stride");
      if (in.value[7] != 0 && type_operand(in, 0) != DType::F16)
        fault("transpose is defined for square f16 fractals only");
      const uint64_t fb = m.fractal_bytes();
      fp.limit(2, (I128(outer - 1) * so + I128(inner - 1) * si + 1) * fb);
      fp.limit(1, I128(outer) * inner * fb);
      fp.begin(2, false);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) fp.add(uint64_t(o * so + i * si) * fb, fb);
      fp.end();
      fp.begin(1, true);
      fp.add(0, uint64_t(outer * inner) * fb);
      fp.end();
      copy_cost(m, Buffer::L1, buffer_operand(in, 1), uint64_t(outer * inner) * fb, cost);
      return;
    }
    case Opcode::Load3d: {
      const auto& f = in.fmatrix;
      const int64_t H = f[0], W = f[1], kh = f[8], kw = f[9];
      if (H <= 0 || W <= 0 || kh <= 0 || kw <= 0 || f[6] <= 0 || f[7] <= 0 || f[10] <= 0 || f[11] <= 0)
        fault("img2col geometry unset or invalid: run set_fmatrix with positive H, W, strides, kernel, dilation");
      const int64_t c0 = m.fractal_row_bytes / 2;
      const int64_t channels = positive(in, 3, "channels");
      if (channels % c0) fault(fmt::format("channels {} must be a multiple of C0 = {}", channels, c0));
      const int64_t pc = positive(in, 5, "pixel_count"), kc = positive(in, 7, "kpos_count");
      non_negative(in, 4, "pixel_begin");
      non_negative(in, 6, "kpos_begin");
      if (pc % m.fractal_rows()) fault(fmt::format("pixel_count {} must be a multiple of {}", pc, m.fractal_rows()));
      if (in.value[6] + kc > (channels / c0) * kh * kw)
        fault(fmt::format("kpos_begin + kpos_count = {} exceeds C1 x KH x KW = {}", in.value[6] + kc,
                          (channels / c0) * kh * kw));
      fp.limit(2, I128(channels) * H * W * 2);
      fp.limit(1, I128(pc / m.fractal_rows()) * kc * m.fractal_bytes());
      fp.begin(2, false);
      fp.add(0, uint64_t(channels * H * W * 2));
      fp.end();
      const uint64_t bytes = uint64_t(pc / m.fractal_rows() * kc) * m.fractal_bytes();
      fp.begin(1, true);
      fp.add(0, bytes);
      fp.end();
      copy_cost(m, Buffer::L1, buffer_operand(in, 1), bytes, cost);
      return;
    }
    case Opcode::Mmad: {
      const MmadShape s = mmad_shape(m, in);
      fp.limit(2, I128(s.mf) * s.kf * s.a_frac_bytes);
      fp.limit(3, I128(s.kf) * s.nf * s.b_frac_bytes);
      fp.limit(1, I128(s.mf) * s.nf * s.c_frac_bytes);
      fp.begin(2, false);
      fp.add(0, uint64_t(s.mf * s.kf) * s.a_frac_bytes);
      fp.end();
      fp.begin(3, false);
      fp.add(0, uint64_t(s.kf * s.nf) * s.b_frac_bytes);
      fp.end();
      if (in.value[7] == 0) {
        fp.begin(1, false);
        fp.add(0, uint64_t(s.mf * s.nf) * s.c_frac_bytes);
        fp.end();
      }
      fp.begin(1, true);
      fp.add(0, uint64_t(s.mf * s.nf) * s.c_frac_bytes);
      fp.end();
      cost.occupancy_cycles = uint64_t(s.mf * s.kf * s.nf) * s.shape.cycles;
      cost.latency_cycles = m.cube_startup_cycles;
      return;
    }
    case Opcode::MovL0c: {
      const int64_t n = positive(in, 3, "fractals");
      const uint64_t elems = uint64_t(m.cube_f16.m0) * m.cube_f16.n0;
      fp.limit(2, I128(n) * elems * 4);
      fp.limit(1, I128(n) * elems * dtype_bytes(type_operand(in, 0)));
      fp.begin(2, false);
      fp.add(0, uint64_t(n) * elems * 4);
      fp.end();
      const uint64_t bytes = uint64_t(n) * elems * dtype_bytes(type_operand(in, 0));
      fp.begin(1, true);
      fp.add(0, bytes);
      fp.end();
      copy_cost(m, Buffer::L0C, Buffer::UB, bytes, cost);
      return;
    }
    case Opcode::Vconv: {
      const int ed = dtype_bytes(type_operand(in, 0)), es = dtype_bytes(type_operand(in, 1));
      const int64_t repeat = in.value[4];
      check_repeat(m, repeat);
      const int64_t n = lanes(m, std::max(ed, es));
      fp.vector_operand(3, false, repeat, blocks_per_repeat(m, es, n), in.value[6], in.value[8]);
      fp.vector_operand(2, true, repeat, blocks_per_repeat(m, ed, n), in.value[5], in.value[7]);
      vector_cost(m, repeat, cost);
      return;
    }
    case Opcode::Vcadd:
    case Opcode::Vcmax: {
      const int eb = dtype_bytes(type_operand(in, 0));
      const int64_t repeat = in.value[3];
      check_repeat(m, repeat);
      fp.vector_operand(2, false, repeat, blocks_per_repeat(m, eb, lanes(m, eb)), in.value[4], in.value[5]);
      fp.begin(1, true);
      fp.add(0, uint64_t(repeat * eb));
      fp.end();
      vector_cost(m, repeat, cost);
      return;
    }
    case Opcode::Vbrcb: {  // reads `repeat` contiguous elements, writes one repeat per element
      const int eb = dtype_bytes(type_operand(in, 0));
      const int64_t repeat = in.value[3];
      check_repeat(m, repeat);
      fp.limit(2, I128(repeat) * eb);
      fp.begin(2, false);
      fp.add(0, uint64_t(repeat * eb));
      fp.end();
      fp.vector_operand(1, true, repeat, blocks_per_repeat(m, eb, lanes(m, eb)), in.value[4], in.value[5]);
      vector_cost(m, repeat, cost);
      return;
    }
    case Opcode::Vdup: {
      const int eb = dtype_bytes(type_operand(in, 0));
      const int64_t repeat = in.value[3];
      check_repeat(m, repeat);
      fp.vector_operand(1, true, repeat, blocks_per_repeat(m, eb, lanes(m, eb)), in.value[4], in.value[5]);
      vector_cost(m, repeat, cost);
      return;
    }
    default: break;
  }
  const VectorForm form = vector_form(op);
  TESSEL_CHECK(form != VectorForm::Other, "describe_instruction called for a sync or scalar instruction");
  const int eb = dtype_bytes(type_operand(in, 0));
  const int64_t bpr = blocks_per_repeat(m, eb, lanes(m, eb));
  if (form == VectorForm::Binary) {
    const int64_t repeat = in.value[4];
    check_repeat(m, repeat);
    fp.vector_operand(2, false, repeat, bpr, in.value[6], in.value[9]);
    fp.vector_operand(3, false, repeat, bpr, in.value[7], in.value[10]);
    fp.vector_operand(1, true, repeat, bpr, in.value[5], in.value[8]);
    vector_cost(m, repeat, cost);
  } else {
    const int base = form == VectorForm::WithScalar ? 4 : 3;  // index of `repeat`
    const int64_t repeat = in.value[base];
    check_repeat(m, repeat);
    fp.vector_operand(2, false, repeat, bpr, in.value[base + 2], in.value[base + 4]);
    fp.vector_operand(1, true, repeat, bpr, in.value[base + 1], in.value[base + 3]);
    vector_cost(m, repeat, cost);
  }
}

// ---------------------------------------------------------------- function

namespace {

float load_float(DType t, const uint8_t* p) {
  if (t == DType::F16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_bits_to_f32(h);
  }
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

void store_float(DType t, uint8_t* p, float v) {
  if (t == DType::F16) {
    const uint16_t h = f32_to_f16_bits(v);
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
    *p = static_cast<uint8_t>(static_cast<int8_t>(std::clamp<int64_t>(v, -128, 127)));
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
    case Opcode::Vmax: case Opcode::Vmaxs: return std::max(a, b);
    case Opcode::Vmin: return std::min(a, b);
    case Opcode::Vrelu: return a > 0.0f ? a : 0.0f;
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
    case Opcode::Vadd: case Opcode::Vadds: return a + b;
    case Opcode::Vsub: return a - b;
    case Opcode::Vmul: case Opcode::Vmuls: return a * b;
    case Opcode::Vdiv:
      if (b == 0) fault("integer division by zero");
      return a / b;
    case Opcode::Vmax: case Opcode::Vmaxs: return std::max(a, b);
    case Opcode::Vmin: return std::min(a, b);
    case Opcode::Vrelu: return std::max<int64_t>(a, 0);
    case Opcode::Vabs: return a < 0 ? -a : a;
    default: fault(std::string(npu::mnemonic(op)) + " is not defined on integers");
  }
}

bool lane_enabled(const isa::NpuMachine& m, const IssuedInstruction& in, int64_t lane) {
  const uint64_t bit = static_cast<uint64_t>(lane) % m.vector_mask_bits;
  return bit < 64 ? (in.mask_lo >> bit) & 1 : (in.mask_hi >> (bit - 64)) & 1;
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

Strided strided(const isa::NpuMachine& m, const MemoryView& mem, const IssuedInstruction& in, int operand, DType t,
                int64_t blk, int64_t rep) {
  const int eb = dtype_bytes(t);
  return {mem.base[static_cast<size_t>(buffer_operand(in, operand))] + in.value[operand], blk, rep,
          static_cast<int>(m.vector_block_bytes / eb), eb, m.vector_block_bytes};
}

void execute_elementwise(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const Opcode op = in.instr->opcode;
  const VectorForm form = vector_form(op);
  const DType t = type_operand(in, 0);
  const bool is_float = dtype_is_float(t);
  const int64_t n = lanes(m, dtype_bytes(t));
  const int base = form == VectorForm::Binary ? 4 : form == VectorForm::WithScalar ? 4 : 3;
  const int64_t repeat = in.value[base];
  Strided dst, a, b{};
  if (form == VectorForm::Binary) {
    dst = strided(m, mem, in, 1, t, in.value[5], in.value[8]);
    a = strided(m, mem, in, 2, t, in.value[6], in.value[9]);
    b = strided(m, mem, in, 3, t, in.value[7], in.value[10]);
  } else {
    dst = strided(m, mem, in, 1, t, in.value[base + 1], in.value[base + 3]);
    a = strided(m, mem, in, 2, t, in.value[base + 2], in.value[base + 4]);
  }
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
        const float y = form == VectorForm::Binary ? load_float(t, b.at(r, l)) : scalar_f;
        store_float(t, dst.at(r, l), float_op(op, x, y));
      } else {
        const int64_t x = load_int(t, a.at(r, l));
        const int64_t y = form == VectorForm::Binary ? load_int(t, b.at(r, l)) : scalar_i;
        store_int(t, dst.at(r, l), int_op(op, x, y));
      }
    }
}

int64_t round_to_int(float v) { return static_cast<int64_t>(std::nearbyint(static_cast<double>(v))); }

void execute_vconv(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const DType td = type_operand(in, 0), ts = type_operand(in, 1);
  const int64_t n = lanes(m, std::max(dtype_bytes(td), dtype_bytes(ts)));
  const Strided dst = strided(m, mem, in, 2, td, in.value[5], in.value[7]);
  const Strided src = strided(m, mem, in, 3, ts, in.value[6], in.value[8]);
  for (int64_t r = 0; r < in.value[4]; ++r)
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
        else store_int(td, d, std::clamp<int64_t>(v, td == DType::I8 ? -128 : INT32_MIN, td == DType::I8 ? 127 : INT32_MAX));
      }
    }
}

void execute_reduce(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const DType t = type_operand(in, 0);
  const int64_t n = lanes(m, dtype_bytes(t));
  const Strided src = strided(m, mem, in, 2, t, in.value[4], in.value[5]);
  uint8_t* dst = mem.base[static_cast<size_t>(buffer_operand(in, 1))] + in.value[1];
  const bool sum = in.instr->opcode == Opcode::Vcadd;
  for (int64_t r = 0; r < in.value[3]; ++r) {
    if (dtype_is_float(t)) {
      float acc = sum ? 0.0f : -INFINITY;
      for (int64_t l = 0; l < n; ++l)
        if (lane_enabled(m, in, l)) acc = sum ? acc + load_float(t, src.at(r, l)) : std::max(acc, load_float(t, src.at(r, l)));
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
  const DType t = type_operand(in, 0);
  const int eb = dtype_bytes(t);
  const int64_t n = lanes(m, eb);
  const Strided dst = strided(m, mem, in, 1, t, in.value[4], in.value[5]);
  const uint8_t* src = mem.base[static_cast<size_t>(buffer_operand(in, 2))] + in.value[2];
  std::vector<uint8_t> values(src, src + in.value[3] * eb);  // read before any write (dst may overlap)
  for (int64_t r = 0; r < in.value[3]; ++r)
    for (int64_t l = 0; l < n; ++l)
      if (lane_enabled(m, in, l)) std::memcpy(dst.at(r, l), values.data() + r * eb, eb);
}

void execute_vdup(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const DType t = type_operand(in, 0);
  const int64_t n = lanes(m, dtype_bytes(t));
  const Strided dst = strided(m, mem, in, 1, t, in.value[4], in.value[5]);
  for (int64_t r = 0; r < in.value[3]; ++r)
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
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const uint8_t* s = src + (o * so + i * si) * fb;
      uint8_t* d = dst + (o * inner + i) * fb;
      if (!transpose) {
        std::memmove(d, s, fb);
        continue;
      }
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

// C (NZ, f32) = [C +] A (ZZ) x B (ZN). Operands are unpacked into dense row-major scratch so the
// inner loop runs over contiguous n; each C element accumulates its k products in ascending k.
void execute_mmad_f16(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem) {
  const isa::CubeShape& s = m.cube_f16;
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
          da[(mi * s.m0 + r) * K + ki * s.k0 + q] = f16_bits_to_f32(h);
        }
    }
  for (int64_t ki = 0; ki < kf; ++ki)
    for (int64_t ni = 0; ni < nf; ++ni) {
      const uint8_t* frac = b + (ki * nf + ni) * s.k0 * s.n0 * 2;
      for (int col = 0; col < s.n0; ++col)
        for (int q = 0; q < s.k0; ++q) {
          uint16_t h;
          std::memcpy(&h, frac + (col * s.k0 + q) * 2, 2);
          db[(ki * s.k0 + q) * N + ni * s.n0 + col] = f16_bits_to_f32(h);
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
  constexpr int kLanes = 16;
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
    default: execute_elementwise(m, in, mem); return;
  }
}

}  // namespace tessel::npu_sim
