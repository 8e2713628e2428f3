// The NPU instruction table, the .npu assembler and printer, and the binary encoding: every
// example assembles, prints and re-assembles to the same program; encode -> decode is the
// identity; malformed text is rejected with file:line:col and the reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "isa/base/error.h"
#include "isa/npu_isa.h"
#include "isa/npu_program.h"

using namespace tessel;
using namespace tessel::npu;

namespace {

std::string rejection(const std::string& text) {
  try {
    assemble_program(text, "t.npu");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> example_files() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(TESSEL_SOURCE_DIR) + "/npu_sim/examples"))
    if (entry.path().extension() == ".npu") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("the opcode table: unique mnemonics, formats within kMaxOperands, parse inverts the names") {
  std::set<std::string_view> seen;
  for (int i = 0; i < kOpcodeCount; ++i) {
    const OpcodeInfo& info = opcode_info(static_cast<Opcode>(i));
    CAPTURE(info.mnemonic);
    CHECK(seen.insert(info.mnemonic).second);
    CHECK(parse_mnemonic(info.mnemonic) == static_cast<Opcode>(i));
    CHECK(info.operand_count <= kMaxOperands);
  }
  CHECK(opcode_info(Opcode::Mmad).pipe_rule == PipeRule::M);
  CHECK(opcode_info(Opcode::DmaIn).pipe_rule == PipeRule::MTE2);
  CHECK(opcode_info(Opcode::DmaOut).pipe_rule == PipeRule::MTE3);
  CHECK(opcode_info(Opcode::Load3d).pipe_rule == PipeRule::MTE1);
  CHECK(opcode_info(Opcode::MovL0c).pipe_rule == PipeRule::V);
  CHECK(opcode_info(Opcode::Vadd).operand_count == 11);
  CHECK_FALSE(parse_mnemonic("vaddd"));
}

TEST_CASE("registers and pipes: names round-trip, r32 and r05 are not registers") {
  for (int r = 0; r < kRegisterCount; ++r) CHECK(parse_register(register_name(static_cast<uint8_t>(r))) == r);
  CHECK_FALSE(parse_register("r32"));
  CHECK_FALSE(parse_register("r05"));
  for (int p = 0; p <= kPipeCount; ++p) CHECK(parse_pipe(pipe_name(static_cast<Pipe>(p))) == static_cast<Pipe>(p));
}

TEST_CASE("every example assembles, and print -> assemble gives the same program and the same text") {
  const auto files = example_files();
  REQUIRE(files.size() >= 5);
  for (const std::string& f : files) {
    CAPTURE(f);
    const Program p = load_program(f);
    const std::string text = print_program(p);
    const Program again = assemble_program(text, "printed.npu");
    CHECK(again == p);
    CHECK(print_program(again) == text);
  }
}

TEST_CASE("every example encodes to bytes and decodes to the same program") {
  for (const std::string& f : example_files()) {
    CAPTURE(f);
    const Program p = load_program(f);
    const std::vector<uint8_t> bytes = encode_program(p);
    CHECK(decode_program(bytes, "bin") == p);
  }
}

TEST_CASE("operand forms: register-offset addresses, negative offsets, hex, floats, ALL") {
  const Program p = assemble_program(
      ".cores 2\n.tensor T f32 [8] at GM+0x40 scratch\n"
      "add r3, core_id, 0x10\nvadds f32, UB[r3-32], UB[r3+64], -1.5e-3, 1, 1, 1, 8, 8\n"
      "vmuls f16, UB[0], UB[32], 2, 1, 1, 1, 8, 8\npipe_barrier ALL\n",
      "forms.npu");
  CHECK(p.cores == 2);
  REQUIRE(p.tensors.size() == 1);
  CHECK(p.tensors[0].gm_offset == 64);
  CHECK(p.tensors[0].role == TensorRole::Scratch);
  CHECK(p.code[0].operands[1].reg == kRegCoreId);
  CHECK(p.code[0].operands[2].imm == 16);
  CHECK(p.code[1].operands[1].imm == -32);
  CHECK(p.code[1].operands[3].kind == OperandKind::FloatImmediate);
  CHECK(p.code[1].operands[3].fimm == -1.5e-3);
  CHECK(p.code[2].operands[3].kind == OperandKind::Immediate);
  CHECK(format_instruction(p.code[1]) == "vadds f32, UB[r3-32], UB[r3+64], -0.0015, 1, 1, 1, 8, 8");
  CHECK(assemble_program(print_program(p), "x") == p);
  CHECK(decode_program(encode_program(p), "x") == p);
}

TEST_CASE("a program built in C++ validates, prints and executes on the right pipes") {
  Program p;
  p.tensors.push_back({"A", DType::F16, {16, 16}, 0, TensorRole::In, {}});
  p.add(Opcode::DmaInNz, {Operand::type(DType::F16), Operand::addr(Buffer::L1, 0), Operand::addr(Buffer::GM, 0),
                          Operand::imm_(16), Operand::imm_(16), Operand::imm_(16)});
  p.add(Opcode::SetFlag, {Operand::pipe_(Pipe::MTE2), Operand::pipe_(Pipe::MTE1), Operand::imm_(0)});
  p.add(Opcode::WaitFlag, {Operand::pipe_(Pipe::MTE2), Operand::pipe_(Pipe::MTE1), Operand::imm_(0)});
  p.add(Opcode::PipeBarrier, {Operand::pipe_(Pipe::All)});
  CHECK_NOTHROW(validate_program(p));
  CHECK(executing_pipe(p.code[0]) == Pipe::MTE2);
  CHECK(executing_pipe(p.code[1]) == Pipe::MTE2);
  CHECK(executing_pipe(p.code[2]) == Pipe::MTE1);
  CHECK(executing_pipe(p.code[3]) == Pipe::S);
  CHECK(print_program(p) ==
        ".tensor A f16 [16, 16] at GM+0 in\ndma_in_nz f16, L1[0], GM[0], 16, 16, 16\nset_flag MTE2, MTE1, 0\n"
        "wait_flag MTE2, MTE1, 0\npipe_barrier ALL\n");
}

TEST_CASE("malformed assembly is rejected with file:line:col and the reason") {
  const std::string end = "\npipe_barrier ALL\n";
  CHECK(rejection("  vaddd f16, UB[0]" + end) == "t.npu:1:3: unknown mnemonic 'vaddd'");
  CHECK(rejection("mov r1" + end) == "t.npu:1:1: 'mov' takes 2 operand(s) (r,v), got 1");
  CHECK(rejection("mov 3, r1" + end) == "t.npu:1:5: operand 1 of 'mov' must be a destination register (r0..r31)");
  CHECK(rejection("mov r1, X[0]" + end) == "t.npu:1:9: unknown buffer 'X' (expected GM, L1, L0A, L0B, L0C or UB)");
  CHECK(rejection("mov r1, r2 r3" + end) == "t.npu:1:12: unexpected text after the operands (missing ','?)");
  CHECK(rejection("mov r1, 12abc" + end) == "t.npu:1:9: malformed number '12abc'");
  CHECK(rejection("dma_in UB[0], L1[0], 1, 32, 0, 0" + end).find("t.npu:1:1: operand 2 of 'dma_in' cannot be in L1 (allowed: GM)") == 0);
  CHECK(rejection("vadd f16, L1[0], UB[0], UB[0], 1, 1, 1, 1, 8, 8, 8" + end).find("addresses L1") != std::string::npos);
  CHECK(rejection("vexp i32, UB[0], UB[0], 1, 1, 1, 8, 8" + end).find("does not take element type i32") != std::string::npos);
  CHECK(rejection("set_flag V, V, 0" + end).find("needs two different pipes") != std::string::npos);
  CHECK(rejection("loop r1, 0, 4, 1" + end).find("t.npu:1:1: 'loop' is never closed") == 0);
  CHECK(rejection("endloop" + end).find("t.npu:1:1: 'endloop' without a matching 'loop'") == 0);
  CHECK(rejection("mov r1, 1\n") == "t.npu: a program must end with 'pipe_barrier ALL' (so every pipe has drained)");
  CHECK(rejection(".tensor A f16 [4, 0] at GM+0 in" + end) == "t.npu:1:19: a tensor dimension must be a positive integer");
  CHECK(rejection(".tensor A f16 [4] at L1+0 in" + end) == "t.npu:1:22: tensors live in GM: expected 'at GM+OFFSET'");
  CHECK(rejection(".tensor A f16 [4] at GM+0 maybe" + end) == "t.npu:1:27: expected the tensor's role: in, out, inout or scratch");
  CHECK(rejection(".tensor A f16 [16] at GM+0 in\n.tensor B f16 [4] at GM+16 in" + end).find("overlaps tensor 'A'") !=
        std::string::npos);
  CHECK(rejection(".bogus 3" + end) == "t.npu:1:1: unknown directive '.bogus' (expected .cores or .tensor)");
}

TEST_CASE("malformed binaries are rejected, never read out of bounds") {
  const Program p = assemble_program("mov r1, 5\npipe_barrier ALL\n", "p");
  std::vector<uint8_t> bytes = encode_program(p);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + cut);
    CHECK_THROWS_AS(decode_program(truncated, "cut"), UserError);
  }
  bytes[0] ^= 0xff;
  CHECK_THROWS_WITH_AS(decode_program(bytes, "bad"), "bad: byte 4: not a tessel NPU program (bad magic)", UserError);
}

