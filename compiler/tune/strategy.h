// Search strategies (issue 8): which configurations of a space to measure next. One
// implementation per file, chosen by name (STYLE.md 9):
//   exhaustive (strategy_exhaustive.cc): every configuration, in space order;
//   random     (strategy_random.cc):     a seeded permutation of the space;
//   genetic    (strategy_genetic.cc):    population, tournament selection, per-axis crossover and
//                                        mutation to neighbouring sizes;
//   model      (strategy_model.cc):      a random batch, then the cost model's top-N unmeasured
//                                        configurations plus perturbations of the best measured
//                                        ones, re-fitting the model after every batch.
// Strategies are deterministic given the seed and the measurements they are shown, so a run with a
// fixed seed is reproducible and a resumed run continues where the log stopped.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/tune/cost_model.h"
#include "compiler/tune/space.h"

namespace tessel::tune {

class SearchState {
 public:
  SearchState(const Space& space, FitChecker& fit, CostModel* model, uint64_t seed);
  const Space& space() const { return space_; }
  const Problem& problem() const;
  const ConfigInfo& info(int i);  // footprints of configuration i (cached by the fit checker)
  CostModel* model() const { return model_; }
  std::mt19937_64& rng() { return rng_; }

  // Measured costs by configuration index (failed measurements: +infinity).
  const std::map<int, double>& measured() const { return measured_; }
  bool is_measured(int i) const { return measured_.count(i) != 0; }
  void record(int i, double cost) { measured_[i] = cost; }
  // Measured indices, best first.
  std::vector<int> ranked() const;
  // Configurations that differ from i on one axis by one step of that axis's candidates.
  std::vector<int> neighbours(int i) const;
  // A uniformly drawn unmeasured configuration not in `taken` (-1 when none is left).
  int random_unmeasured(const std::vector<int>& taken);
  // Configuration with per-axis (outer, inner) pairs, or -1 when not in the space.
  int find(const std::vector<std::pair<int64_t, int64_t>>& sizes) const;
  std::vector<std::pair<int64_t, int64_t>> sizes(int i) const;
  size_t axes() const { return axis_values_.size(); }
  const std::vector<std::pair<int64_t, int64_t>>& axis_values(size_t a) const { return axis_values_[a]; }

 private:
  const Space& space_;
  FitChecker& fit_;
  CostModel* model_;
  std::mt19937_64 rng_;
  std::map<int, double> measured_;
  std::map<int, ConfigInfo> infos_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> axis_values_;  // sorted distinct pairs per axis
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string name() const = 0;
  // Up to `max` unmeasured configuration indices to measure next; empty when the strategy is done.
  virtual std::vector<int> next_batch(SearchState& state, int max) = 0;
};

// "exhaustive", "random", "genetic" or "model"; UserError naming the strategies otherwise.
std::unique_ptr<SearchStrategy> make_strategy(const std::string& name);
std::vector<std::string> strategy_names();

}  // namespace tessel::tune
