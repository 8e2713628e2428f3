// NPU mapping of channel-last kernels with per-channel statements and column reductions
// (batch-norm reduce / update, NHWC): see channels.h.
#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/operands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <functional>

#include "compiler/emit_npu/pointwise.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

// A column reduction's start and its row-by-row combine.
double identity_of(ir::Reduction r) {
  return r == ir::Reduction::Sum ? 0.0 : r == ir::Reduction::Prod ? 1.0 : r == ir::Reduction::Max ? -INFINITY : INFINITY;
}
Opcode combine_of(ir::Reduction r) {
  return r == ir::Reduction::Sum ? Opcode::Vadd : r == ir::Reduction::Prod ? Opcode::Vmul : r == ir::Reduction::Max ? Opcode::Vmax : Opcode::Vmin;
}

enum Reg : uint8_t { kChunk = 1, kRow, kRowOff, kGm2, kGm4 };

enum class Kind { Channel, Full, Reduce };

class Channels : public VectorCode {
 public:
  Channels(const kernel::Kernel& k, const isa::NpuMachine& m) : VectorCode(k, m) {}

  // "" when the kernel is a channel-last row kernel whose rows fit one f32 repeat and whose chunk
  // of rows fits UB (then emit() maps it), else the reason.
  std::string why_not() {
    const ir::Function* f = k_.function;
    if (!f) return "no tensor IR attached";
    if (std::string w = classify(*f); !w.empty()) return w;
    const int64_t W = m_.vector_lanes(DType::F32);  // one f32 repeat per row
    if (C_ > W) return fmt::format("{} channels (at most {}: one vector repeat per row)", C_, W);
    return plan_ub(*f);
  }
  std::string why_not_message() { return message(why_not(), "not a channel-last row kernel"); }

