// The best-configuration database: a JSON file mapping a problem (operator, target, shape) to the
// best tile spec measured so far. `tessel tune` updates it; `tessel compile` / `tessel run` use
// it when no --tile is given. Location: --db, else $TESSEL_TUNE_DB, else
// $XDG_CACHE_HOME/tessel/best.json, else ~/.cache/tessel/best.json. TESSEL_TUNE_DB=off disables it.
//   {"entries": {"matmul|davinci-910|K=1024,M=1024,N=1024":
//                {"tile": "m=256/128,...", "cost": 15407, "unit": "cycles", "strategy": "model", "trials": 64}}}
#pragma once

#include <map>
#include <optional>
#include <string>

#include "compiler/tune/tuning_log.h"
#include "isa/hierarchy_override.h"

namespace tessel::tune {

struct BestEntry {
  std::string tile;
  double cost = 0;
  std::string unit, strategy;
  int trials = 0;
};

std::string default_db_path();  // "" when disabled
std::optional<BestEntry> db_lookup(const std::string& path, const ProblemKey& key);
// Stores `e` when the problem has no entry or a costlier one (same unit). Returns whether it did.
bool db_update(const std::string& path, const ProblemKey& key, const BestEntry& e);

// A plan found in the database: its text (a tile spec, or a GPU plan) and where it came from.
struct TunedPlan {
  std::string tile;
  std::string database, key;
  double cost = 0;
  std::string unit;
};

// The compile/run hook: the tuned plan for an operator file at these sizes on `target` (a
// description path; "c" has none) with `overrides` (a variant is its own entry), when the
// database has one. Prints a note on stderr naming the file and the key.
std::optional<TunedPlan> tuned_tile_for(const std::string& file, const std::string& def, const std::string& target,
                                          const std::map<std::string, int64_t>& sizes, const isa::Overrides& overrides = {});

}  // namespace tessel::tune
