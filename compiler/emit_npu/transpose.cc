// NPU mapping of NHWC -> NCHW style transposes (see transpose.h).
#include "compiler/emit_npu/transpose.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;


constexpr int kMaskHalfBits = 64;  // not hardware: the int64 halves (hi, lo) of set_vector_mask's operand

// "kernel K: <mapping>: <why>", the mappings' UserError text.
std::string message(const kernel::Kernel& k, const char* mapping, const std::string& why) {
  return "kernel " + k.name + ": " + mapping + ": " + why;
}

// "" when `match` finds its form in the kernel, else the message saying why not.
template <class Form>
std::string why_not(const kernel::Kernel& k, const char* mapping, std::string (*match)(const kernel::Kernel&, Form&)) {
  Form form;
  const std::string why = match(k, form);
  return why.empty() ? why : message(k, mapping, why);
}

// The form `match` finds in the kernel; a UserError saying why not when there is none.
template <class Form>
Form matched(const kernel::Kernel& k, const char* mapping, std::string (*match)(const kernel::Kernel&, Form&)) {
  Form form;
  if (std::string why = match(k, form); !why.empty()) throw UserError(message(k, mapping, why));
  return form;
}

constexpr const char* kTranspose = "not a last-axis transpose";

// The copies move bit patterns, so a dtype the vector unit has no instructions for (bf16) moves as
// one of its width it takes: vbrcb broadcasts bf16 as f16 (a byte copy). The in-place touches
// (x * 1) of such a dtype run in i32, exact on any bits (their regions are whole repeats); f16,
// f32 and i32 keep their own type (issue 31: seed 7501 program 240, 'vmuls' of i8).
DType broadcast_type(DType t) { return t == DType::BF16 ? DType::F16 : t; }
DType touch_type(DType t) { return t == DType::F16 || t == DType::F32 || t == DType::I32 ? t : DType::I32; }
constexpr int64_t kMaxPixelRows = 8192;  // not hardware: a bound on the unrolled code (two instructions per row)
constexpr const char* kOneHot = "not a one-hot";

struct Transpose {
  const kernel::GlobalTensor* X = nullptr;
  const kernel::GlobalTensor* Y = nullptr;
};

// X(n, h, w, c) -> Y(n, c, h, w): "" or why the kernel is not that copy.
std::string match_transpose(const kernel::Kernel& k, Transpose& t) {
  const ir::Function* f = k.function;
  if (!f || f->statements.size() != 1) return "not one statement";
  const ir::Statement& s = f->statements[0];
  const ir::Expr& e = *s.rhs;
  if (s.reduction != ir::Reduction::None || e.kind != ir::ExprKind::Access || e.indices == s.out_indices) return "not a copy";
  t.X = k.find_tensor(e.name);
  t.Y = k.find_tensor(s.output);
  if (!t.X || !t.Y || t.X->kind != ir::TensorKind::Input || t.Y->kind != ir::TensorKind::Output || t.X->dtype != t.Y->dtype)
    return "not a copy between an input and an output of one type";
  if (dtype_bytes(t.X->dtype) == 1) return "1-byte elements (vbrcb broadcasts 2- and 4-byte values)";
  const size_t rank = s.out_indices.size();
  // The first index stays, the last input index moves to position 1.
  if (rank < 3 || e.indices.size() != rank || e.indices[0] != s.out_indices[0] || e.indices.back() != s.out_indices[1])
    return "not [B, P..., C] -> [B, C, P...]";
  for (size_t i = 1; i + 1 < rank; ++i)
    if (e.indices[i] != s.out_indices[i + 1]) return "not [B, P..., C] -> [B, C, P...]";
  return "";
}

