// Description overrides (issue 18): variants of a hierarchy description for design-space
// exploration, e.g. `--set L1.capacity_bytes=1MiB,GM->L1.bandwidth_bytes_per_cycle=64`.
//
// Overrides are applied to the description's YAML tree *before* it is parsed, so every key the
// schema has is overridable and the one parser + validator (isa/hierarchy.cc) checks the variant:
// a variant that breaks a rule is rejected with that rule's message.
//
// Key syntax (a contract other tools rely on), a comma-separated list of KEY=VALUE:
//   FIELD             a top-level scalar            cores=16, clock_mhz=1000
//   LEVEL.FIELD       a level by name               L1.capacity_bytes=1MiB
//   UNIT.FIELD        a unit by name                cube.startup_cycles=4
//   FROM->TO.FIELD    a transfer path               GM->L1.bandwidth_bytes_per_cycle=64
//   sync.FIELD        the NPU sync section          sync.event_ids_per_pipe_pair=8
//   gpu.FIELD         the GPU section               gpu.shared_bytes_per_sm=233472
// VALUE: a plain number or text, or a size with a suffix KiB, MiB, GiB (1MiB = 1048576).
// A FIELD must be one the schema knows for that element (it may be absent from the file); an
// unknown level, unit, path or field, or a key given twice, is a UserError naming the key.
//
// The variant's identity is `description_hash`: 64-bit FNV-1a (16 hex digits) of the effective
// YAML tree in a canonical form (map keys sorted, numbers normalised, comments and layout
// dropped), so the same overrides in any order give the same hash, and so does the same file
// content at another path; the unmodified file has a hash too.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace YAML {
class Node;
}

namespace tessel::isa {

struct Override {
  std::string key;    // as given, e.g. "L1.capacity_bytes"
  std::string value;  // size suffixes expanded: "1MiB" -> "1048576"
};

// A set of overrides, kept sorted by key (the canonical order).
struct Overrides {
  std::vector<Override> items;
  bool empty() const { return items.empty(); }
  // "KEY=VALUE,KEY=VALUE" sorted by key, values expanded ("" when empty).
  std::string text() const;
};

// "KEY=VALUE[,KEY=VALUE...]" (several texts are joined, as repeated --set flags). UserError on a
// malformed item, an empty key or value, a bad size suffix or a key given twice.
Overrides parse_overrides(const std::string& text);
Overrides parse_overrides(const std::vector<std::string>& texts);
Overrides parse_overrides(const std::vector<std::pair<std::string, std::string>>& pairs);

// "1MiB" -> "1048576"; a value without a size suffix is returned unchanged (trimmed).
std::string expand_size_suffix(const std::string& key, const std::string& value);

// Applies `o` to the root of a description's YAML tree (`file` names it in messages).
void apply_overrides(YAML::Node& root, const Overrides& o, const std::string& file);

// The canonical text of a YAML tree and its 64-bit FNV-1a hash as 16 hex digits.
std::string canonical_yaml(const YAML::Node& node);
std::string description_hash(const YAML::Node& root);

}  // namespace tessel::isa
