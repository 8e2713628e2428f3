// bf16 on the NPU's mappings (compiler/poly/widen_bf16.h): a bf16 contraction accumulated in f32 runs
// on the cube where the description lists a bf16 x bf16 -> f32 shape (the f16 data path with the
// element type as data: nd2nz copies, load2d, mmad bf16, the simulator's products exact in f32),
// else on the vector contraction with its operands converted to f32 in UB (the stock DaVinci
// descriptions: their sources list no bf16 on the cube), or, where that refuses it, the general
// lowering. Every output is compared with the reference interpreter element by element, naive and
// pruned syncs.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

constexpr const char* kFile = "../tests/emit_npu/data/bf16_mappings.tsl";

// davinci-910 with a bf16 x bf16 -> f32 cube shape beside its f16 one (an Ascend 910B-class cube:
// CANN's aclnnMm takes BFLOAT16 on the Atlas A2 series, not on the Atlas training series the stock
// description models), written under the build tree.
std::string bf16_cube_target() {
  std::ifstream in(kTarget);
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string f16 = "      - {m: 16, n: 16, k: 16, a: f16, b: f16, acc: f32, cycles: 1, energy_pj_per_mac: 0.5}";
  const size_t at = yaml.find(f16);
  REQUIRE(at != std::string::npos);
  yaml.insert(at, "      - {m: 16, n: 16, k: 16, a: bf16, b: bf16, acc: f32, cycles: 1, energy_pj_per_mac: 0.5}\n");
  const std::string name = "name: davinci-910";
  yaml.replace(yaml.find(name), name.size(), "name: davinci-910-bf16-cube");
  const std::string path = std::string(TESSEL_BINARY_DIR) + "/tests/davinci-910-bf16-cube.yaml";
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << yaml;
  return path;
}

// Instructions with a bf16 element type, by opcode.
std::map<npu::Opcode, int> bf16_instructions(const Case& c) {
  std::map<npu::Opcode, int> n;
  for (const auto& i : c.kernel.program.code)
    for (const auto& o : i.operands)
      if (o.kind == npu::OperandKind::ElementType && o.dtype == DType::BF16) ++n[i.opcode];
  return n;
}

}  // namespace

TEST_CASE("bf16 matmul on a cube with a bf16 shape: mmad bf16, equal to the interpreter, within 1.2x the f16 cycles") {
  const std::string target = bf16_cube_target();
  for (const std::string shape : {"M=512,N=512,K=512", "M=48,N=80,K=64", "M=37,N=50,K=70"}) {
    CAPTURE(shape);
    auto c = compile_case(kFile, "bf16_matmul_f32", shape, "", true, target);
    const auto ops = bf16_instructions(*c);
    CHECK(ops.count(npu::Opcode::Mmad));
    CHECK_FALSE(ops.count(npu::Opcode::Vconv));  // no conversion: the cube reads bf16
    const uint64_t cycles = verified_cycles(*c, true);  // each product exact in f32, summed in ascending k
    if (shape != "M=512,N=512,K=512") continue;
    // the f16 matmul of the same size on the same description (3,309 cycles on davinci-910); the
    // vector path took 17,387,436 cycles on one core before (bf16 operands widened to f32 copies)
    auto h = compile_case(kFile, "f16_matmul_f32", shape, "", true, target);
    const uint64_t f16 = verified_cycles(*h, true);
    MESSAGE("bf16 matmul 512^3 on the bf16 cube: " << cycles << " cycles; f16: " << f16);
    CHECK(cycles <= f16 * 6 / 5);
  }
}

TEST_CASE("bf16 matmul on the stock descriptions: the vector contraction converts its operands, bit for bit") {
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto c = compile_case(kFile, "bf16_matmul_f32", "M=37,N=70,K=45", "", true, target);
    CHECK(notes_contain(c->kernel, "vector contraction 37x70x45 bf16 (operands converted to f32 in UB as loaded)"));
    CHECK(bf16_instructions(*c) == std::map<npu::Opcode, int>{{npu::Opcode::Vconv, bf16_instructions(*c)[npu::Opcode::Vconv]}});
    verified_cycles(*c, true);
    // the reason the cube does not take it, where widen_bf16 left the statement
    const auto& lines = c->compilation->widened_statements;
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].find("has no bf16 x bf16 -> f32 shape (its shapes: f16 x f16 -> f32, i8 x i8 -> i32)") != std::string::npos);
  }
  // 512^3 on davinci-910: on 32 cores (17,387,436 cycles on one core before)
  auto c = compile_case(kFile, "bf16_matmul_f32", "M=512,N=512,K=512", "", false, kTarget);
  CHECK(c->kernel.program.cores == 32);
}

TEST_CASE("bf16 matmul the vector contraction does not take (a batch): f32 copies on the general lowering, bit for bit") {
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto c = compile_case(kFile, "bf16_batched", "B=3,M=20,N=24,K=17", "", true, target);
    verified_cycles(*c, true);
    // widened as before: f32 copies of the operands, then an f32 contraction
    const auto& lines = c->compilation->widened_statements;
    REQUIRE_FALSE(lines.empty());
    CHECK(lines[0].find("has no bf16 x bf16 -> f32 shape") != std::string::npos);
    CHECK(lines[0].find("; on the vector unit in f32") != std::string::npos);
    CHECK(notes_contain(c->kernel, "general vector lowering"));
  }
}