// Why the matched transpose does not fit the mapping (the UserError text), "" when it does: C
// within one vbrcb's repeats, X and its transpose in UB at once, the unrolled rows bounded.
std::string transpose_fit(const kernel::Kernel& k, const Transpose& t, const isa::NpuMachine& m) {
  auto unsupported = [&](const std::string& why) { return message(k, kTranspose, why); };
  const kernel::GlobalTensor* X = t.X;
  const size_t rank = X->shape.size();
  const int eb = dtype_bytes(X->dtype);
  const int64_t B = X->shape[0], C = X->shape.back();
  int64_t P = 1;
  for (size_t i = 1; i + 1 < rank; ++i) P *= X->shape[i];
  const int64_t bytes_per_repeat = m.vector_bytes_per_repeat, max_repeat = m.vector_max_repeat;
  const int64_t lanes = m.vector_lanes(X->dtype), block = m.block_elements(X->dtype);
  if (C > max_repeat) return unsupported(fmt::format("{} channels (one vbrcb repeat each, at most {})", C, max_repeat));
  // UB: X as B*P rows of Cp elements (each row aligned), Y as B*C rows of Pp elements.
  const int64_t Cp = round_up(C, block), Pp = round_up(P, lanes);
  const int64_t x_bytes = round_up(B * P * Cp * eb, bytes_per_repeat), y_bytes = B * C * Pp * eb;
  if (x_bytes + y_bytes > m.capacity(Buffer::UB))
    return unsupported(fmt::format("the tensor does not fit the vector buffer in one piece ({} bytes with its transpose, UB holds {} bytes)",
                                   x_bytes + y_bytes, m.capacity(Buffer::UB)));
  if (B * P > kMaxPixelRows) return unsupported(fmt::format("more than {} pixel rows (one instruction pair per row)", kMaxPixelRows));
  return "";
}

}  // namespace

std::string why_not_transpose(const kernel::Kernel& k, const isa::NpuMachine&) { return why_not(k, kTranspose, match_transpose); }

std::string why_not_transpose_fit(const kernel::Kernel& k, const isa::Hierarchy& h) {
  Transpose t;
  if (!match_transpose(k, t).empty()) return "";  // not the form: why_not_transpose says so
  return transpose_fit(k, t, isa::npu_machine(h));
}

