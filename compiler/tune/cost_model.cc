#include "compiler/tune/cost_model.h"

#include "isa/base/error.h"

namespace tessel::tune {

std::unique_ptr<CostModel> make_analytic_model();  // analytic_model.cc
std::unique_ptr<CostModel> make_learned_model();   // learned_model.cc

namespace {

struct ModelEntry {
  const char* name;
  std::unique_ptr<CostModel> (*make)();
};

const ModelEntry kModels[] = {
    {"analytic", make_analytic_model},
    {"learned", make_learned_model},
};

}  // namespace

std::vector<std::string> cost_model_names() {
  std::vector<std::string> names;
  for (const auto& m : kModels) names.push_back(m.name);
  return names;
}

std::unique_ptr<CostModel> make_cost_model(const std::string& name) {
  for (const auto& m : kModels)
    if (name == m.name) return m.make();
  std::string known;
  for (const auto& n : cost_model_names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("--model: unknown cost model '" + name + "' (models: " + known + ")");
}

}  // namespace tessel::tune
