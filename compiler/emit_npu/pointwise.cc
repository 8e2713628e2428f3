#include "compiler/emit_npu/pointwise.h"
#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/compositions.h"
#include "compiler/ir/builtin_math.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "isa/base/error.h"
#include "isa/base/float_minmax.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;


enum Reg : uint8_t { kChunk = 1, kOff2, kOff4, kCore0 };


}  // namespace

VectorCode::VectorCode(const kernel::Kernel& k, const isa::NpuMachine& m)
    : k_(k),
      m_(m),
      bytes_per_repeat_(m_.vector_bytes_per_repeat),
      max_repeat_(m_.vector_max_repeat),
      repeat_blocks_(m_.blocks_per_repeat()) {}

std::string VectorCode::message(const std::string& why, const std::string& mapping) const {
  return why.empty() ? why : "kernel " + k_.name + ": " + mapping + ": " + why;
}

npu::Program& VectorCode::begin_program(NpuKernel& out) {
  npu::Program& p = out.program;
  p_ = &p;
  p.source_name = k_.name + ".npu";
  p.cores = 1;
  bind_tensors(p);
  return p;
}

void VectorCode::bind_tensors(npu::Program& p) const {
  int64_t gm = 0;
  const int64_t align = m_.granularity(Buffer::GM);
  for (const auto& t : k_.tensors) {
    if (t.temporary) continue;
    npu::TensorBinding b{t.name, t.dtype, t.shape.empty() ? std::vector<int64_t>{1} : t.shape, gm, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, {}};
    gm = (gm + b.byte_size() + align - 1) / align * align;
    p.tensors.push_back(b);
  }
}

void VectorCode::row_chunks(int64_t total, int64_t rows, uint8_t counter, const std::vector<std::pair<uint8_t, int64_t>>& offsets,
                            const std::function<void(int64_t, bool, int64_t)>& chunk) {
  const int64_t full = total / rows, tail = total % rows;
  if (full > 1) {
    op(Opcode::Loop, {reg(counter), imm(0), imm(full), imm(1)});
    for (const auto& [r, bytes] : offsets) op(Opcode::Mul, {reg(r), reg(counter), imm(bytes)});
    chunk(rows, true, 0);
    op(Opcode::EndLoop, {});
  } else if (full == 1) {
    chunk(rows, false, 0);
  }
  if (tail > 0) chunk(tail, false, full * rows);
}

std::vector<int64_t> VectorCode::sizes_of(const ir::Tensor& t) const {
  for (const auto& g : k_.tensors)
    if (g.name == t.name) return g.shape;
  std::vector<int64_t> s;
  for (const auto& d : t.shape) s.push_back(d.evaluate({}, k_.sizes));
  return s;
}

bool VectorCode::reads_tensor(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::Access) return true;
  for (const auto& a : e.args)
    if (reads_tensor(*a)) return true;
  return false;
}

int64_t VectorCode::rows_per_chunk(int64_t total, int64_t fit, const std::function<bool(int64_t)>& aligned) const {
  const int64_t rows = std::min<int64_t>(fit, max_repeat_);
  if (rows >= total) return total;
  int64_t unit = 1;
  while (!aligned(unit)) ++unit;
  return rows / unit * unit;
}

UserError VectorCode::not_pointwise(const std::string& why) const {
    return UserError("kernel " + k_.name + ": no NPU mapping takes it; not element-wise: " + why);
  }

int VectorCode::count_nodes(const ir::Expr& e) {
    int n = 1;
    if (e.kind == ir::ExprKind::Apply && e.op == ir::Op::Cast && e.type == DType::I32) n += kTruncRegions;
    if (e.kind == ir::ExprKind::Apply && e.op == ir::Op::Cast && e.type == DType::I8) n += kTruncRegions + 4;  // to_i8
    if (e.kind == ir::ExprKind::Apply) n += composition_regions(e.op);
    for (const auto& a : e.args) n += count_nodes(*a);
    return n;
  }

void VectorCode::op(Opcode o, std::vector<Operand> operands) { p_->add(o, std::move(operands)); }

int64_t VectorCode::fresh_region() {
    const int64_t r = region_base_ + next_region_;
    next_region_ += chunk_ * 4;
    return r;
  }

int64_t VectorCode::repeats(int64_t n, DType t) const {
    return (n * dtype_bytes(t) + bytes_per_repeat_ - 1) / bytes_per_repeat_;
  }

VectorCode::Value VectorCode::vector_of(const Value& v, int64_t n) {
    if (!v.scalar) return v;
    Value r{false, 0, fresh_region(), v.type};
    op(Opcode::Vdup, {type(v.type), at(Buffer::UB, r.region), Operand::float_(v.constant), imm(repeats(n, v.type)), imm(1), imm(repeat_blocks_)});
    return r;
  }

void VectorCode::binary(Opcode o, const Value& dst, const Value& a, const Value& b, int64_t n) {
    op(o, {type(dst.type), at(Buffer::UB, dst.region), at(Buffer::UB, a.region), at(Buffer::UB, b.region),
           imm(repeats(n, dst.type)), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(source_stride(a)), imm(source_stride(b))});
  }
void VectorCode::with_scalar(Opcode o, const Value& dst, const Value& a, double s, int64_t n) {
    op(o, {type(dst.type), at(Buffer::UB, dst.region), at(Buffer::UB, a.region), Operand::float_(s),
           imm(repeats(n, dst.type)), imm(1), imm(1), imm(repeat_blocks_), imm(source_stride(a))});
  }