  NpuKernel emit() {
    if (std::string w = why_not(); !w.empty()) throw unsupported(w);
    const ir::Function* f = k_.function;
    const int64_t W = m_.vector_lanes(DType::F32);
    std::map<std::string, Value> expanded;  // channel values read by row statements
    for (size_t i = 0; i < f->statements.size(); ++i)
      if (kinds_[i] != Kind::Channel) collect_channel_reads(*f->statements[i].rhs, expanded);

    NpuKernel out;
    npu::Program& p = begin_program(out);  // one core: the column reductions accumulate over every row

    // Phase 1: channel inputs, channel statements that need no reduction, accumulators.
    chunk_ = W;
    region_base_ = 0;
    next_region_ = 0;
    for (const auto& t : p.tensors)
      if (t.role == npu::TensorRole::In && is_channel(t.shape)) {
        Value v{false, 0, fresh_region(), t.dtype};
        op(Opcode::DmaIn, {at(Buffer::UB, v.region), at(Buffer::GM, t.gm_offset), imm(1), imm(C_ * dtype_bytes(t.dtype)), imm(0), imm(0)});
        channel_[t.name] = v;
      }
    for (size_t i = 0; i < f->statements.size(); ++i) {
      const ir::Statement& s = f->statements[i];
      if (kinds_[i] == Kind::Reduce) {
        Value acc{false, 0, fresh_region(), DType::F32};
        op(Opcode::Vdup, {type(DType::F32), at(Buffer::UB, acc.region),
                          Operand::float_(identity_of(s.reduction)),
                          imm(1), imm(1), imm(repeat_blocks_)});
        channel_[s.output] = acc;
      } else if (kinds_[i] == Kind::Channel && !after_reduce_[i]) {
        channel_statement(s);
      }
    }
    const int64_t channel_phase1_end = next_region_;

    // Expanded copies (rows_ rows) of every channel value a full or reduce statement reads.
    region_base_ = channel_bytes_;
    chunk_ = rows_ * W;
    next_region_ = 0;
    for (auto& [name, v] : expanded) {
      auto it = channel_.find(name);
      if (it == channel_.end() || it->second.type != DType::F32)
        throw unsupported("a row statement reads " + name + ", which is not an f32 channel value computed before the rows");
      v = {false, 0, fresh_region(), DType::F32};
      op(Opcode::Vadds, {type(DType::F32), at(Buffer::UB, v.region), at(Buffer::UB, it->second.region), Operand::float_(0),
                         imm(rows_), imm(1), imm(1), imm(repeat_blocks_), imm(0)});
    }
    const int64_t rows_base = next_region_;

    // Phase 2: the rows in chunks of rows_.
    auto chunk = [&](int64_t n, bool registers, int64_t first_row) {
      next_region_ = rows_base;
      tensors_ = expanded;
      auto gm_at = [&](const npu::TensorBinding& t) {
        const int eb = dtype_bytes(t.dtype);
        return at(Buffer::GM, t.gm_offset + first_row * C_ * eb, registers ? (eb == 2 ? uint8_t(kGm2) : uint8_t(kGm4)) : npu::kNoRegister);
      };
      for (const auto& t : p.tensors)
        if (t.role == npu::TensorRole::In && !is_channel(t.shape)) {
          const int eb = dtype_bytes(t.dtype);
          Value v{false, 0, fresh_region(), t.dtype};
          op(Opcode::DmaIn, {at(Buffer::UB, v.region), gm_at(t), imm(n), imm(C_ * eb), imm(0), imm((W - C_) * eb)});
          tensors_[t.name] = v;
        }
      for (size_t i = 0; i < f->statements.size(); ++i) {
        const ir::Statement& s = f->statements[i];
        if (kinds_[i] == Kind::Channel) continue;
        Value v = compile(*s.rhs, n * W);
        if (v.scalar) v = vector_of(v, n * W);
        if (kinds_[i] == Kind::Full) {
          const ir::Tensor* t = f->find_tensor(s.output);
          if (v.type != t->dtype) throw unsupported("statement " + s.name + " result type differs from " + s.output);
          tensors_[s.output] = v;
          continue;
        }
        if (v.type != DType::F32) throw unsupported("reduction " + s.name + " does not accumulate in f32");
        // Rows in ascending order, one vector instruction each: the interpreter's order.
        const Value& acc = channel_.at(s.output);
        const Opcode o = combine_of(s.reduction);
        op(Opcode::Loop, {reg(kRow), imm(0), imm(n), imm(1)});
        op(Opcode::Mul, {reg(kRowOff), reg(kRow), imm(bytes_per_repeat_)});
        op(o, {type(DType::F32), at(Buffer::UB, acc.region), at(Buffer::UB, acc.region), at(Buffer::UB, v.region, kRowOff),
               imm(1), imm(1), imm(1), imm(1), imm(repeat_blocks_), imm(repeat_blocks_), imm(repeat_blocks_)});
        op(Opcode::EndLoop, {});
      }
      for (const auto& t : p.tensors)
        if (t.role == npu::TensorRole::Out && !is_channel(t.shape)) {
          const int eb = dtype_bytes(t.dtype);
          op(Opcode::DmaOut, {gm_at(t), at(Buffer::UB, tensors_.at(t.name).region), imm(n), imm(C_ * eb), imm((W - C_) * eb), imm(0)});
        }
    };
    row_chunks(R_, rows_, kChunk, {{kGm2, rows_ * C_ * 2}, {kGm4, rows_ * C_ * 4}}, chunk);

    // Phase 3: channel statements after the reductions, channel outputs.
    chunk_ = W;
    region_base_ = 0;
    next_region_ = channel_phase1_end;
    for (size_t i = 0; i < f->statements.size(); ++i)
      if (kinds_[i] == Kind::Channel && after_reduce_[i]) channel_statement(f->statements[i]);
    for (const auto& t : p.tensors)
      if (t.role == npu::TensorRole::Out && is_channel(t.shape)) {
        const Value& v = channel_.at(t.name);
        op(Opcode::DmaOut, {at(Buffer::GM, t.gm_offset), at(Buffer::UB, v.region), imm(1), imm(C_ * dtype_bytes(t.dtype)), imm(0), imm(0)});
      }
    p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
    out.notes.push_back(fmt::format("channel-last: {} rows x {} channels, UB chunks of {} rows (one f32 repeat per row), one core; "
                                    "column reductions accumulate row by row in ascending order",
                                    R_, C_, rows_));
    npu::validate_program(p);
    return out;
  }

