// Genetic search: the first generation is random; each later one breeds children of parents
// chosen by tournament among the measured configurations (the population: the best `kPopulation`
// so far), by uniform per-axis crossover and, per axis with probability kMutation, a step to a
// neighbouring size on that axis. Children outside the space or already measured are redrawn; when
// breeding stalls, random configurations fill the batch.
#include <algorithm>

#include "compiler/tune/strategy.h"

namespace tessel::tune {

namespace {

// not hardware: the search's parameters
constexpr int kPopulation = 16;
constexpr int kTournament = 3;
constexpr double kMutation = 0.3;
constexpr int kAttempts = 64;  // not hardware

class Genetic : public SearchStrategy {
 public:
  std::string name() const override { return "genetic"; }
  std::vector<int> next_batch(SearchState& state, int max) override {
    std::vector<int> out;
    auto ranked = state.ranked();
    if (ranked.size() > size_t(kPopulation)) ranked.resize(kPopulation);
    auto& rng = state.rng();
    std::uniform_real_distribution<double> coin(0, 1);
    const int batch = std::min(max, kPopulation);
    if (ranked.size() >= 2) {
      auto pick = [&] {
        int best = -1;
        for (int t = 0; t < kTournament; ++t) {
          int c = ranked[std::uniform_int_distribution<size_t>(0, ranked.size() - 1)(rng)];
          if (best < 0 || state.measured().at(c) < state.measured().at(best)) best = c;
        }
        return best;
      };
      for (int attempt = 0; attempt < kAttempts * batch && int(out.size()) < batch; ++attempt) {
        const auto a = state.sizes(pick()), b = state.sizes(pick());
        auto child = a;
        for (size_t x = 0; x < child.size(); ++x) {
          if (coin(rng) < 0.5) child[x] = b[x];
          if (coin(rng) < kMutation) {
            const auto& vals = state.axis_values(x);
            long pos = std::lower_bound(vals.begin(), vals.end(), child[x]) - vals.begin();
            pos += coin(rng) < 0.5 ? -1 : 1;
            if (pos >= 0 && pos < long(vals.size())) child[x] = vals[size_t(pos)];
          }
        }
        const int i = state.find(child);
        if (i >= 0 && !state.is_measured(i) && std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
      }
    }
    while (int(out.size()) < batch) {
      const int i = state.random_unmeasured(out);
      if (i < 0) break;
      out.push_back(i);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<SearchStrategy> make_genetic_strategy() { return std::make_unique<Genetic>(); }

}  // namespace tessel::tune
