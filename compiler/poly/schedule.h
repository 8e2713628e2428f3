// Schedule (pass "schedule"): an isl schedule for the scop from its dependences with explicit
// scheduler options (isl schedule_constraints::compute_schedule). Validity and proximity are all
// dependences except a reduction's dependences on itself (its updates may be reordered, as in
// Tensor Comprehensions), coincidence the flow dependences likewise.
//
// Bounded, never a runaway: the isl calls run under the operation quota (SchedulerOptions::
// max_operations, tableau pivots) and a wall-clock deadline (max_seconds, all attempts together;
// IslDeadline). isl's whole-component ILP (FusionStrategy::Max) can take minutes where dependences
// carry large constants — a reduction's last update feeding a 0-d consumer (`S[2, 2159, 4] -> T[]`),
// reshapes' divisions — against the bounded constant term; so when it hits either bound it is tried
// once more with incremental clustering (Conservative: one band per SCC, merged pairwise, small
// ILPs), and when that hits them too the schedule falls back to the statement order (program
// order) with a warning. This isl schedule informs `--explain` and the dependence checks; the
// kernels are built from the fusion plan's tiled schedule (tiling.h), so a fall-back changes no
// generated code. Runs after compute_dependences.
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
  bool fell_back = false;   // quota or deadline hit on every attempt: statement order
  bool relaxed = false;     // maximal fusion hit a bound; incremental clustering gave the schedule
  std::string warning;      // why (set when fell_back or relaxed)
};

ScheduleResult compute_schedule(const Scop& scop, const Dependences& deps, const SchedulerOptions& options);

}  // namespace tessel::poly
