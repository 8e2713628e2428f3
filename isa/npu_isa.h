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
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, accesses, doc) e,
#include "isa/npu_isa.def"
#undef TESSEL_NPU_OP
};
inline constexpr int kOpcodeCount = 0
#define TESSEL_NPU_OP(e, mnemonic, pipe, format, accesses, doc) +1
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

inline constexpr int kMaxOperands = 14;

// The footprint formula family of one access (the .def table's access column). Each family reads
// the operands named by its parameters; their kinds (t: element type, v: value) are its signature,
// extent_signature(). The formulas themselves are isa/npu_footprint.cc; isa/README.md lists them.
enum class Extent : uint8_t {
  Vector,           // t,v,v,v  type, repeat, blk_stride, rep_stride: repeat x blocks of one vector block
  VectorCast,       // t,t,v,v,v  type, other type, repeat, blk, rep: lanes set by the wider of the two
  Elements,         // t,v  type, count: count contiguous elements
  Dense,            // t,v,v  type, rows, cols: rows x cols contiguous elements
  Bursts,           // v,v,v  nburst, burst_bytes, gap_bytes: nburst bursts, gap bytes apart
  NdRows,           // t,v,v,v  type, rows, cols, row_stride (elements): an ND block of rows
  FractalGrid,      // v,v,v,v  outer, inner, outer_stride, inner_stride (fractals): strided fractals
  Fractals,         // v,v  outer, inner: outer x inner contiguous fractals
  Img2colSource,    // v  channels: the C1HWC0 feature map the img2col geometry describes
  Img2colFractals,  // v,v,v,v,v  channels, pixel_begin, pixel_count, kpos_begin, kpos_count
  CubeA,            // t,v,v  type, m, k: m x k in L0A fractals
  CubeB,            // t,v,v  type, k, n: k x n in L0B fractals
  CubeC,            // t,v,v  type, m, n: m x n accumulator fractals
  AccFractals,      // v  count: accumulator fractals
  AccFractalsAs,    // t,v  type, count: accumulator fractals' elements stored as `type`
  Element,          // t  type: one element (the scalar unit's ld)
};
std::string_view extent_name(Extent e);
std::string_view extent_signature(Extent e);  // "t,v,v,v"

enum class AccessMode : uint8_t {
  Read,
  Write,
  ReadUnlessSet,  // read unless the `flag` operand is non-zero (mmad's init: C is not read)
};

inline constexpr int kMaxAccesses = 4;
inline constexpr int kMaxExtentParams = 5;

// One access of an instruction: the address operand it starts at, read or write, and the formula
// family with the operands it reads (indices into the operand list).
struct OperandAccess {
  AccessMode mode = AccessMode::Read;
  int8_t address = -1;
  int8_t flag = -1;  // ReadUnlessSet only
  Extent extent = Extent::Elements;
  int8_t param_count = 0;
  int8_t param[kMaxExtentParams] = {};
  bool write() const { return mode == AccessMode::Write; }
};

struct OpcodeInfo {
  Opcode opcode;
  std::string_view mnemonic;
  PipeRule pipe_rule;
  std::string_view format;  // "r,v,v"
  std::string_view doc;
  int operand_count;
  OperandSlot slots[kMaxOperands];
  int access_count;  // the .def table's access column, in the order the instruction performs them
  OperandAccess accesses[kMaxAccesses];
  int repeat_operand;  // the repeat count of a vector instruction (its first Vector access), or -1
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
