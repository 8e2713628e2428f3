// Schedule (pass "schedule"): an isl schedule for the scop from its dependences with explicit
// scheduler options (isl schedule_constraints::compute_schedule). Validity and proximity are all
// dependences except a reduction's dependences on itself (its updates may be reordered, as in
// Tensor Comprehensions), coincidence the flow dependences likewise. When the operation quota is hit, the schedule
// falls back to the statement order (program order) and a warning is recorded.
// Runs after compute_dependences.
#pragma once

#include <isl/cpp.h>

#include <string>

#include "compiler/poly/dependences.h"
#include "compiler/poly/isl_util.h"
#include "compiler/poly/scop.h"

namespace tessel::poly {

struct ScheduleResult {
  isl::schedule schedule;
  isl::union_map map;       // the schedule as a flat map (statement instance -> time)
  bool fell_back = false;   // quota hit: statement order
  std::string warning;
};

ScheduleResult compute_schedule(const Scop& scop, const Dependences& deps, const SchedulerOptions& options);

}  // namespace tessel::poly
