// Tile search spaces (DESIGN.md "Tile specs and tuning", issue 8). A space spec constrains, per
// loop axis and per tiling level (outer = `stage`, inner = operand level), which sizes may be tried:
//
//   m=64-512:pow2/32-256:pow2,n=64|128|256/64,k=32-256:x32:pow2/16|32
//
// A level is a candidate list `A|B|C`, a single size, or a range `MIN-MAX` with modifiers `:pow2`
// (powers of two only) and `:xN` (multiples of N). Without `/INNER` the inner size equals the outer.
// Axes the spec does not name keep the default tile spec's sizes. Inner sizes must divide outer ones.
//
// build_space() enumerates the product, removes dominated candidates (a size whose tile count on
// its axis equals that of a smaller size of the same level: same loops, more padding and a larger
// footprint) and keeps exactly the configurations promotion accepts (FitChecker, fit_check.h:
// footprints against each level's capacity, double buffering reserving half). When the target maps
// the problem with sizes of its own (Problem::fixed_mapping) every configuration is the same
// program: the space keeps one (the default tile spec where it fits, else the first that fits).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/tile/tile_spec.h"

namespace tessel::tune {

class FitChecker;

struct LevelRange {
  std::vector<int64_t> list;  // explicit candidates (non-empty: min/max/pow2/multiple unused)
  int64_t min = 1, max = 0;   // inclusive range
  bool pow2 = false;
  int64_t multiple_of = 1;
  std::vector<int64_t> values(int64_t extent) const;  // candidates, ascending, clamped to extent
};

struct AxisRange {
  std::string axis;
  LevelRange outer;
  LevelRange inner;
  bool inner_tied = false;  // no `/INNER`: inner = outer
};

struct SpaceSpec {
  std::vector<AxisRange> axes;
  std::string to_string() const;
};

// UserError naming the entry for bad syntax, an empty range, or a modifier other than pow2 / xN.
SpaceSpec parse_space_spec(const std::string& text);

// The default space around the default tile spec: every axis it tiles (outer > 1) gets outer
// sizes in powers of two times the matrix unit's dimension for that axis, from twice the unit to
// the axis extent (at most 32 units), and inner sizes from a quarter of the outer size (at least
// the unit) to the outer size. Point-tiled axes stay at 1.
SpaceSpec default_space_spec(const tile::TileSpec& default_spec, const std::map<std::string, int64_t>& extents,
                             const std::map<std::string, int64_t>& units);

struct SpaceStats {
  size_t enumerated = 0;   // product of the per-axis candidates
  size_t dominated = 0;    // removed as dominated
  size_t not_fitting = 0;  // rejected by promotion's capacity check
  size_t fit_checks = 0;   // configurations checked (the rest inferred: a tile containing one that does not fit does not fit)
  size_t full_checks = 0;  // of which by tile + promote (FitChecker's arithmetic model answers the others)
  std::vector<std::string> examples_not_fitting;  // a few keys, for messages and tests
  size_t same_program = 0;  // fitting configurations left out: the problem's mapping ignores the tile (Problem::fixed_mapping)
};

struct Space {
  std::vector<tile::TileSpec> configs;  // every legal configuration, in a fixed order
  SpaceStats stats;
  int index_of(const std::string& key) const;  // -1 when absent
  std::map<std::string, int> index;
};

// The per-axis candidate (outer, inner) pairs after domination removal, in enumeration order.
std::vector<std::vector<std::pair<int64_t, int64_t>>> axis_candidates(const SpaceSpec& spec,
                                                                      const std::map<std::string, int64_t>& extents,
                                                                      SpaceStats* stats = nullptr);

// `progress` (optional) is called with (configurations visited, product of the candidates) as the
// enumeration goes and once at the end.
// `spec` with every axis of `defaults` it does not name added at its default sizes (what
// build_space enumerates).
SpaceSpec with_default_axes(const SpaceSpec& spec, const tile::TileSpec& defaults);

Space build_space(const SpaceSpec& spec, FitChecker& fit,
                  const std::function<void(size_t done, size_t total)>& progress = nullptr);

// The text key of a configuration (its tile spec text).
inline std::string config_key(const tile::TileSpec& t) { return t.to_string(); }

}  // namespace tessel::tune
