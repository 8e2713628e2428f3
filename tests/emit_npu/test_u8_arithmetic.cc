// u8 arithmetic on the NPU descriptions, whose vector unit has no u8 instruction (compiler/
// emit_npu/nest_plan.h, compute_type; pointwise.cc, convert and wrap; nest_values.cc, narrow_op
// and narrowed): a u8 read is widened as i8 and moved to [0, 255] by (x + 256) mod 256, each u8
// operation runs in i32 and wraps modulo 256, float casts truncate and saturate to [0, 255], and a
// u8 result is stored as its i8 bit pattern. Kernels with u8 arithmetic go to the general lowering
// (emit_npu.cc, u8_use). Inputs span the whole u8 range (the interpreter's random inputs stay below
// 9, which never wraps); outputs are compared with the interpreter element by element, naive and
// pruned syncs, race-free, on davinci-910 and davinci-310.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

constexpr const char* kFile = "../tests/emit_npu/data/u8_arithmetic.tsl";

// compile_case with every u8 input drawn from [0, 255] (f32 inputs from [-1, 5)), and the
// interpreter's outputs for them.
std::unique_ptr<Case> full_range_case(const std::string& def, const std::string& shape, const std::string& target) {
  auto c = compile_case(kFile, def, shape, "", true, target);
  std::mt19937 rng(7);
  for (auto& [name, a] : c->inputs) {
    if (a.dtype == DType::U8)
      for (uint8_t& b : a.data) b = static_cast<uint8_t>(rng() & 255);
    if (a.dtype == DType::F32)
      for (int64_t i = 0; i < a.element_count(); ++i) {
        const float x = static_cast<float>(rng() % 6000) / 1000.0f - 1.0f;
        std::memcpy(a.data.data() + 4 * i, &x, 4);
      }
  }
  const ir::Function& f = frontend::select_function(c->module, def);
  c->expected = interp::evaluate(f, parse_shape(shape), c->inputs);
  return c;
}

// No instruction of the program has a u8 element type (the program format would refuse it).
void no_u8_instruction(const Case& c) {
  for (const auto& i : c.kernel.program.code)
    for (const auto& o : i.operands) CHECK_FALSE((o.kind == npu::OperandKind::ElementType && o.dtype == DType::U8));
}

// Wrapped results exist: some expected u8 element is one a non-wrapping computation would not give.
bool wraps(const Case& c, const std::string& out) {
  const NpyArray& a = c.expected.at(out);
  int high = 0;
  for (uint8_t b : a.data) high += b >= 128;
  return high > 0 && high < a.element_count();
}

}  // namespace

TEST_CASE("u8 element-wise arithmetic and casts wrap modulo 256 and saturate from floats") {
  for (const std::string& target : {kTarget, kTarget310})
    for (const char* shape : {"N=7,M=300", "N=33,M=17"}) {
      CAPTURE(target);
      CAPTURE(shape);
      auto c = full_range_case("u8_elementwise", shape, target);
      no_u8_instruction(*c);
      CHECK(wraps(*c, "C"));
      verified_cycles(*c, true);
    }
}

TEST_CASE("u8 reductions, broadcasts of u8 rows and columns, and an accumulation into a u8 output") {
  for (const std::string& target : {kTarget, kTarget310})
    for (const char* shape : {"N=7,M=300", "N=40,M=33"}) {
      CAPTURE(target);
      CAPTURE(shape);
      auto c = full_range_case("u8_reductions", shape, target);
      no_u8_instruction(*c);
      CHECK(wraps(*c, "S"));
      verified_cycles(*c, true);
    }
}

TEST_CASE("a contraction of u8 operands cast to i32 runs on the vector unit, exact") {
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto c = full_range_case("u8_contraction", "M=20,K=24,N=36", target);
    no_u8_instruction(*c);
    verified_cycles(*c, true);
  }
}
