// NPU mapping of a depthwise NHWC convolution on the vector unit: see depthwise.h.
#include "compiler/emit_npu/depthwise.h"
#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "compiler/emit_npu/pointwise.h"
#include "compiler/poly/contraction.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

struct Depthwise {
  std::string x, w, acc;
  int statement = 0;
  int64_t N = 0, H = 0, W = 0, C = 0, R = 0, S = 0, OH = 0, OW = 0, pt = 0, pl = 0;
  std::string an, ap, aq, ac, ar, as;  // the statement's index names
  bool nchw = false;                    // X[N, C, H, W], Wt[C, R, S], Acc[N, C, OH, OW]
};

DepthwiseShape shape_of(const Depthwise& d) {
  DepthwiseShape s;
  s.x = d.x, s.w = d.w, s.acc = d.acc, s.statement = d.statement;
  s.N = d.N, s.H = d.H, s.W = d.W, s.C = d.C, s.R = d.R, s.S = d.S, s.OH = d.OH, s.OW = d.OW, s.pt = d.pt, s.pl = d.pl;
  s.an = d.an, s.ap = d.ap, s.aq = d.aq, s.ac = d.ac, s.ar = d.ar, s.as = d.as;
  s.nchw = d.nchw;
  return s;
}

// The constant c when a - b - d == c (only a constant left, zero coefficients ignored).
std::optional<int64_t> constant_difference(const ir::AffineExpr& a, const ir::AffineExpr& b, const ir::AffineExpr& d) {
  ir::AffineExpr e = a - b - d;
  std::erase_if(e.index_coeffs, [](const auto& kv) { return kv.second == 0; });
  std::erase_if(e.param_coeffs, [](const auto& kv) { return kv.second == 0; });
  if (!e.is_constant()) return std::nullopt;
  return e.constant;
}

// X (the padding statement's source when there is one) and the pads, from the factor `a` read at
// h = p + r - pt + ..., w = q + s - pl + ...
std::string padded_input(const ir::Function& f, int anchor, const ir::Expr& a, int64_t dh, int64_t dw, Depthwise& d) {
  if (anchor == 0) {  // the padding inlined: X read as zero outside the image
    d.x = a.name, d.pt = -dh, d.pl = -dw;
    return "";
  }
  const ir::Statement& pad = f.statements[0];
  const ir::Expr& sel = *pad.rhs;
  if (a.name != pad.output || sel.kind != ir::ExprKind::Apply || sel.op != ir::Op::Select)
    return "the statement before the reduction is not a padding select of its input";
  const ir::Expr* xa = poly::strip_cast(sel.args[1].get());
  if (xa->kind != ir::ExprKind::Access || xa->indices.size() != 4) return "the padding statement does not read a 4-d tensor";
  d.x = xa->name, d.pt = -xa->indices[1].constant - dh, d.pl = -xa->indices[2].constant - dw;
  return "";
}

// The NCHW form Acc(n, c, p, q) +=! f32(X(n, c, p + r - pt, q + s - pl)) * f32(Wt(c, r, s)) (padding
// inlined or none): true and `d` filled when the statement is that.
bool match_nchw(const kernel::Kernel& k, const ir::Statement& s, const ir::Expr& a, const ir::Expr& b, Depthwise& d) {
  const auto& o = s.out_indices;
  const auto n = poly::plain_index(o[0]), c = poly::plain_index(o[1]);
  const auto dh = constant_difference(a.indices[2], o[2], b.indices[1]);
  const auto dw = constant_difference(a.indices[3], o[3], b.indices[2]);
  if (!(n && c && poly::plain_index(a.indices[0]) == n && poly::plain_index(a.indices[1]) == c && poly::plain_index(b.indices[0]) == c &&
        dh && dw))
    return false;
  const kernel::GlobalTensor* X = k.find_tensor(a.name);
  const kernel::GlobalTensor* Wt = k.find_tensor(b.name);
  if (!X || !Wt || X->dtype != DType::F16 || Wt->dtype != DType::F16 || X->shape.size() != 4 || Wt->shape.size() != 3) return false;
  d.nchw = true;
  d.x = a.name, d.w = b.name, d.acc = s.output, d.statement = 0, d.pt = -*dh, d.pl = -*dw;
  d.an = *n, d.ac = *c, d.ap = poly::plain_index(o[2]).value_or(""), d.aq = poly::plain_index(o[3]).value_or("");
  d.ar = poly::plain_index(b.indices[1]).value_or(""), d.as = poly::plain_index(b.indices[2]).value_or("");
  d.N = X->shape[0], d.C = X->shape[1], d.H = X->shape[2], d.W = X->shape[3], d.R = Wt->shape[1], d.S = Wt->shape[2];
  d.OH = d.H + 2 * d.pt - d.R + 1, d.OW = d.W + 2 * d.pl - d.S + 1;
  return true;
}