void VectorCode::unary(Opcode o, const Value& dst, const Value& a, int64_t n) {
    op(o, {type(dst.type), at(Buffer::UB, dst.region), at(Buffer::UB, a.region), imm(repeats(n, dst.type)), imm(1), imm(1),
           imm(repeat_blocks_), imm(source_stride(a))});
  }

VectorCode::Value VectorCode::compile(const ir::Expr& e, int64_t n) {
    switch (e.kind) {
      case ir::ExprKind::Constant: return {true, e.value, 0, e.type};
      case ir::ExprKind::SizeParam: return {true, double(k_.sizes.at(e.name)), 0, e.type};
      case ir::ExprKind::Access: {
        auto it = tensors_.find(e.name);
        TESSEL_CHECK(it != tensors_.end(), "pointwise: tensor read before it is loaded or computed");
        return it->second;
      }
      case ir::ExprKind::IndexValue: break;
      case ir::ExprKind::Apply: return apply(e, n);
    }
    TESSEL_CHECK(false, "pointwise: unchecked expression kind");
    return {};
  }

VectorCode::Value VectorCode::apply(const ir::Expr& e, int64_t n) {
    std::vector<Value> a;
    for (const auto& arg : e.args) a.push_back(compile(*arg, n));
    const DType t = e.type;
    if (e.op == ir::Op::Cast) {
      if (a[0].scalar) return {true, t == DType::I32 ? std::trunc(a[0].constant) : a[0].constant, 0, t};
      if (a[0].type == t) return a[0];
      if (t == DType::I32 && dtype_is_float(a[0].type)) return truncate_to_i32(a[0], n);
      if (t == DType::I8) return to_i8(a[0], n);
      Value r{false, 0, result_region(e, a), t};
      const int64_t lanes = bytes_per_repeat_ / std::max(dtype_bytes(t), dtype_bytes(a[0].type));
      const int64_t rep_dst = lanes * dtype_bytes(t) / m_.vector_block_bytes, rep_src = lanes * dtype_bytes(a[0].type) / m_.vector_block_bytes;
      op(Opcode::Vconv, {type(t), type(a[0].type), at(Buffer::UB, r.region), at(Buffer::UB, a[0].region),
                         imm((n + lanes - 1) / lanes), imm(1), imm(1), imm(rep_dst), imm(a[0].pattern ? 0 : rep_src)});
      return r;
    }
    for (const auto& v : a)
      if (!v.scalar && v.type != t) throw not_pointwise("mixed-type arithmetic without a cast");
    const bool all_scalar = std::all_of(a.begin(), a.end(), [](const Value& v) { return v.scalar; });
    if (all_scalar) {  // constants: fold in double (the interpreter rounds once per operation too)
      double x = a[0].constant, y = a.size() > 1 ? a[1].constant : 0, r = 0;
      switch (e.op) {
        case ir::Op::Add: r = x + y; break;
        case ir::Op::Sub: r = x - y; break;
        case ir::Op::Mul: r = x * y; break;
        case ir::Op::Div:  // an integer division truncates toward zero, x / 0 == 0 (compiler/README.md)
          r = dtype_is_float(t) ? x / y : y == 0 ? 0 : std::trunc(x / y);
          break;
        case ir::Op::Mod: r = dtype_is_float(t) || y != 0 ? std::fmod(x, y) : 0; break;
        case ir::Op::Min: r = nan_min(x, y); break;
        case ir::Op::Max: r = nan_max(x, y); break;
        case ir::Op::Neg: r = -x; break;
        case ir::Op::Abs: r = std::fabs(x); break;
        case ir::Op::Exp: r = std::exp(x); break;
        case ir::Op::Log: r = std::log(x); break;
        case ir::Op::Sqrt: r = std::sqrt(x); break;
        case ir::Op::Rsqrt: r = 1 / std::sqrt(x); break;
        case ir::Op::Tanh: r = std::tanh(x); break;
        default:
          if (!ir::is_float_math(e.op)) throw not_pointwise("constant operator");
          r = ir::math_f32(e.op, float(x), float(y));  // the interpreter's definition (builtin_math.h)
      }
      return {true, t == DType::F32 ? double(float(r)) : r, 0, t};
    }
    if (const Composition* c = composition_for(e.op)) return compose(*c, e, a, n);
    Value r{false, 0, result_region(e, a), t};
    if (a.size() == 1) {
      switch (e.op) {
        case ir::Op::Neg: with_scalar(Opcode::Vmuls, r, a[0], -1.0, n); return r;
        case ir::Op::Abs: unary(Opcode::Vabs, r, a[0], n); return r;
        case ir::Op::Exp: unary(Opcode::Vexp, r, a[0], n); return r;
        case ir::Op::Log: unary(Opcode::Vln, r, a[0], n); return r;
        case ir::Op::Sqrt: unary(Opcode::Vsqrt, r, a[0], n); return r;
        case ir::Op::Rsqrt: unary(Opcode::Vrsqrt, r, a[0], n); return r;
        case ir::Op::Tanh: unary(Opcode::Vtanh, r, a[0], n); return r;
        default: break;
      }
      throw not_pointwise(std::string("operator ") + ir::op_spelling(e.op));
    }
    const Value &x = a[0], &y = a[1];
    // Vector with a scalar where an exact instruction exists.
    if (x.scalar != y.scalar) {
      const Value& v = x.scalar ? y : x;
      const double s = x.scalar ? x.constant : y.constant;
      switch (e.op) {
        case ir::Op::Add: with_scalar(Opcode::Vadds, r, v, s, n); return r;
        case ir::Op::Mul: with_scalar(Opcode::Vmuls, r, v, s, n); return r;
        case ir::Op::Max:
          // vmaxs keeps its vector operand on a tie, the language the first operand: max(0, -0.0)
          // is 0 (compiler/README.md), so a zero constant first takes the two-vector vmax (issue 31).
          if (x.scalar && s == 0) break;
          with_scalar(Opcode::Vmaxs, r, v, s, n);
          return r;
        case ir::Op::Sub:
          if (y.scalar) { with_scalar(Opcode::Vadds, r, x, -s, n); return r; }
          break;
        default: break;
      }
    }
    // A constant operand is broadcast in the operation's type: the front end may leave a weak
    // literal's node in i32 beside an f16 operand (`min(2, X(i))` under a select and a cast).
    auto in_op_type = [&](Value v) {
      if (v.scalar) v.type = r.type;
      return vector_of(v, n);
    };
    const Value vx = in_op_type(x), vy = in_op_type(y);
    switch (e.op) {
      case ir::Op::Add: binary(Opcode::Vadd, r, vx, vy, n); return r;
      case ir::Op::Sub: binary(Opcode::Vsub, r, vx, vy, n); return r;
      case ir::Op::Mul: binary(Opcode::Vmul, r, vx, vy, n); return r;
      case ir::Op::Div: case ir::Op::Mod:
        if (!dtype_is_float(r.type)) return integer_divide(e.op, r, vx, y, n);
        binary(e.op == ir::Op::Div ? Opcode::Vdiv : Opcode::Vmod, r, vx, vy, n);
        return r;
      case ir::Op::Min: binary(Opcode::Vmin, r, vx, vy, n); return r;
      case ir::Op::Max: binary(Opcode::Vmax, r, vx, vy, n); return r;
      default: break;
    }
    throw not_pointwise(std::string("operator ") + ir::op_spelling(e.op));
  }

