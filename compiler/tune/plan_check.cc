// Checks of tuned plans' outputs: compiler/tune/plan_check.h states the contract.
#include "compiler/tune/plan_check.h"

#include "compiler/interp/interpreter.h"
#include "compiler/interp/row_sample.h"

namespace tessel::tune {

std::optional<emit_c::Tensors> plan_check_magnitudes(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                                     const emit_c::Tensors& inputs) {
  if (interp::iteration_points(f, sizes) > kPlanCheckMaxPoints) return std::nullopt;
  emit_c::Tensors mags;
  interp::evaluate(f, sizes, inputs, &mags);
  return mags;
}

emit_c::Verification check_plan_outputs(const emit_c::Tensors& reference, const emit_c::Tensors& actual, double tolerance,
                                        const std::optional<emit_c::Tensors>& magnitudes) {
  return emit_c::verify(reference, actual, tolerance, magnitudes ? &*magnitudes : nullptr);
}

}  // namespace tessel::tune
