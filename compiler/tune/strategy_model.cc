// Model-guided search: per batch (of the caller's size: the tuner's --batch, or a Dask driver's
// proposal count) the cost model's top unmeasured configurations (kTopShare of the batch, all of
// the first batch) plus perturbations (neighbours) of the best measured ones; the model is
// re-fitted on all measurements before each batch. A model that is not ready (the learned one
// before enough measurements) ranks by the analytic model, so the first batch is the analytic
// model's best guesses, not random draws (a random draw can cost minutes of compilation for a
// configuration the model knows to be many times slower).
#include <algorithm>
#include <limits>

#include "compiler/tune/strategy.h"

namespace tessel::tune {

namespace {

constexpr double kTopShare = 0.75;

class ModelGuided : public SearchStrategy {
 public:
  std::string name() const override { return "model"; }
  std::vector<int> next_batch(SearchState& state, int max) override {
    std::vector<int> out;
    CostModel* model = state.model();
    std::vector<Measured> data;
    for (const auto& [i, c] : state.measured())
      if (c < std::numeric_limits<double>::infinity()) data.push_back({&state.info(i), c});
    if (model && !data.empty()) model->fit(state.problem(), data);
    if (!analytic_) analytic_ = make_cost_model("analytic");
    const CostModel* ranker = model && model->ready() ? model : analytic_.get();
    std::vector<std::pair<double, int>> scored;
    for (int i = 0; i < int(state.space().configs.size()); ++i)
      if (!state.is_measured(i)) scored.push_back({ranker->predict(state.problem(), state.info(i)), i});
    std::stable_sort(scored.begin(), scored.end());
    const int batch = max;
    const int top = std::max(1, int(batch * kTopShare));
    for (const auto& [p, i] : scored) {
      if (int(out.size()) >= top) break;
      out.push_back(i);
    }
    for (int best : state.ranked()) {
      if (int(out.size()) >= batch) break;
      auto nb = state.neighbours(best);
      std::shuffle(nb.begin(), nb.end(), state.rng());
      for (int j : nb)
        if (int(out.size()) < batch && !state.is_measured(j) && std::find(out.begin(), out.end(), j) == out.end())
          out.push_back(j);
    }
    for (const auto& [p, i] : scored) {
      if (int(out.size()) >= batch) break;
      if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    }
    return out;
  }

 private:
  std::unique_ptr<CostModel> analytic_;
};

}  // namespace

std::unique_ptr<SearchStrategy> make_model_strategy() { return std::make_unique<ModelGuided>(); }

}  // namespace tessel::tune