 private:
  UserError unsupported(const std::string& why) const { return UserError(message(why, "not a channel-last row kernel")); }

  // UB: the channel area (rows of one f32 repeat), then the full area (chunks of rows_ such rows,
  // a multiple of the GM alignment when there are several chunks: every chunk's GM offset stays
  // aligned whatever C and the element size).
  std::string plan_ub(const ir::Function& f) {
    const int64_t row_bytes = m_.vector_bytes_per_repeat;
    int channel_regions = 0, full_regions = 0;
    for (const auto& t : f.tensors) (is_channel(sizes_of(t)) ? channel_regions : full_regions) += 1;
    for (size_t i = 0; i < f.statements.size(); ++i) {
      const int nodes = 1 + count_nodes(*f.statements[i].rhs);
      if (kinds_[i] == Kind::Channel) channel_regions += nodes;
      else full_regions += nodes;
    }
    std::map<std::string, Value> expanded;
    for (size_t i = 0; i < f.statements.size(); ++i)
      if (kinds_[i] != Kind::Channel) collect_channel_reads(*f.statements[i].rhs, expanded);
    full_regions += static_cast<int>(expanded.size());
    channel_bytes_ = int64_t(channel_regions) * row_bytes;
    rows_ = rows_per_chunk(R_, (m_.capacity(Buffer::UB) - channel_bytes_) / (int64_t(full_regions) * row_bytes),
                           [&](int64_t r) { return r % m_.granularity(Buffer::GM) == 0; });
    return rows_ < 1 ? "too many intermediate values for the vector buffer" : "";
  }

  bool is_channel(const std::vector<int64_t>& shape) const { return shape.size() == 1 && shape[0] == C_ && rank_ > 1; }

  // The tensors' shapes and each statement's kind; "" or why the kernel has not that form.
  std::string classify(const ir::Function& f) {
    // The full shape: the largest rank; every tensor is full or [C] with C its last dimension.
    for (const auto& t : f.tensors)
      if (t.shape.size() > full_shape_.size()) full_shape_ = sizes_of(t);
    rank_ = full_shape_.size();
    if (rank_ < 2) return "no tensor of rank >= 2";
    C_ = full_shape_.back();
    R_ = 1;
    for (size_t i = 0; i + 1 < rank_; ++i) R_ *= full_shape_[i];
    for (const auto& t : f.tensors) {
      const auto shape = sizes_of(t);
      if (shape != full_shape_ && !(shape.size() == 1 && shape[0] == C_)) return "tensor " + t.name + " is neither full nor per channel";
      if (t.dtype != DType::F16 && t.dtype != DType::F32) return fmt::format("tensor {} is {}", t.name, dtype_name(t.dtype));
    }
    std::set<std::string> reduced;
    for (const auto& s : f.statements)
      if (std::string w = classify_statement(f, s, reduced); !w.empty()) return w;
    bool row_kind = false;
    for (Kind k : kinds_) row_kind |= k != Kind::Full;
    return row_kind ? "" : "no per-channel statement";
  }

  // One statement's kind (appended to kinds_ / after_reduce_); `reduced`: the reductions' outputs
  // and channel values computed from them so far.
  std::string classify_statement(const ir::Function& f, const ir::Statement& s, std::set<std::string>& reduced) {
    const ir::Tensor* out = f.find_tensor(s.output);
    const bool channel_out = sizes_of(*out).size() == 1 && rank_ > 1;
    Kind kind;
    if (s.reduction != ir::Reduction::None) {
      if (!channel_out || !s.init) return "reduction " + s.name + " is not a per-channel reduction from its identity";
      if (s.rhs->type != DType::F32) return "reduction " + s.name + " does not accumulate in f32";
      kind = Kind::Reduce;
    } else {
      kind = channel_out ? Kind::Channel : Kind::Full;
      for (const auto& d : s.domain)
        if (d.is_reduction) return "statement " + s.name + " has a reduction index";
    }
    bool reads_reduced = false;
    if (std::string w = check_reads(f, s, kind, *s.rhs, reduced, reads_reduced); !w.empty()) return w;
    if (kind == Kind::Reduce) {
      // The leading indices must be the reduction indices, each over its whole dimension.
      const auto& idx = reduce_indices_[s.name];
      std::set<std::string> seen;
      for (size_t i = 0; i + 1 < idx.size(); ++i) {
        bool ok = false;
        for (const auto& d : s.domain)
          if (d.is_reduction && idx[i] == ir::AffineExpr::index(d.name)) ok = seen.insert(d.name).second;
        if (!ok) return "reduction " + s.name + " indices";
      }
    }
    if (kind == Kind::Full && reads_reduced) return "statement " + s.name + " reads a reduction over the same rows (two passes)";
    if (kind == Kind::Reduce && reads_reduced) return "reduction " + s.name + " reads another reduction";
    if (kind == Kind::Reduce) reduced.insert(s.output);
    const bool after = kind == Kind::Channel && reads_reduced;
    if (after) reduced.insert(s.output);
    kinds_.push_back(kind);
    after_reduce_.push_back(after);
    return "";
  }

