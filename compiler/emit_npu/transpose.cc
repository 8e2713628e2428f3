// NPU mapping of NHWC -> NCHW style transposes (see transpose.h).
#include "compiler/emit_npu/transpose.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

NpuKernel emit_transpose(const kernel::Kernel& k, const isa::Hierarchy& h) {
  auto unsupported = [&](const std::string& why) { return UserError("kernel " + k.name + ": not a last-axis transpose: " + why); };
  const ir::Function* f = k.function;
  if (!f || f->statements.size() != 1) throw unsupported("not one statement");
  const ir::Statement& s = f->statements[0];
  const ir::Expr& e = *s.rhs;
  if (s.reduction != ir::Reduction::None || e.kind != ir::ExprKind::Access) throw unsupported("not a copy");
  const kernel::GlobalTensor* X = k.find_tensor(e.name);
  const kernel::GlobalTensor* Y = k.find_tensor(s.output);
  if (!X || !Y || X->kind != ir::TensorKind::Input || Y->kind != ir::TensorKind::Output || X->dtype != Y->dtype)
    throw unsupported("not a copy between an input and an output of one type");
  const size_t rank = s.out_indices.size();
  // X(n, h, w, c) -> Y(n, c, h, w): the first index stays, the last input index moves to position 1.
  if (rank < 3 || e.indices.size() != rank || e.indices[0] != s.out_indices[0] || e.indices.back() != s.out_indices[1])
    throw unsupported("not [B, P..., C] -> [B, C, P...]");
  for (size_t i = 1; i + 1 < rank; ++i)
    if (e.indices[i] != s.out_indices[i + 1]) throw unsupported("not [B, P..., C] -> [B, C, P...]");
  const int eb = dtype_bytes(X->dtype);
  const int64_t B = X->shape[0], C = X->shape.back();
  int64_t P = 1;
  for (size_t i = 1; i + 1 < rank; ++i) P *= X->shape[i];
  int64_t bytes_per_repeat = 256, max_repeat = 255;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Vector)) bytes_per_repeat = u->bytes_per_repeat, max_repeat = u->max_repeat;
  const int64_t lanes = bytes_per_repeat / eb, block = 32 / eb;
  if (C > max_repeat) throw unsupported(fmt::format("{} channels (one vbrcb repeat each, at most {})", C, max_repeat));
  // UB: X as B*P rows of Cp elements (each row aligned), Y as B*C rows of Pp elements.
  const int64_t Cp = round_up(C, block), Pp = round_up(P, lanes);
  const int64_t x_bytes = round_up(B * P * Cp * eb, 256), y_bytes = B * C * Pp * eb;
  const int64_t ub = h.level(isa::Role::Vector).capacity_bytes;
  if (x_bytes + y_bytes > ub) throw unsupported("the tensor does not fit the vector buffer in one piece");
  if (B * P > 8192) throw unsupported("more than 8192 pixel rows (one instruction pair per row)");

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  p.cores = 1;
  const int64_t align = h.level(isa::Role::Global).alignment_bytes;
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
      p.add(Opcode::Vmuls, {type(X->dtype), at(Buffer::UB, region + done), at(Buffer::UB, region + done), Operand::float_(1), imm(r),
                            imm(1), imm(1), imm(8), imm(8)});
      done += r * bytes_per_repeat;
    }
  };
  touch(x_ub, x_bytes);
  // Pixel row q = (b, p): vbrcb broadcasts its C values, repeat c to Y row (b, c); the lane mask
  // keeps lane p only (p within its window of `lanes`), so each vbrcb writes one column of Y.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t px = 0; px < P; ++px) {
      const int64_t lane = px % lanes;
      const uint64_t bit = uint64_t(1) << (lane % 64);
      p.add(Opcode::SetVectorMask, {imm(lane >= 64 ? int64_t(bit) : 0), imm(lane < 64 ? int64_t(bit) : 0)});
      p.add(Opcode::Vbrcb, {type(X->dtype), at(Buffer::UB, y_ub + (b * C * Pp + px / lanes * lanes) * eb),
                            at(Buffer::UB, x_ub + (b * P + px) * Cp * eb), imm(C), imm(1), imm(Pp * eb / 32)});
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
NpuKernel emit_one_hot(const kernel::Kernel& k, const isa::Hierarchy& h) {
  auto unsupported = [&](const std::string& why) { return UserError("kernel " + k.name + ": not a one-hot: " + why); };
  const ir::Function* f = k.function;
  if (!f || f->statements.size() != 1) throw unsupported("not one statement");
  const ir::Statement& s = f->statements[0];
  const ir::Expr& e = *s.rhs;
  if (s.reduction != ir::Reduction::None || s.out_indices.size() != 2 || e.kind != ir::ExprKind::Apply || e.op != ir::Op::Select)
    throw unsupported("not select(column == index(row), a, b)");
  const ir::Expr& cond = *e.args[0];
  if (cond.kind != ir::ExprKind::Apply || cond.op != ir::Op::Eq) throw unsupported("the condition is not an equality");
  const ir::Expr* col = cond.args[0].get();
  const ir::Expr* idx = cond.args[1].get();
  if (col->kind == ir::ExprKind::Access) std::swap(col, idx);
  if (col->kind != ir::ExprKind::IndexValue || !(col->affine == s.out_indices[1]) || idx->kind != ir::ExprKind::Access ||
      idx->indices.size() != 1 || !(idx->indices[0] == s.out_indices[0]))
    throw unsupported("not column == index(row)");
  if (e.args[1]->kind != ir::ExprKind::Constant || e.args[2]->kind != ir::ExprKind::Constant) throw unsupported("values are not constants");
  const kernel::GlobalTensor* I = k.find_tensor(idx->name);
  const kernel::GlobalTensor* Y = k.find_tensor(s.output);
  if (!I || !Y || I->dtype != DType::I32 || Y->dtype != DType::F32 || Y->shape.size() != 2) throw unsupported("not i32 indices -> f32 [N, D]");
  const double a = e.args[1]->value, b = e.args[2]->value;
  const int64_t N = Y->shape[0], D = Y->shape[1];
  int64_t bytes_per_repeat = 256, max_repeat = 255;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Vector)) bytes_per_repeat = u->bytes_per_repeat, max_repeat = u->max_repeat;
  const int64_t W = bytes_per_repeat / 4;
  if (D > W) throw unsupported(fmt::format("{} columns (at most {})", D, W));
  const int64_t rows = std::min<int64_t>(128, max_repeat) / 8 * 8;  // a multiple of 8: chunk offsets stay aligned
  const int64_t region = rows * bytes_per_repeat;
  if (uint64_t(6 * region) > h.level(isa::Role::Vector).capacity_bytes) throw unsupported("the vector buffer is too small");

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  p.cores = 1;
  const int64_t align = h.level(isa::Role::Global).alignment_bytes;
  npu::TensorBinding bi{I->name, I->dtype, I->shape, 0, npu::TensorRole::In, {}};
  npu::TensorBinding by{Y->name, Y->dtype, Y->shape, round_up(bi.byte_size(), align), npu::TensorRole::Out, {}};
  p.tensors = {bi, by};
  const int64_t iota_row = 0, iota = bytes_per_repeat, idx_i = iota + region, idx_f = idx_i + region, bcast = idx_f + region,
                work = bcast + region;
  auto v2 = [&](Opcode o, int64_t dst, int64_t src, double scalar, int64_t n) {
    p.add(o, {type(DType::F32), at(Buffer::UB, dst), at(Buffer::UB, src), Operand::float_(scalar), imm(n), imm(1), imm(1), imm(8), imm(8)});
  };
  for (int64_t d = 0; d < D; ++d) {
    const uint64_t bit = uint64_t(1) << d;
    p.add(Opcode::SetVectorMask, {imm(0), imm(int64_t(bit))});
    p.add(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, iota_row), Operand::float_(double(d)), imm(1), imm(1), imm(8)});
  }
  p.add(Opcode::SetVectorMask, {imm(-1), imm(-1)});
  p.add(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, iota), at(Buffer::UB, iota_row), Operand::float_(0), imm(rows), imm(1), imm(1),
                        imm(8), imm(0)});
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    p.add(Opcode::DmaIn, {at(Buffer::UB, idx_i), at(Buffer::GM, bi.gm_offset + r0 * 4), imm(1), imm(n * 4), imm(0), imm(0)});
    p.add(Opcode::Vconv, {type(DType::F32), type(DType::I32), at(Buffer::UB, idx_f), at(Buffer::UB, idx_i), imm((n + W - 1) / W), imm(1),
                          imm(1), imm(8), imm(8)});
    p.add(Opcode::Vbrcb, {type(DType::F32), at(Buffer::UB, bcast), at(Buffer::UB, idx_f), imm(n), imm(1), imm(8)});
    p.add(Opcode::Vsub, {type(DType::F32), at(Buffer::UB, work), at(Buffer::UB, iota), at(Buffer::UB, bcast), imm(n), imm(1), imm(1),
                         imm(1), imm(8), imm(8), imm(8)});
    p.add(Opcode::Vabs, {type(DType::F32), at(Buffer::UB, work), at(Buffer::UB, work), imm(n), imm(1), imm(1), imm(8), imm(8)});
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
