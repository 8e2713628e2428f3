#include "isa/npu_program.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "isa/base/error.h"
#include "isa/base/file_io.h"

namespace tessel::npu {
namespace {

constexpr std::array<std::string_view, 4> kTensorRoleNames = {"in", "out", "inout", "scratch"};

// Which buffers each address operand of an opcode may name (operand index counts all operands).
struct AddressRule {
  Opcode opcode;
  int operand;
  std::initializer_list<Buffer> allowed;
};
const AddressRule kAddressRules[] = {
    {Opcode::DmaIn, 0, {Buffer::L1, Buffer::UB, Buffer::L0A, Buffer::L0B}},
    {Opcode::DmaIn, 1, {Buffer::GM}},
    {Opcode::DmaInNz, 1, {Buffer::L1, Buffer::L0A, Buffer::L0B}},
    {Opcode::DmaInNz, 2, {Buffer::GM}},
    {Opcode::Load2d, 1, {Buffer::L0A, Buffer::L0B}},
    {Opcode::Load2d, 2, {Buffer::L1}},
    {Opcode::Load3d, 1, {Buffer::L0A, Buffer::UB}},
    {Opcode::Load3d, 2, {Buffer::L1}},
    {Opcode::Mmad, 1, {Buffer::L0C}},
    {Opcode::Mmad, 2, {Buffer::L0A}},
    {Opcode::Mmad, 3, {Buffer::L0B}},
    {Opcode::MovL0c, 1, {Buffer::UB}},
    {Opcode::MovL0c, 2, {Buffer::L0C}},
    {Opcode::DmaOut, 0, {Buffer::GM, Buffer::L1}},
    {Opcode::DmaOut, 1, {Buffer::UB}},
    {Opcode::Ld, 2, {Buffer::GM}},
};

// Element types each opcode's first type operand accepts (vector ops without a rule: f16 f32 i32).
struct TypeRule {
  Opcode opcode;
  std::initializer_list<DType> allowed;
};
const TypeRule kTypeRules[] = {
    {Opcode::Mmad, {DType::F16, DType::I8, DType::BF16}},      // bf16: where the cube lists it (footprint)
    {Opcode::Load2d, {DType::F16, DType::I8, DType::BF16}},
    {Opcode::Load3d, {DType::F16}},
    {Opcode::DmaInNz, {DType::F16, DType::F32, DType::I8, DType::I32, DType::BF16}},
    {Opcode::MovL0c, {DType::F32, DType::F16, DType::I32}},
    {Opcode::Vconv, {DType::F16, DType::F32, DType::I32, DType::I8, DType::BF16}},  // bf16: a conversion the machine lists (simulator)
    {Opcode::Vexp, {DType::F16, DType::F32}},
    {Opcode::Vln, {DType::F16, DType::F32}},
    {Opcode::Vsqrt, {DType::F16, DType::F32}},
    {Opcode::Vrsqrt, {DType::F16, DType::F32}},
    {Opcode::Vrec, {DType::F16, DType::F32}},
    {Opcode::Vtanh, {DType::F16, DType::F32}},
    {Opcode::Vtranspose, {DType::F16}},
};
constexpr std::initializer_list<DType> kDefaultVectorTypes = {DType::F16, DType::F32, DType::I32};

std::string where(const Program& p, const Instruction& instr, size_t index) {
  if (instr.location.line > 0) return fmt::format("{}:{}:{}", p.source_name, instr.location.line, instr.location.column);
  return fmt::format("{}: instruction {}", p.source_name, index);
}

bool slot_accepts(OperandSlot slot, const Operand& o) {
  switch (slot) {
    case OperandSlot::DstReg: return o.kind == OperandKind::Register && o.reg < kGeneralRegisterCount;
    case OperandSlot::Value: return o.kind == OperandKind::Register || o.kind == OperandKind::Immediate;
    case OperandSlot::Scalar:
      return o.kind == OperandKind::Register || o.kind == OperandKind::Immediate ||
             o.kind == OperandKind::FloatImmediate;
    case OperandSlot::Address: return o.kind == OperandKind::Address;
    case OperandSlot::PipeName: return o.kind == OperandKind::PipeName && o.pipe != Pipe::All;
    case OperandSlot::PipeOrAll: return o.kind == OperandKind::PipeName;
    case OperandSlot::ElementType: return o.kind == OperandKind::ElementType;
  }
  return false;
}

std::string_view slot_description(OperandSlot slot) {
  switch (slot) {
    case OperandSlot::DstReg: return "a destination register (r0..r31)";
    case OperandSlot::Value: return "a register or an integer immediate";
    case OperandSlot::Scalar: return "a register or a numeric immediate";
    case OperandSlot::Address: return "an address BUFFER[reg+offset]";
    case OperandSlot::PipeName: return "a pipe (S, V, M, MTE1, MTE2, MTE3)";
    case OperandSlot::PipeOrAll: return "a pipe or ALL";
    case OperandSlot::ElementType: return "an element type (f16, f32, i32, i8)";
  }
  return "?";
}

std::string join_buffers(std::initializer_list<Buffer> bs) {
  std::string s;
  for (Buffer b : bs) s += (s.empty() ? "" : ", ") + std::string(buffer_name(b));
  return s;
}

std::string join_types(std::initializer_list<DType> ts) {
  std::string s;
  for (DType t : ts) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

bool is_vector_op(Opcode op) { return opcode_info(op).pipe_rule == PipeRule::V && op != Opcode::MovL0c; }

void validate_instruction(const Program& p, const Instruction& instr, size_t index) {
  const OpcodeInfo& info = opcode_info(instr.opcode);
  const std::string at = where(p, instr, index);
  if (static_cast<int>(instr.operands.size()) != info.operand_count)
    throw UserError(fmt::format("{}: '{}' takes {} operand(s) ({}), got {}", at, info.mnemonic, info.operand_count,
                                info.format.empty() ? "none" : info.format, instr.operands.size()));
  for (int i = 0; i < info.operand_count; ++i) {
    const Operand& o = instr.operands[i];
    if (!slot_accepts(info.slots[i], o))
      throw UserError(fmt::format("{}: operand {} of '{}' must be {}, got '{}'", at, i + 1, info.mnemonic,
                                  slot_description(info.slots[i]), format_operand(o)));
    if ((o.kind == OperandKind::Register || o.kind == OperandKind::Address) && o.reg != kNoRegister &&
        o.reg >= kRegisterCount)
      throw UserError(fmt::format("{}: operand {} names register {} (there are r0..r31, core_id, core_count)", at,
                                  i + 1, int(o.reg)));
  }
  for (const AddressRule& rule : kAddressRules) {
    if (rule.opcode != instr.opcode) continue;
    const Buffer b = instr.operands[rule.operand].buffer;
    if (std::find(rule.allowed.begin(), rule.allowed.end(), b) == rule.allowed.end())
      throw UserError(fmt::format("{}: operand {} of '{}' cannot be in {} (allowed: {})", at, rule.operand + 1,
                                  info.mnemonic, buffer_name(b), join_buffers(rule.allowed)));
  }
  if (is_vector_op(instr.opcode)) {
    for (const Operand& o : instr.operands)
      if (o.kind == OperandKind::Address && o.buffer != Buffer::UB)
        throw UserError(fmt::format("{}: vector instruction '{}' addresses {} (vector operands live in UB)", at,
                                    info.mnemonic, buffer_name(o.buffer)));
  }
  if (info.operand_count > 0 && info.slots[0] == OperandSlot::ElementType) {
    std::initializer_list<DType> allowed = kDefaultVectorTypes;
    for (const TypeRule& rule : kTypeRules)
      if (rule.opcode == instr.opcode) allowed = rule.allowed;
    const int type_operands = instr.opcode == Opcode::Vconv ? 2 : 1;
    for (int i = 0; i < type_operands; ++i) {
      const DType t = instr.operands[i].dtype;
      if (std::find(allowed.begin(), allowed.end(), t) == allowed.end())
        throw UserError(fmt::format("{}: '{}' does not take element type {} (allowed: {})", at, info.mnemonic,
                                    dtype_name(t), join_types(allowed)));
    }
  }
  if (instr.opcode == Opcode::Ld && instr.operands[1].dtype != DType::I32)
    throw UserError(fmt::format("{}: 'ld' reads i32 only, got {}", at, dtype_name(instr.operands[1].dtype)));
  if (instr.opcode == Opcode::SetFlag || instr.opcode == Opcode::WaitFlag) {
    if (instr.operands[0].pipe == instr.operands[1].pipe)
      throw UserError(fmt::format("{}: '{}' needs two different pipes, got {} twice", at, info.mnemonic,
                                  pipe_name(instr.operands[0].pipe)));
    if (instr.operands[2].kind == OperandKind::Immediate && instr.operands[2].imm < 0)
      throw UserError(fmt::format("{}: event id {} is negative", at, instr.operands[2].imm));
  }
}

void validate_tensors(const Program& p) {
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const TensorBinding& t = p.tensors[i];
    const std::string at = t.location.line > 0 ? fmt::format("{}:{}:{}", p.source_name, t.location.line, t.location.column)
                                               : p.source_name;
    if (t.name.empty()) throw UserError(at + ": a tensor needs a name");
    if (t.shape.empty()) throw UserError(fmt::format("{}: tensor '{}' needs a shape", at, t.name));
    for (int64_t d : t.shape)
      if (d <= 0) throw UserError(fmt::format("{}: tensor '{}' has a non-positive dimension {}", at, t.name, d));
    if (t.gm_offset < 0) throw UserError(fmt::format("{}: tensor '{}' has a negative GM offset", at, t.name));
    // Sizes and ends in checked arithmetic: byte_size() and the overlap test below rely on them fitting.
    int64_t bytes = dtype_bytes(t.dtype), end = 0;
    for (int64_t d : t.shape)
      if (__builtin_mul_overflow(bytes, d, &bytes))
        throw UserError(fmt::format("{}: tensor '{}' needs more than {} bytes; its size overflows", at, t.name, INT64_MAX));
    if (__builtin_add_overflow(t.gm_offset, bytes, &end))
      throw UserError(fmt::format("{}: tensor '{}' at GM+{} with {} bytes ends past {}", at, t.name, t.gm_offset, bytes, INT64_MAX));
    for (size_t j = 0; j < i; ++j) {
      const TensorBinding& u = p.tensors[j];
      if (u.name == t.name) throw UserError(fmt::format("{}: tensor '{}' is declared twice", at, t.name));
      if (t.gm_offset < u.gm_offset + u.byte_size() && u.gm_offset < t.gm_offset + t.byte_size())
        throw UserError(fmt::format("{}: tensor '{}' (GM+{}..{}) overlaps tensor '{}' (GM+{}..{})", at, t.name,
                                    t.gm_offset, t.gm_offset + t.byte_size(), u.name, u.gm_offset,
                                    u.gm_offset + u.byte_size()));
    }
  }
}

// ---------------------------------------------------------------- assembler

class LineParser {
 public:
  LineParser(std::string_view line, int line_number, const std::string& source)
      : text_(line), line_(line_number), source_(source) {}

  [[noreturn]] void fail(size_t col, const std::string& reason) const {
    throw UserError(fmt::format("{}:{}:{}: {}", source_, line_, col + 1, reason));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool at_end() {
    skip_space();
    return pos_ >= text_.size();
  }
  size_t pos() const { return pos_; }
  size_t here() {  // the column of the next token
    skip_space();
    return pos_;
  }
  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool accept(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const char* what) {
    if (!accept(c)) fail(pos_, fmt::format("expected '{}' {}", c, what));
  }
  std::string_view word() {  // identifier-ish: letters, digits, '_', '.'
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' || text_[pos_] == '.'))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }
  // A numeric literal: integer (decimal or 0x hex, optional sign) or floating point.
  bool number(int64_t& integer, double& floating, bool& is_float) {
    skip_space();
    const size_t start = pos_;
    size_t p = pos_;
    if (p < text_.size() && (text_[p] == '-' || text_[p] == '+')) ++p;
    // inf and nan, as format_operand prints them (a program tessel compiled must assemble back)
    const bool word = (text_.compare(p, 3, "inf") == 0 || text_.compare(p, 3, "nan") == 0) &&
                      (p + 3 >= text_.size() || !std::isalnum(static_cast<unsigned char>(text_[p + 3])));
    if (p >= text_.size() || !(std::isdigit(static_cast<unsigned char>(text_[p])) || text_[p] == '.' || word)) return false;
    while (p < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[p])) || text_[p] == '.' ||
                                ((text_[p] == '-' || text_[p] == '+') && (text_[p - 1] == 'e' || text_[p - 1] == 'E'))))
      ++p;
    std::string lit(text_.substr(start, p - start));
    pos_ = p;
    const bool hex = lit.find("0x") != std::string::npos || lit.find("0X") != std::string::npos;
    is_float = !hex && lit.find_first_of(".eE") != std::string::npos;
    if (word) is_float = true;
    try {
      size_t used = 0;
      if (is_float) {
        floating = std::stod(lit, &used);
      } else {
        std::string digits = lit;
        bool negative = false;
        if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
          negative = digits[0] == '-';
          digits = digits.substr(1);
        }
        const uint64_t magnitude = std::stoull(digits, &used, 0);
        used += lit.size() - digits.size();
        if (magnitude > (negative ? uint64_t(1) << 63 : ~uint64_t(0))) throw std::out_of_range("");
        integer = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
      }
      if (used != lit.size()) fail(start, "malformed number '" + lit + "'");
    } catch (const std::invalid_argument&) {
      fail(start, "malformed number '" + lit + "'");
    } catch (const std::out_of_range&) {
      fail(start, "number '" + lit + "' is out of range");
    }
    return true;
  }

