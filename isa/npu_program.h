// NPU programs: the instructions of isa/npu_isa.def with typed operands, the GM tensors they bind
// by name, and the three forms a program takes:
//   text (.npu)  --assemble_program-->  Program  --print_program-->  text
//   Program      --encode_program--->   bytes    --decode_program--> Program   (disassembler)
// The compiler's NPU backend builds a Program directly (Program::add + the Operand factories) and
// calls validate_program; `tessel sim` assembles text. The format is documented in isa/README.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "isa/base/dtype.h"
#include "isa/base/error.h"
#include "isa/npu_isa.h"

namespace tessel::npu {

inline constexpr uint8_t kNoRegister = 0xff;

enum class OperandKind : uint8_t { Register, Immediate, FloatImmediate, Address, PipeName, ElementType };

// One operand. Addresses are byte offsets inside a buffer: buffer[base_register + offset].
struct Operand {
  OperandKind kind = OperandKind::Immediate;
  uint8_t reg = kNoRegister;  // Register; the base register of an Address (kNoRegister: none)
  Buffer buffer = Buffer::GM; // Address
  Pipe pipe = Pipe::S;        // PipeName (Pipe::All only for pipe_barrier)
  DType dtype = DType::F16;   // ElementType
  int64_t imm = 0;            // Immediate; the constant offset of an Address
  double fimm = 0;            // FloatImmediate

  static Operand reg_(uint8_t r) { Operand o; o.kind = OperandKind::Register; o.reg = r; return o; }
  static Operand imm_(int64_t v) { Operand o; o.kind = OperandKind::Immediate; o.imm = v; return o; }
  static Operand float_(double v) { Operand o; o.kind = OperandKind::FloatImmediate; o.fimm = v; return o; }
  static Operand addr(Buffer b, int64_t offset, uint8_t base = kNoRegister) {
    Operand o; o.kind = OperandKind::Address; o.buffer = b; o.imm = offset; o.reg = base; return o;
  }
  static Operand pipe_(Pipe p) { Operand o; o.kind = OperandKind::PipeName; o.pipe = p; return o; }
  static Operand type(DType t) { Operand o; o.kind = OperandKind::ElementType; o.dtype = t; return o; }

  bool operator==(const Operand& other) const;
};

struct SourceLocation {  // 1-based; 0 when the instruction was built in C++
  int line = 0;
  int column = 0;
};

struct Instruction {
  Opcode opcode = Opcode::Mov;
  std::vector<Operand> operands;
  SourceLocation location;

  bool operator==(const Instruction& other) const {  // the location is not part of the meaning
    return opcode == other.opcode && operands == other.operands;
  }
};

// How `tessel sim` treats a GM tensor: `in` must be given with --input, `out` may be read back with
// --output, `inout` both, `scratch` is zero-initialised working memory.
enum class TensorRole : uint8_t { In, Out, InOut, Scratch };
std::string_view tensor_role_name(TensorRole r);

struct TensorBinding {
  std::string name;
  DType dtype = DType::F16;
  std::vector<int64_t> shape;
  int64_t gm_offset = 0;  // byte offset in GM
  TensorRole role = TensorRole::InOut;
  SourceLocation location;

  int64_t element_count() const;
  int64_t byte_size() const { return element_count() * dtype_bytes(dtype); }
  bool is_input() const { return role == TensorRole::In || role == TensorRole::InOut; }
  bool is_output() const { return role == TensorRole::Out || role == TensorRole::InOut; }
  bool operator==(const TensorBinding& o) const {
    return name == o.name && dtype == o.dtype && shape == o.shape && gm_offset == o.gm_offset && role == o.role;
  }
};

struct Program {
  std::string source_name = "<program>";  // for messages
  int cores = 1;                          // cores that run the code (.cores N); each sees its core_id
  std::vector<TensorBinding> tensors;
  std::vector<Instruction> code;

  Instruction& add(Opcode op, std::vector<Operand> operands) {
    code.push_back({op, std::move(operands), {}});
    return code.back();
  }
  const TensorBinding* find_tensor(const std::string& name) const;
  bool operator==(const Program& o) const { return cores == o.cores && tensors == o.tensors && code == o.code; }
};

// The pipe that executes an instruction (set_flag: its source pipe; wait_flag: its destination
// pipe; pipe_barrier P: P; pipe_barrier ALL and every scalar instruction: S).
Pipe executing_pipe(const Instruction& instr);

// For each instruction index: the index of the matching endloop (for loop) or loop (for endloop),
// -1 for any other instruction. Call only on a validated program.
std::vector<int> match_loops(const Program& program);

// Structural checks: operand kinds match the format, buffers allowed for each address, element
// types allowed per opcode, loops nest, the program ends with `pipe_barrier ALL`, tensors are
// valid and do not overlap. Throws UserError naming source:line:col (or the instruction index).
// A program the format refuses (ProgramError, a UserError: exit 1 for a user's .npu; for a program
// tessel emitted, the CLI reports it as a tessel bug, exit 3: compiler/cli/run_npu.cc).
class ProgramError : public UserError {
 public:
  using UserError::UserError;
};
void validate_program(const Program& program);

// Text form. assemble_program throws UserError "source:line:col: reason" for malformed input.
Program assemble_program(const std::string& text, const std::string& source_name);
Program load_program(const std::string& path);  // a .npu text file, or the binary form (magic TNPU)
std::string print_program(const Program& program);
std::string format_instruction(const Instruction& instr);
std::string format_operand(const Operand& operand);

// Binary form (little endian, versioned). decode_program throws UserError on malformed bytes.
std::vector<uint8_t> encode_program(const Program& program);
Program decode_program(const std::vector<uint8_t>& bytes, const std::string& source_name);

}  // namespace tessel::npu
