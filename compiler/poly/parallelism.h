// Parallelism (analysis, run by pass "kernel"): which loops of the tiled schedule may run their
// iterations concurrently. Takes the dependences (flow, anti and output, including a reduction's
// dependences on itself) and the tiled program; answers, for a time dimension of a group's schedule
// (the AST's iterator c<d>) and the statements of one loop over it, whether the loop carries no
// dependence: every pair of dependent instances of those statements that agrees on dimensions
// 0..d-1 also agrees on d. That is isl's notion of a coincident schedule dimension, decided here
// exactly on the flat tiled schedule at the compile-time sizes. Dependences between groups never
// matter: groups run one after the other.
//
// `mark_buffer_rebinding` adds what the dependences of tensor elements cannot see: a loop whose
// body binds a tile origin that some on-chip buffer's box is placed at refills that buffer every
// iteration, so iterations that share the buffer conflict in it even when they touch different
// elements (Node::rebinds_buffers).
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <isl/cpp.h>

#include "compiler/kernel/kernel_ir.h"
#include "compiler/poly/dependences.h"
#include "compiler/poly/scop.h"
#include "compiler/poly/tiling.h"

namespace tessel::poly {

// The dependences of each group in its own time dimensions, queried per loop: the statements a
// loop's body holds decide which dependences it can carry (the loop of an element-wise statement is
// parallel even where a reduction shares its time dimension in another loop).
class Coincidence {
 public:
  Coincidence(const Dependences& deps, const TiledProgram& tiled);
  // True when dimension `dim` of group `group` carries no dependence between instances of
  // `statements` (scop statement names).
  bool carries_none(int group, int dim, const std::set<std::string>& statements) const;

 private:
  struct Pair {
    std::string src, dst;
    isl::map in_time;  // dependent instances as (time -> time) in the group's dimensions
  };
  std::vector<std::vector<Pair>> pairs_;  // per group
  std::vector<int> dims_;                 // per group: kept time dimensions
  mutable std::map<std::tuple<int, int, std::set<std::string>>, bool> memo_;
};

// Sets `rebinds_buffers` on every loop of `k` whose subtree binds a Let that a buffer's offset reads.
void mark_buffer_rebinding(kernel::Kernel& k);

}  // namespace tessel::poly