  // The reads of statement `s` of kind `kind` in `e`: each at the indices its kind allows.
  std::string check_reads(const ir::Function& f, const ir::Statement& s, Kind kind, const ir::Expr& e,
                          const std::set<std::string>& reduced, bool& reads_reduced) {
    if (e.kind == ir::ExprKind::IndexValue) return "statement " + s.name + " uses an index as a value";
    if (e.kind == ir::ExprKind::Access) {
      const bool channel_in = sizes_of(*f.find_tensor(e.name)).size() == 1;
      if (reduced.count(e.name)) reads_reduced = true;
      const std::string other = " reads " + e.name + " at other indices";
      if (kind == Kind::Channel) {
        if (!channel_in || e.indices != s.out_indices) return "statement " + s.name + other;
      } else if (kind == Kind::Full) {
        if (channel_in ? !(e.indices.size() == 1 && e.indices[0] == s.out_indices.back()) : e.indices != s.out_indices)
          return "statement " + s.name + other;
      } else if (channel_in) {
        if (!(e.indices.size() == 1 && e.indices[0] == s.out_indices[0])) return "reduction " + s.name + other;
      } else {
        if (e.indices.size() != rank_ || !(e.indices.back() == s.out_indices[0])) return "reduction " + s.name + other;
        if (!reduce_indices_.count(s.name)) reduce_indices_[s.name] = e.indices;
        else if (reduce_indices_[s.name] != e.indices) return "reduction " + s.name + " reads full tensors at different indices";
      }
    }
    if (e.kind == ir::ExprKind::Apply && e.type != DType::F16 && e.type != DType::F32 && reads_tensor(e))
      return fmt::format("{} arithmetic", dtype_name(e.type));
    for (const auto& a : e.args)
      if (std::string w = check_reads(f, s, kind, *a, reduced, reads_reduced); !w.empty()) return w;
    return "";
  }

  void channel_statement(const ir::Statement& s) {
    tensors_ = channel_;
    Value v = compile(*s.rhs, C_);
    if (v.scalar) v = vector_of(v, C_);
    const ir::Tensor* t = k_.function->find_tensor(s.output);
    if (v.type != t->dtype) throw unsupported("statement " + s.name + " result type differs from " + s.output);
    channel_[s.output] = v;
  }

  void collect_channel_reads(const ir::Expr& e, std::map<std::string, Value>& out) {
    if (e.kind == ir::ExprKind::Access && e.indices.size() == 1 && rank_ > 1) out[e.name] = {};
    for (const auto& a : e.args) collect_channel_reads(*a, out);
  }

  std::vector<int64_t> full_shape_;
  size_t rank_ = 0;
  int64_t C_ = 0, R_ = 0, rows_ = 0, channel_bytes_ = 0;
  std::vector<Kind> kinds_;
  std::vector<bool> after_reduce_;
  std::map<std::string, std::vector<ir::AffineExpr>> reduce_indices_;
  std::map<std::string, Value> channel_;
};

}  // namespace

std::string why_not_channels(const kernel::Kernel& kernel, const isa::NpuMachine& machine) {
  return Channels(kernel, machine).why_not_message();
}

NpuKernel emit_channels(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  return Channels(kernel, isa::npu_machine(target)).emit();
}

}  // namespace tessel::emit_npu
