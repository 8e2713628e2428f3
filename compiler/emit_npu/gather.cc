// NPU mapping of a one-hot gather along a table's outer axis (see gather.h).
#include "compiler/emit_npu/gather.h"

#include <fmt/format.h>

#include "compiler/emit_npu/operands.h"
#include "compiler/kernel/gather_form.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

constexpr const char* kGather = "not a gather";
constexpr int64_t kMaxPieces = 64;  // not hardware: a bound on the unrolled pieces of one row
constexpr int kMaskHalfBits = 64;   // not hardware: the int64 halves (hi, lo) of set_vector_mask's operand

using Gather = kernel::GatherForm;

std::string message(const kernel::Kernel& k, const std::string& why) { return "kernel " + k.name + ": " + kGather + ": " + why; }

// Bytes of one UB slot (two alternate): half of UB in whole vector repeats.
int64_t slot_bytes(const isa::NpuMachine& m) {
  return m.capacity(Buffer::UB) / 2 / m.vector_bytes_per_repeat * m.vector_bytes_per_repeat;
}

std::string gather_fit(const kernel::Kernel& k, const Gather& g, const isa::NpuMachine& m) {
  const int64_t pieces = (g.row_bytes + slot_bytes(m) - 1) / slot_bytes(m);
  if (pieces > kMaxPieces)
    return message(k, fmt::format("a row of {} bytes is {} UB pieces (at most {})", g.row_bytes, pieces, kMaxPieces));
  return "";
}

// Registers of the emitted program.
enum : uint8_t { kK = 1, kQ, kGuard, kGuardLoop, kT, kId, kNeg, kLo, kHi, kValid, kSrc, kDst, kSlot, kZero };

// Zeroes `bytes` (whole elements of t) at UB[slot + 0]: full repeats, then the tail's lanes masked.
void zero_fill(npu::Program& p, const isa::NpuMachine& m, DType t, Operand slot, int64_t bytes) {
  const int64_t repeat = m.vector_bytes_per_repeat, blocks = m.blocks_per_repeat();
  const Operand zero = t == DType::I32 ? imm(0) : Operand::float_(0.0);
  auto at_offset = [&](int64_t off) { return at(Buffer::UB, slot.imm + off, slot.reg); };
  const int64_t full = bytes / repeat, tail = bytes % repeat / dtype_bytes(t);
  for (int64_t done = 0; done < full; done += m.vector_max_repeat) {
    const int64_t n = std::min<int64_t>(m.vector_max_repeat, full - done);
    p.add(Opcode::Vdup, {type(t), at_offset(done * repeat), zero, imm(n), imm(1), imm(blocks)});
  }
  if (tail == 0) return;
  auto bits = [](int64_t n) { return n >= kMaskHalfBits ? int64_t(-1) : int64_t((uint64_t(1) << n) - 1); };
  p.add(Opcode::SetVectorMask, {imm(tail > kMaskHalfBits ? bits(tail - kMaskHalfBits) : 0), imm(bits(std::min<int64_t>(tail, kMaskHalfBits)))});
  p.add(Opcode::Vdup, {type(t), at_offset(full * repeat), zero, imm(1), imm(1), imm(blocks)});
  p.add(Opcode::SetVectorMask, {imm(-1), imm(-1)});
}

// kId = the table row I(q) selects (0 where none), kValid = 1 when one does; kSrc, kDst the byte
// offsets of X's and Y's rows.
void row_of_index(npu::Program& p, const Gather& g, int64_t i_off) {
  p.add(Opcode::Mul, {reg(kT), reg(kQ), imm(dtype_bytes(DType::I32))});
  p.add(Opcode::Ld, {reg(kId), type(DType::I32), at(Buffer::GM, i_off, kT)});
  if (g.wraps) {  // -D <= id < 0 counts from the end
    p.add(Opcode::Slt, {reg(kNeg), reg(kId), imm(0)});
    p.add(Opcode::Mul, {reg(kNeg), reg(kNeg), imm(g.D)});
    p.add(Opcode::Add, {reg(kId), reg(kId), reg(kNeg)});
  }
  p.add(Opcode::Slt, {reg(kLo), reg(kId), imm(0)});
  p.add(Opcode::Slt, {reg(kHi), reg(kId), imm(g.D)});
  p.add(Opcode::Sub, {reg(kValid), reg(kHi), reg(kLo)});  // 0 <= id < D: 1 - 0; below: 1 - 1; above: 0 - 0
  p.add(Opcode::Mul, {reg(kId), reg(kId), reg(kValid)});
  p.add(Opcode::Mul, {reg(kSrc), reg(kId), imm(g.row_bytes)});
  p.add(Opcode::Mul, {reg(kDst), reg(kQ), imm(g.row_bytes)});
}

}  // namespace

