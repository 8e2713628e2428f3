// Exhaustive search: every configuration of the space, in space order (small spaces).
#include "compiler/tune/strategy.h"

namespace tessel::tune {

namespace {

class Exhaustive : public SearchStrategy {
 public:
  std::string name() const override { return "exhaustive"; }
  std::vector<int> next_batch(SearchState& state, int max) override {
    std::vector<int> out;
    for (int i = 0; i < int(state.space().configs.size()) && int(out.size()) < max; ++i)
      if (!state.is_measured(i)) out.push_back(i);
    return out;
  }
};

}  // namespace

std::unique_ptr<SearchStrategy> make_exhaustive_strategy() { return std::make_unique<Exhaustive>(); }

}  // namespace tessel::tune
