#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/emit_npu/pointwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

Operand f16() { return Operand::type(DType::F16); }

enum Reg : uint8_t { kJob = 1, kImage, kKTile, kTmp, kXBase, kWCol, kYBase, kSlice, kWSlice, kInit, kKpos, kWAddr, kPair, kCol2, kCol4 };

const ir::Expr* strip_cast(const ir::Expr* e) {
  return e->kind == ir::ExprKind::Apply && e->op == ir::Op::Cast ? e->args[0].get() : e;
}

// a - b == c, with zero coefficients ignored.
bool difference_is(const ir::AffineExpr& a, const ir::AffineExpr& b, const ir::AffineExpr& c) {
  ir::AffineExpr d = a - b;
  std::erase_if(d.index_coeffs, [](const auto& kv) { return kv.second == 0; });
  std::erase_if(d.param_coeffs, [](const auto& kv) { return kv.second == 0; });
  return d == c;
}

struct Conv {
  std::string x, w, y;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, K = 0, OH = 0, OW = 0, pt = 0, pl = 0;
  int statement = 0;       // the convolution statement
  std::string acc;         // its accumulator (== y without an epilogue)
  DType out = DType::F32;  // y's type
  bool epilogue = false;   // statements after the convolution, element-wise on its output
};

// The constant c when a - b - d == c (only a constant left, zero coefficients ignored).
std::optional<int64_t> constant_difference(const ir::AffineExpr& a, const ir::AffineExpr& b, const ir::AffineExpr& d) {
  ir::AffineExpr e = a - b - d;
  std::erase_if(e.index_coeffs, [](const auto& kv) { return kv.second == 0; });
  std::erase_if(e.param_coeffs, [](const auto& kv) { return kv.second == 0; });
  if (!e.is_constant()) return std::nullopt;
  return e.constant;
}

// Y(n, p, q, k) +=! X(n, p + r - pt, q + s - pl, c) * Wt(r, s, c, k), with X read as zero outside the
// image (the polyhedral core inlines the padding statement), or the same through a padding
// statement Xp = select(in the image, X(n, h - pt, w - pl, c), 0).
std::optional<Conv> match(const kernel::Kernel& k) {
  const ir::Function* f = k.function;
  if (!f || f->statements.empty()) return std::nullopt;
  int ci = 0;
  while (ci < static_cast<int>(f->statements.size()) && f->statements[ci].reduction == ir::Reduction::None) ++ci;
  if (ci >= static_cast<int>(f->statements.size()) || ci > 1) return std::nullopt;
  const ir::Statement& s = f->statements[ci];
  if (s.reduction != ir::Reduction::Sum || !s.init || s.out_indices.size() != 4) return std::nullopt;
  const ir::Expr& rhs = *s.rhs;
  if (rhs.kind != ir::ExprKind::Apply || rhs.op != ir::Op::Mul) return std::nullopt;
  const ir::Expr* a = strip_cast(rhs.args[0].get());
  const ir::Expr* b = strip_cast(rhs.args[1].get());
  if (a->kind != ir::ExprKind::Access || b->kind != ir::ExprKind::Access) return std::nullopt;
  if (a->indices.size() != 4 || b->indices.size() != 4) return std::nullopt;
  const auto& o = s.out_indices;
  const auto dh = constant_difference(a->indices[1], o[1], b->indices[0]);
  const auto dw = constant_difference(a->indices[2], o[2], b->indices[1]);
  if (!(a->indices[0] == o[0] && a->indices[3] == b->indices[2] && b->indices[3] == o[3] && dh && dw)) return std::nullopt;
  Conv c;
  c.w = b->name, c.y = c.acc = s.output;
  c.statement = ci;
  if (ci + 1 < static_cast<int>(f->statements.size())) {  // an epilogue: y is the last statement's output
    c.epilogue = true;
    c.y = f->statements.back().output;
  }
  if (ci == 1) {
    const ir::Statement& pad = f->statements[0];
    const ir::Expr& sel = *pad.rhs;
    if (a->name != pad.output || sel.kind != ir::ExprKind::Apply || sel.op != ir::Op::Select) return std::nullopt;
    const ir::Expr* xa = strip_cast(sel.args[1].get());
    if (xa->kind != ir::ExprKind::Access || xa->indices.size() != 4) return std::nullopt;
    c.x = xa->name;
    c.pt = -xa->indices[1].constant - *dh, c.pl = -xa->indices[2].constant - *dw;
  } else {
    c.x = a->name;
    c.pt = -*dh, c.pl = -*dw;
  }
  const kernel::GlobalTensor* X = k.find_tensor(c.x);
  const kernel::GlobalTensor* Wt = k.find_tensor(c.w);
  const kernel::GlobalTensor* Y = k.find_tensor(c.y);
  if (!X || !Wt || !Y || X->shape.size() != 4 || Wt->shape.size() != 4 || Y->shape.size() != 4) return std::nullopt;
  if (X->dtype != DType::F16 || Wt->dtype != DType::F16 || (!c.epilogue && Y->dtype != DType::F32)) return std::nullopt;
  c.out = Y->dtype;
  c.N = X->shape[0], c.H = X->shape[1], c.W = X->shape[2], c.C = X->shape[3];
  c.R = Wt->shape[0], c.S = Wt->shape[1], c.K = Wt->shape[3];
  c.OH = Y->shape[1], c.OW = Y->shape[2];
  return c;
}

}  // namespace