// The language defines an integer x / 0 and x % 0 as 0 (compiler/README.md); vdiv and vmod fault
// on a divisor of 0 (isa/README.md). A constant divisor is known; a vector one is guarded:
// z = (y == 0) as 1 / 0, the division by y + z (1 where y is 0: x % 1 is 0 already), and a
// quotient's lanes where z is 1 cleared as q - q * z.
VectorCode::Value VectorCode::integer_divide(ir::Op o, const Value& r, const Value& x, const Value& y, int64_t n) {
  const Opcode code = o == ir::Op::Div ? Opcode::Vdiv : Opcode::Vmod;
  if (y.scalar) {
    const Value c{true, y.constant, 0, r.type};
    if (y.constant == 0) with_scalar(Opcode::Vmuls, r, x, 0, n);  // every lane 0
    else binary(code, r, x, vector_of(c, n), n);
    return r;
  }
  const Value zero = vector_of(Value{true, 0, 0, r.type}, n);
  const Value z{false, 0, fresh_region(), r.type}, d{false, 0, fresh_region(), r.type};
  binary(Opcode::Vcmpeq, z, y, zero, n);
  binary(Opcode::Vadd, d, y, z, n);
  binary(code, r, x, d, n);
  if (o == ir::Op::Div) {
    binary(Opcode::Vmul, d, r, z, n);
    binary(Opcode::Vsub, r, r, d, n);
  }
  return r;
}

bool VectorCode::maps_operator(ir::Op op) {
  switch (op) {
    case ir::Op::Add: case ir::Op::Sub: case ir::Op::Mul: case ir::Op::Div: case ir::Op::Mod: case ir::Op::Min:
    case ir::Op::Max: case ir::Op::Neg: case ir::Op::Abs: case ir::Op::Exp: case ir::Op::Log: case ir::Op::Sqrt:
    case ir::Op::Rsqrt: case ir::Op::Tanh: case ir::Op::Cast:
      return true;
    default: return composition_for(op) != nullptr;
  }
}

VectorCode::Value VectorCode::compose(const Composition& c, const ir::Expr& e, const std::vector<Value>& a, int64_t n) {
  const DType t = e.type;
  if (!dtype_is_float(t) && t != DType::I32) throw not_pointwise(fmt::format("{} of {}", ir::op_spelling(e.op), dtype_name(t)));
  const DType work = dtype_is_float(t) ? DType::F32 : t;
  std::vector<Composer::Reg> args;
  for (Value v : a) {
    if (v.scalar) {
      v.type = work;
      v = vector_of(v, n);
    } else if (v.type != work || v.pattern) {
      const Value w{false, 0, fresh_region(), work};
      if (v.type != work) convert(w, v, n);
      else with_scalar(Opcode::Vmuls, w, v, 1, n);
      v = w;
    }
    args.push_back(v.region);
  }
  const Value r{false, 0, result_region(e, a), t};
  const int64_t dst = t == work ? r.region : fresh_region();
  Composer k(*this, work, n, c.scratch_regions, dst);
  if (a.size() == 2 && a[1].scalar) k.constant_operand = a[1].constant;
  c.emit(k, dst, args);
  k.finish();
  if (t != work) convert(r, Value{false, 0, dst, work}, n);
  return r;
}

