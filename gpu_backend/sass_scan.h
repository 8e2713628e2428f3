// Does a CUBIN use the tensor cores? Answered without cuobjdump or nvdisasm (absent on CI).
//
// A CUBIN is an ELF file whose .text.<kernel> sections hold SASS. From Volta (sm_70) to Hopper
// (sm_90) every instruction is 128 bits, and the low 12 bits of its first 64-bit word are the
// opcode. The table in sass_scan.cc lists the tensor-core opcodes, each checked against
// `cuobjdump -sass` on a real CUBIN (see the comments there); other architectures are refused.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessel::gpu {

struct SassScan {
  int sm = 0;                                  // from the ELF header (90 for sm_90)
  uint64_t instructions = 0;                   // over every .text.* section
  std::map<std::string, uint64_t> tensor_ops;  // mnemonic ("HMMA", "IMMA", "HGMMA") -> count
  std::map<std::string, uint64_t> copy_ops;    // TMA copies: "UTMALDG" -> count
  std::vector<std::string> kernels;            // names of the .text.* sections, without ".text."
  uint64_t tensor_op_count() const;
};

// Throws UserError when the bytes are not a CUDA ELF of a supported architecture or are truncated.
SassScan scan_cubin(const std::vector<uint8_t>& cubin);

// The low-12-bit opcode of every instruction, in order, per kernel (to check the table against a
// disassembler on a machine that has one).
std::map<std::string, std::vector<uint16_t>> cubin_opcodes(const std::vector<uint8_t>& cubin);

bool cubin_has_tensor_core_ops(const std::vector<uint8_t>& cubin);
uint64_t cubin_tensor_core_op_count(const std::vector<uint8_t>& cubin);

}  // namespace tessel::gpu