std::string why_not_gather(const kernel::Kernel& k, const isa::NpuMachine&) {
  Gather g;
  const std::string why = kernel::why_not_gather_form(k, g);
  return why.empty() ? why : message(k, why);
}

std::string why_not_gather_fit(const kernel::Kernel& k, const isa::Hierarchy& h) {
  Gather g;
  if (!kernel::why_not_gather_form(k, g).empty()) return "";
  return gather_fit(k, g, isa::npu_machine(h));
}

NpuKernel emit_gather(const kernel::Kernel& k, const isa::Hierarchy& h) {
  Gather g;
  if (std::string why = kernel::why_not_gather_form(k, g); !why.empty()) throw UserError(message(k, why));
  const isa::NpuMachine m = isa::npu_machine(h);
  if (std::string why = gather_fit(k, g, m); !why.empty()) throw UserError(why);
  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = k.name + ".npu";
  const int64_t align = m.granularity(Buffer::GM);
  npu::TensorBinding bi{g.I->name, g.I->dtype, g.I->shape, 0, npu::TensorRole::In, {}};
  npu::TensorBinding bx{g.X->name, g.X->dtype, g.X->shape, round_up(bi.byte_size(), align), npu::TensorRole::In, {}};
  npu::TensorBinding by{g.Y->name, g.Y->dtype, g.Y->shape, round_up(bx.gm_offset + bx.byte_size(), align), npu::TensorRole::Out, {}};
  p.tensors = {bi, bx, by};
  const int64_t cores = std::min<int64_t>(m.cores, g.rows), per_core = (g.rows + cores - 1) / cores;
  p.cores = int(cores);
  const int64_t slot = slot_bytes(m), pieces = (g.row_bytes + slot - 1) / slot;
  const bool guard = g.rows % cores != 0;
  p.add(Opcode::Loop, {reg(kK), imm(0), imm(per_core), imm(1)});  // row q = k * cores + core_id
  p.add(Opcode::Mul, {reg(kT), reg(kK), imm(cores)});
  p.add(Opcode::Add, {reg(kQ), reg(kT), reg(npu::kRegCoreId)});
  if (guard) {  // the last round: cores past the last row skip it
    p.add(Opcode::Slt, {reg(kGuard), reg(kQ), imm(g.rows)});
    p.add(Opcode::Loop, {reg(kGuardLoop), imm(0), reg(kGuard), imm(1)});
  }
  row_of_index(p, g, bi.gm_offset);
  if (pieces == 1) {  // slot (k mod 2): this row's DMA in overlaps the previous row's DMA out
    p.add(Opcode::Div, {reg(kT), reg(kK), imm(2)});
    p.add(Opcode::Mul, {reg(kT), reg(kT), imm(2)});
    p.add(Opcode::Sub, {reg(kSlot), reg(kK), reg(kT)});
    p.add(Opcode::Mul, {reg(kSlot), reg(kSlot), imm(slot)});
  }
  for (int64_t j = 0; j < pieces; ++j) {
    const int64_t off = j * slot, bytes = std::min(slot, g.row_bytes - off);
    const Operand ub = pieces == 1 ? at(Buffer::UB, 0, kSlot) : at(Buffer::UB, (j % 2) * slot);
    p.add(Opcode::DmaIn, {ub, at(Buffer::GM, bx.gm_offset + off, kSrc), imm(1), imm(bytes), imm(0), imm(0)});
    p.add(Opcode::Loop, {reg(kZero), reg(kValid), imm(1), imm(1)});  // once where the index selects no row
    zero_fill(p, m, g.X->dtype, ub, bytes);
    p.add(Opcode::EndLoop, {});
    p.add(Opcode::DmaOut, {at(Buffer::GM, by.gm_offset + off, kDst), ub, imm(1), imm(bytes), imm(0), imm(0)});
  }
  if (guard) p.add(Opcode::EndLoop, {});
  p.add(Opcode::EndLoop, {});
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  out.notes.push_back(fmt::format("gather of {} row(s) of {} [{} rows, {} bytes each] by {}: the scalar unit reads each index "
                                  "(ld), one DMA in and one out per row{}, rows over {} core(s) ({} each), two UB slots{}",
                                  g.rows, g.X->name, g.D, g.row_bytes, g.I->name,
                                  pieces > 1 ? fmt::format(" ({} pieces)", pieces) : "", cores, per_core,
                                  g.wraps ? ", negative indices from the end" : ""));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu

