// Dependences (pass "dependences"): flow, anti and output dependences between statement
// instances, from the scop's access relations and program order (isl union_access_info /
// compute_flow). Runs after build_scop.
#pragma once

#include <isl/cpp.h>

#include "compiler/poly/scop.h"

namespace tessel::poly {

struct Dependences {
  isl::union_map flow;    // write -> later read of the same element
  isl::union_map anti;    // read -> later write
  isl::union_map output;  // write -> later write
  isl::union_map all() const { return flow.unite(anti).unite(output); }
};

Dependences compute_dependences(const Scop& scop);

// True when `schedule` (statement instance -> time, lexicographic) executes the source of every
// dependence in `deps` before its sink.
bool respects(const isl::union_map& schedule, const isl::union_map& deps);

}  // namespace tessel::poly