NpuKernel emit_transpose(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const Transpose t = matched(k, kTranspose, match_transpose);
  const kernel::GlobalTensor* X = t.X;
  const kernel::GlobalTensor* Y = t.Y;
  const size_t rank = X->shape.size();
  const isa::NpuMachine m = isa::npu_machine(h);
  const int eb = dtype_bytes(X->dtype);
  const int64_t B = X->shape[0], C = X->shape.back();
  int64_t P = 1;
  for (size_t i = 1; i + 1 < rank; ++i) P *= X->shape[i];
  const int64_t bytes_per_repeat = m.vector_bytes_per_repeat, max_repeat = m.vector_max_repeat, blocks = m.blocks_per_repeat();
  const int64_t lanes = m.vector_lanes(X->dtype), block = m.block_elements(X->dtype);
  if (std::string why = transpose_fit(k, t, m); !why.empty()) throw UserError(why);
  // UB: X as B*P rows of Cp elements (each row aligned), Y as B*C rows of Pp elements.
  const int64_t Cp = round_up(C, block), Pp = round_up(P, lanes);
  const int64_t x_bytes = round_up(B * P * Cp * eb, bytes_per_repeat), y_bytes = B * C * Pp * eb;

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  p.cores = 1;
  const int64_t align = m.granularity(Buffer::GM);
  npu::TensorBinding bx{X->name, X->dtype, X->shape, 0, npu::TensorRole::In, {}};
  npu::TensorBinding by{Y->name, Y->dtype, Y->shape, round_up(bx.byte_size(), align), npu::TensorRole::Out, {}};
  p.tensors = {bx, by};
  const int64_t x_ub = 0, y_ub = x_bytes;
  p.add(Opcode::DmaIn, {at(Buffer::UB, x_ub), at(Buffer::GM, bx.gm_offset), imm(B * P), imm(C * eb), imm(0), imm((Cp - C) * eb)});
  // The sync pass has no footprint for vbrcb: exact in-place copies (x * 1) of both regions make
  // its reads and writes visible to it through ordinary vector instructions on the same pipe.
  auto touch = [&](int64_t region, int64_t bytes) {
    for (int64_t done = 0; done < bytes;) {
      const int64_t r = std::min((bytes - done + bytes_per_repeat - 1) / bytes_per_repeat, max_repeat);
      p.add(Opcode::Vmuls, {type(touch_type(X->dtype)), at(Buffer::UB, region + done), at(Buffer::UB, region + done), Operand::float_(1), imm(r),
                            imm(1), imm(1), imm(blocks), imm(blocks)});
      done += r * bytes_per_repeat;
    }
  };
  touch(x_ub, x_bytes);
  // Pixel row q = (b, p): vbrcb broadcasts its C values, repeat c to Y row (b, c); the lane mask
  // keeps lane p only (p within its window of `lanes`), so each vbrcb writes one column of Y.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t px = 0; px < P; ++px) {
      const int64_t lane = px % lanes;
      const uint64_t bit = uint64_t(1) << (lane % kMaskHalfBits);
      const bool high = lane >= kMaskHalfBits;
      p.add(Opcode::SetVectorMask, {imm(high ? int64_t(bit) : 0), imm(high ? 0 : int64_t(bit))});
      p.add(Opcode::Vbrcb, {type(broadcast_type(X->dtype)), at(Buffer::UB, y_ub + (b * C * Pp + px / lanes * lanes) * eb),
                            at(Buffer::UB, x_ub + (b * P + px) * Cp * eb), imm(C), imm(1), imm(Pp * eb / m.vector_block_bytes)});
    }
  p.add(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  touch(y_ub, y_bytes);
  p.add(Opcode::DmaOut, {at(Buffer::GM, by.gm_offset), at(Buffer::UB, y_ub), imm(B * C), imm(P * eb), imm((Pp - P) * eb), imm(0)});
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out.notes.push_back(fmt::format("transpose [{}, {}, {}] -> [{}, {}, {}] in UB: one masked vbrcb per pixel row, one core", B, P, C, B, C, P));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu

namespace tessel::emit_npu {

// Y(n, d) = select(d == idx(n), a, b) (one-hot): idx converted to f32 (exact below 2^24, and no
// larger value can equal a column index), broadcast across each row by vbrcb; the column indices
// as a row built by masked vdups and copied down the rows; then with t = |d - idx| (an integer),
// hit = max(1 - t, 0) is exactly 1 or 0, and Y = b + (a - b) * hit. Rows of one f32 repeat (D <= 64).
namespace {

struct OneHot {
  const kernel::GlobalTensor* I = nullptr;
  const kernel::GlobalTensor* Y = nullptr;
  double a = 0, b = 0;  // the values at and off the index
};

// Y(n, d) = select(d == idx(n), a, b): "" or why the kernel is not that.
std::string match_one_hot(const kernel::Kernel& k, OneHot& o) {
  const ir::Function* f = k.function;
  if (!f || f->statements.size() != 1) return "not one statement";
  const ir::Statement& s = f->statements[0];
  const ir::Expr& e = *s.rhs;
  if (s.reduction != ir::Reduction::None || s.out_indices.size() != 2 || e.kind != ir::ExprKind::Apply || e.op != ir::Op::Select)
    return "not select(column == index(row), a, b)";
  const ir::Expr& cond = *e.args[0];
  if (cond.kind != ir::ExprKind::Apply || cond.op != ir::Op::Eq) return "the condition is not an equality";
  const ir::Expr* col = cond.args[0].get();
  const ir::Expr* idx = cond.args[1].get();
  if (col->kind == ir::ExprKind::Access) std::swap(col, idx);
  if (col->kind != ir::ExprKind::IndexValue || !(col->affine == s.out_indices[1]) || idx->kind != ir::ExprKind::Access ||
      idx->indices.size() != 1 || !(idx->indices[0] == s.out_indices[0]))
    return "not column == index(row)";
  if (e.args[1]->kind != ir::ExprKind::Constant || e.args[2]->kind != ir::ExprKind::Constant) return "values are not constants";
  o.I = k.find_tensor(idx->name);
  o.Y = k.find_tensor(s.output);
  if (!o.I || !o.Y || o.I->dtype != DType::I32 || o.Y->dtype != DType::F32 || o.Y->shape.size() != 2) return "not i32 indices -> f32 [N, D]";
  o.a = e.args[1]->value, o.b = e.args[2]->value;
  return "";
}

constexpr int64_t kChunkRows = 128;  // not hardware: the emitter's chunk of rows

// Rows per chunk: a multiple of the indices per GM alignment, so every chunk's offset stays aligned.
int64_t one_hot_rows(const isa::NpuMachine& m) {
  const int64_t unit = m.granularity(Buffer::GM) / dtype_bytes(DType::I32);
  return std::min<int64_t>(kChunkRows, m.vector_max_repeat) / unit * unit;
}

// Why the matched one-hot does not fit the mapping (the UserError text), "" when it does: a row
// within one f32 repeat, six chunk regions in UB.
std::string one_hot_fit(const kernel::Kernel& k, const OneHot& o, const isa::NpuMachine& m) {
  auto unsupported = [&](const std::string& why) { return message(k, kOneHot, why); };
  const int64_t D = o.Y->shape[1], W = m.vector_lanes(DType::F32);
  if (D > W) return unsupported(fmt::format("{} columns (at most {})", D, W));
  if (6 * one_hot_rows(m) * m.vector_bytes_per_repeat > m.capacity(Buffer::UB)) return unsupported("the vector buffer is too small");
  return "";
}

}  // namespace

std::string why_not_one_hot(const kernel::Kernel& k, const isa::NpuMachine&) { return why_not(k, kOneHot, match_one_hot); }

std::string why_not_one_hot_fit(const kernel::Kernel& k, const isa::Hierarchy& h) {
  OneHot o;
  if (!match_one_hot(k, o).empty()) return "";  // not the form: why_not_one_hot says so
  return one_hot_fit(k, o, isa::npu_machine(h));
}

NpuKernel emit_one_hot(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const OneHot o = matched(k, kOneHot, match_one_hot);
  const kernel::GlobalTensor* I = o.I;
  const kernel::GlobalTensor* Y = o.Y;
  const isa::NpuMachine m = isa::npu_machine(h);
  const double a = o.a, b = o.b;
  const int64_t N = Y->shape[0], D = Y->shape[1];
  const int64_t bytes_per_repeat = m.vector_bytes_per_repeat, blocks = m.blocks_per_repeat();
  const int64_t W = m.vector_lanes(DType::F32);
  if (std::string why = one_hot_fit(k, o, m); !why.empty()) throw UserError(why);
  const int64_t rows = one_hot_rows(m);
  const int64_t region = rows * bytes_per_repeat;

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  p.cores = 1;
  const int64_t align = m.granularity(Buffer::GM);
  npu::TensorBinding bi{I->name, I->dtype, I->shape, 0, npu::TensorRole::In, {}};
  npu::TensorBinding by{Y->name, Y->dtype, Y->shape, round_up(bi.byte_size(), align), npu::TensorRole::Out, {}};
  p.tensors = {bi, by};
  const int64_t iota_row = 0, iota = bytes_per_repeat, idx_i = iota + region, idx_f = idx_i + region, bcast = idx_f + region,
                work = bcast + region;
  auto v2 = [&](Opcode o, int64_t dst, int64_t src, double scalar, int64_t n) {
    p.add(o, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, src), Operand::float_(scalar), imm(n), imm(1), imm(1), imm(blocks), imm(blocks)});
  };
  for (int64_t d = 0; d < D; ++d) {
    const uint64_t bit = uint64_t(1) << d;
    p.add(Opcode::SetVectorMask, {imm(0), imm(int64_t(bit))});
    p.add(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, iota_row), Operand::float_(double(d)), imm(1), imm(1), imm(blocks)});
  }
  p.add(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  p.add(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, iota), at(Buffer::UB, iota_row), Operand::float_(0), imm(rows), imm(1), imm(1),
                        imm(blocks), imm(0)});
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    p.add(Opcode::DmaIn, {at(Buffer::UB, idx_i), at(Buffer::GM, bi.gm_offset + r0 * 4), imm(1), imm(n * 4), imm(0), imm(0)});
    p.add(Opcode::Vconv, {type(DType::F32), type(DType::I32), at(Buffer::UB, idx_f), at(Buffer::UB, idx_i), imm((n + W - 1) / W), imm(1),
                          imm(1), imm(blocks), imm(blocks)});
    p.add(Opcode::Vbrcb, {type(DType::F32), at(Buffer::UB, bcast), at(Buffer::UB, idx_f), imm(n), imm(1), imm(blocks)});
    p.add(Opcode::Vsub, {type(DType::F32), at(Buffer::UB, work), at(Buffer::UB, iota), at(Buffer::UB, bcast), imm(n), imm(1), imm(1),
                         imm(1), imm(blocks), imm(blocks), imm(blocks)});
    p.add(Opcode::Vabs, {type(DType::F32), at(Buffer::UB, work), at(Buffer::UB, work), imm(n), imm(1), imm(1), imm(blocks), imm(blocks)});
    v2(Opcode::Vmuls, work, work, -1.0, n);
    v2(Opcode::Vadds, work, work, 1.0, n);
    v2(Opcode::Vmaxs, work, work, 0.0, n);
    if (a - b != 1.0) v2(Opcode::Vmuls, work, work, a - b, n);
    if (b != 0.0) v2(Opcode::Vadds, work, work, b, n);
    p.add(Opcode::DmaOut, {at(Buffer::GM, by.gm_offset + r0 * D * 4), at(Buffer::UB, work), imm(n), imm(D * 4), imm((W - D) * 4), imm(0)});
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out.notes.push_back(fmt::format("one-hot [{}] -> [{}, {}]: vbrcb of the indices, |column - index| clamped, chunks of {} rows, one core",
                                  N, N, D, rows));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu
