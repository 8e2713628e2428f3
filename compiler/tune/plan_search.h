// Tuning over a target's plan space (`tessel tune --target sm90.yaml` on a TensorCore kernel): the
// tile policy's ranked plans (emit_cuda::tc_candidates, its best guess first) are the space, the
// policy's ranking is the model. The default plan (the policy's own choice, key "default") is
// measured first; then the plans in ranked order until --trials are logged. Measurements go to
// the same JSON-lines log as the tile-spec tuner (compiler/tune/tuning_log.h: the plan text is the
// record's "tile"), a resumed run measures only what the log does not hold, a failed plan is
// measured again up to TuneOptions::max_attempts times, and the best plan goes to the database
// only when it beats the default (else "default"), so `tessel run` then runs what was measured.
// Input: the ranked plan texts and a function measuring one (an empty text: the default plan).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/tune/measure.h"
#include "compiler/tune/tuner.h"

namespace tessel::tune {

using PlanMeasureFn = std::function<Measurement(const std::string& plan)>;

TuneResult run_plan_search(const std::vector<std::string>& plans, const PlanMeasureFn& measure, const TuneOptions& options);

}  // namespace tessel::tune
