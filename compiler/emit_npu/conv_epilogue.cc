#include "compiler/emit_npu/conv_epilogue.h"

#include <algorithm>

#include "compiler/emit_npu/operands.h"

namespace tessel::emit_npu {

using npu::Buffer;
using npu::Opcode;

namespace {
// Rows of a channel pattern: 16 channels repeated down this many rows fill whole vector repeats for
// f16 and f32 alike (so element-wise code over patterns keeps every channel in its place).
int64_t pattern_rows(const isa::NpuMachine& m) { return m.vector_bytes_per_repeat / (m.cube_f16.n0 * dtype_bytes(DType::F16)); }
}  // namespace

ConvEpilogue::ConvEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int conv_statement, const std::string& accumulator)
    : VectorCode(k, isa::npu_machine(h)), check_(k, h, conv_statement, accumulator, /*skip_before=*/true), accumulator_(accumulator) {
  const ir::Function& f = *k.function;
  for (int i = conv_statement + 1; i < static_cast<int>(f.statements.size()); ++i) statements_.push_back(&f.statements[i]);
  for (const std::string& name : check_.broadcasts()) {
    const int rank = static_cast<int>(statements_.front()->out_indices.size());
    if (check_.broadcast_dims(name) != std::vector<int>{rank - 1})
      throw not_pointwise("the epilogue reads " + name + " at other indices than the last (channel) one");
  }
  for (const ir::Statement* s : statements_) {
    regions_ += 1 + count_nodes(*s->rhs);
    collect_leaves(*s->rhs);
  }
  hoist_regions_ = static_cast<int>(check_.broadcasts().size());
  for (const ir::Expr* e : leaves_) hoist_regions_ += count_nodes(*e);
}

bool ConvEpilogue::channel_only(const ir::Expr& e) const {
  if (e.kind == ir::ExprKind::Access) {
    const auto& b = check_.broadcasts();
    return std::find(b.begin(), b.end(), e.name) != b.end();
  }
  if (e.kind == ir::ExprKind::IndexValue) return false;
  return std::all_of(e.args.begin(), e.args.end(), [&](const ir::ExprPtr& a) { return channel_only(*a); });
}

void ConvEpilogue::collect_leaves(const ir::Expr& e) {
  if (channel_only(e) && reads_tensor(e)) {
    leaves_.push_back(&e);
    return;
  }
  for (const auto& a : e.args) collect_leaves(*a);
}

int64_t ConvEpilogue::resident_bytes(int64_t rows, int64_t channels) const {
  return int64_t(leaves_.size()) * rows * channels * dtype_bytes(DType::F32);
}

int64_t ConvEpilogue::column_bytes(int64_t rows) const {
  return int64_t(regions_) * rows * m_.cube_f16.n0 * dtype_bytes(DType::F32) + bytes_per_repeat_;
}

int64_t ConvEpilogue::scratch_bytes(int64_t channels) const {
  return int64_t(hoist_regions_) * channels * pattern_rows(m_) * dtype_bytes(DType::F32);
}

void ConvEpilogue::load_channels(npu::Program& p, const std::map<std::string, npu::Operand>& channel_gm, int64_t channels,
                                 int64_t rows, int64_t resident, int64_t scratch) {
  p_ = &p;
  const int64_t n0 = m_.cube_f16.n0, pr = pattern_rows(m_), blocks = channels / n0;
  chunk_ = channels * pr;
  region_base_ = scratch;
  next_region_ = 0;
  tensors_.clear();
  // Each tensor's tile as patterns [blocks][pr][n0]: one DMA per pattern row.
  for (const std::string& name : check_.broadcasts()) {
    const DType t = k_.find_tensor(name)->dtype;
    const int64_t eb = dtype_bytes(t), pattern = fresh_region();
    for (int64_t r = 0; r < pr; ++r)
      op(Opcode::DmaIn, {at(Buffer::UB, pattern + r * n0 * eb), channel_gm.at(name), imm(blocks), imm(n0 * eb), imm(0),
                         imm((pr - 1) * n0 * eb)});
    tensors_[name] = {false, 0, pattern, t};
  }
  hoisting_ = true;
  std::vector<Value> patterns;
  for (const ir::Expr* e : leaves_) patterns.push_back(VectorCode::compile(*e, chunk_));
  hoisting_ = false;
  // Expanded down the rows of a pixel block, column block by column block (x * 1: exact, signed
  // zeros included), the source repeat stride 0 repeating the pattern's first repeat.
  resident_ = resident, rows_ = rows;
  leaf_type_.clear();
  for (size_t i = 0; i < leaves_.size(); ++i) {
    const Value& v = patterns[i];
    const int64_t eb = dtype_bytes(v.type), reps = rows * n0 * eb / bytes_per_repeat_;
    leaf_type_[leaves_[i]] = v.type;
    for (int64_t jj = 0; jj < blocks; ++jj)
      for (int64_t done = 0; done < reps; done += max_repeat_)
        op(Opcode::Vmuls, {type(v.type), at(Buffer::UB, resident + int64_t(i) * rows * channels * 4 + jj * rows * n0 * eb + done * bytes_per_repeat_),
                           at(Buffer::UB, v.region + jj * pr * n0 * eb), npu::Operand::float_(1), imm(std::min(max_repeat_, reps - done)),
                           imm(1), imm(1), imm(repeat_blocks_), imm(0)});
  }
  channels_ = channels;
}

VectorCode::Value ConvEpilogue::compile(const ir::Expr& e, int64_t n) {
  if (!hoisting_) {
    const auto it = std::find(leaves_.begin(), leaves_.end(), &e);
    if (it != leaves_.end()) {
      const int64_t i = it - leaves_.begin();
      const DType t = leaf_type_.at(&e);
      return {false, 0, resident_ + i * rows_ * channels_ * 4 + jj_ * rows_ * m_.cube_f16.n0 * dtype_bytes(t), t};
    }
  }
  return VectorCode::compile(e, n);
}

int64_t ConvEpilogue::emit_column(npu::Program& p, int64_t acc_region, int64_t rows, int64_t jj, int64_t region_base) {
  p_ = &p;
  chunk_ = rows * m_.cube_f16.n0;
  region_base_ = region_base;
  next_region_ = 0;
  jj_ = jj;
  tensors_.clear();
  tensors_[accumulator_] = {false, 0, acc_region, DType::F32};
  for (const ir::Statement* s : statements_) {
    Value v = compile(*s->rhs, chunk_);
    if (v.scalar) v = vector_of(v, chunk_);
    tensors_[s->output] = v;
  }
  const Value& out = tensors_.at(output());
  if (out.type != output_type()) throw not_pointwise("the epilogue's result type differs from " + output());
  return out.region;
}

}  // namespace tessel::emit_npu
