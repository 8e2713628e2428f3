#include "isa/npu_isa.h"

#include <array>
#include <string>

#include "isa/base/error.h"

namespace tessel::npu {
namespace {

constexpr std::array<std::string_view, 7> kPipeNames = {"S", "V", "M", "MTE1", "MTE2", "MTE3", "ALL"};
constexpr std::array<std::string_view, kBufferCount> kBufferNames = {"GM", "L1", "L0A", "L0B", "L0C", "UB"};

constexpr int count_operands(std::string_view format) {
  if (format.empty()) return 0;
  int n = 1;
  for (char c : format) n += c == ',';
  return n;
}

constexpr OpcodeInfo make_info(Opcode op, std::string_view mnemonic, PipeRule rule, std::string_view format,
                               std::string_view doc) {
  OpcodeInfo info{op, mnemonic, rule, format, doc, count_operands(format), {}};
  int slot = 0;
  for (char c : format)
    if (c != ',') info.slots[slot++] = static_cast<OperandSlot>(c);
  return info;
}

const std::array<OpcodeInfo, kOpcodeCount> kOpcodeTable = {{
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, doc) make_info(Opcode::e, mnemonic, PipeRule::pipe, format, doc),
#include "isa/npu_isa.def"
#undef TESSEL_NPU_OP
}};

static_assert([] {
  for (int i = 0; i < kOpcodeCount; ++i) {
    std::string_view f;
    int k = 0;
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, doc) \
  if (k++ == i) f = format;
#include "isa/npu_isa.def"
#undef TESSEL_NPU_OP
    if (count_operands(f) > kMaxOperands) return false;
  }
  return true;
}(), "an opcode in isa/npu_isa.def has more operands than kMaxOperands");

}  // namespace

std::string_view pipe_name(Pipe p) { return kPipeNames[static_cast<size_t>(p)]; }

std::optional<Pipe> parse_pipe(std::string_view name) {
  for (size_t i = 0; i < kPipeNames.size(); ++i)
    if (kPipeNames[i] == name) return static_cast<Pipe>(i);
  return std::nullopt;
}

std::string_view buffer_name(Buffer b) { return kBufferNames[static_cast<size_t>(b)]; }

std::optional<Buffer> parse_buffer(std::string_view name) {
  for (size_t i = 0; i < kBufferNames.size(); ++i)
    if (kBufferNames[i] == name) return static_cast<Buffer>(i);
  return std::nullopt;
}

isa::Role buffer_role(Buffer b) {
  switch (b) {
    case Buffer::GM: return isa::Role::Global;
    case Buffer::L1: return isa::Role::Stage;
    case Buffer::L0A: return isa::Role::OperandA;
    case Buffer::L0B: return isa::Role::OperandB;
    case Buffer::L0C: return isa::Role::Accumulator;
    case Buffer::UB: return isa::Role::Vector;
  }
  TESSEL_CHECK(false, "buffer enumerator out of range");
  return isa::Role::Global;
}

const OpcodeInfo& opcode_info(Opcode op) {
  const size_t i = static_cast<size_t>(op);
  TESSEL_CHECK(i < kOpcodeTable.size(), "opcode out of range");
  return kOpcodeTable[i];
}

std::string_view mnemonic(Opcode op) { return opcode_info(op).mnemonic; }

std::optional<Opcode> parse_mnemonic(std::string_view text) {
  for (const OpcodeInfo& info : kOpcodeTable)
    if (info.mnemonic == text) return info.opcode;
  return std::nullopt;
}

std::string register_name(uint8_t reg) {
  if (reg == kRegCoreId) return "core_id";
  if (reg == kRegCoreCount) return "core_count";
  TESSEL_CHECK(reg < kGeneralRegisterCount, "register index out of range");
  return "r" + std::to_string(reg);
}

std::optional<uint8_t> parse_register(std::string_view name) {
  if (name == "core_id") return kRegCoreId;
  if (name == "core_count") return kRegCoreCount;
  if (name.size() < 2 || name.size() > 3 || name[0] != 'r') return std::nullopt;
  int value = 0;
  for (char c : name.substr(1)) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (name.size() == 3 && name[1] == '0') return std::nullopt;  // "r05" is not a register name
  if (value >= kGeneralRegisterCount) return std::nullopt;
  return static_cast<uint8_t>(value);
}

}  // namespace tessel::npu
