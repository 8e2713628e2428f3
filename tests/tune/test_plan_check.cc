// `tessel tune`'s GPU plan check (compiler/tune/plan_check.h): a sum whose terms cancel is compared
// relative to the terms' magnitudes, as `tessel run` compares it, so a plan summing in another order
// is not a failed measurement; the interpreter is not run for the magnitudes past the point budget.
#include <doctest/doctest.h>

#include <cstring>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/tune/plan_check.h"

using namespace tessel;

namespace {

NpyArray f32_array(std::vector<int64_t> shape, const std::vector<float>& v) {
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = std::move(shape);
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), v.size() * 4);
  return a;
}

}  // namespace

TEST_CASE("tune's plan check: a cancelling sum within abs + rel x sum of |terms| passes, beyond it fails") {
  const frontend::Module m = frontend::parse_module("def s(f32[M, K] X) -> (f32[M] Y) {\n  Y(m) +=! X(m, k)\n}\n", "s.tsl");
  const ir::Function& f = frontend::select_function(m, "s");
  const std::map<std::string, int64_t> sizes{{"M", 2}, {"K", 3}};
  const emit_c::Tensors inputs{{"X", f32_array({2, 3}, {1000.0f, -1000.0f, 0.5f, 1.0f, 2.0f, 3.0f})}};
  const emit_c::Tensors reference = interp::evaluate(f, sizes, inputs);
  const auto mags = tune::plan_check_magnitudes(f, sizes, inputs);
  REQUIRE(mags.has_value());
  // Y[0] = 0.5 from terms of magnitude 2000.5: another order may be off by 1e-3 (f32 tolerance 1e-5:
  // 1e-5 + 1e-5 x 2000.5 = 0.02 with the magnitudes, 1.5e-5 relative to |expected|)
  emit_c::Tensors plan = reference;
  float y0 = 0;
  std::memcpy(&y0, plan["Y"].data.data(), 4);
  CHECK(y0 == 0.5f);
  y0 += 1e-3f;
  std::memcpy(plan["Y"].data.data(), &y0, 4);
  CHECK(tune::check_plan_outputs(reference, plan, 1e-5, mags).verified);
  CHECK_FALSE(tune::check_plan_outputs(reference, plan, 1e-5, std::nullopt).verified);
  // beyond the magnitudes' bound: a wrong plan still fails
  y0 += 0.1f;
  std::memcpy(plan["Y"].data.data(), &y0, 4);
  const emit_c::Verification wrong = tune::check_plan_outputs(reference, plan, 1e-5, mags);
  CHECK_FALSE(wrong.verified);
  CHECK(wrong.first_mismatch.find("Y[0]") != std::string::npos);
}

TEST_CASE("tune's plan check: no interpreter run for the magnitudes past kPlanCheckMaxPoints") {
  const frontend::Module m = frontend::parse_module("def s(f32[M, K] X) -> (f32[M] Y) {\n  Y(m) +=! X(m, k)\n}\n", "s.tsl");
  const ir::Function& f = frontend::select_function(m, "s");
  // 20000 x 20000 = 4e8 points: above the budget, so nothing is evaluated (no inputs are needed)
  CHECK_FALSE(tune::plan_check_magnitudes(f, {{"M", 20000}, {"K", 20000}}, {}).has_value());
}