// Acc(n, p, q, c) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c)) after at most one padding
// statement (or the NCHW form above); "" or why the kernel is not that.
std::string match(const kernel::Kernel& k, Depthwise& d) {
  const ir::Function* f = k.function;
  if (!f || f->statements.empty()) return "no tensor IR attached";
  int ci = 0;
  while (ci < static_cast<int>(f->statements.size()) && f->statements[ci].reduction == ir::Reduction::None) ++ci;
  if (ci > 1 || ci >= static_cast<int>(f->statements.size())) return "not one reduction after at most one padding statement";
  const ir::Statement& s = f->statements[ci];
  std::string why;
  const auto product = poly::product_of_accesses(s, &why);
  if (!product) return "reduction " + s.name + ": " + why;
  const ir::Expr* a = product->left;
  const ir::Expr* b = product->right;
  const auto& o = s.out_indices;
  if (!s.init || o.size() != 4 || a->indices.size() != 4 || b->indices.size() != 3)
    return "reduction " + s.name + " is not Acc[N, OH, OW, C] +=! X[N, H, W, C] * Wt[R, S, C]";
  if (ci == 0 && match_nchw(k, s, *a, *b, d)) return "";
  const auto n = poly::plain_index(o[0]), c = poly::plain_index(o[3]);
  const auto dh = constant_difference(a->indices[1], o[1], b->indices[0]);
  const auto dw = constant_difference(a->indices[2], o[2], b->indices[1]);
  if (!(n && c && poly::plain_index(a->indices[0]) == n && poly::plain_index(a->indices[3]) == c &&
        poly::plain_index(b->indices[2]) == c && dh && dw))
    return "reduction " + s.name + " does not read X(n, p + r, q + s, c) * Wt(r, s, c)";
  d.w = b->name, d.acc = s.output, d.statement = ci;
  d.an = *n, d.ac = *c, d.ap = poly::plain_index(o[1]).value_or(""), d.aq = poly::plain_index(o[2]).value_or("");
  d.ar = poly::plain_index(b->indices[0]).value_or(""), d.as = poly::plain_index(b->indices[1]).value_or("");
  if (std::string w = padded_input(*f, ci, *a, *dh, *dw, d); !w.empty()) return w;
  const kernel::GlobalTensor* X = k.find_tensor(d.x);
  const kernel::GlobalTensor* Wt = k.find_tensor(d.w);
  if (!X || !Wt || X->dtype != DType::F16 || Wt->dtype != DType::F16 || X->shape.size() != 4 || Wt->shape.size() != 3)
    return "X and Wt are not f16 tensors [N, H, W, C] and [R, S, C]";
  d.N = X->shape[0], d.H = X->shape[1], d.W = X->shape[2], d.C = X->shape[3], d.R = Wt->shape[0], d.S = Wt->shape[1];
  d.OH = d.H + 2 * d.pt - d.R + 1, d.OW = d.W + 2 * d.pl - d.S + 1;  // symmetric padding (checked against Y on emission)
  return "";
}

class DepthwiseCode : public VectorCode {
 public:
  // Whether the template's one-core, whole-tensor layout fits (channels within one f32 repeat per
  // pixel, every tensor in UB at once, pixels within one instruction's repeats); "" or why not.
  static std::string fit_refusal(const kernel::Kernel& k, const Depthwise& d, const isa::NpuMachine& m) {
    const int64_t lanes = m.vector_lanes(DType::F32), row = m.vector_bytes_per_repeat;
    if (d.nchw) return "the NCHW layout (this template takes NHWC)";
    if (d.C > lanes) return fmt::format("{} channels (at most {})", d.C, lanes);
    const ir::Function* f = k.function;
    int64_t regions = 1;
    for (size_t i = d.statement + 1; i < f->statements.size(); ++i) regions += 1 + count_nodes(*f->statements[i].rhs);
    const int64_t in = d.N * d.H * d.W, out = d.N * d.OH * d.OW, positions = d.R * d.S;
    const int64_t bytes = in * row / 2 + in * row + positions * row / 2 + positions * row + out * row +
                          std::max(d.OW, int64_t(1)) * row + regions * out * row;
    if (bytes > m.capacity(Buffer::UB)) return "the tensors do not fit the vector buffer in one piece";
    if (in > m.vector_max_repeat || out > m.vector_max_repeat || positions > m.vector_max_repeat)
      return "more pixels than one vector instruction's repeats";
    return "";
  }

