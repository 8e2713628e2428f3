// NPU mapping of last-axis row kernels (softmax, layer-norm): see channels.h.
#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "compiler/emit_npu/pointwise.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;


enum Reg : uint8_t { kChunk = 1, kGm2, kGm4, kRow4 };

enum class Shape { Full, Row, Column };
enum class Kind { Full, Row, Reduce };

class Rows : public VectorCode {
 public:
  Rows(const kernel::Kernel& k, const isa::NpuMachine& m) : VectorCode(k, m) {}

  // "" when the kernel is a last-axis row kernel whose rows fit one f32 repeat and whose chunk of
  // rows fits UB (then emit() maps it), else the reason.
  std::string why_not() {
    const ir::Function* f = k_.function;
    if (!f) return "no tensor IR attached";
    if (std::string w = classify(*f); !w.empty()) return w;
    const int64_t W = m_.vector_lanes(DType::F32);  // one f32 repeat per row
    if (N_ > W) return fmt::format("rows of {} elements (at most {}: one vector repeat per row)", N_, W);
    if (std::string w = plan_ub(*f); !w.empty()) return w;
    for (const auto& t : k_.tensors)
      if (!t.temporary && shape_of(t.name) == Shape::Row && (t.kind == ir::TensorKind::Input || t.dtype != DType::F32))
        return "per-row tensor " + t.name + " in GM (only f32 per-row outputs)";
    for (const auto& t : k_.tensors)
      if (!t.temporary && t.kind == ir::TensorKind::Input && shape_of(t.name) == Shape::Column && t.dtype != DType::F32)
        return "per-column tensor " + t.name + " is not f32";
    return "";
  }
  std::string why_not_message() { return message(why_not(), "not a last-axis row kernel"); }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw unsupported(w);
    const ir::Function* f = k_.function;
    const int64_t W = m_.vector_lanes(DType::F32);
    chunk_ = rows_ * W;
    region_base_ = 0;
    next_region_ = 0;

