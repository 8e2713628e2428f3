// Promotion (pass "promote"): places every tensor a fused group touches in an on-chip buffer at a
// hierarchy level chosen by role, with the tensor's footprint per tile as a box (isl fixed box
// hull of the accesses over the tile's origins), its bytes, the copies that fill and drain it, and
// a capacity check against the description (a double-buffered buffer takes twice its bytes, i.e.
// double buffering reserves half a level). Roles:
//   - matched matmul anchor: A / B stage tiles per reduction tile -> `stage`, their operand tiles
//     -> `operand_a` / `operand_b`, the partial sums C -> `accumulator`;
//   - other reduction inputs per reduction tile -> `stage`;
//   - everything else per stage tile (bias, relu, softmax rows, outputs) -> `vector`.
// Locals used by one group only (with every value consumed in the tile that produced it) stay on
// chip; other locals become global temporaries. A tile that does not fit is reported in
// Promotion::overflow (the first level that overflows: bytes needed, capacity, which buffers), not
// thrown: the caller decides (the pipeline shrinks a default tile, rejects a user's; the tuner's
// fit check skips the configuration). Runs after tile_program.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "compiler/tile/fit.h"
#include "compiler/poly/dependences.h"
#include "compiler/poly/scop.h"
#include "compiler/poly/tiling.h"
#include "isa/hierarchy.h"

namespace tessel::poly {

struct Placement {
  int buffer = -1;
  TileLevel level = TileLevel::P;
  bool copy_in = false, copy_out = false;
  int src = -1;  // source buffer of copy_in (-1: the global tensor)
};

struct Promotion {
  std::vector<kernel::GlobalTensor> tensors;  // argument order, then temporaries
  std::vector<kernel::Buffer> buffers;
  std::vector<Placement> placements;  // one per buffer, same index
  // per group: tensor -> buffer id that statements of the group use
  std::vector<std::map<std::string, int>> binding;
  std::optional<tile::FitFailure> overflow;  // set when some level's buffers exceed its capacity
  std::string to_string() const;
};

Promotion promote(const Scop& scop, const Dependences& deps, const TiledProgram& tiled, const isa::Hierarchy& h);

}  // namespace tessel::poly