TEST_CASE("infinite and NaN float immediates print and assemble back (a compiled softmax's -inf)") {
  // issue 31: `tessel compile` of softmax wrote 'vdup f32, UB[1024], -inf, ...', which `tessel sim`
  // could not read back ("expected an operand")
  const std::string text = ".tensor G f32 [64] at GM+0 inout\nvdup f32, UB[0], -inf, 1, 1, 8\nvdup f32, UB[0], inf, 1, 1, 8\n"
                           "vdup f32, UB[0], nan, 1, 1, 8\nvadds f32, UB[0], UB[0], -inf, 1, 1, 1, 8, 8\npipe_barrier ALL\n";
  const npu::Program p = npu::assemble_program(text, "inf.npu");
  CHECK(std::isinf(p.code[0].operands[2].fimm));
  CHECK(p.code[0].operands[2].fimm < 0);
  CHECK(std::isnan(p.code[2].operands[2].fimm));
  const std::string printed = npu::print_program(p);
  CHECK(npu::print_program(npu::assemble_program(printed, "inf2.npu")) == printed);
  CHECK_THROWS_AS(npu::assemble_program(".tensor G f32 [64] at GM+0 inout\nvdup f32, UB[0], info, 1, 1, 8\npipe_barrier ALL\n", "x.npu"), UserError);
}

TEST_CASE("validate_program refuses with npu::ProgramError, which the CLI reports as a tessel bug for emitted programs") {
  npu::Program p;
  p.source_name = "emitted.npu";
  p.add(npu::Opcode::Mov, {npu::Operand::reg_(1), npu::Operand::imm_(0)});  // no final pipe_barrier ALL
  CHECK_THROWS_WITH_AS(npu::validate_program(p), doctest::Contains("emitted.npu: a program must end with 'pipe_barrier ALL'"), npu::ProgramError);
  CHECK_THROWS_AS(npu::assemble_program("mov r1, 0\n", "user.npu"), UserError);  // a user's .npu: exit 1
}
