#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/operands.h"

#include "compiler/emit_npu/attention.h"
#include "compiler/emit_npu/channels.h"
#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/depthwise.h"
#include "compiler/emit_npu/gather.h"
#include "compiler/emit_npu/gemm.h"
#include "compiler/emit_npu/group_stats.h"
#include "compiler/emit_npu/nest.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/emit_npu/transpose.h"
#include "compiler/emit_npu/vector_gemm.h"
#include "compiler/emit_npu/window_max.h"
#include "compiler/emit_npu/window_sum.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;
using npu::Pipe;

using Machine = isa::NpuMachine;

// The vector-unit mappings of kernels without a matmul, in the order they are tried: the first
// whose why_not accepts the kernel maps it (their forms exclude each other: element-wise reads at
// the output's indices, channel-last and last-axis rows at row or channel indices, a transpose is
// one permuted copy, a one-hot one select on i32 indices, a gather a sum of select(index test,
// table row, 0) over the table's rows). Each why_not checks its mapping's
// preconditions without throwing and says why it does not apply; a kernel none accepts is one
// UserError listing every reason. why_not_fit (where a form's placement can fail after its form
// matched: the transposes' UB and repeat bounds) says, again before emitting, why the mapping
// cannot place the kernel: the general lowering then maps it, the refusal its first note.
struct VectorMapping {
  std::string (*why_not)(const kernel::Kernel&, const Machine&);
  std::string (*why_not_fit)(const kernel::Kernel&, const isa::Hierarchy&);  // null: why_not covers it
  NpuKernel (*emit)(const kernel::Kernel&, const isa::Hierarchy&);
};
constexpr VectorMapping kVectorMappings[] = {
    {why_not_pointwise, nullptr, emit_pointwise},
    {why_not_channels, nullptr, emit_channels},
    {why_not_rows, nullptr, emit_rows},
    {why_not_transpose, why_not_transpose_fit, emit_transpose},
    {why_not_one_hot, why_not_one_hot_fit, emit_one_hot},
    {why_not_gather, why_not_gather_fit, emit_gather},
    {why_not_nest, nullptr, emit_nest},
};

}  // namespace

namespace {

// The dtypes the vector unit computes in (the description's vector `dtypes`); i8 and u8 count
// when i32 does, since the lowerings compute them in i32 (nest_plan.h, compute_type).
bool vector_computes(const isa::Hierarchy& target, DType t) {
  for (const isa::Unit* u : target.units_of_kind(isa::UnitKind::Vector)) {
    const auto& ts = u->dtypes;
    if (std::find(ts.begin(), ts.end(), t) != ts.end()) return true;
    if ((t == DType::I8 || t == DType::U8) && std::find(ts.begin(), ts.end(), DType::I32) != ts.end()) return true;
  }
  return false;
}

// " (file:line:col)" of a source place, or "" where there is none.
std::string source_place(const ir::SourceLoc& l) {
  return l.line ? fmt::format(" ({}:{}:{})", l.file, l.line, l.col) : std::string();
}

// The place of the first operation in `s` with an operand or a result of which bad(dtype) holds,
// " (file:line:col)" (" " where the operation has no place), its dtype in `type`; "" when there is none.
// An operation `skip` holds for (a conversion the vector unit lists) is not checked, its operands are.
std::string first_operation_with(const ir::Statement& s, const std::function<bool(DType)>& bad, DType& type,
                                 const std::function<bool(const ir::Expr&)>& skip = nullptr) {
  std::string where;
  std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
    if (!where.empty() || e.kind != ir::ExprKind::Apply) return;
    for (const auto& a : e.args)
      if (!(skip && skip(e)) && (bad(a->type) || bad(e.type))) {
        type = bad(e.type) ? e.type : a->type;
        where = source_place(e.loc);
        if (where.empty()) where = " ";
        return;
      }
    for (const auto& a : e.args) walk(*a);
  };
  walk(*s.rhs);
  return where;
}

