// The learned cost model: gradient-boosted trees (XGBoost C API, objective rank:pairwise) over
// config_features(), re-fitted on all measurements so far (one query group: the problem). Until
// it has seen enough measurements it defers to the analytic model. Built only where CMake found
// xgboost/c_api.h and libxgboost (TESSEL_HAVE_XGBOOST); elsewhere make_learned_model() throws a
// UserError saying how to get it.
#include <cmath>

#include "compiler/tune/cost_model.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_XGBOOST
#include <xgboost/c_api.h>
#endif

namespace tessel::tune {

std::unique_ptr<CostModel> make_analytic_model();

#ifdef TESSEL_HAVE_XGBOOST

namespace {

void xgb_check(int rc, const char* what) {
  if (rc != 0) throw InternalError(std::string("learned model: ") + what + ": " + XGBGetLastError());
}

class LearnedModel : public CostModel {
 public:
  ~LearnedModel() override {
    if (booster_) XGBoosterFree(booster_);
  }
  std::string name() const override { return "learned"; }
  bool ready() const override { return booster_ != nullptr; }

  void fit(const Problem& problem, const std::vector<Measured>& measured) override {
    if (measured.size() < kMinSamples) return;
    std::vector<float> x, y;
    size_t width = 0;
    // rank:pairwise: larger labels rank first, so the label is the negated log cost
    for (const auto& m : measured) {
      const auto f = config_features(problem, *m.config);
      width = f.size();
      for (double v : f) x.push_back(float(v));
      y.push_back(float(-std::log(std::max(1e-12, m.cost))));
    }
    DMatrixHandle d = nullptr;
    xgb_check(XGDMatrixCreateFromMat(x.data(), measured.size(), width, NAN, &d), "XGDMatrixCreateFromMat");
    xgb_check(XGDMatrixSetFloatInfo(d, "label", y.data(), y.size()), "label");
    const unsigned group = unsigned(measured.size());
    xgb_check(XGDMatrixSetUIntInfo(d, "group", &group, 1), "group");
    if (booster_) XGBoosterFree(booster_);
    booster_ = nullptr;
    xgb_check(XGBoosterCreate(&d, 1, &booster_), "XGBoosterCreate");
    const std::pair<const char*, const char*> params[] = {
        {"objective", "rank:pairwise"}, {"max_depth", "4"}, {"eta", "0.3"}, {"nthread", "1"},
        {"seed", "0"}, {"verbosity", "0"}};
    for (const auto& [k, v] : params) xgb_check(XGBoosterSetParam(booster_, k, v), k);
    for (int it = 0; it < kRounds; ++it) xgb_check(XGBoosterUpdateOneIter(booster_, it, d), "XGBoosterUpdateOneIter");
    XGDMatrixFree(d);
  }

  double predict(const Problem& problem, const ConfigInfo& config) const override {
    if (!booster_) return analytic_->predict(problem, config);
    const auto f = config_features(problem, config);
    std::vector<float> x(f.begin(), f.end());
    DMatrixHandle d = nullptr;
    xgb_check(XGDMatrixCreateFromMat(x.data(), 1, x.size(), NAN, &d), "XGDMatrixCreateFromMat");
    bst_ulong len = 0;
    const float* out = nullptr;
    xgb_check(XGBoosterPredict(booster_, d, 0, 0, 0, &len, &out), "XGBoosterPredict");
    const double score = len ? out[0] : 0;
    XGDMatrixFree(d);
    return -score;  // lower is better
  }

 private:
  static constexpr size_t kMinSamples = 8;
  static constexpr int kRounds = 30;
  BoosterHandle booster_ = nullptr;
  std::unique_ptr<CostModel> analytic_ = make_analytic_model();
};

}  // namespace

std::unique_ptr<CostModel> make_learned_model() { return std::make_unique<LearnedModel>(); }

#else

std::unique_ptr<CostModel> make_learned_model() {
  throw UserError("--model learned: this tessel was built without XGBoost (install libxgboost-dev, "
                  "scripts/setup.sh lists it, and re-run cmake); use --model analytic");
}

#endif

}  // namespace tessel::tune
