// The check of a tuned GPU plan's outputs (`tessel tune`, compiler/cli/cmd_tune.cc): against the
// library's output or the default plan's, with the bound `tessel run` uses for sums,
// abs + rel x max(|expected|, sum of |terms|) (compiler/emit_c/run_c.h, verify's term magnitudes):
// two plans that sum in different orders differ by a multiple of the terms' magnitudes, not of the
// result, where the terms cancel.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "compiler/emit_c/run_c.h"
#include "compiler/ir/tensor_ir.h"

namespace tessel::tune {

// Above this many iteration points (interp::iteration_points) the interpreter is not run for the
// magnitudes (a tuning check must not cost minutes): the bound is then relative to |expected|.
inline constexpr double kPlanCheckMaxPoints = 2e8;

// The term magnitudes of f's float sums on `inputs` (interp::evaluate's), or nothing where the
// function is too large to evaluate (kPlanCheckMaxPoints).
std::optional<emit_c::Tensors> plan_check_magnitudes(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                                     const emit_c::Tensors& inputs);

// `actual` against `reference` within `tolerance` (f32) and tolerance_for's (other dtypes), sums
// relative to their terms' magnitudes where `magnitudes` has them.
emit_c::Verification check_plan_outputs(const emit_c::Tensors& reference, const emit_c::Tensors& actual, double tolerance,
                                        const std::optional<emit_c::Tensors>& magnitudes);

}  // namespace tessel::tune
