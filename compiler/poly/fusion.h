// Post-tiling fusion plan (pass "fusion"): groups the scop's statements into fused groups that
// share one tile loop nest. A group is seeded by a statement; its tile axes are that statement's
// non-reduction indices. Later statements that have every tile axis (same name, same range) join
// it: element-wise producers and consumers of a reduction (bias, relu, cast, GELU) are computed
// inside its tile, and the statements of softmax / layer-norm share one row tile. The group's
// anchor is its first reduction update; the anchor's reduction axes are tiled inside the group.
// Legality is checked by the tile pass against the dependences (tile_program); when the fused
// schedule violates one, the pipeline re-plans with `fuse = false` (one statement per group).
// Runs after build_scop.
#pragma once

#include <string>
#include <vector>

#include "compiler/poly/scop.h"

namespace tessel::poly {

struct Group {
  int id = 0;
  std::vector<int> members;  // indices into Scop::statements, program order
  int anchor = -1;           // index into Scop::statements of the main reduction update, -1: none
  std::vector<std::string> tile_axes;       // shared, tiled at both levels
  std::vector<std::string> reduction_axes;  // the anchor's reduction axes, tiled inside its phase
};

std::vector<Group> plan_fusion(const Scop& scop, bool fuse);

std::string to_string(const std::vector<Group>& groups, const Scop& scop);

}  // namespace tessel::poly
