// Post-tiling fusion plan (pass "fusion"): groups the scop's statements into fused groups that
// share one tile loop nest. A group is seeded by a statement; its tile axes are that statement's
// non-reduction indices. Later statements that have every tile axis (same name, same range) join
// it: element-wise producers and consumers of a reduction (bias, relu, cast, GELU) are computed
// inside its tile, and the statements of softmax / layer-norm share one row tile. The group's
// anchor is its first reduction update; the anchor's reduction axes are tiled inside the group.
// Parallelism (FusionPolicy, GPU targets): a statement does not join a group whose tiles are fewer
// than `parallel_units` when it has at least twice as many parallel points as the group has tiles
// and at least `min_points_per_tile` points a tile, reduced points counted (a
// split reduction's first phase stays parallel over its chunks; a group norm's normalisation, 512K
// points, would otherwise run inside the 16 tiles of its (n, g) statistics on 16 of the GPU's
// SMs; a group norm's second statistic, computed from X in its readers (inline_locals), 512 x 1024
// points, would run in those 16 tiles too; at 50K points one launch is faster than two); it seeds
// a group of its own, and the tensor
// between the two groups is materialised. Without sizes or units every join stands.
// Legality is checked by the tile pass against the dependences (tile_program); when the fused
// schedule violates one, the pipeline re-plans with `fuse = false` (one statement per group).
// Runs after build_scop.
#pragma once

#include <cstdint>
#include <map>
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

struct FusionPolicy {
  int64_t parallel_units = 0;              // e.g. the GPU's SM count; 0: joins by axes only
  std::map<std::string, int64_t> sizes;    // the function's size parameters, bound
  int64_t min_points_per_tile = 8192;      // as SplitPolicy::min_length: shorter work stays fused
};

std::vector<Group> plan_fusion(const Scop& scop, bool fuse, const FusionPolicy& policy = {});

std::string to_string(const std::vector<Group>& groups, const Scop& scop);

}  // namespace tessel::poly