  DepthwiseCode(const kernel::Kernel& k, const isa::Hierarchy& h, const Depthwise& d)
      : VectorCode(k, isa::npu_machine(h)), d_(d), row_(bytes_per_repeat_), row_blocks_(row_ / m_.vector_block_bytes) {}

  NpuKernel emit() {
    const ir::Function* f = k_.function;
    const int64_t lanes = m_.vector_lanes(DType::F32);  // one f32 repeat per pixel
    if (std::string why = fit_refusal(k_, d_, m_); !why.empty()) throw unsupported(why);
    // The output: the last statement's tensor, [N, OH, OW, C].
    const kernel::GlobalTensor* Y = k_.find_tensor(f->statements.back().output);
    if (!Y || Y->kind != ir::TensorKind::Output || Y->shape != std::vector<int64_t>{d_.N, d_.OH, d_.OW, d_.C})
      throw unsupported("the output is not [N, OH, OW, C]");
    for (const auto& t : k_.tensors)
      if (t.name != d_.x && t.name != d_.w && t.name != Y->name && !t.temporary) throw unsupported("extra tensor " + t.name);
    place_in_ub();

    NpuKernel out;
    npu::Program& p = begin_program(out);
    load_inputs();
    convolve();
    const Value& y = epilogue(Y->name);
    if (y.type != Y->dtype) throw unsupported("the result type differs from " + Y->name);
    const int eb = dtype_bytes(Y->dtype);
    op(Opcode::DmaOut, {at(Buffer::GM, offset_of(Y->name)), at(Buffer::UB, y.region), imm(pixels_out()), imm(d_.C * eb),
                        imm(lanes * eb - d_.C * eb), imm(0)});
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format("depthwise convolution on the vector unit: pixels as rows of one repeat ({} channels), "
                                    "one vmul + vadd per output row and kernel position, one core", d_.C));
    npu::validate_program(p);
    return out;
  }

 private:
  UserError unsupported(const std::string& why) const {
    return UserError("kernel " + k_.name + ": the NPU backend does not map this depthwise convolution yet: " + why);
  }
  int64_t pixels_in() const { return d_.N * d_.H * d_.W; }
  int64_t pixels_out() const { return d_.N * d_.OH * d_.OW; }
  int64_t positions() const { return d_.R * d_.S; }
  int64_t offset_of(const std::string& name) const { return p_->find_tensor(name)->gm_offset; }

  // UB: X and the weights staged as f16 and converted to f32 (one row of one repeat per pixel or
  // kernel position), the accumulator, one output row of products, then the epilogue's regions.
  void place_in_ub() {
    const ir::Function* f = k_.function;
    int regions = 1;
    for (size_t i = d_.statement + 1; i < f->statements.size(); ++i) regions += 1 + count_nodes(*f->statements[i].rhs);
    x16_ = 0, x32_ = x16_ + pixels_in() * row_ / 2, w16_ = x32_ + pixels_in() * row_, w32_ = w16_ + positions() * row_ / 2;
    acc_ = w32_ + positions() * row_, tmp_ = acc_ + pixels_out() * row_, rest_ = tmp_ + std::max(d_.OW, int64_t(1)) * row_;
    TESSEL_CHECK(rest_ + int64_t(regions) * pixels_out() * row_ <= m_.capacity(Buffer::UB),
                 "depthwise: fit_refusal accepted a layout that does not fit UB");
  }

  // Pixels as rows of one repeat: X and the weights (f16 staged, converted to f32), the accumulator zeroed.
  void load_inputs() {
    const Operand f32 = type(DType::F32);
    const int64_t half = row_ / 2;  // not hardware: an f16 row is half an f32 row
    op(Opcode::DmaIn, {at(Buffer::UB, x16_), at(Buffer::GM, offset_of(d_.x)), imm(pixels_in()), imm(d_.C * 2), imm(0), imm(half - d_.C * 2)});
    op(Opcode::DmaIn, {at(Buffer::UB, w16_), at(Buffer::GM, offset_of(d_.w)), imm(positions()), imm(d_.C * 2), imm(0), imm(half - d_.C * 2)});
    op(Opcode::Vconv, {f32, type(DType::F16), at(Buffer::UB, x32_), at(Buffer::UB, x16_), imm(pixels_in()), imm(1), imm(1),
                       imm(row_blocks_), imm(row_blocks_ / 2)});
    op(Opcode::Vconv, {f32, type(DType::F16), at(Buffer::UB, w32_), at(Buffer::UB, w16_), imm(positions()), imm(1), imm(1),
                       imm(row_blocks_), imm(row_blocks_ / 2)});
    op(Opcode::Vdup, {f32, at(Buffer::UB, acc_), Operand::float_(0), imm(pixels_out()), imm(1), imm(row_blocks_)});
  }

  // Per output row and kernel position, the valid output columns at once (terms reading the zero
  // padding are skipped: they add 0), r then s ascending: the interpreter's order.
  void convolve() {
    const Operand f32 = type(DType::F32);
    const int64_t rb = row_blocks_;
    for (int64_t n = 0; n < d_.N; ++n)
      for (int64_t p0 = 0; p0 < d_.OH; ++p0)
        for (int64_t r = 0; r < d_.R; ++r) {
          const int64_t h = p0 + r - d_.pt;
          if (h < 0 || h >= d_.H) continue;
          for (int64_t s = 0; s < d_.S; ++s) {
            const int64_t q0 = std::max<int64_t>(0, d_.pl - s), q1 = std::min<int64_t>(d_.OW, d_.W + d_.pl - s);
            if (q1 <= q0) continue;
            const int64_t src = x32_ + ((n * d_.H + h) * d_.W + q0 + s - d_.pl) * row_, dst = acc_ + ((n * d_.OH + p0) * d_.OW + q0) * row_;
            op(Opcode::Vmul, {f32, at(Buffer::UB, tmp_), at(Buffer::UB, src), at(Buffer::UB, w32_ + (r * d_.S + s) * row_), imm(q1 - q0),
                              imm(1), imm(1), imm(1), imm(rb), imm(rb), imm(0)});
            op(Opcode::Vadd, {f32, at(Buffer::UB, dst), at(Buffer::UB, dst), at(Buffer::UB, tmp_), imm(q1 - q0), imm(1), imm(1), imm(1),
                              imm(rb), imm(rb), imm(rb)});
          }
        }
  }

  // The epilogue, element-wise over all output pixels (lanes past C computed and never stored).
  const Value& epilogue(const std::string& y) {
    const ir::Function* f = k_.function;
    chunk_ = pixels_out() * m_.vector_lanes(DType::F32);
    region_base_ = rest_;
    next_region_ = 0;
    tensors_[d_.acc] = {false, 0, acc_, DType::F32};
    for (size_t i = d_.statement + 1; i < f->statements.size(); ++i) {
      const ir::Statement& s = f->statements[i];
      if (s.reduction != ir::Reduction::None || s.out_indices != f->statements[d_.statement].out_indices)
        throw unsupported("epilogue statement " + s.name + " is not element-wise");
      Value v = compile(*s.rhs, chunk_);
      if (v.scalar) v = vector_of(v, chunk_);
      tensors_[s.output] = v;
    }
    return tensors_.at(y);
  }

  const Depthwise& d_;
  const int64_t row_;         // one pixel: one f32 repeat
  const int64_t row_blocks_;  // its vector blocks (a repeat stride)
  int64_t x16_ = 0, x32_ = 0, w16_ = 0, w32_ = 0, acc_ = 0, tmp_ = 0, rest_ = 0;
};

}  // namespace

