#include "compiler/tune/strategy.h"

#include <algorithm>
#include <limits>
#include <set>

#include "compiler/tune/fit_check.h"
#include "isa/base/error.h"

namespace tessel::tune {

std::unique_ptr<SearchStrategy> make_exhaustive_strategy();  // strategy_exhaustive.cc
std::unique_ptr<SearchStrategy> make_random_strategy();      // strategy_random.cc
std::unique_ptr<SearchStrategy> make_genetic_strategy();     // strategy_genetic.cc
std::unique_ptr<SearchStrategy> make_model_strategy();       // strategy_model.cc

namespace {

struct StrategyEntry {
  const char* name;
  std::unique_ptr<SearchStrategy> (*make)();
};

const StrategyEntry kStrategies[] = {
    {"exhaustive", make_exhaustive_strategy},
    {"random", make_random_strategy},
    {"genetic", make_genetic_strategy},
    {"model", make_model_strategy},
};

}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& s : kStrategies) names.push_back(s.name);
  return names;
}

std::unique_ptr<SearchStrategy> make_strategy(const std::string& name) {
  for (const auto& s : kStrategies)
    if (name == s.name) return s.make();
  std::string known;
  for (const auto& n : strategy_names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("--strategy: unknown strategy '" + name + "' (strategies: " + known + ")");
}

SearchState::SearchState(const Space& space, FitChecker& fit, CostModel* model, uint64_t seed)
    : space_(space), fit_(fit), model_(model), rng_(seed) {
  if (space.configs.empty()) return;
  axis_values_.resize(space.configs[0].axes.size());
  for (const auto& c : space.configs)
    for (size_t a = 0; a < c.axes.size() && a < axis_values_.size(); ++a)
      axis_values_[a].push_back({c.axes[a].outer, c.axes[a].inner});
  for (auto& v : axis_values_) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
}

const Problem& SearchState::problem() const { return fit_.problem(); }

const ConfigInfo& SearchState::info(int i) {
  if (auto it = infos_.find(i); it != infos_.end()) return it->second;
  auto info = fit_.check(space_.configs.at(size_t(i)));
  TESSEL_CHECK(info.has_value(), "tune: configuration " + space_.configs[size_t(i)].to_string() +
                                     " of the space does not fit (build_space keeps only fitting ones)");
  return infos_.emplace(i, std::move(*info)).first->second;
}

std::vector<int> SearchState::ranked() const {
  std::vector<int> r;
  for (const auto& [i, c] : measured_) r.push_back(i);
  std::stable_sort(r.begin(), r.end(), [&](int a, int b) { return measured_.at(a) < measured_.at(b); });
  return r;
}

std::vector<std::pair<int64_t, int64_t>> SearchState::sizes(int i) const {
  std::vector<std::pair<int64_t, int64_t>> s;
  for (const auto& a : space_.configs.at(size_t(i)).axes) s.push_back({a.outer, a.inner});
  return s;
}

int SearchState::find(const std::vector<std::pair<int64_t, int64_t>>& sizes) const {
  if (space_.configs.empty()) return -1;
  tile::TileSpec t = space_.configs[0];
  for (size_t a = 0; a < t.axes.size() && a < sizes.size(); ++a) {
    t.axes[a].outer = sizes[a].first;
    t.axes[a].inner = sizes[a].second;
  }
  return space_.index_of(config_key(t));
}

std::vector<int> SearchState::neighbours(int i) const {
  std::vector<int> out;
  const auto base = sizes(i);
  for (size_t a = 0; a < axis_values_.size(); ++a) {
    const auto& vals = axis_values_[a];
    const long pos = std::lower_bound(vals.begin(), vals.end(), base[a]) - vals.begin();
    for (long d : {-1L, 1L}) {
      const long q = pos + d;
      if (q < 0 || q >= long(vals.size())) continue;
      auto s = base;
      s[a] = vals[size_t(q)];
      if (int j = find(s); j >= 0) out.push_back(j);
    }
  }
  return out;
}

int SearchState::random_unmeasured(const std::vector<int>& taken) {
  std::vector<int> free;
  std::set<int> t(taken.begin(), taken.end());
  for (int i = 0; i < int(space_.configs.size()); ++i)
    if (!is_measured(i) && !t.count(i)) free.push_back(i);
  if (free.empty()) return -1;
  return free[std::uniform_int_distribution<size_t>(0, free.size() - 1)(rng_)];
}

}  // namespace tessel::tune
