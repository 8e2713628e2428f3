// Tile specs (DESIGN.md "Tile specs and tuning"): per loop axis (a statement's index name), a
// size per tiling level of the target: outer = the `stage` level, inner = the operand / warp
// level. Text form: `m=128/64,n=128/32,k=64/16`; `m=128` means outer = inner = 128.
// Axes without an entry are not tiled (one tile spans the axis).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "isa/hierarchy.h"

namespace tessel::tile {

struct AxisTile {
  std::string axis;
  int64_t outer = 0;
  int64_t inner = 0;
};

struct TileSpec {
  std::vector<AxisTile> axes;
  const AxisTile* find(const std::string& axis) const;
  void set(const std::string& axis, int64_t outer, int64_t inner);
  std::string to_string() const;  // the text form, parseable again
};

// Parses the text form. UserError on syntax, zero sizes or inner > outer, naming the entry.
TileSpec parse_tile_spec(const std::string& text);

// UserError naming the axis when an entry names no index of any statement of `f`.
void check_tile_spec(const TileSpec& spec, const ir::Function& f);

// A default spec from the hierarchy: reduction axes of contractions get the matrix unit's k
// (scaled up) and parallel axes of reductions its m/n, clamped to the problem sizes. On NPU
// targets an f16 contraction (or an i8 one, in units of the description's i8 shape) with one
// reduction axis (GEMM, batched GEMM, GEMM + epilogue; its batch axes first) takes
// k = 8u/4u, operand tiles of up to 8u x 4u, and the m x n block tile that a time model over the
// description favours (waves of tiles over the cores, each bound by the cube or by its
// global->stage copies, all copies by the shared global bandwidth). The pipeline shrinks it
// further while promotion reports that a level would overflow.
TileSpec default_tile_spec(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                           const isa::Hierarchy& h);

}  // namespace tessel::tile