std::string why_not_depthwise(const kernel::Kernel& k, const isa::NpuMachine&) {
  Depthwise d;
  return match(k, d);
}

std::string why_not_depthwise_fit(const kernel::Kernel& k, const isa::NpuMachine& m) {
  Depthwise d;
  if (std::string why = match(k, d); !why.empty()) return "kernel " + k.name + ": not a depthwise convolution: " + why;
  if (std::string why = DepthwiseCode::fit_refusal(k, d, m); !why.empty())
    return "kernel " + k.name + ": the NPU backend does not map this depthwise convolution yet: " + why;
  return "";
}

std::string why_not_depthwise_fit(const kernel::Kernel& k, const isa::Hierarchy& h) {
  Depthwise d;
  if (std::string why = match(k, d); !why.empty()) return "kernel " + k.name + ": not a depthwise convolution: " + why;
  const std::string cube = why_not_depthwise_on_cube(k, h, shape_of(d));
  if (cube.empty()) return "";
  const std::string vector = why_not_depthwise_fit(k, isa::npu_machine(h));
  return vector.empty() ? "" : cube + "; " + vector;
}

NpuKernel emit_depthwise(const kernel::Kernel& k, const isa::Hierarchy& h) {
  Depthwise d;
  if (std::string why = match(k, d); !why.empty())
    throw UserError("kernel " + k.name + ": not a depthwise convolution: " + why);
  if (why_not_depthwise_on_cube(k, h, shape_of(d)).empty()) return emit_depthwise_on_cube(k, h, shape_of(d));
  return DepthwiseCode(k, h, d).emit();
}

}  // namespace tessel::emit_npu
