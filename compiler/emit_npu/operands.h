// Short spellings of NPU instruction operands and the rounding the emitter's files share.
#pragma once

#include "isa/npu_program.h"

namespace tessel::emit_npu {

// x rounded up to a multiple of m (> 0): buffer sizes in whole blocks and fractals
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

inline npu::Operand imm(int64_t v) { return npu::Operand::imm_(v); }
inline npu::Operand reg(uint8_t r) { return npu::Operand::reg_(r); }
inline npu::Operand at(npu::Buffer b, int64_t offset, uint8_t base = npu::kNoRegister) {
  return npu::Operand::addr(b, offset, base);
}
inline npu::Operand type(DType t) { return npu::Operand::type(t); }

}  // namespace tessel::emit_npu
