// bf16 on the NPU descriptions, whose vector unit has no bf16 arithmetic but lists the conversions
// bf16 <-> f32 (isa/targets/davinci-*.yaml `conversions`, their cycles per repeat): bf16 values are
// converted to f32 in UB (vconv), computed in f32 with every bf16 result rounded to nearest even
// (compiler/poly/widen_bf16.h), a bf16 sum or product rounded after every step in the
// interpreter's order (compiler/emit_npu/nest.cc), and stored as bf16. Outputs are compared with
// the reference interpreter element by element (bit for bit), naive and pruned syncs, race-free;
// no instruction but vconv has a bf16 element type; a vconv's cycles are the description's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "compiler/interp/scalar.h"
#include "isa/base/bf16.h"
#include "npu_case.h"
#include "npu_sim/report.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

constexpr const char* kFile = "../tests/emit_npu/data/bf16_arithmetic.tsl";

// No instruction computes in bf16 (only vconv names it), and some vconv converts to or from it.
void only_conversions_in_bf16(const Case& c) {
  int conversions = 0;
  for (const auto& i : c.kernel.program.code)
    for (const auto& o : i.operands)
      if (o.kind == npu::OperandKind::ElementType && o.dtype == DType::BF16) {
        CHECK(i.opcode == npu::Opcode::Vconv);
        conversions += i.opcode == npu::Opcode::Vconv;
      }
  CHECK(conversions > 0);
}

void bit_exact(const std::string& def, const std::string& shape, const std::string& target) {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(target);
  auto c = compile_case(kFile, def, shape, "", true, target);
  only_conversions_in_bf16(*c);
  verified_cycles(*c, true);
}

// Cycles of the first instruction on the vector pipe of a one-instruction program (timing only).
npu_sim::InstructionEvent vector_event(const std::string& instruction) {
  const std::string text = ".tensor G f16 [64, 64] at GM+0 inout\n" + instruction + "\npipe_barrier ALL\n";
  const npu::Program p = npu::assemble_program(text, "bf16.npu");
  npu_sim::SimOptions o;
  o.timing_only = true;
  const isa::Hierarchy h = isa::load_hierarchy(kTarget);
  const npu_sim::SimResult r = npu_sim::simulate(p, h, {}, o);
  for (const npu_sim::InstructionEvent& e : r.record.instructions)
    if (e.pipe == npu::Pipe::V) return e;
  FAIL("no vector instruction ran");
  return {};
}

}  // namespace

TEST_CASE("bf16 element-wise arithmetic on the NPU equals the interpreter bit for bit") {
  for (const std::string& target : {kTarget, kTarget310})
    for (const char* shape : {"M=37,N=200", "M=5,N=33"}) bit_exact("bf16_pointwise", shape, target);
}

TEST_CASE("bf16 sum, product and max reductions on the NPU round every step as the interpreter does") {
  // 64 terms of the sum: accumulated in f32 without the per-step rounding, S differs from the
  // interpreter's by more than bf16's tolerance (89 against 87.5 at one row)
  for (const std::string& target : {kTarget, kTarget310})
    for (const char* shape : {"M=37,N=64", "M=3,N=300"}) bit_exact("bf16_reduction", shape, target);
}

TEST_CASE("bf16 matmul on the NPU: bf16 and f32 results bit for bit (f32 copies, or the vector contraction converting in UB)") {
  for (const std::string& target : {kTarget, kTarget310}) {
    bit_exact("bf16_matmul", "M=33,N=48,K=40", target);
    bit_exact("bf16_matmul_f32", "M=33,N=48,K=40", target);
  }
}

TEST_CASE("bf16 vconv costs the description's cycles per repeat: 2 on davinci-910, against 1 for f16 -> f32") {
  // 10 repeats of 64 lanes: 10 x 2 cycles occupancy (conversions: cycles_per_repeat 2), then the
  // vector start-up of 15 cycles; the f16 -> f32 vconv (no listed conversion) 10 x 1
  const npu_sim::InstructionEvent to32 = vector_event("vconv f32, bf16, UB[0], UB[16384], 10, 1, 1, 8, 4");
  CHECK(to32.end - to32.start == 20);
  CHECK(to32.completion - to32.end == 15);
  const npu_sim::InstructionEvent to16 = vector_event("vconv bf16, f32, UB[16384], UB[0], 10, 1, 1, 4, 8");
  CHECK(to16.end - to16.start == 20);
  const npu_sim::InstructionEvent f16 = vector_event("vconv f32, f16, UB[0], UB[16384], 10, 1, 1, 8, 4");
  CHECK(f16.end - f16.start == 10);
}

TEST_CASE("bf16 on the NPU simulator: arithmetic refused, an unlisted conversion a fault naming it") {
  CHECK_THROWS_WITH_AS(npu::assemble_program("vadd bf16, UB[0], UB[256], UB[512], 1, 1, 1, 1, 8, 8, 8\n", "x.npu"),
                       doctest::Contains("does not take element type bf16"), UserError);
  CHECK_THROWS_WITH_AS(vector_event("vconv f16, bf16, UB[0], UB[16384], 1, 1, 1, 4, 4"),
                       doctest::Contains("lists no conversion from bf16 to f16"), UserError);
}

TEST_CASE("f32 -> bf16 bits round to nearest even and quiet NaN as the interpreter's round_to_bf16") {
  const float cases[] = {1.0f, 1.00390625f /* a tie: to even (1) */, 1.01171875f /* a tie: up */, -2.5e-40f,
                         3.4e38f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.1f};
  for (float v : cases) {
    CAPTURE(v);
    const float ours = bf16_bits_to_f32(f32_to_bf16_bits(v)), ref = interp::round_to_bf16(v);
    CHECK(std::memcmp(&ours, &ref, 4) == 0);
  }
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(1.00390625f)) == 1.0f);
  CHECK(bf16_bits_to_f32(f32_to_bf16_bits(1.01171875f)) == 1.015625f);
}
