// Human-readable views of hierarchy descriptions: `tessel check-hierarchy A.yaml [B.yaml]`.
#pragma once

#include <set>
#include <string>

#include "isa/hierarchy.h"

namespace tessel::isa {

// Tables of levels (with roles), units and transfer paths, then the target-specific sections.
std::string describe_hierarchy(const Hierarchy& h);

// What a description offers, as comparable feature strings: "transform img2col",
// "matrix 16x16x32 i8*i8->i32", "matrix dtype bf16", "unit kind scalar", "explicit sync flags".
std::set<std::string> hierarchy_features(const Hierarchy& h);

struct HierarchyComparison {
  std::string table;                   // role-by-role correspondence
  std::set<std::string> only_in_first;  // features the first offers that the second lacks
  std::set<std::string> only_in_second;
};
HierarchyComparison compare_hierarchies(const Hierarchy& a, const Hierarchy& b);
std::string format_comparison(const Hierarchy& a, const Hierarchy& b, const HierarchyComparison& c);

std::string format_bytes(uint64_t bytes);  // "64 KiB", "1 MiB", "233472 B"

}  // namespace tessel::isa
