#include "isa/npu_isa.h"

#include <array>
#include <initializer_list>
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

struct ExtentInfo {
  std::string_view name, signature;
};

constexpr std::array<ExtentInfo, 16> kExtents = {{
    {"Vector", "t,v,v,v"},    {"VectorCast", "t,t,v,v,v"},   {"Elements", "t,v"},
    {"Dense", "t,v,v"},       {"Bursts", "v,v,v"},           {"NdRows", "t,v,v,v"},
    {"FractalGrid", "v,v,v,v"}, {"Fractals", "v,v"},         {"Img2colSource", "v"},
    {"Img2colFractals", "v,v,v,v,v"}, {"CubeA", "t,v,v"},    {"CubeB", "t,v,v"},
    {"CubeC", "t,v,v"},       {"AccFractals", "v"},          {"AccFractalsAs", "t,v"},
    {"Element", "t"},
}};
static_assert(kExtents.size() == static_cast<size_t>(Extent::Element) + 1, "one kExtents row per npu::Extent");

constexpr OperandAccess make_access(AccessMode mode, int flag, int address, Extent extent,
                                    std::initializer_list<int> params) {
  OperandAccess a{mode, static_cast<int8_t>(address), static_cast<int8_t>(flag), extent, 0, {}};
  for (int p : params) a.param[a.param_count++] = static_cast<int8_t>(p);
  return a;
}

constexpr int repeat_operand_of(const OpcodeInfo& info) {
  for (int i = 0; i < info.access_count; ++i) {
    const OperandAccess& a = info.accesses[i];
    if (a.extent == Extent::Vector) return a.param[1];
    if (a.extent == Extent::VectorCast) return a.param[2];
  }
  return -1;
}

constexpr OpcodeInfo make_info(Opcode op, std::string_view mnemonic, PipeRule rule, std::string_view format,
                               std::initializer_list<OperandAccess> accesses, std::string_view doc) {
  OpcodeInfo info{op, mnemonic, rule, format, doc, count_operands(format), {}, 0, {}, -1};
  int slot = 0;
  for (char c : format)
    if (c != ',') info.slots[slot++] = static_cast<OperandSlot>(c);
  for (const OperandAccess& a : accesses) info.accesses[info.access_count++] = a;
  info.repeat_operand = repeat_operand_of(info);
  return info;
}

#define READS(address, extent, ...) make_access(AccessMode::Read, -1, address, Extent::extent, {__VA_ARGS__})
#define WRITES(address, extent, ...) make_access(AccessMode::Write, -1, address, Extent::extent, {__VA_ARGS__})
#define READS_UNLESS(flag, address, extent, ...) \
  make_access(AccessMode::ReadUnlessSet, flag, address, Extent::extent, {__VA_ARGS__})
#define TESSEL_NPU_ACCESS_LIST(...) {__VA_ARGS__}
constexpr std::array<OpcodeInfo, kOpcodeCount> kOpcodeTable = {{
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, accesses, doc) \
  make_info(Opcode::e, mnemonic, PipeRule::pipe, format, TESSEL_NPU_ACCESS_LIST accesses, doc),
#include "isa/npu_isa.def"
#undef TESSEL_NPU_OP
}};
#undef TESSEL_NPU_ACCESS_LIST
#undef READS_UNLESS
#undef WRITES
#undef READS

static_assert([] {
  for (const OpcodeInfo& info : kOpcodeTable)
    if (info.operand_count > kMaxOperands || info.access_count > kMaxAccesses) return false;
  return true;
}(), "an opcode in isa/npu_isa.def has more operands than kMaxOperands or accesses than kMaxAccesses");

// Every access names an address operand, a flag that is a value, and as many parameters as its
// family's signature with the kinds it lists (t: an element type operand, v: a value operand).
constexpr bool access_fits(const OpcodeInfo& info, const OperandAccess& a) {
  const auto slot_is = [&](int i, OperandSlot s) { return i >= 0 && i < info.operand_count && info.slots[i] == s; };
  if (!slot_is(a.address, OperandSlot::Address)) return false;
  if ((a.mode == AccessMode::ReadUnlessSet) != slot_is(a.flag, OperandSlot::Value)) return false;
  const std::string_view sig = kExtents[static_cast<size_t>(a.extent)].signature;
  if (count_operands(sig) != a.param_count) return false;
  for (int i = 0; i < a.param_count; ++i)
    if (!slot_is(a.param[i], sig[2 * i] == 't' ? OperandSlot::ElementType : OperandSlot::Value)) return false;
  return true;
}

static_assert([] {
  for (const OpcodeInfo& info : kOpcodeTable)
    for (int i = 0; i < info.access_count; ++i)
      if (!access_fits(info, info.accesses[i])) return false;
  return true;
}(), "an access in isa/npu_isa.def names an operand of the wrong kind or the wrong number of parameters");

}  // namespace

std::string_view extent_name(Extent e) { return kExtents[static_cast<size_t>(e)].name; }
std::string_view extent_signature(Extent e) { return kExtents[static_cast<size_t>(e)].signature; }

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
