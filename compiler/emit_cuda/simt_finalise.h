// Last-block finalisation of SIMT groups (emit_simt.h): a group B that follows group A, and whose
// block tiles each read, of what A writes, only what a fixed set of A's block tiles writes, runs
// inside A's kernel instead of as a launch of its own. Each A tile, after its stores, fences and
// counts itself in on its B tile's counter (global scratch, atomicAdd); the tile that arrives last
// runs that B tile, reading A's results through L2 (__ldcg: another block wrote them), and resets
// the counter for the next launch. A split reduction's phase two (poly::split_reductions:
// T(o) op=! T_partial(o, c), the partials of the phase-one tiles that share o) is the case in
// point: a launch fewer, and each output is folded as soon as its partials are in, not after
// phase one's last block. B's tile computes what its own launch would, in the same order: the
// result is unchanged, bit for bit, and nothing waits (no block depends on another being resident).
//
// The analysis (this file) enumerates both grids' tiles and evaluates their boxes:
//   - B's grid loops each match one of A's (same bounds and step): B's tile of an A tile is the
//     projection onto the matched loops, and every B tile has the same number of A tiles
//     (`arrivals`, the product of the unmatched loops' trips). A B without grid loops is one tile
//     that every A tile arrives at.
//   - a box is the global elements a copy moves, at the loop values of the tile (lets at the tile's
//     top level evaluated in order); a copy nested in a loop or branch, or a statement reading or
//     writing a tensor in global memory itself, counts as the whole tensor.
//   - every element an A tile writes that some B tile reads is read only by the A tile's own B
//     tile; B writes no tensor A reads or writes; both grids have at most kMaxFinaliseTiles tiles.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_cuda {

constexpr int64_t kMaxFinaliseTiles = 1 << 16;

struct Finalisation {
  // B's tile index for A's tile: sum over A's grid loops d of strides[d] x (iteration of loop d)
  std::vector<int64_t> strides;
  int64_t arrivals = 0;            // A tiles per B tile
  int64_t b_tiles = 0;             // counters
  std::set<std::string> tensors;   // what A writes and B reads: B's loads of them go to L2
};

// The finalisation of group `b` into group `a` (top-level groups of k's body, b right after a), or
// nullopt when the conditions above do not hold.
std::optional<Finalisation> plan_finalisation(const kernel::Kernel& k, const kernel::Node& a, const kernel::Node& b);

}  // namespace tessel::emit_cuda
