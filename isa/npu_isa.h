// The NPU instruction set: pipes, buffers, opcodes and their operand formats, generated from the
// one table isa/npu_isa.def. The program format built on it is isa/npu_program.h; the meaning and
// timing of each instruction are documented in isa/README.md ("NPU instruction set").
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "isa/hierarchy.h"

namespace tessel::npu {

// The six pipes of an AI core (DESIGN.md "The NPU model"). All is only an operand of pipe_barrier.
enum class Pipe : uint8_t { S, V, M, MTE1, MTE2, MTE3, All };
inline constexpr int kPipeCount = 6;  // without All
std::string_view pipe_name(Pipe p);
std::optional<Pipe> parse_pipe(std::string_view name);  // "ALL" included

// The buffers an address can name. Each maps to the hierarchy level carrying its role.
enum class Buffer : uint8_t { GM, L1, L0A, L0B, L0C, UB };
inline constexpr int kBufferCount = 6;
std::string_view buffer_name(Buffer b);
std::optional<Buffer> parse_buffer(std::string_view name);
isa::Role buffer_role(Buffer b);

enum class Opcode : uint16_t {
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, doc) e,
#include "isa/npu_isa.def"
#undef TESSEL_NPU_OP
};
inline constexpr int kOpcodeCount = 0
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, doc) +1
#include "isa/npu_isa.def"
#undef TESSEL_NPU_OP
    ;

// How an opcode's executing pipe is chosen (the .def table's PipeRule column).
enum class PipeRule : uint8_t { S, V, M, MTE1, MTE2, MTE3, FlagSrc, FlagDst, Barrier };

// One letter of the operand format (see isa/npu_isa.def).
enum class OperandSlot : uint8_t {
  DstReg = 'r',
  Value = 'v',
  Scalar = 'f',
  Address = 'a',
  PipeName = 'p',
  PipeOrAll = 'b',
  ElementType = 't',
};

inline constexpr int kMaxOperands = 12;

struct OpcodeInfo {
  Opcode opcode;
  std::string_view mnemonic;
  PipeRule pipe_rule;
  std::string_view format;  // "r,v,v"
  std::string_view doc;
  int operand_count;
  OperandSlot slots[kMaxOperands];
};

const OpcodeInfo& opcode_info(Opcode op);
std::string_view mnemonic(Opcode op);
std::optional<Opcode> parse_mnemonic(std::string_view text);

// Registers: r0..r31 are general (64-bit signed); two read-only special registers follow.
inline constexpr int kGeneralRegisterCount = 32;
inline constexpr uint8_t kRegCoreId = 32;     // `core_id`: this core's index, 0..core_count-1
inline constexpr uint8_t kRegCoreCount = 33;  // `core_count`: cores running the program
inline constexpr int kRegisterCount = 34;
std::string register_name(uint8_t reg);
std::optional<uint8_t> parse_register(std::string_view name);

}  // namespace tessel::npu