// Why a statement computes, converts or reduces values of a dtype the vector unit does not take
// (u8 or bf16 on the DaVinci descriptions), or "". Reads only moved (stored as they are) need no
// vector type: the copies move bytes. Checked before any mapping, so no template emits an
// instruction with an element type the program format refuses (issue 31: a u8 cast's vconv).
std::string why_not_vector_dtypes(const kernel::Kernel& k, const isa::Hierarchy& target) {
  if (!k.function) return "";
  const Machine m = isa::npu_machine(target);
  for (const ir::Statement& s : k.function->statements) {
    std::string why;
    DType t = DType::F32;
    const std::string where = first_operation_with(
        s, [&](DType d) { return !vector_computes(target, d); }, t,
        [&](const ir::Expr& e) { return e.op == ir::Op::Cast && m.conversion(e.args[0]->type, e.type); });
    if (!where.empty()) why = fmt::format("{} values{}", dtype_name(t), where == " " ? "" : where);
    const bool converted = s.acc_type == DType::BF16 && m.conversion(DType::F32, DType::BF16) && m.conversion(DType::BF16, DType::F32);
    if (why.empty() && s.reduction != ir::Reduction::None && !vector_computes(target, s.acc_type) && !converted)
      why = fmt::format("a reduction in {}", dtype_name(s.acc_type));
    if (why.empty()) continue;
    std::string types;
    for (const isa::Unit* u : target.units_of_kind(isa::UnitKind::Vector))
      for (DType d : u->dtypes) types += (types.empty() ? "" : ", ") + std::string(dtype_name(d));
    return fmt::format("kernel {}: statement {}{} computes with {}: the NPU has no mapping for them (the vector unit "
                       "of {} takes {})",
                       k.name, s.name, source_place(s.loc), why, target.name, types);
  }
  return "";
}

// Where a statement computes with u8 values (no instruction takes them: only the general lowering
// computes them, in i32), e.g. "statement S0 (f.tsl:2:3)", or "".
std::string u8_use(const kernel::Kernel& k) {
  if (!k.function) return "";
  for (const ir::Statement& s : k.function->statements) {
    DType t = DType::F32;
    const bool reduces = s.reduction != ir::Reduction::None && s.acc_type == DType::U8;
    if (reduces || !first_operation_with(s, [](DType d) { return d == DType::U8; }, t).empty())
      return "u8 arithmetic in statement " + s.name + source_place(s.loc);
  }
  return "";
}