  Operand operand() {
    skip_space();
    const size_t start = pos_;
    int64_t integer = 0;
    double floating = 0;
    bool is_float = false;
    if (number(integer, floating, is_float)) return is_float ? Operand::float_(floating) : Operand::imm_(integer);
    const std::string name(word());
    if (name.empty()) fail(start, "expected an operand");
    if (accept('[')) {
      const auto buffer = parse_buffer(name);
      if (!buffer) fail(start, "unknown buffer '" + name + "' (expected GM, L1, L0A, L0B, L0C or UB)");
      Operand a = Operand::addr(*buffer, 0);
      const size_t inner = pos_;
      if (number(integer, floating, is_float)) {
        if (is_float) fail(inner, "an address offset must be an integer");
        a.imm = integer;
      } else {
        const std::string reg(word());
        const auto r = parse_register(reg);
        if (!r) fail(inner, "expected a register or an offset inside the brackets, got '" + reg + "'");
        a.reg = *r;
        if (peek() == '+' || peek() == '-') {
          const bool minus = text_[pos_] == '-';
          ++pos_;
          const size_t off = pos_;
          if (!number(integer, floating, is_float) || is_float || integer < 0) fail(off, "expected a byte offset");
          a.imm = minus ? -integer : integer;
        }
      }
      expect(']', "closing the address");
      return a;
    }
    if (const auto r = parse_register(name)) return Operand::reg_(*r);
    if (const auto p = parse_pipe(name)) return Operand::pipe_(*p);
    if (const auto t = parse_dtype(name)) return Operand::type(*t);
    fail(start, "unknown operand '" + name + "' (expected a register, number, address, pipe or element type)");
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int line_;
  const std::string& source_;
};

std::string_view strip_comment(std::string_view line) {
  size_t cut = line.size();
  for (std::string_view marker : {"#", ";", "//"}) cut = std::min(cut, line.find(marker));
  return line.substr(0, cut);
}

void parse_directive(LineParser& lp, Program& program, int line_number) {
  const size_t start = lp.here();
  const std::string_view directive = lp.word();
  if (directive == ".cores") {
    int64_t n = 0;
    double f = 0;
    bool is_float = false;
    if (!lp.number(n, f, is_float) || is_float || n < 1) lp.fail(lp.here(), ".cores needs a positive integer");
    program.cores = static_cast<int>(n);
  } else if (directive == ".tensor") {
    TensorBinding t;
    t.location = {line_number, static_cast<int>(start) + 1};
    t.name = std::string(lp.word());
    if (t.name.empty()) lp.fail(lp.here(), ".tensor needs a name");
    const size_t type_at = lp.here();
    const std::string type(lp.word());
    const auto dtype = parse_dtype(type);
    if (!dtype || *dtype == DType::U8)
      lp.fail(type_at, "unknown tensor element type '" + type + "' (expected f16, bf16, f32, i32 or i8)");
    t.dtype = *dtype;
    lp.expect('[', "opening the tensor shape");
    do {
      int64_t d = 0;
      double f = 0;
      bool is_float = false;
      const size_t at = lp.here();
      if (!lp.number(d, f, is_float) || is_float || d <= 0) lp.fail(at, "a tensor dimension must be a positive integer");
      t.shape.push_back(d);
    } while (lp.accept(','));
    lp.expect(']', "closing the tensor shape");
    const size_t at_at = lp.here();
    if (lp.word() != "at") lp.fail(at_at, "expected 'at GM+OFFSET'");
    const size_t gm_at = lp.here();
    if (lp.word() != "GM") lp.fail(gm_at, "tensors live in GM: expected 'at GM+OFFSET'");
    int64_t offset = 0;
    if (lp.accept('+')) {
      double f = 0;
      bool is_float = false;
      if (!lp.number(offset, f, is_float) || is_float || offset < 0) lp.fail(lp.here(), "expected a byte offset");
    }
    t.gm_offset = offset;
    const size_t role_at = lp.here();
    const std::string_view role = lp.word();
    const auto it = std::find(kTensorRoleNames.begin(), kTensorRoleNames.end(), role);
    if (it == kTensorRoleNames.end())
      lp.fail(role_at, "expected the tensor's role: in, out, inout or scratch");
    t.role = static_cast<TensorRole>(it - kTensorRoleNames.begin());
    program.tensors.push_back(std::move(t));
  } else {
    lp.fail(start, "unknown directive '" + std::string(directive) + "' (expected .cores or .tensor)");
  }
  if (!lp.at_end()) lp.fail(lp.here(), "unexpected text after the directive");
}

void put_u8(std::vector<uint8_t>& out, uint8_t v) { out.push_back(v); }
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_i64(std::vector<uint8_t>& out, int64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}

class ByteReader {
 public:
  ByteReader(const std::vector<uint8_t>& bytes, const std::string& source) : bytes_(bytes), source_(source) {}
  uint8_t u8() {
    need(1);
    return bytes_[pos_++];
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(bytes_[pos_++]) << (8 * i);
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(bytes_[pos_++]) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string text(size_t n) {
    need(n);
    std::string s(bytes_.begin() + pos_, bytes_.begin() + pos_ + n);
    pos_ += n;
    return s;
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(fmt::format("{}: byte {}: {}", source_, pos_, why));
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  void need(size_t n) const {
    if (pos_ + n > bytes_.size()) fail("truncated program");
  }
  const std::vector<uint8_t>& bytes_;
  const std::string& source_;
  size_t pos_ = 0;
};

constexpr uint32_t kMagic = 0x55504e54;  // "TNPU"
constexpr uint32_t kVersion = 1;

}  // namespace

bool Operand::operator==(const Operand& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case OperandKind::Register: return reg == o.reg;
    case OperandKind::Immediate: return imm == o.imm;
    case OperandKind::FloatImmediate: return std::bit_cast<uint64_t>(fimm) == std::bit_cast<uint64_t>(o.fimm);
    case OperandKind::Address: return buffer == o.buffer && reg == o.reg && imm == o.imm;
    case OperandKind::PipeName: return pipe == o.pipe;
    case OperandKind::ElementType: return dtype == o.dtype;
  }
  return false;
}

std::string_view tensor_role_name(TensorRole r) { return kTensorRoleNames[static_cast<size_t>(r)]; }

int64_t TensorBinding::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorBinding* Program::find_tensor(const std::string& name) const {
  for (const TensorBinding& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Pipe executing_pipe(const Instruction& instr) {
  switch (opcode_info(instr.opcode).pipe_rule) {
    case PipeRule::S: return Pipe::S;
    case PipeRule::V: return Pipe::V;
    case PipeRule::M: return Pipe::M;
    case PipeRule::MTE1: return Pipe::MTE1;
    case PipeRule::MTE2: return Pipe::MTE2;
    case PipeRule::MTE3: return Pipe::MTE3;
    case PipeRule::FlagSrc: return instr.operands.at(0).pipe;
    case PipeRule::FlagDst: return instr.operands.at(1).pipe;
    case PipeRule::Barrier: return instr.operands.at(0).pipe == Pipe::All ? Pipe::S : instr.operands.at(0).pipe;
  }
  return Pipe::S;
}

std::vector<int> match_loops(const Program& program) {
  std::vector<int> partner(program.code.size(), -1);
  std::vector<int> open;
  for (size_t i = 0; i < program.code.size(); ++i) {
    if (program.code[i].opcode == Opcode::Loop) open.push_back(static_cast<int>(i));
    if (program.code[i].opcode == Opcode::EndLoop) {
      TESSEL_CHECK(!open.empty(), "match_loops on a program that validate_program rejects");
      partner[i] = open.back();
      partner[open.back()] = static_cast<int>(i);
      open.pop_back();
    }
  }
  return partner;
}

namespace {

void check_program(const Program& p) {
  if (p.cores < 1) throw UserError(p.source_name + ": a program runs on at least one core");
  validate_tensors(p);
  std::vector<size_t> open;
  for (size_t i = 0; i < p.code.size(); ++i) {
    const Instruction& instr = p.code[i];
    if (static_cast<size_t>(instr.opcode) >= static_cast<size_t>(kOpcodeCount))
      throw UserError(fmt::format("{}: opcode {} does not exist", where(p, instr, i), int(instr.opcode)));
    validate_instruction(p, instr, i);
    if (instr.opcode == Opcode::Loop) open.push_back(i);
    if (instr.opcode == Opcode::EndLoop) {
      if (open.empty()) throw UserError(where(p, instr, i) + ": 'endloop' without a matching 'loop'");
      open.pop_back();
    }
  }
  if (!open.empty()) throw UserError(where(p, p.code[open.back()], open.back()) + ": 'loop' is never closed by 'endloop'");
  if (p.code.empty() || p.code.back().opcode != Opcode::PipeBarrier || p.code.back().operands[0].pipe != Pipe::All)
    throw UserError(p.source_name + ": a program must end with 'pipe_barrier ALL' (so every pipe has drained)");
}

}  // namespace

void validate_program(const Program& p) {
  try {
    check_program(p);
  } catch (const ProgramError&) {
    throw;
  } catch (const UserError& e) {
    throw ProgramError(e.what());
  }
}

Program assemble_program(const std::string& text, const std::string& source_name) {
  Program program;
  program.source_name = source_name;
  std::istringstream in(text);
  std::string raw;
  int line_number = 0;
  while (std::getline(in, raw)) {
    ++line_number;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    const std::string_view line = strip_comment(raw);
    LineParser lp(line, line_number, program.source_name);
    if (lp.at_end()) continue;
    if (lp.peek() == '.') {
      parse_directive(lp, program, line_number);
      continue;
    }
    const size_t start = lp.pos();
    const std::string name(lp.word());
    if (name.empty()) lp.fail(start, "expected a mnemonic or a directive");
    const auto op = parse_mnemonic(name);
    if (!op) lp.fail(start, "unknown mnemonic '" + name + "'");
    Instruction instr{*op, {}, {line_number, static_cast<int>(start) + 1}};
    const OpcodeInfo& info = opcode_info(*op);
    std::vector<size_t> columns;
    if (!lp.at_end()) {
      do {
        columns.push_back(lp.pos());
        lp.skip_space();
        columns.back() = lp.pos();
        instr.operands.push_back(lp.operand());
      } while (lp.accept(','));
    }
    if (!lp.at_end()) lp.fail(lp.pos(), "unexpected text after the operands (missing ','?)");
    if (static_cast<int>(instr.operands.size()) != info.operand_count)
      lp.fail(start, fmt::format("'{}' takes {} operand(s) ({}), got {}", name, info.operand_count,
                                 info.format.empty() ? "none" : info.format, instr.operands.size()));
    for (int i = 0; i < info.operand_count; ++i)
      if (!slot_accepts(info.slots[i], instr.operands[i]))
        lp.fail(columns[i], fmt::format("operand {} of '{}' must be {}", i + 1, name, slot_description(info.slots[i])));
    program.code.push_back(std::move(instr));
  }
  validate_program(program);
  return program;
}

Program load_program(const std::string& path) {
  const std::string bytes = read_bounded_file(path, "program", kMaxProgramBytes);
  if (bytes.size() >= 4 && bytes.compare(0, 4, "TNPU") == 0)  // the binary form (encode_program)
    return decode_program(std::vector<uint8_t>(bytes.begin(), bytes.end()), path);
  return assemble_program(bytes, path);
}

std::string format_operand(const Operand& o) {
  switch (o.kind) {
    case OperandKind::Register: return o.reg < kRegisterCount ? register_name(o.reg) : fmt::format("r?{}", int(o.reg));
    case OperandKind::Immediate: return std::to_string(o.imm);
    case OperandKind::FloatImmediate: {
      if (std::isinf(o.fimm)) return o.fimm > 0 ? "inf" : "-inf";
      if (std::isnan(o.fimm)) return std::signbit(o.fimm) ? "-nan" : "nan";
      std::string s = fmt::format("{}", o.fimm);  // shortest text that reads back to the same double
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case OperandKind::Address: {
      std::string s = std::string(buffer_name(o.buffer)) + "[";
      if (o.reg != kNoRegister) {
        s += o.reg < kRegisterCount ? register_name(o.reg) : "r?";
        if (o.imm > 0) s += "+" + std::to_string(o.imm);
        if (o.imm < 0) s += "-" + std::to_string(-o.imm);
      } else {
        s += std::to_string(o.imm);
      }
      return s + "]";
    }
    case OperandKind::PipeName: return std::string(pipe_name(o.pipe));
    case OperandKind::ElementType: return std::string(dtype_name(o.dtype));
  }
  return "?";
}

std::string format_instruction(const Instruction& instr) {
  std::string s(mnemonic(instr.opcode));
  for (size_t i = 0; i < instr.operands.size(); ++i) s += (i == 0 ? " " : ", ") + format_operand(instr.operands[i]);
  return s;
}

std::string print_program(const Program& p) {
  std::string out;
  if (p.cores != 1) out += fmt::format(".cores {}\n", p.cores);
  for (const TensorBinding& t : p.tensors) {
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    out += fmt::format(".tensor {} {} [{}] at GM+{} {}\n", t.name, dtype_name(t.dtype), shape, t.gm_offset,
                       tensor_role_name(t.role));
  }
  int depth = 0;
  for (const Instruction& instr : p.code) {
    if (instr.opcode == Opcode::EndLoop) --depth;
    out += std::string(2 * std::max(depth, 0), ' ') + format_instruction(instr) + "\n";
    if (instr.opcode == Opcode::Loop) ++depth;
  }
  return out;
}

std::vector<uint8_t> encode_program(const Program& p) {
  std::vector<uint8_t> out;
  put_u32(out, kMagic);
  put_u32(out, kVersion);
  put_u32(out, static_cast<uint32_t>(p.cores));
  put_u32(out, static_cast<uint32_t>(p.tensors.size()));
  for (const TensorBinding& t : p.tensors) {
    put_u32(out, static_cast<uint32_t>(t.name.size()));
    out.insert(out.end(), t.name.begin(), t.name.end());
    put_u8(out, static_cast<uint8_t>(t.dtype));
    put_u8(out, static_cast<uint8_t>(t.role));
    put_u8(out, static_cast<uint8_t>(t.shape.size()));
    for (int64_t d : t.shape) put_i64(out, d);
    put_i64(out, t.gm_offset);
  }
  put_u32(out, static_cast<uint32_t>(p.code.size()));
  for (const Instruction& instr : p.code) {
    put_u32(out, static_cast<uint32_t>(instr.opcode));
    put_u8(out, static_cast<uint8_t>(instr.operands.size()));
    for (const Operand& o : instr.operands) {
      put_u8(out, static_cast<uint8_t>(o.kind));
      switch (o.kind) {
        case OperandKind::Register: put_u8(out, o.reg); break;
        case OperandKind::Immediate: put_i64(out, o.imm); break;
        case OperandKind::FloatImmediate: put_i64(out, std::bit_cast<int64_t>(o.fimm)); break;
        case OperandKind::Address:
          put_u8(out, static_cast<uint8_t>(o.buffer));
          put_u8(out, o.reg);
          put_i64(out, o.imm);
          break;
        case OperandKind::PipeName: put_u8(out, static_cast<uint8_t>(o.pipe)); break;
        case OperandKind::ElementType: put_u8(out, static_cast<uint8_t>(o.dtype)); break;
      }
    }
  }
  return out;
}

Program decode_program(const std::vector<uint8_t>& bytes, const std::string& source_name) {
  ByteReader r(bytes, source_name);
  if (r.u32() != kMagic) r.fail("not a tessel NPU program (bad magic)");
  if (const uint32_t v = r.u32(); v != kVersion) r.fail(fmt::format("unsupported program version {}", v));
  Program p;
  p.source_name = source_name;
  p.cores = static_cast<int>(r.u32());
  const uint32_t tensor_count = r.u32();
  for (uint32_t i = 0; i < tensor_count; ++i) {
    TensorBinding t;
    const uint32_t name_size = r.u32();
    if (name_size > bytes.size()) r.fail("tensor name length out of range");
    t.name = r.text(name_size);
    const uint8_t dtype = r.u8(), role = r.u8(), rank = r.u8();
    if (dtype > static_cast<uint8_t>(DType::I32)) r.fail("bad element type");
    if (role > static_cast<uint8_t>(TensorRole::Scratch)) r.fail("bad tensor role");
    t.dtype = static_cast<DType>(dtype);
    t.role = static_cast<TensorRole>(role);
    for (int d = 0; d < rank; ++d) t.shape.push_back(r.i64());
    t.gm_offset = r.i64();
    p.tensors.push_back(std::move(t));
  }
  const uint32_t instr_count = r.u32();
  if (instr_count > bytes.size()) r.fail("instruction count out of range");
  for (uint32_t i = 0; i < instr_count; ++i) {
    Instruction instr;
    const uint32_t op = r.u32();
    if (op >= static_cast<uint32_t>(kOpcodeCount)) r.fail(fmt::format("unknown opcode {}", op));
    instr.opcode = static_cast<Opcode>(op);
    const uint8_t n = r.u8();
    if (n > kMaxOperands) r.fail("too many operands");
    for (int k = 0; k < n; ++k) {
      Operand o;
      const uint8_t kind = r.u8();
      if (kind > static_cast<uint8_t>(OperandKind::ElementType)) r.fail("bad operand kind");
      o.kind = static_cast<OperandKind>(kind);
      switch (o.kind) {
        case OperandKind::Register: o.reg = r.u8(); break;
        case OperandKind::Immediate: o.imm = r.i64(); break;
        case OperandKind::FloatImmediate: o.fimm = std::bit_cast<double>(r.i64()); break;
        case OperandKind::Address: {
          const uint8_t b = r.u8();
          if (b >= kBufferCount) r.fail("bad buffer");
          o.buffer = static_cast<Buffer>(b);
          o.reg = r.u8();
          o.imm = r.i64();
          break;
        }
        case OperandKind::PipeName: {
          const uint8_t pipe = r.u8();
          if (pipe > static_cast<uint8_t>(Pipe::All)) r.fail("bad pipe");
          o.pipe = static_cast<Pipe>(pipe);
          break;
        }
        case OperandKind::ElementType: {
          const uint8_t t = r.u8();
          if (t > static_cast<uint8_t>(DType::I32)) r.fail("bad element type");
          o.dtype = static_cast<DType>(t);
          break;
        }
      }
      instr.operands.push_back(o);
    }
    p.code.push_back(std::move(instr));
  }
  if (!r.done()) r.fail("trailing bytes after the last instruction");
  validate_program(p);
  return p;
}

}  // namespace tessel::npu