    NpuKernel out;
    npu::Program& p = begin_program(out);
    // Per-column [N] inputs: loaded once, expanded down rows_ rows (copy with source repeat stride 0).
    std::map<std::string, Value> columns;
    for (const auto& t : p.tensors)
      if (t.role == npu::TensorRole::In && shape_of(t.name) == Shape::Column) {
        const int64_t row = fresh_region();
        op(Opcode::DmaIn, {at(Buffer::UB, row), at(Buffer::GM, t.gm_offset), imm(1), imm(N_ * 4), imm(0), imm(0)});
        Value v{false, 0, fresh_region(), DType::F32};
        op(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, v.region), at(Buffer::UB, row), Operand::float_(0), imm(rows_), imm(1),
                           imm(1), imm(repeat_blocks_), imm(0)});
        columns[t.name] = v;
      }
    const int64_t chunk_base = next_region_;

    auto chunk = [&](int64_t n, bool registers, int64_t first_row) {
      next_region_ = chunk_base;
      std::map<std::string, Value> fulls = columns, row_values, expanded;
      auto gm_at = [&](const npu::TensorBinding& t) {
        const int eb = dtype_bytes(t.dtype);
        const bool row = shape_of(t.name) == Shape::Row;
        const uint8_t base = row ? uint8_t(kRow4) : eb == 2 ? uint8_t(kGm2) : uint8_t(kGm4);
        return at(Buffer::GM, t.gm_offset + first_row * (row ? 1 : N_) * eb, registers ? base : npu::kNoRegister);
      };
      for (const auto& t : p.tensors)
        if (t.role == npu::TensorRole::In && shape_of(t.name) == Shape::Full) {
          const int eb = dtype_bytes(t.dtype);
          Value v{false, 0, fresh_region(), t.dtype};
          op(Opcode::DmaIn, {at(Buffer::UB, v.region), gm_at(t), imm(n), imm(N_ * eb), imm(0), imm((W - N_) * eb)});
          fulls[t.name] = v;
        }
      for (size_t i = 0; i < f->statements.size(); ++i) {
        const ir::Statement& s = f->statements[i];
        const ir::Tensor* t = f->find_tensor(s.output);
        if (kinds_[i] == Kind::Row) {
          tensors_ = row_values;
          Value v = compile(*s.rhs, n);
          if (v.scalar) v = vector_of(v, n);
          if (v.type != t->dtype) throw unsupported("statement " + s.name + " result type differs from " + s.output);
          row_values[s.output] = v;
          continue;
        }
        // Full and reduce statements see full values, expanded per-row values (vbrcb), columns.
        tensors_ = fulls;
        std::function<void(const ir::Expr&)> expand = [&](const ir::Expr& e) {
          if (e.kind == ir::ExprKind::Access && shape_of(e.name) == Shape::Row) {
            if (!expanded.count(e.name)) {
              const Value& rv = row_values.at(e.name);
              if (rv.type != DType::F32) throw unsupported("per-row value " + e.name + " is not f32");
              Value x{false, 0, fresh_region(), DType::F32};
              op(Opcode::Vbrcb, {type(DType::F32), at(Buffer::UB, x.region), at(Buffer::UB, rv.region), imm(n), imm(1), imm(repeat_blocks_)});
              expanded[e.name] = x;
            }
            tensors_[e.name] = expanded.at(e.name);
          }
          for (const auto& a : e.args) expand(*a);
        };
        expand(*s.rhs);
        Value v = compile(*s.rhs, n * W);
        if (v.scalar) v = vector_of(v, n * W);
        if (kinds_[i] == Kind::Full) {
          if (v.type != t->dtype) throw unsupported("statement " + s.name + " result type differs from " + s.output);
          fulls[s.output] = v;
          continue;
        }
        if (v.type != DType::F32) throw unsupported("reduction " + s.name + " does not accumulate in f32");
        // One repeat per row, lanes past N masked off; lanes in ascending order (the interpreter's).
        Value acc{false, 0, fresh_region(), DType::F32};
        // not hardware: 64 is the width of the mask operand's low int64 half (N <= f32 lanes)
        const uint64_t lo = N_ >= 64 ? ~uint64_t(0) : (uint64_t(1) << N_) - 1;
        op(Opcode::SetVectorMask, {imm(0), imm(static_cast<int64_t>(lo))});
        op(s.reduction == ir::Reduction::Sum ? Opcode::Vcadd : Opcode::Vcmax,
           {type(DType::F32), at(Buffer::UB, acc.region), at(Buffer::UB, v.region), imm(n), imm(1), imm(repeat_blocks_)});
        op(Opcode::SetVectorMask, {imm(-1), imm(-1)});
        row_values[s.output] = acc;
      }
      for (const auto& t : p.tensors) {
        if (t.role != npu::TensorRole::Out) continue;
        const int eb = dtype_bytes(t.dtype);
        if (shape_of(t.name) == Shape::Row)
          op(Opcode::DmaOut, {gm_at(t), at(Buffer::UB, row_values.at(t.name).region), imm(1), imm(n * eb), imm(0), imm(0)});
        else
          op(Opcode::DmaOut, {gm_at(t), at(Buffer::UB, fulls.at(t.name).region), imm(n), imm(N_ * eb), imm((W - N_) * eb), imm(0)});
      }
    };
    row_chunks(R_, rows_, kChunk, {{kGm2, rows_ * N_ * 2}, {kGm4, rows_ * N_ * 4}, {kRow4, rows_ * 4}}, chunk);
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format("last-axis rows: {} rows x {} elements, UB chunks of {} rows (one f32 repeat per row), "
                                    "row reductions by vcadd / vcmax (lanes past N masked), per-row values broadcast by vbrcb",
                                    R_, N_, rows_));
    npu::validate_program(p);
    return out;
  }

 private:
  UserError unsupported(const std::string& why) const { return UserError(message(why, "not a last-axis row kernel")); }

  // UB: every value (full, per row, expanded) gets a region of rows_ rows of one f32 repeat; chunks
  // of several rows keep every GM offset aligned.
  std::string plan_ub(const ir::Function& f) {
    int regions = static_cast<int>(f.tensors.size());
    for (const auto& [name, shape] : shapes_) regions += shape != Shape::Full;  // column rows / expansions
    for (const auto& s : f.statements) regions += 1 + count_nodes(*s.rhs);
    auto aligned = [&](int64_t r) {
      for (const auto& t : k_.tensors) {
        if (t.temporary) continue;
        const int64_t per_row = (shape_of(t.name) == Shape::Full ? N_ : shape_of(t.name) == Shape::Row ? 1 : 0) * dtype_bytes(t.dtype);
        if (r * per_row % m_.granularity(Buffer::GM)) return false;
      }
      return true;
    };
    rows_ = rows_per_chunk(R_, m_.capacity(Buffer::UB) / (int64_t(regions) * bytes_per_repeat_), aligned);
    return rows_ < 1 ? "too many intermediate values for the vector buffer" : "";
  }

  Shape shape_of(const std::string& name) const { return shapes_.at(name); }

  // The tensors' shapes and each statement's kind; "" or why the kernel has not that form.
  std::string classify(const ir::Function& f) {
    std::vector<ir::AffineExpr> full_exprs;
    for (const auto& t : f.tensors)
      if (t.shape.size() > full_shape_.size()) full_shape_ = sizes_of(t), full_exprs = t.shape;
    if (full_shape_.size() < 2) return "no tensor of rank >= 2";
    N_ = full_shape_.back();
    R_ = 1;
    for (size_t i = 0; i + 1 < full_shape_.size(); ++i) R_ *= full_shape_[i];
    const std::vector<ir::AffineExpr> lead_exprs(full_exprs.begin(), full_exprs.end() - 1);
    for (const auto& t : f.tensors) {
      if (t.shape == full_exprs) shapes_[t.name] = Shape::Full;
      else if (t.shape == lead_exprs) shapes_[t.name] = Shape::Row;
      else if (t.shape.size() == 1 && t.shape[0] == full_exprs.back()) shapes_[t.name] = Shape::Column;
      else return "tensor " + t.name + " is neither full, per row nor per column";
      if (t.dtype != DType::F16 && t.dtype != DType::F32) return fmt::format("tensor {} is {}", t.name, dtype_name(t.dtype));
    }
    bool any_row = false;
    for (const auto& s : f.statements) {
      if (std::string w = classify_statement(s); !w.empty()) return w;
      any_row |= kinds_.back() != Kind::Full;
    }
    return any_row ? "" : "no per-row statement";
  }

  // One statement's kind (appended to kinds_) and the indices of its reads.
  std::string classify_statement(const ir::Statement& s) {
    const Shape out = shape_of(s.output);
    Kind kind;
    if (s.reduction != ir::Reduction::None) {
      if (out != Shape::Row || !s.init || (s.reduction != ir::Reduction::Sum && s.reduction != ir::Reduction::Max))
        return "reduction " + s.name + " is not a per-row sum / max from its identity";
      kind = Kind::Reduce;
    } else if (out == Shape::Full) {
      kind = Kind::Full;
    } else if (out == Shape::Row) {
      kind = Kind::Row;
    } else {
      return "statement " + s.name + " writes a per-column tensor";
    }
    // Full accesses: all at one index list whose last entry is the row axis index.
    std::vector<ir::AffineExpr> full_idx = kind == Kind::Reduce ? std::vector<ir::AffineExpr>{} : s.out_indices;
    if (std::string w = check_reads(s, kind, *s.rhs, full_idx); !w.empty()) return w;
    if (kind != Kind::Row)
      if (std::string w = check_row_axis(s, kind, full_idx); !w.empty()) return w;
    kinds_.push_back(kind);
    return "";
  }

  std::string check_reads(const ir::Statement& s, Kind kind, const ir::Expr& e, std::vector<ir::AffineExpr>& full_idx) {
    if (e.kind == ir::ExprKind::IndexValue) return "statement " + s.name + " uses an index as a value";
    if (e.kind == ir::ExprKind::Access) {
      const Shape sh = shape_of(e.name);
      if (kind == Kind::Row) {
        if (sh != Shape::Row || e.indices != s.out_indices) return "statement " + s.name + " reads " + e.name + " at other indices";
      } else if (sh == Shape::Full) {
        if (full_idx.empty()) full_idx = e.indices;
        if (e.indices != full_idx) return "statement " + s.name + " reads " + e.name + " at other indices";
      } else if (sh == Shape::Row) {
        row_reads_.push_back({&s, &e});
      } else {
        col_reads_.push_back({&s, &e});
      }
    }
    if (e.kind == ir::ExprKind::Apply && e.type != DType::F16 && e.type != DType::F32 && reads_tensor(e))
      return fmt::format("{} arithmetic", dtype_name(e.type));
    for (const auto& a : e.args)
      if (std::string w = check_reads(s, kind, *a, full_idx); !w.empty()) return w;
    return "";
  }

  // A full or reduce statement: full reads along the rows, a reduction over the last axis only,
  // per-row values read at the leading indices, per-column ones at the last.
  std::string check_row_axis(const ir::Statement& s, Kind kind, const std::vector<ir::AffineExpr>& full_idx) const {
    if (full_idx.size() != full_shape_.size()) return "statement " + s.name + " reads no full tensor";
    const std::vector<ir::AffineExpr> lead_idx(full_idx.begin(), full_idx.end() - 1);
    if (kind == Kind::Reduce) {
      if (s.out_indices != lead_idx) return "reduction " + s.name + " is not over the last axis";
      const ir::IndexVar* last = nullptr;
      for (const auto& d : s.domain)
        if (d.is_reduction && full_idx.back() == ir::AffineExpr::index(d.name)) last = &d;
      if (!last) return "reduction " + s.name + " is not over the last axis";
      for (const auto& d : s.domain)
        if (d.is_reduction && &d != last) return "reduction " + s.name + " has several reduction indices";
    }
    for (const auto& [st, e] : row_reads_)
      if (st == &s && e->indices != lead_idx) return "statement " + s.name + " reads " + e->name + " at other indices";
    for (const auto& [st, e] : col_reads_)
      if (st == &s && !(e->indices.size() == 1 && e->indices[0] == full_idx.back()))
        return "statement " + s.name + " reads " + e->name + " at other indices";
    return "";
  }

  std::vector<int64_t> full_shape_;
  int64_t N_ = 0, R_ = 0, rows_ = 0;
  std::map<std::string, Shape> shapes_;
  std::vector<Kind> kinds_;
  std::vector<std::pair<const ir::Statement*, const ir::Expr*>> row_reads_, col_reads_;
};

}  // namespace

std::string why_not_rows(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return Rows(kernel, machine).why_not_message();
}

NpuKernel emit_rows(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return Rows(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