void VectorCode::convert(const Value& dst, const Value& src, int64_t n, int64_t scratch) {
  const DType from = src.type == DType::U8 ? DType::I8 : src.type, to = dst.type == DType::U8 ? DType::I8 : dst.type;
  const int64_t lanes = bytes_per_repeat_ / std::max(dtype_bytes(to), dtype_bytes(from));
  const int64_t rep_dst = lanes * dtype_bytes(to) / m_.vector_block_bytes, rep_src = lanes * dtype_bytes(from) / m_.vector_block_bytes;
  op(Opcode::Vconv, {type(to), type(from), at(Buffer::UB, dst.region), at(Buffer::UB, src.region),
                     imm((n + lanes - 1) / lanes), imm(1), imm(1), imm(rep_dst), imm(src.pattern ? 0 : rep_src)});
  if (src.type != DType::U8) return;
  TESSEL_CHECK(dst.type == DType::I32, "npu vector code: a u8 value widened to other than i32");
  const Value k256 = constant_256(n, scratch);
  with_scalar(Opcode::Vadds, dst, dst, 256, n);
  binary(Opcode::Vmod, dst, dst, k256, n);
}

VectorCode::Value VectorCode::constant_256(int64_t n, int64_t region) {
  const Value k{false, 0, region < 0 ? fresh_region() : region, DType::I32};
  op(Opcode::Vdup, {type(DType::I32), at(Buffer::UB, k.region), Operand::float_(256), imm(repeats(n, DType::I32)), imm(1), imm(repeat_blocks_)});
  return k;
}

void VectorCode::wrap(const Value& dst, const Value& src, int64_t lo, const Value& k256, int64_t n) {
  binary(Opcode::Vmod, dst, src, k256, n);
  with_scalar(Opcode::Vadds, dst, dst, double(256 - lo), n);
  binary(Opcode::Vmod, dst, dst, k256, n);
  if (lo != 0) with_scalar(Opcode::Vadds, dst, dst, double(lo), n);
}

// The language's casts to i8: from a float, truncation toward zero saturating at the i8 range
// (truncated to i32 first, then vconv's saturation); from i32, two's-complement wrap-around,
// ((x % 256) + 384) % 256 - 128 with vmod's remainder truncated toward zero, then an exact vconv.
VectorCode::Value VectorCode::to_i8(const Value& x, int64_t n) {
  Value v = dtype_is_float(x.type) ? truncate_to_i32(x, n) : x;
  const Value out{false, 0, fresh_region(), DType::I8};
  if (!dtype_is_float(x.type)) {
    const Value k256 = constant_256(n), w{false, 0, fresh_region(), DType::I32};
    wrap(w, v, -128, k256, n);
    v = w;
  }
  convert(out, v, n);
  return out;
}

// f32 -> i32 truncating toward zero (the language's cast) from vconv, which rounds to nearest even:
// r = f32(i32(x)) is x rounded (exact: an integer below 2^31); it overshot x in magnitude iff
// (r - x) * x > 0, and then r - sign(x) is the truncation. With no compare instruction the
// indicator and the sign come from clamps: c = min(max((r - x) * x * 2^30, 0), 1) is exactly 0 or 1
// (a positive (r - x) * x is at least 2^-25 when |x| >= 1/2, and r = 0 below), likewise
// sg = min(max(x * 2^30, -1), 1) is ±1 wherever c is 1; min(y, 1) is -max(-y, -1). Every step is
// exact in f32, so the result is exact, saturation (vconv clamps) and NaN -> 0 included.
VectorCode::Value VectorCode::truncate_to_i32(const Value& x, int64_t n) {
  Value xf = x;
  if (x.type != DType::F32) {
    xf = {false, 0, fresh_region(), DType::F32};
    convert(xf, x, n);
  }
  auto f32 = [&] { return Value{false, 0, fresh_region(), DType::F32}; };
  const Value ri = {false, 0, fresh_region(), DType::I32};
  convert(ri, xf, n);
  const Value r = f32();
  convert(r, ri, n);
  const Value d = f32(), e = f32(), c = f32(), s = f32(), corr = f32(), t = f32();
  binary(Opcode::Vsub, d, r, xf, n);
  binary(Opcode::Vmul, e, d, xf, n);
  with_scalar(Opcode::Vmuls, e, e, 1073741824.0, n);
  with_scalar(Opcode::Vmaxs, e, e, 0.0, n);
  with_scalar(Opcode::Vmuls, e, e, -1.0, n);
  with_scalar(Opcode::Vmaxs, c, e, -1.0, n);  // -c
  with_scalar(Opcode::Vmuls, s, xf, 1073741824.0, n);
  with_scalar(Opcode::Vmaxs, s, s, -1.0, n);
  with_scalar(Opcode::Vmuls, s, s, -1.0, n);
  with_scalar(Opcode::Vmaxs, s, s, -1.0, n);  // -sg
  binary(Opcode::Vmul, corr, c, s, n);        // c * sg
  binary(Opcode::Vsub, t, r, corr, n);
  const Value out{false, 0, fresh_region(), DType::I32};
  convert(out, t, n);
  return out;
}