bool is_nhwc_convolution(const kernel::Kernel& k) { return match(k).has_value(); }

NpuKernel emit_conv(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const Conv orig = *match(k);
  auto unsupported = [&](const std::string& why) {
    return UserError("kernel " + k.name + ": the NPU backend does not map this convolution yet: " + why);
  };
  int64_t m0 = 16, k0 = 16;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const isa::MatrixShape& s : u->shapes)
      if (s.a == DType::F16 && s.acc == DType::F32) m0 = s.m, k0 = s.k;
  // Channel counts that are not multiples of 16: zero-padded scratch copies (through UB, one core).
  Conv cv = orig;
  cv.C = (orig.C + k0 - 1) / k0 * k0, cv.K = (orig.K + k0 - 1) / k0 * k0;
  const bool padded = cv.C != orig.C || cv.K != orig.K;
  const int64_t P = cv.OH * cv.OW, Pp = (P + m0 - 1) / m0 * m0, RS = cv.R * cv.S, kdim = RS * k0, C1 = cv.C / k0;
  const int64_t pb = cv.OH + cv.R - 1 - cv.H - cv.pt, pr = cv.OW + cv.S - 1 - cv.W - cv.pl;
  const int64_t cap_l1 = h.level(isa::Role::Stage).capacity_bytes, cap_l0a = h.level(isa::Role::OperandA).capacity_bytes;
  const int64_t cap_l0b = h.level(isa::Role::OperandB).capacity_bytes, cap_l0c = h.level(isa::Role::Accumulator).capacity_bytes;
  const int64_t cap_ub = h.level(isa::Role::Vector).capacity_bytes, l0_align = h.level(isa::Role::OperandA).alignment_bytes;
  int64_t tn = 16;
  for (int64_t t = 128; t >= 16; t -= 16)
    if (cv.K % t == 0 && 2 * kdim * t * 2 <= cap_l0b && Pp * t * 4 <= cap_l0c) { tn = t; break; }
  int64_t tm0 = std::min<int64_t>(Pp, cap_l0a / (2 * kdim * 2) / m0 * m0);
  if (tm0 < m0) throw unsupported("one pixel block of all kernel positions does not fit L0A twice");
  const int64_t fm_bytes = cv.C * cv.H * cv.W * 2, b_half = (kdim * tn * 2 + 31) / 32 * 32;
  if (fm_bytes + 2 * b_half > cap_l1) throw unsupported("the feature map of one image and two weight slices exceed L1");
  if (Pp * tn * 4 > cap_l0c) throw unsupported("the accumulator of one image exceeds L0C");
  if (2 * tm0 * tn * 4 > cap_ub) throw unsupported("two accumulator blocks exceed UB");
  // A fused epilogue (e.g. batch-norm + relu): GemmEpilogue per 16-channel block of the accumulator.
  std::unique_ptr<GemmEpilogue> epi;
  if (cv.epilogue) epi = std::make_unique<GemmEpilogue>(k, h, cv.statement, cv.acc, /*skip_before=*/true);
  const int64_t eo = dtype_bytes(cv.out), epi_base = 2 * tm0 * tn * 4;
  if (epi && (epi->output() != cv.y || epi->output_type() != cv.out)) throw unsupported("the epilogue's output is not the last statement's");
  if (epi && epi_base + epi->ub_bytes(tm0) > cap_ub) throw unsupported("the epilogue of a pixel block does not fit UB");
  const int64_t l0a_half = (tm0 * kdim * 2 + l0_align - 1) / l0_align * l0_align;
  const int64_t l0b_half = (kdim * tn * 2 + l0_align - 1) / l0_align * l0_align;

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  out.macs = uint64_t(cv.N) * P * orig.K * orig.C * RS;
  int64_t gm = 0;
  for (const auto& t : k.tensors) {
    npu::TensorBinding b{t.name, t.dtype, t.shape, gm, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, {}};
    gm = (gm + b.byte_size() + 31) / 32 * 32;
    p.tensors.push_back(b);
  }
  auto offset = [&](const std::string& n) { return p.find_tensor(n)->gm_offset; };
  if (epi) {  // column blocks past K read up to 16 elements beyond a broadcast tensor's end: keep them in GM
    npu::TensorBinding g{"guard", DType::F32, {16}, gm, npu::TensorRole::Scratch, {}};
    gm = (gm + g.byte_size() + 31) / 32 * 32;
    p.tensors.push_back(g);
  }
  int64_t x_off = offset(cv.x), w_off = offset(cv.w), y_off = offset(cv.y);
  auto op = [&](Opcode o, std::vector<Operand> v) { p.add(o, std::move(v)); };
  const int64_t user_x = x_off, user_w = w_off, user_y = y_off;
  auto zero_ub = [&](int64_t bytes) {
    const int64_t reps = (bytes + 255) / 256;
    for (int64_t done = 0; done < reps; done += 255)
      op(Opcode::Vdup, {f16(), at(Buffer::UB, done * 256), Operand::float_(0), imm(std::min<int64_t>(255, reps - done)), imm(1), imm(8)});
  };
  if (padded) {
    auto place = [&](const std::string& name, DType t, std::vector<int64_t> shape) {
      npu::TensorBinding b{name, t, std::move(shape), gm, npu::TensorRole::Scratch, {}};
      gm = (gm + b.byte_size() + 31) / 32 * 32;
      p.tensors.push_back(b);
      return b.gm_offset;
    };
    x_off = place(cv.x + "_padded", DType::F16, {cv.N, cv.H, cv.W, cv.C});
    w_off = place(cv.w + "_padded", DType::F16, {cv.R, cv.S, cv.C, cv.K});
    y_off = place(cv.y + "_padded", cv.out, {cv.N, cv.OH, cv.OW, cv.K});
    // X: rows of C -> rows of Cp, chunks of a multiple of 16 rows (aligned sources).
    const int64_t rows = cv.N * cv.H * cv.W;
    int64_t cr = std::min(rows, (cap_ub / 2) / (cv.C * 2));
    if (cr < rows) cr = cr / 16 * 16;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
      const int64_t n = std::min(cr, rows - r0);
      if (cv.C > orig.C) zero_ub(n * cv.C * 2);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, user_x + r0 * orig.C * 2), imm(n), imm(orig.C * 2), imm(0),
                         imm((cv.C - orig.C) * 2)});
      op(Opcode::DmaOut, {at(Buffer::GM, x_off + r0 * cv.C * 2), at(Buffer::UB, 0), imm(1), imm(n * cv.C * 2), imm(0), imm(0)});
    }
    // Weights: all R*S*C rows of K in UB at once, then C rows per kernel position.
    if (RS * orig.C * cv.K * 2 > cap_ub / 2) throw unsupported("the weights do not fit the vector buffer for channel padding");
    if (cv.K > orig.K) zero_ub(RS * orig.C * cv.K * 2);
    op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, user_w), imm(RS * orig.C), imm(orig.K * 2), imm(0), imm((cv.K - orig.K) * 2)});
    for (int64_t q = 0; q < RS; ++q)
      op(Opcode::DmaOut, {at(Buffer::GM, w_off + q * cv.C * cv.K * 2), at(Buffer::UB, q * orig.C * cv.K * 2), imm(1),
                          imm(orig.C * cv.K * 2), imm(0), imm(0)});
  }

  const int64_t k_tiles = cv.K / tn, jobs = cv.N * k_tiles;
  p.cores = padded ? 1 : static_cast<int>(std::min<int64_t>(h.cores, jobs));
  // Two jobs per iteration (feature map and accumulator ping-pong) where each core has an even
  // number of jobs and both halves fit L1 and L0C: the next job's loads overlap this job's drain.
  const bool paired = jobs % (2 * p.cores) == 0 && 2 * fm_bytes + 2 * b_half <= cap_l1 && 2 * Pp * tn * 4 <= cap_l0c;
  const int64_t fm_halves = paired ? 2 : 1;
  op(Opcode::SetFmatrix, {imm(cv.H), imm(cv.W), imm(cv.pt), imm(pb), imm(cv.pl), imm(pr), imm(1), imm(1), imm(cv.R),
                          imm(cv.S), imm(1), imm(1)});
  const int64_t units = paired ? jobs / 2 : jobs;
  const bool job_loop = units > p.cores;
  if (job_loop) op(Opcode::Loop, {reg(kPair), reg(npu::kRegCoreId), imm(units), reg(npu::kRegCoreCount)});
  else op(Opcode::Mov, {reg(kPair), reg(npu::kRegCoreId)});
  for (int64_t half = 0; half < fm_halves; ++half) {
  const int64_t fm_base = half * fm_bytes, c_base = paired ? half * Pp * tn * 4 : 0;
  if (paired) {
    op(Opcode::Mul, {reg(kJob), reg(kPair), imm(2)});
    if (half) op(Opcode::Add, {reg(kJob), reg(kJob), imm(1)});
  } else {
    op(Opcode::Mov, {reg(kJob), reg(kPair)});
  }
  op(Opcode::Div, {reg(kImage), reg(kJob), imm(k_tiles)});
  op(Opcode::Mul, {reg(kTmp), reg(kImage), imm(k_tiles)});
  op(Opcode::Sub, {reg(kKTile), reg(kJob), reg(kTmp)});
  op(Opcode::Mul, {reg(kXBase), reg(kImage), imm(cv.H * cv.W * cv.C * 2)});
  op(Opcode::Mul, {reg(kWCol), reg(kKTile), imm(tn * 2)});
  op(Opcode::Mul, {reg(kYBase), reg(kImage), imm(P * cv.K * eo)});
  if (epi) {
    op(Opcode::Mul, {reg(kCol2), reg(kKTile), imm(tn * 2)});
    op(Opcode::Mul, {reg(kCol4), reg(kKTile), imm(tn * 4)});
  }
  op(Opcode::Mul, {reg(kTmp), reg(kKTile), imm(tn * eo)});
  op(Opcode::Add, {reg(kYBase), reg(kYBase), reg(kTmp)});
  // The image's feature map as C1HWC0: one strided copy per 16 channels.
  for (int64_t c1 = 0; c1 < C1; ++c1)
    op(Opcode::DmaIn, {at(Buffer::L1, fm_base + c1 * cv.H * cv.W * 32), at(Buffer::GM, x_off + c1 * 32, kXBase), imm(cv.H * cv.W),
                       imm(32), imm(cv.C * 2 - 32), imm(0)});
  std::vector<std::pair<int64_t, int64_t>> blocks;  // pixel blocks (begin, size)
  for (int64_t p0 = 0; p0 < Pp; p0 += tm0) blocks.push_back({p0, std::min(tm0, Pp - p0)});
  int64_t l0a_step = 0;
  // One 16-channel slice c1 (all kernel positions) from L1 half `half`; the slice index is
  // 2 * kSlice + half_index (registers kWSlice / kKpos are set by the caller).
  auto slice = [&](int half, int64_t slice_in_pair, Operand init) {
    const int64_t b1 = fm_halves * fm_bytes + half * b_half;
    op(Opcode::Add, {reg(kWAddr), reg(kWSlice), reg(kWCol)});
    for (int64_t q = 0; q < RS; ++q)
      op(Opcode::DmaInNz, {f16(), at(Buffer::L1, b1 + q * k0 * tn * 2),
                           at(Buffer::GM, w_off + (q * cv.C + slice_in_pair * k0) * cv.K * 2, kWAddr), imm(k0), imm(tn), imm(cv.K)});
    op(Opcode::Load2d, {f16(), at(Buffer::L0B, half * l0b_half), at(Buffer::L1, b1), imm(RS), imm(tn / 16), imm(tn / 16), imm(1),
                        imm(1)});
    op(Opcode::Add, {reg(kTmp), reg(kKpos), imm(slice_in_pair * RS)});
    for (const auto& [p0, size] : blocks) {
      const int64_t la = (l0a_step++ % 2) * l0a_half;
      op(Opcode::Load3d, {f16(), at(Buffer::L0A, la), at(Buffer::L1, fm_base), imm(cv.C), imm(p0), imm(size), reg(kTmp), imm(RS)});
      op(Opcode::Mmad, {f16(), at(Buffer::L0C, c_base + p0 * tn * 4), at(Buffer::L0A, la), at(Buffer::L0B, half * l0b_half), imm(size),
                        imm(kdim), imm(tn), init});
    }
  };
  const int64_t pairs = C1 / 2;
  if (pairs > 0) {
    op(Opcode::Loop, {reg(kSlice), imm(0), imm(pairs), imm(1)});
    op(Opcode::Seq, {reg(kInit), reg(kSlice), imm(0)});
    op(Opcode::Mul, {reg(kWSlice), reg(kSlice), imm(2 * k0 * cv.K * 2)});
    op(Opcode::Mul, {reg(kKpos), reg(kSlice), imm(2 * RS)});
    slice(0, 0, reg(kInit));
    slice(1, 1, imm(0));
    op(Opcode::EndLoop, {});
  }
  if (C1 % 2) {
    op(Opcode::Mov, {reg(kWSlice), imm((C1 - 1) * k0 * cv.K * 2)});
    op(Opcode::Mov, {reg(kKpos), imm((C1 - 1) * RS)});
    slice(0, 0, imm(C1 == 1 ? 1 : 0));
  }
  int64_t ub_step = 0;
  for (const auto& [p0, size] : blocks) {
    const int64_t ub = (ub_step++ % 2) * tm0 * tn * 4, valid = std::min(size, P - p0);
    op(Opcode::MovL0c, {Operand::type(DType::F32), at(Buffer::UB, ub), at(Buffer::L0C, c_base + p0 * tn * 4), imm(size * tn / 256), imm(0)});
    if (valid <= 0) continue;
    for (int64_t jj = 0; jj < tn / 16; ++jj)
    {
      int64_t src = ub + jj * size * 64;
      if (epi) {
        std::map<std::string, Operand> columns;
        for (const std::string& name : epi->broadcasts()) {
          const int eb = dtype_bytes(k.find_tensor(name)->dtype);
          columns[name] = at(Buffer::GM, offset(name) + jj * 16 * eb, eb == 2 ? kCol2 : kCol4);
        }
        src = epi->emit_block(p, src, size, epi_base, columns);
      }
      op(Opcode::DmaOut, {at(Buffer::GM, y_off + (p0 * cv.K + jj * 16) * eo, kYBase), at(Buffer::UB, src),
                          imm(valid), imm(16 * eo), imm(0), imm((cv.K - 16) * eo)});
    }
  }
  }  // halves
  if (job_loop) op(Opcode::EndLoop, {});
  if (padded) {  // Y: rows of Kp -> rows of K, chunks of a multiple of 8 rows (aligned destinations)
    const int64_t rows = cv.N * P;
    int64_t cr = std::min(rows, (cap_ub / 2) / (cv.K * eo));
    if (cr < rows) cr = cr / 8 * 8;
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
      const int64_t n = std::min(cr, rows - r0);
      op(Opcode::DmaIn, {at(Buffer::UB, 0), at(Buffer::GM, y_off + r0 * cv.K * eo), imm(1), imm(n * cv.K * eo), imm(0), imm(0)});
      op(Opcode::DmaOut, {at(Buffer::GM, user_y + r0 * orig.K * eo), at(Buffer::UB, 0), imm(n), imm(orig.K * eo),
                          imm((cv.K - orig.K) * eo), imm(0)});
    }
    out.notes.push_back(fmt::format("channels {} -> {} padded to {} -> {} through UB on one core", orig.C, orig.K, cv.C, cv.K));
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out.notes.push_back(fmt::format("img2col convolution: {} jobs (image x {} output channels) over {} core(s){}, "
                                  "pixel blocks of {} (of {}), {} channel slices of {} kernel positions",
                                  jobs, tn, p.cores, paired ? " two at a time (ping-pong)" : "", tm0, Pp, C1, RS));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu

namespace tessel::emit_npu {
namespace {

// Depthwise: Acc(n, p, q, c) +=! f32(Xp(n, p + r - pt, q + s - pl, c)) * f32(Wt(r, s, c)) after a
// padding statement, then element-wise statements on Acc (e.g. relu6).
struct Depthwise {
  std::string x, w, acc;
  int statement = 0;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, OH = 0, OW = 0, pt = 0, pl = 0;
};

std::optional<Depthwise> match_depthwise(const kernel::Kernel& k) {
  const ir::Function* f = k.function;
  if (!f || f->statements.empty()) return std::nullopt;
  int ci = 0;
  while (ci < static_cast<int>(f->statements.size()) && f->statements[ci].reduction == ir::Reduction::None) ++ci;
  if (ci > 1 || ci >= static_cast<int>(f->statements.size())) return std::nullopt;
  const ir::Statement& s = f->statements[ci];
  if (s.reduction != ir::Reduction::Sum || !s.init || s.out_indices.size() != 4) return std::nullopt;
  const ir::Expr& rhs = *s.rhs;
  if (rhs.kind != ir::ExprKind::Apply || rhs.op != ir::Op::Mul) return std::nullopt;
  const ir::Expr* a = strip_cast(rhs.args[0].get());
  const ir::Expr* b = strip_cast(rhs.args[1].get());
  if (a->kind != ir::ExprKind::Access || b->kind != ir::ExprKind::Access || a->indices.size() != 4 || b->indices.size() != 3)
    return std::nullopt;
  const auto& o = s.out_indices;
  const auto dh = constant_difference(a->indices[1], o[1], b->indices[0]);
  const auto dw = constant_difference(a->indices[2], o[2], b->indices[1]);
  if (!(a->indices[0] == o[0] && a->indices[3] == o[3] && b->indices[2] == o[3] && dh && dw)) return std::nullopt;
  Depthwise d;
  d.w = b->name, d.acc = s.output, d.statement = ci;
  if (ci == 1) {
    const ir::Statement& pad = f->statements[0];
    const ir::Expr& sel = *pad.rhs;
    if (a->name != pad.output || sel.kind != ir::ExprKind::Apply || sel.op != ir::Op::Select) return std::nullopt;
    const ir::Expr* xa = strip_cast(sel.args[1].get());
    if (xa->kind != ir::ExprKind::Access || xa->indices.size() != 4) return std::nullopt;
    d.x = xa->name;
    d.pt = -xa->indices[1].constant - *dh, d.pl = -xa->indices[2].constant - *dw;
  } else {  // the padding inlined: X read as zero outside the image
    d.x = a->name;
    d.pt = -*dh, d.pl = -*dw;
  }
  const kernel::GlobalTensor* X = k.find_tensor(d.x);
  const kernel::GlobalTensor* Wt = k.find_tensor(d.w);
  if (!X || !Wt || X->dtype != DType::F16 || Wt->dtype != DType::F16 || X->shape.size() != 4 || Wt->shape.size() != 3) return std::nullopt;
  d.N = X->shape[0], d.H = X->shape[1], d.W = X->shape[2], d.C = X->shape[3], d.R = Wt->shape[0], d.S = Wt->shape[1];
  d.OH = d.H + 2 * d.pt - d.R + 1, d.OW = d.W + 2 * d.pl - d.S + 1;  // symmetric padding (checked against Y below)
  return d;
}

class DepthwiseCode : public VectorCode {
 public:
  DepthwiseCode(const kernel::Kernel& k, const isa::Hierarchy& h, const Depthwise& d) : VectorCode(k, h), d_(d) {}

