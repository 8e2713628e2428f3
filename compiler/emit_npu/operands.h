// Short spellings of NPU instruction operands, shared by the emitter's files.
#pragma once

#include "isa/npu_program.h"

namespace tessel::emit_npu {

inline npu::Operand imm(int64_t v) { return npu::Operand::imm_(v); }
inline npu::Operand reg(uint8_t r) { return npu::Operand::reg_(r); }
inline npu::Operand at(npu::Buffer b, int64_t offset, uint8_t base = npu::kNoRegister) {
  return npu::Operand::addr(b, offset, base);
}
inline npu::Operand type(DType t) { return npu::Operand::type(t); }

}  // namespace tessel::emit_npu