namespace {

class Pointwise : public VectorCode {
 public:
  Pointwise(const kernel::Kernel& k, const isa::NpuMachine& m) : VectorCode(k, m) {}

  // "" when every statement is element-wise over tensors of one size and the chunk's values fit
  // UB (then emit() maps the kernel), else the reason.
  std::string why_not() {
    const ir::Function* f = k_.function;
    if (!f) return "no tensor IR attached";
    if (std::string w = check_shapes(); !w.empty()) return w;
    for (const auto& s : f->statements)
      if (std::string w = check_statement(s); !w.empty()) return w;
    chunk_ = chunk_elements(*f);
    if (chunk_ < m_.vector_lanes(DType::F16)) return "too many intermediate values for the vector buffer";
    for (const auto& t : k_.tensors)
      if (t.temporary) return "global temporary " + t.name;
    return "";
  }

  std::string why_not_message() {
    const std::string why = why_not();
    return why.empty() ? why : std::string(not_pointwise(why).what());
  }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw not_pointwise(w);
    NpuKernel out;
    npu::Program& p = begin_program(out);  // no temporaries (why_not)
    const int64_t full = elements_ / chunk_, tail = elements_ % chunk_;
    p.cores = static_cast<int>(std::clamp<int64_t>(full, 1, m_.cores));
    if (full > 0) {
      const bool loop = full > p.cores;  // one chunk per core needs no loop (nor syncs carried by it)
      if (loop) op(Opcode::Loop, {reg(kChunk), reg(npu::kRegCoreId), imm(full), reg(npu::kRegCoreCount)});
      else op(Opcode::Mov, {reg(kChunk), reg(npu::kRegCoreId)});
      op(Opcode::Mul, {reg(kOff2), reg(kChunk), imm(chunk_ * 2)});
      op(Opcode::Mul, {reg(kOff4), reg(kChunk), imm(chunk_ * 4)});
      emit_chunk(chunk_, true, 0);
      if (loop) op(Opcode::EndLoop, {});
    }
    if (tail > 0) {  // core 0 only: a loop of one iteration there, none elsewhere
      op(Opcode::Loop, {reg(kCore0), reg(npu::kRegCoreId), imm(1), reg(npu::kRegCoreCount)});
      emit_chunk(tail, false, full * chunk_);
      op(Opcode::EndLoop, {});
    }
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format("element-wise over {} elements in UB chunks of {} on {} core(s)", elements_, chunk_, p.cores));
    npu::validate_program(p);
    return out;
  }

 private:
  // Elements per chunk: every tensor and every expression node gets a region of that many f32
  // values; a multiple of the f16 lanes, at most max_repeat f32 repeats.
  int64_t chunk_elements(const ir::Function& f) const {
    int regions = 0;
    for (const auto& s : f.statements) regions += 1 + count_nodes(*s.rhs);
    regions += static_cast<int>(f.tensors.size());
    const int64_t lanes16 = m_.vector_lanes(DType::F16);  // the most lanes a repeat has
    const int64_t f32 = dtype_bytes(DType::F32);
    const int64_t chunk = std::min<int64_t>(max_repeat_ * m_.vector_lanes(DType::F32) / lanes16 * lanes16,
                                            m_.capacity(Buffer::UB) / (regions * f32) / lanes16 * lanes16);
    return std::min<int64_t>(chunk, kMaxChunkElements);
  }
  static constexpr int64_t kMaxChunkElements = 8192;  // not hardware: the emitter's cap on a chunk (README)

  std::string check_shapes() {
    elements_ = -1;
    for (const auto& t : k_.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      if (elements_ >= 0 && n != elements_) return "tensors of different sizes";
      elements_ = n;
      const bool i32_out = t.dtype == DType::I32 && t.kind == ir::TensorKind::Output;
      if (t.dtype != DType::F16 && t.dtype != DType::F32 && !i32_out) return fmt::format("tensor {} is {}", t.name, dtype_name(t.dtype));
    }
    return "";
  }

  static std::string check_statement(const ir::Statement& s) {
    if (s.reduction != ir::Reduction::None) return "statement " + s.name + " is a reduction";
    for (const auto& d : s.domain)
      if (d.is_reduction) return "statement " + s.name + " has a reduction index";
    return check_expr(*s.rhs, s);
  }

  static std::string check_expr(const ir::Expr& e, const ir::Statement& s) {
    switch (e.kind) {
      case ir::ExprKind::Constant: case ir::ExprKind::SizeParam: return "";
      case ir::ExprKind::IndexValue: return "statement " + s.name + " uses an index as a value";
      case ir::ExprKind::Access:
        if (e.indices != s.out_indices) return "statement " + s.name + " reads " + e.name + " at other indices";
        return "";
      case ir::ExprKind::Apply:
        if (e.op == ir::Op::Cast && e.type == DType::I32 && e.args.size() == 1 &&
            (e.args[0]->type == DType::F32 || e.args[0]->type == DType::F16) && e.args[0]->kind != ir::ExprKind::Constant)
          return check_expr(*e.args[0], s);
        if (e.type != DType::F16 && e.type != DType::F32) return fmt::format("{} arithmetic", dtype_name(e.type));
        for (const auto& a : e.args)
          if (std::string w = check_expr(*a, s); !w.empty()) return w;
        if (maps_operator(e.op)) return "";
        return std::string("operator ") + ir::op_spelling(e.op);
    }
    return "";
  }
  // One chunk of n elements: load the inputs, evaluate the statements, store the outputs. GM
  // addresses are `static_offset` elements in, plus the chunk registers when `registers`.
  void emit_chunk(int64_t n, bool registers, int64_t static_offset) {
    next_region_ = 0;
    tensors_.clear();
    auto gm = [&](const npu::TensorBinding& t) {
      const int eb = dtype_bytes(t.dtype);
      return at(Buffer::GM, t.gm_offset + static_offset * eb, registers ? uint8_t(eb == 2 ? kOff2 : kOff4) : npu::kNoRegister);
    };
    for (const auto& t : p_->tensors)
      if (t.role == npu::TensorRole::In) {
        Value v{false, 0, fresh_region(), t.dtype};
        op(Opcode::DmaIn, {at(Buffer::UB, v.region), gm(t), imm(1), imm(n * dtype_bytes(t.dtype)), imm(0), imm(0)});
        tensors_[t.name] = v;
      }
    for (const auto& s : k_.function->statements) {
      Value v = compile(*s.rhs, n);
      const ir::Tensor* out = k_.function->find_tensor(s.output);
      TESSEL_CHECK(out, "pointwise: statement writes an unknown tensor");
      if (v.scalar) {  // a statement of literals only (ONNX's ConstantOfShape, Shape, Size): broadcast
        v.type = out->dtype;
        v = vector_of(v, n);
      }
      if (v.type != out->dtype) throw not_pointwise("statement " + s.name + " result type differs from " + s.output);
      tensors_[s.output] = v;
    }
    for (const auto& t : p_->tensors)
      if (t.role == npu::TensorRole::Out)
        op(Opcode::DmaOut, {gm(t), at(Buffer::UB, tensors_.at(t.name).region), imm(1), imm(n * dtype_bytes(t.dtype)), imm(0), imm(0)});
  }

  int64_t elements_ = 0;
};

}  // namespace

namespace {

// The output dimensions at which `e` reads each of its dimensions (plain indices of statement s's
// output, each at most once), or empty.
std::vector<int> output_dims_of(const ir::Expr& e, const ir::Statement& s) {
  std::vector<int> dims;
  for (const auto& ix : e.indices) {
    int found = -1;
    for (size_t d = 0; d < s.out_indices.size(); ++d)
      if (ix == s.out_indices[d] && ix.index_coeffs.size() == 1 && ix.param_coeffs.empty() && ix.constant == 0 &&
          ix.index_coeffs.begin()->second == 1)
        found = static_cast<int>(d);
    if (found < 0 || std::count(dims.begin(), dims.end(), found)) return {};
    dims.push_back(found);
  }
  return dims;
}

}  // namespace

GemmEpilogue::GemmEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int matmul_statement,
                           const std::string& accumulator, bool skip_before)
    : VectorCode(k, isa::npu_machine(h)), accumulator_(accumulator) {
  if (std::string why = analyse(matmul_statement, skip_before); !why.empty()) throw not_pointwise(why);
}

GemmEpilogue::GemmEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int matmul_statement,
                           const std::string& accumulator, bool skip_before, std::string& refusal)
    : VectorCode(k, isa::npu_machine(h)), accumulator_(accumulator) {
  const std::string why = analyse(matmul_statement, skip_before);
  refusal = why.empty() ? why : std::string(not_pointwise(why).what());
}

std::string GemmEpilogue::analyse(int matmul_statement, bool skip_before) {
  const kernel::Kernel& k = k_;
  const ir::Function* f = k.function;
  if (!f) return "no tensor IR attached";
  // the accumulator stays on chip (every statement after it is the epilogue): one that is an output
  // too would never be written
  if (const kernel::GlobalTensor* acc = k.find_tensor(accumulator_); acc && acc->kind == ir::TensorKind::Output)
    return "the accumulator " + accumulator_ + " is stored too, not only its epilogue's result";
  std::vector<std::string> known = {accumulator_};
  for (int i = 0; i < static_cast<int>(f->statements.size()); ++i) {
    if (i == matmul_statement || (skip_before && i < matmul_statement)) continue;
    const ir::Statement& s = f->statements[i];
    if (s.reduction != ir::Reduction::None || s.out_indices.size() < 2)
      return "epilogue statement " + s.name + " is not element-wise over [M, N]";
    std::string why;  // the first refusal in the walk's order
    std::function<void(const ir::Expr&)> check = [&](const ir::Expr& e) {
      if (!why.empty()) return;
      if (e.kind == ir::ExprKind::IndexValue) {
        why = "epilogue statement " + s.name + " uses an index as a value";
        return;
      }
      if (e.kind == ir::ExprKind::Access) {
        const bool on_tile = std::find(known.begin(), known.end(), e.name) != known.end();
        const kernel::GlobalTensor* input = k.find_tensor(e.name);
        // an input read at the output's own indices (a residual) is a source of the whole block,
        // loaded row by row like a broadcast tensor that varies along M and N
        const bool residual = e.indices == s.out_indices && !on_tile && input && input->kind == ir::TensorKind::Input &&
                              !output_dims_of(e, s).empty();
        if (e.indices == s.out_indices && !residual) {
          if (!on_tile) {
            why = "epilogue statement " + s.name + " reads " + e.name + " that is not computed on the tile";
            return;
          }
        } else if (std::vector<int> dims = output_dims_of(e, s); !dims.empty() && (residual || dims.size() < s.out_indices.size())) {
          const kernel::GlobalTensor* t = k.find_tensor(e.name);
          if (!t || t->kind != ir::TensorKind::Input || (t->dtype != DType::F32 && t->dtype != DType::F16)) {
            why = "epilogue statement " + s.name + " broadcasts " + e.name + ", not an f16/f32 input";
            return;
          }
          if (broadcast_dims_.count(e.name) && broadcast_dims_.at(e.name) != dims) {
            why = "epilogue statements read " + e.name + " at different indices";
            return;
          }
          if (std::find(broadcasts_.begin(), broadcasts_.end(), e.name) == broadcasts_.end()) broadcasts_.push_back(e.name);
          broadcast_dims_[e.name] = dims;
        } else {
          why = "epilogue statement " + s.name + " reads " + e.name + " at other indices";
          return;
        }
      }
      if (e.kind == ir::ExprKind::Apply && e.type != DType::F16 && e.type != DType::F32) {
        why = fmt::format("{} arithmetic in the epilogue", dtype_name(e.type));
        return;
      }
      for (const auto& a : e.args) check(*a);
    };
    check(*s.rhs);
    if (!why.empty()) return why;
    known.push_back(s.output);
    statements_.push_back(&s);
    regions_ += 1 + count_nodes(*s.rhs);
    const kernel::GlobalTensor* out = k.find_tensor(s.output);
    if (out && out->kind == ir::TensorKind::Output) {
      if (!output_.empty()) return "the epilogue writes two outputs";
      output_ = out->name;
      output_type_ = out->dtype;
    }
  }
  if (output_.empty()) return "the epilogue writes no output";
  regions_ += 2 * static_cast<int>(broadcasts_.size()) + 1;
  return "";
}

int64_t GemmEpilogue::ub_bytes(int64_t rows) const {
  return int64_t(regions_) * rows * m_.cube_f16.n0 * dtype_bytes(DType::F32) + bytes_per_repeat_;
}

int64_t GemmEpilogue::emit_block(npu::Program& p, int64_t c_region, int64_t rows, int64_t region_base,
                                 const std::map<std::string, npu::Operand>& broadcast_gm) {
  std::map<std::string, BroadcastSource> sources;
  for (const std::string& name : broadcasts_) {
    if (broadcast_dims_.at(name) != std::vector<int>{static_cast<int>(statements_.front()->out_indices.size()) - 1})
      throw not_pointwise("the epilogue reads " + name + " at other indices than the last (channel) one");
    sources[name] = {broadcast_gm.at(name)};
  }
  return emit_block(p, c_region, rows, region_base, sources);
}

int64_t GemmEpilogue::load_ub_bytes(int64_t rows) const {
  return int64_t(2 * broadcasts_.size() + 1) * rows * m_.cube_f16.n0 * dtype_bytes(DType::F32);
}

int64_t GemmEpilogue::emit_block(npu::Program& p, int64_t c_region, int64_t rows, int64_t region_base,
                                 const std::map<std::string, BroadcastSource>& sources, Part part, int64_t loads_base) {
  p_ = &p;
  const bool loads = part != Part::Compute, computes = part != Part::Loads;
  const int64_t columns = m_.cube_f16.n0;  // one column block of the accumulator
  chunk_ = rows * columns;
  region_base_ = loads_base >= 0 ? loads_base : region_base;
  next_region_ = 0;
  tensors_.clear();
  tensors_[accumulator_] = {false, 0, c_region, DType::F32};
  // Regions: every pattern, then the expanded values — those varying along the rows last, as the
  // masked vbrcb's footprint reaches past its region into the next one (a V region then, so no
  // pipe pair appears that the data does not need).
  std::map<std::string, int64_t> pattern_of, expanded_of;
  for (const std::string& name : broadcasts_) pattern_of[name] = fresh_region();
  for (int rows_last = 0; rows_last < 2; ++rows_last)
    for (const std::string& name : broadcasts_)
      if ((sources.at(name).along_rows && !sources.at(name).along_columns) == (rows_last == 1)) expanded_of[name] = fresh_region();
  if (loads_base >= 0) region_base_ = region_base, next_region_ = 0;  // the evaluation's regions apart
  for (const std::string& name : broadcasts_) {
    const kernel::GlobalTensor* t = k_.find_tensor(name);
    const int eb = dtype_bytes(t->dtype);
    const BroadcastSource& source = sources.at(name);
    const int64_t pattern = pattern_of.at(name), expanded = expanded_of.at(name);
    if (source.along_rows && source.along_columns) {  // the block itself, row by row
      if (loads)
        op(Opcode::DmaIn, {at(Buffer::UB, expanded), source.gm, imm(rows), imm(columns * eb), imm(source.row_stride_bytes - columns * eb),
                           imm(0)});
    } else if (source.along_rows) {
      // one value per row: the rows' values, each broadcast by vbrcb to the row's n0 lanes (the mask
      // enables the first n0 lanes; repeat r starts at row r)
      if (loads) op(Opcode::DmaIn, {at(Buffer::UB, pattern), source.gm, imm(1), imm(rows * eb), imm(0), imm(0)});
      if (!computes) continue;
      op(Opcode::SetVectorMask, {imm(0), imm(static_cast<int64_t>((uint64_t(1) << columns) - 1))});
      const int64_t piece = m_.vector_max_repeat / m_.block_elements(t->dtype) * m_.block_elements(t->dtype);  // aligned sources
      for (int64_t done = 0; done < rows; done += piece)
        op(Opcode::Vbrcb, {type(t->dtype), at(Buffer::UB, expanded + done * columns * eb), at(Buffer::UB, pattern + done * eb),
                           imm(std::min(piece, rows - done)), imm(1), imm(columns * eb / m_.vector_block_bytes)});
      op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
    } else if (const int64_t row_blocks = columns * eb / m_.vector_block_bytes; one_row_pattern(source, eb, rows)) {
      // `columns` values per row, the same in every row: one DMA of one row (each DMA holds the
      // shared GM a cycle on every core), then one instruction (x * 1, exact) whose repeat h writes
      // the row's vector block h into `repeat_blocks_` rows; read as a pattern (source repeat
      // stride 0). One instruction, not one per block: in a tile loop the scalar's look-ahead to
      // the next block's loads ends where the vector queue is full.
      if (loads && !loaded_apart_.count(name))
        op(Opcode::DmaIn, {at(Buffer::UB, pattern), source.gm, imm(1), imm(columns * eb), imm(0), imm(0)});
      if (!computes) continue;
      op(Opcode::Vmuls, {type(t->dtype), at(Buffer::UB, expanded), at(Buffer::UB, pattern), Operand::float_(1), imm(row_blocks),
                         imm(row_blocks), imm(0), imm(1), imm(1)});
      tensors_[name] = {false, 0, expanded, t->dtype, false, true};
      continue;
    } else {
      // a pattern of one repeat (bytes_per_repeat) by small DMAs, then copied with a source repeat stride of 0
      for (int64_t r = 0; loads && r < bytes_per_repeat_ / (columns * eb); ++r)
        op(Opcode::DmaIn, {at(Buffer::UB, pattern + r * columns * eb), source.gm, imm(1), imm(columns * eb), imm(0), imm(0)});
      if (computes)
        op(Opcode::Vadds, {type(t->dtype), at(Buffer::UB, expanded), at(Buffer::UB, pattern), Operand::float_(0),
                           imm(repeats(chunk_, t->dtype)), imm(1), imm(1), imm(repeat_blocks_), imm(0)});
    }
    tensors_[name] = {false, 0, expanded, t->dtype};
  }
  if (!computes) return -1;
  for (const ir::Statement* s : statements_) {
    Value v = compile(*s->rhs, chunk_);
    if (v.scalar) v = vector_of(v, chunk_);
    tensors_[s->output] = v;
  }
  const Value& out = tensors_.at(output_);
  if (out.type != output_type_) throw not_pointwise("the epilogue's result type differs from " + output_);
  return out.region;
}

