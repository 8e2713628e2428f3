// A vector unit's `conversions` (bf16 <-> f32 on the DaVinci descriptions): parsed with their
// cycles per repeat into the machine model, and refused with the key and the reason where they
// cannot hold (one dtype twice, 0 cycles, a unit other than a vector unit).
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/npu_machine.h"

using namespace tessel;

namespace {

const std::string kFile = std::string(TESSEL_SOURCE_DIR) + "/isa/targets/davinci-910.yaml";

std::string description() {
  std::ifstream in(kFile);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// davinci-910.yaml with its first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string t = description();
  const size_t at = t.find(from);
  REQUIRE(at != std::string::npos);
  return t.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("davinci-910's vector unit converts bf16 <-> f32 at 2 cycles per repeat and computes no bf16") {
  const isa::NpuMachine m = isa::npu_machine(isa::load_hierarchy(kFile));
  REQUIRE(m.conversion(DType::BF16, DType::F32));
  REQUIRE(m.conversion(DType::F32, DType::BF16));
  CHECK(m.conversion(DType::BF16, DType::F32)->cycles_per_repeat == 2);
  CHECK(m.conversion(DType::F32, DType::BF16)->cycles_per_repeat == 2);
  CHECK_FALSE(m.conversion(DType::BF16, DType::F16));
}

TEST_CASE("vector conversions: one dtype twice, 0 cycles and a non-vector unit are refused with the key") {
  CHECK_THROWS_WITH_AS(isa::parse_hierarchy(edited("{from: bf16, to: f32, cycles_per_repeat: 2}", "{from: f32, to: f32, cycles_per_repeat: 2}"), "d.yaml"),
                       doctest::Contains("conversions[0].to: a conversion needs two different dtypes"), UserError);
  CHECK_THROWS_WITH_AS(isa::parse_hierarchy(edited("{from: bf16, to: f32, cycles_per_repeat: 2}", "{from: bf16, to: f32, cycles_per_repeat: 0}"), "d.yaml"),
                       doctest::Contains("cycles_per_repeat: must be at least 1"), UserError);
  CHECK_THROWS_WITH_AS(isa::parse_hierarchy(edited("    dtypes: [i32]\n", "    dtypes: [i32]\n    conversions: [{from: bf16, to: f32, cycles_per_repeat: 1}]\n"), "d.yaml"),
                       doctest::Contains("only vector units have conversions"), UserError);
}
