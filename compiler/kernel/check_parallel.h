// Parallel-loop checker (analysis, independent of the polyhedral core): executes the control flow
// of a kernel IR at its compile-time sizes, without computing values, and records which iteration
// of each loop marked `parallel` touches which element. A conflict is an element that one
// iteration writes and another iteration of the same loop instance reads or writes:
//   - global tensor elements, for every parallel loop;
//   - buffer elements too, for parallel loops that do not rebind buffers (the ones threads of a
//     block may share; iterations of an outer ParallelCores loop have their own buffers).
// It is the ground truth the dependence analysis (compiler/poly/parallelism.h) must agree with,
// run over every workload and conformance instance (`tessel compile --check-parallel`, tests).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::kernel {

struct ParallelCheck {
  int64_t loops = 0;          // parallel loop instances checked
  int64_t accesses = 0;       // element accesses recorded
  int64_t conflicts = 0;
  std::string first_conflict; // "loop c2 (group of Sum): Sum[3] written by iteration 0, read by iteration 4"
  bool complete = true;       // false when the access budget ran out (the result covers a prefix)
};

// `max_accesses` bounds the work (0: unbounded).
ParallelCheck check_parallel(const Kernel& k, int64_t max_accesses = 50'000'000);

}  // namespace tessel::kernel
