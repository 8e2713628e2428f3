// Tiling (pass "tile"): turns the fusion plan and a tile spec into one flat, tiled schedule at
// the compile-time sizes, checked against the dependences.
//
// Every group g gets the time dimensions (same positions in every group, so a dimension's loop
// kind is fixed):
//   [g, O_P.. (stage tiles of the tile axes: parallel across cores), phase,
//    O_R.. (stage tiles of the anchor's reduction axes: sequential), slot,
//    I_P.. (operand tiles of the tile axes: parallel within a core), I_R.. (sequential), slot,
//    points.. (sequential)]
// Members run in program order as phases inside the stage tile; the anchor's phase holds the
// reduction tiles. Marker statements EnterP_g / ExitP_g (per stage tile), EnterR_g (per reduction
// tile) and EnterI_g (per operand tile) mark where buffers are filled and drained; a matched
// anchor's points are replaced by one Frag_g statement per operand tile. Partial tiles come from
// the domains (isl generates min/max bounds).
// Runs after fusion and intrinsic matching; promotion and build_kernel read its result.
#pragma once

#include <isl/cpp.h>

#include <map>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "compiler/poly/dependences.h"
#include "compiler/poly/fusion.h"
#include "compiler/poly/intrinsics.h"
#include "compiler/poly/scop.h"
#include "compiler/tile/tile_spec.h"

namespace tessel::poly {

using Sizes = std::map<std::string, int64_t>;

enum class TileLevel { P, R, I };  // stage tile of tile axes / stage tile of reduction axes / operand tile

struct TiledGroup {
  Group group;
  MatmulMatch match;                      // of the anchor
  std::map<std::string, int64_t> outer, inner, lo, hi;  // per axis (tile sizes, domain range)
  int anchor_phase = -1;
  int exit_phase = 0;
  // origin variable names of the marker at each level, in the marker's tuple order
  std::vector<std::string> origins(TileLevel level) const;
  std::string marker(TileLevel level) const;  // "EnterP_g0", "EnterR_g0", "EnterI_g0"
};

struct TiledProgram {
  Sizes sizes;
  isl::set fixed_context;               // the parameters bound to `sizes`
  isl::union_set fixed_domain;          // the scop's statements at these sizes
  std::vector<TiledGroup> groups;
  int pmax = 0, qmax = 0, width = 0;    // dimension layout
  std::vector<isl::union_map> group_schedules;   // per group: its part of codegen_schedule, over
  std::vector<std::vector<int>> group_kept_dims; // the layout dimensions it uses (others are 0)
  isl::union_map statement_schedule;    // scop statements -> time
  isl::union_map codegen_schedule;      // statements, markers and fragments -> time
  std::map<std::string, isl::union_map> origin_maps;  // marker name -> (statement -> marker instance)
  std::map<std::string, int> statement_group;          // scop statement name -> group id

  // Kind of the loop over time dimension `time_dim` of group `group`'s schedule.
  kernel::LoopKind dim_kind(int group, int time_dim) const;
  // The axis a tile dimension of group `group` tiles ("" for other dimensions) and its level.
  std::string dim_axis(int group, int time_dim, bool* inner) const;
  std::string to_string() const;
};

// Builds the tiled schedule. Returns false (and leaves `out` partial) when the fused schedule
// would violate a dependence.
bool tile_program(const Scop& scop, const Dependences& deps, const std::vector<Group>& groups,
                  const std::vector<MatmulMatch>& matches, const tile::TileSpec& spec, const Sizes& sizes,
                  TiledProgram& out);

// The origin variable of an axis at a level ("g0_m_o", "g0_m_i").
std::string origin_var(int group, const std::string& axis, bool inner);

}  // namespace tessel::poly