bool GemmEpilogue::one_row_pattern(const BroadcastSource& source, int64_t element_bytes, int64_t rows) const {
  const int64_t bytes = m_.cube_f16.n0 * element_bytes;
  return !source.along_rows && source.along_columns && bytes % m_.vector_block_bytes == 0 && rows % repeat_blocks_ == 0 &&
         rows / repeat_blocks_ <= max_repeat_;
}

void GemmEpilogue::emit_loads(npu::Program& p, int64_t rows, const std::vector<BlockLoads>& blocks) {
  const int64_t region = rows * m_.cube_f16.n0 * dtype_bytes(DType::F32);  // fresh_region's step
  for (size_t t = 0; t < broadcasts_.size(); ++t) {
    const std::string& name = broadcasts_[t];
    const int64_t eb = dtype_bytes(k_.find_tensor(name)->dtype), bytes = m_.cube_f16.n0 * eb;
    auto pattern = [&](const BlockLoads& b) { return (b.loads_base >= 0 ? b.loads_base : b.region_base) + int64_t(t) * region; };
    if (blocks.size() < 2 || !std::all_of(blocks.begin(), blocks.end(), [&](const BlockLoads& b) { return one_row_pattern(b.sources.at(name), eb, rows); }))
      continue;
    // runs of blocks whose values follow each other in GM (same register) and whose patterns are equally far apart
    for (size_t first = 0; first < blocks.size();) {
      const npu::Operand& gm = blocks[first].sources.at(name).gm;
      size_t last = first + 1;
      const int64_t stride = last < blocks.size() ? pattern(blocks[last]) - pattern(blocks[first]) : 0;
      while (last < blocks.size() && stride >= bytes && pattern(blocks[last]) - pattern(blocks[last - 1]) == stride) {
        const npu::Operand& next = blocks[last].sources.at(name).gm;
        if (next.reg != gm.reg || next.imm != gm.imm + int64_t(last - first) * bytes) break;
        ++last;
      }
      const int64_t n = int64_t(last - first);
      p.add(Opcode::DmaIn, {at(Buffer::UB, pattern(blocks[first])), gm, imm(n), imm(bytes), imm(0), imm(n > 1 ? stride - bytes : 0)});
      first = last;
    }
    loaded_apart_.insert(name);
  }
  for (const BlockLoads& b : blocks) emit_block(p, 0, rows, b.region_base, b.sources, Part::Loads, b.loads_base);
  loaded_apart_.clear();
}

std::string why_not_pointwise(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return Pointwise(kernel, machine).why_not_message();
}

NpuKernel emit_pointwise(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return Pointwise(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
