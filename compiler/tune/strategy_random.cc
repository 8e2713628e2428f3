// Random search: a permutation of the space drawn once from the seed; configurations already
// measured (a resumed log) are skipped, so resuming continues the same sequence.
#include <algorithm>

#include "compiler/tune/strategy.h"

namespace tessel::tune {

namespace {

class RandomSearch : public SearchStrategy {
 public:
  std::string name() const override { return "random"; }
  std::vector<int> next_batch(SearchState& state, int max) override {
    if (order_.empty()) {
      order_.resize(state.space().configs.size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = int(i);
      std::shuffle(order_.begin(), order_.end(), state.rng());
    }
    std::vector<int> out;
    for (int i : order_) {
      if (int(out.size()) >= max) break;
      if (!state.is_measured(i)) out.push_back(i);
    }
    return out;
  }

 private:
  std::vector<int> order_;
};

}  // namespace

std::unique_ptr<SearchStrategy> make_random_strategy() { return std::make_unique<RandomSearch>(); }

}  // namespace tessel::tune