  NpuKernel emit() {
    auto unsupported = [&](const std::string& why) {
      return UserError("kernel " + k_.name + ": the NPU backend does not map this depthwise convolution yet: " + why);
    };
    const ir::Function* f = k_.function;
    const int64_t lanes = bytes_per_repeat_ / 4;  // one f32 repeat per pixel
    if (d_.C > lanes) throw unsupported(fmt::format("{} channels (at most {})", d_.C, lanes));
    // The output: the last statement's tensor, [N, OH, OW, C].
    const ir::Statement& last = f->statements.back();
    const kernel::GlobalTensor* Y = k_.find_tensor(last.output);
    if (!Y || Y->kind != ir::TensorKind::Output || Y->shape != std::vector<int64_t>{d_.N, d_.OH, d_.OW, d_.C})
      throw unsupported("the output is not [N, OH, OW, C]");
    const int64_t pixels_in = d_.N * d_.H * d_.W, pixels_out = d_.N * d_.OH * d_.OW, RS = d_.R * d_.S;
    for (const auto& t : k_.tensors)
      if (t.name != d_.x && t.name != d_.w && t.name != Y->name && !t.temporary) throw unsupported("extra tensor " + t.name);
    int regions = 1;
    for (size_t i = d_.statement + 1; i < f->statements.size(); ++i) regions += 1 + count_nodes(*f->statements[i].rhs);
    const int64_t row = bytes_per_repeat_;  // one pixel (f32)
    const int64_t x16 = 0, x32 = x16 + pixels_in * row / 2, w16 = x32 + pixels_in * row, w32 = w16 + RS * row / 2,
                  acc = w32 + RS * row, tmp = acc + pixels_out * row, rest = tmp + std::max(d_.OW, int64_t(1)) * row;
    if (rest + int64_t(regions) * pixels_out * row > h_.level(isa::Role::Vector).capacity_bytes)
      throw unsupported("the tensors do not fit the vector buffer in one piece");
    if (pixels_in > max_repeat_ || pixels_out > max_repeat_ || RS > max_repeat_)
      throw unsupported("more pixels than one vector instruction's repeats");

    NpuKernel out;
    npu::Program& p = out.program;
    p_ = &p;
    p.source_name = k_.name + ".npu";
    p.cores = 1;
    int64_t gm = 0;
    for (const auto& t : k_.tensors) {
      if (t.temporary) continue;
      npu::TensorBinding b{t.name, t.dtype, t.shape, gm, t.kind == ir::TensorKind::Input ? npu::TensorRole::In : npu::TensorRole::Out, {}};
      gm = (gm + b.byte_size() + 31) / 32 * 32;
      p.tensors.push_back(b);
    }
    auto off = [&](const std::string& n) { return p.find_tensor(n)->gm_offset; };
    const Operand f32 = type(DType::F32);
    // Pixels as rows of one repeat: X and the weights (f16 staged, converted to f32).
    op(Opcode::DmaIn, {at(Buffer::UB, x16), at(Buffer::GM, off(d_.x)), imm(pixels_in), imm(d_.C * 2), imm(0), imm(row / 2 - d_.C * 2)});
    op(Opcode::DmaIn, {at(Buffer::UB, w16), at(Buffer::GM, off(d_.w)), imm(RS), imm(d_.C * 2), imm(0), imm(row / 2 - d_.C * 2)});
    op(Opcode::Vconv, {f32, type(DType::F16), at(Buffer::UB, x32), at(Buffer::UB, x16), imm(pixels_in), imm(1), imm(1), imm(8), imm(4)});
    op(Opcode::Vconv, {f32, type(DType::F16), at(Buffer::UB, w32), at(Buffer::UB, w16), imm(RS), imm(1), imm(1), imm(8), imm(4)});
    op(Opcode::Vdup, {f32, at(Buffer::UB, acc), Operand::float_(0), imm(pixels_out), imm(1), imm(8)});
    // Per output row and kernel position, the valid output columns at once (terms reading the
    // zero padding are skipped: they add 0), r then s ascending: the interpreter's order.
    for (int64_t n = 0; n < d_.N; ++n)
      for (int64_t p0 = 0; p0 < d_.OH; ++p0)
        for (int64_t r = 0; r < d_.R; ++r) {
          const int64_t h = p0 + r - d_.pt;
          if (h < 0 || h >= d_.H) continue;
          for (int64_t s = 0; s < d_.S; ++s) {
            const int64_t q0 = std::max<int64_t>(0, d_.pl - s), q1 = std::min<int64_t>(d_.OW, d_.W + d_.pl - s);
            if (q1 <= q0) continue;
            const int64_t src = x32 + ((n * d_.H + h) * d_.W + q0 + s - d_.pl) * row, dst = acc + ((n * d_.OH + p0) * d_.OW + q0) * row;
            op(Opcode::Vmul, {f32, at(Buffer::UB, tmp), at(Buffer::UB, src), at(Buffer::UB, w32 + (r * d_.S + s) * row), imm(q1 - q0),
                              imm(1), imm(1), imm(1), imm(8), imm(8), imm(0)});
            op(Opcode::Vadd, {f32, at(Buffer::UB, dst), at(Buffer::UB, dst), at(Buffer::UB, tmp), imm(q1 - q0), imm(1), imm(1), imm(1),
                              imm(8), imm(8), imm(8)});
          }
        }
    // The epilogue, element-wise over all output pixels (lanes past C computed and never stored).
    chunk_ = pixels_out * lanes;
    region_base_ = rest;
    next_region_ = 0;
    tensors_[d_.acc] = {false, 0, acc, DType::F32};
    for (size_t i = d_.statement + 1; i < f->statements.size(); ++i) {
      const ir::Statement& s = f->statements[i];
      if (s.reduction != ir::Reduction::None || s.out_indices != f->statements[d_.statement].out_indices)
        throw unsupported("epilogue statement " + s.name + " is not element-wise");
      Value v = compile(*s.rhs, chunk_);
      if (v.scalar) v = vector_of(v, chunk_);
      tensors_[s.output] = v;
    }
    const Value& y = tensors_.at(Y->name);
    if (y.type != Y->dtype) throw unsupported("the result type differs from " + Y->name);
    const int eb = dtype_bytes(Y->dtype);
    op(Opcode::DmaOut, {at(Buffer::GM, off(Y->name)), at(Buffer::UB, y.region), imm(pixels_out), imm(d_.C * eb), imm(lanes * eb - d_.C * eb),
                        imm(0)});
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format("depthwise convolution on the vector unit: pixels as rows of one repeat ({} channels), "
                                    "one vmul + vadd per output row and kernel position, one core", d_.C));
    npu::validate_program(p);
    return out;
  }

 private:
      Operand at(Buffer b, int64_t o) { return Operand::addr(b, o); }
  const Depthwise& d_;
};

}  // namespace

bool is_depthwise_convolution(const kernel::Kernel& k) { return match_depthwise(k).has_value(); }

NpuKernel emit_depthwise(const kernel::Kernel& k, const isa::Hierarchy& h) {
  const Depthwise d = *match_depthwise(k);
  return DepthwiseCode(k, h, d).emit();
}

}  // namespace tessel::emit_npu