NpuKernel emit_any(const kernel::Kernel& k, const isa::Hierarchy& target) {
  const Machine m = isa::npu_machine(target);
  if (const std::string why = why_not_vector_dtypes(k, target); !why.empty()) throw UserError(why);
  // The fused attention (online softmax) has its own program: the record, not a loop tree.
  if (k.attention) return emit_attention(k, target);
  // A strided window maximum over a channel-last map (max pooling, its padding folded): its ranges
  // may use floor division (evaluated to the sizes), its indices are affine.
  if (why_not_window_max(k, m).empty()) return emit_window_max(k, target);
  // The templates below read affine index, range and shape forms only: a function with floor
  // division or modulo anywhere goes to the general vector lowering, which splits divided indices.
  // u8 values likewise: no instruction takes them, the general lowering computes them in i32.
  const std::string division = ir::division_use(*k.function);
  const std::string use = !division.empty() ? "floor division or modulo: " + division : u8_use(k);
  if (!use.empty()) {
    if (const std::string why = why_not_nest(k, m); !why.empty())
      throw UserError(why + " (the only NPU mapping of " + use + ")");
    return emit_nest(k, target);
  }
  // A template that refuses a kernel it recognised (the cube paths: why_not_conv, why_not_gemm; the
  // vector templates: why_not_fit; all decided before emitting) leaves it to the general lowering
  // (exact; for a contraction far from the cube's rate), the refusal kept as the mapping's first
  // note, unless the user gave a tile (it is for the cube) or the general lowering refuses it too
  // within `max_issued` instructions per core: then the template's refusal is the error.
  auto or_general = [&](const std::string& refused, double max_issued, auto&& emit) -> NpuKernel {
    if (refused.empty()) return emit();
    if (k.user_tile || !why_not_nest(k, m, max_issued).empty()) throw UserError(refused);
    NpuKernel out = emit_nest(k, target);
    out.notes.insert(out.notes.begin(), "refused (" + refused + "): the general vector lowering maps it");
    return out;
  };
  // not hardware: 2^20 instructions per core, a contraction small enough for the vector unit
  const double cube_max_issued = double(1 << 20);
  if (is_nhwc_convolution(k, m))
    return or_general(why_not_conv(k, target), cube_max_issued, [&] { return emit_conv(k, target); });
  if (why_not_depthwise(k, m).empty())  // the cube, else the one-core vector template, else the general lowering
    return or_general(why_not_depthwise_fit(k, target), cube_max_issued, [&] { return emit_depthwise(k, target); });
  // a contraction in a dtype the cube has no shape for (f32): the vector unit at its peak
  if (why_not_vector_gemm(k, m).empty()) return emit_vector_gemm(k, target);
  // a stride-1 window sum over a channel-last map (average pooling): each input element converted once
  if (why_not_window_sum(k, m).empty()) return emit_window_sum(k, target);
  // statistics per group of a channel-last map (group norm): a group's values kept in UB, no barrier
  if (why_not_group_stats(k, m).empty()) return emit_group_stats(k, target);
  const kernel::Node* mm = find_matmul(k);
  if (mm) return or_general(why_not_gemm(k, mm->matmul, m, target), cube_max_issued, [&] { return emit_gemm(k, mm->matmul, m, target); });
  std::string reasons;
  // The row templates run on one core: the general lowering's row pipeline over several beats them.
  const bool pipeline = row_pipeline_cores(k, m) > 1;
  for (const VectorMapping& mapping : kVectorMappings) {
    if (pipeline && (mapping.emit == emit_channels || mapping.emit == emit_rows)) continue;
    const std::string why = mapping.why_not(k, m);
    if (why.empty()) {
      const std::string refused = mapping.why_not_fit ? mapping.why_not_fit(k, target) : std::string();
      return or_general(refused, double(1 << 23), [&] { return mapping.emit(k, target); });
    }
    reasons += (reasons.empty() ? "" : "; ") + why;
  }
  throw UserError(reasons);
}

// Every placement (inputs, outputs, scratch) ends inside the target's GM. The emitters' programs
// passed npu::validate_program, so each tensor's end is an exact int64 (no wrapped offset).
void check_gm_fit(const kernel::Kernel& k, const npu::Program& p, const Machine& m) {
  const uint64_t capacity = m.buffer(Buffer::GM).capacity_bytes;
  for (const npu::TensorBinding& t : p.tensors) {
    const uint64_t end = static_cast<uint64_t>(t.gm_offset) + static_cast<uint64_t>(t.byte_size());
    if (end > capacity)
      throw UserError(fmt::format("kernel {}: tensor '{}' ({}, {} bytes at GM+{}) ends at byte {}, past the {} bytes of GM of {}",
                                  k.name, t.name, npu::tensor_role_name(t.role), t.byte_size(), t.gm_offset, end,
                                  capacity, m.target_name));
  }
}

}  // namespace

NpuKernel emit_npu(const kernel::Kernel& k, const isa::Hierarchy& target) {
  if (target.kind != isa::TargetKind::Npu) throw UserError(target.source_file + ": not an NPU description");
  NpuKernel out = emit_any(k, target);
  check_gm_fit(k, out.program, isa::npu_machine(target));
  // A kernel over collapsed indices (poly::collapse_indices) reads and writes its tensors in merged
  // shapes; the program declares the user's shapes (the same bytes), which inputs bind in and
  // outputs come back in.
  for (npu::TensorBinding& b : out.program.tensors) {
    const kernel::GlobalTensor* t = k.find_tensor(b.name);
    if (!t || t->declared_shape.empty()) continue;
    npu::TensorBinding declared = b;
    declared.shape = t->declared_shape;
    if (declared.byte_size() == b.byte_size()) b = declared;
  }
  return out;
}

}  // namespace tessel::emit_npu
