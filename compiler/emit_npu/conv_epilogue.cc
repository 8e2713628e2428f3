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
  if (std::string why = analyse(conv_statement); !why.empty()) throw not_pointwise(why);
}

ConvEpilogue::ConvEpilogue(const kernel::Kernel& k, const isa::Hierarchy& h, int conv_statement, const std::string& accumulator,
                           std::string& refusal)
    : VectorCode(k, isa::npu_machine(h)), check_(k, h, conv_statement, accumulator, /*skip_before=*/true, refusal),
      accumulator_(accumulator) {
  if (!refusal.empty()) return;
  const std::string why = analyse(conv_statement);
  refusal = why.empty() ? why : std::string(not_pointwise(why).what());
}

std::string ConvEpilogue::analyse(int conv_statement) {
  const ir::Function& f = *k_.function;
  for (int i = conv_statement + 1; i < static_cast<int>(f.statements.size()); ++i) statements_.push_back(&f.statements[i]);
  for (const std::string& name : check_.broadcasts()) {
    const int rank = static_cast<int>(statements_.front()->out_indices.size());
    if (check_.broadcast_dims(name) != std::vector<int>{rank - 1})
      return "the epilogue reads " + name + " at other indices than the last (channel) one";
  }
  for (const ir::Statement* s : statements_) collect_leaves(*s->rhs);
  for (const ir::Statement* s : statements_) regions_ += 1 + per_element_nodes(*s->rhs);
  hoist_regions_ = 2 * static_cast<int>(check_.broadcasts().size());  // patterns and their spares
  for (const ir::Expr* e : leaves_) hoist_regions_ += count_nodes(*e);
  return "";
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

int ConvEpilogue::per_element_nodes(const ir::Expr& e) const {
  if (std::find(leaves_.begin(), leaves_.end(), &e) != leaves_.end()) return 0;
  int n = count_nodes(e);
  for (const auto& a : e.args) n -= count_nodes(*a) - per_element_nodes(*a);
  return n;
}

int64_t ConvEpilogue::resident_bytes(int64_t channels) const {
  return int64_t(hoist_regions_) * channels * pattern_rows(m_) * dtype_bytes(DType::F32);
}

int64_t ConvEpilogue::column_bytes(int64_t rows) const {
  return int64_t(regions_) * rows * m_.cube_f16.n0 * dtype_bytes(DType::F32) + bytes_per_repeat_;
}

void ConvEpilogue::load_channels(npu::Program& p, const std::map<std::string, npu::Operand>& channel_gm, int64_t channels,
                                 int64_t valid, int64_t resident) {
  p_ = &p;
  const int64_t n0 = m_.cube_f16.n0, pr = pattern_rows(m_), blocks = channels / n0;
  chunk_ = channels * pr;
  region_base_ = resident;
  next_region_ = 0;
  tensors_.clear();
  // Each tensor's tile as patterns [blocks][pr][n0]: one DMA per pattern row, or (a pattern row of
  // f16 channels one vector block, so a repeat's blocks are the pattern's rows) the whole blocks'
  // row 0 by one DMA and rows 1.. on V, one repeat per block whose source blocks are all row 0's
  // (each DMA holds the shared GM a cycle: 8 rows x 2 tensors on 32 cores were 512 cycles). The
  // sync pass sees a DMA's hull (its last gap included): a spare region after the pattern keeps
  // that hull off the next region.
  const int64_t vb = m_.vector_block_bytes;
  for (const std::string& name : check_.broadcasts()) {
    const DType t = k_.find_tensor(name)->dtype;
    const int64_t eb = dtype_bytes(t), pattern = fresh_region();
    if (blocks > 1) fresh_region();
    const int64_t whole = valid / n0, rest = valid % n0;  // only the tensor's own values are read
    const int64_t row_blocks = n0 * eb / vb;
    const bool on_v = whole > 0 && n0 * dtype_bytes(DType::F16) == vb && n0 * eb % vb == 0 && whole <= int64_t(m_.vector_max_repeat);
    npu::Operand tail = channel_gm.at(name);
    tail.imm += whole * n0 * eb;
    for (int64_t r = 0; r < pr; ++r) {
      if (whole && (!on_v || r == 0))
        op(Opcode::DmaIn, {at(Buffer::UB, pattern + r * n0 * eb), channel_gm.at(name), imm(whole), imm(n0 * eb), imm(0),
                           imm(whole > 1 ? (pr - 1) * n0 * eb : 0)});
      if (rest) op(Opcode::DmaIn, {at(Buffer::UB, pattern + (whole * pr + r) * n0 * eb), tail, imm(1), imm(rest * eb), imm(0), imm(0)});
    }
    for (int64_t h = 0; on_v && h < row_blocks; ++h)
      op(Opcode::Vmuls, {type(t), at(Buffer::UB, pattern + h * vb), at(Buffer::UB, pattern + h * vb), npu::Operand::float_(1), imm(whole),
                         imm(row_blocks), imm(0), imm(pr * row_blocks), imm(pr * row_blocks)});
    tensors_[name] = {false, 0, pattern, t};
  }
  hoisting_ = true;
  leaf_pattern_.clear();
  // A tensor read as it is gets a vector copy (x * 1, exact) too: then every pattern the column
  // blocks read is written on V, right after its DMA, and that one MTE2 -> V pair orders it.
  for (const ir::Expr* e : leaves_) {
    Value v = VectorCode::compile(*e, chunk_);
    if (e->kind == ir::ExprKind::Access) {
      const Value copy{false, 0, fresh_region(), v.type};
      with_scalar(Opcode::Vmuls, copy, v, 1, chunk_);
      v = copy;
    }
    leaf_pattern_[e] = v;
  }
  hoisting_ = false;
}

VectorCode::Value ConvEpilogue::compile(const ir::Expr& e, int64_t n) {
  if (!hoisting_) {
    const auto it = leaf_pattern_.find(&e);
    if (it != leaf_pattern_.end()) {  // the column block's pattern, repeated down the rows
      Value v = it->second;
      v.region += jj_ * pattern_rows(m_) * m_.cube_f16.n0 * dtype_bytes(v.type);
      v.pattern = true;
      return v;
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
  Value& out = tensors_.at(output());
  if (out.pattern) {  // a result of channel values only: written out whole
    const Value whole{false, 0, fresh_region(), out.type};
    with_scalar(Opcode::Vmuls, whole, out, 1, chunk_);
    out = whole;
  }
  if (out.type != output_type()) throw not_pointwise("the epilogue's result type differs from " + output());
  return out.region;
}

}  // namespace tessel::emit_npu
