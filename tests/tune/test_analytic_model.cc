// The analytic cost model (compiler/tune/analytic_model.cc): directions it must get right.
#include <doctest/doctest.h>

#include "compiler/tune/cost_model.h"
#include "isa/base/error.h"
#include "tune_test_util.h"

using namespace tessel;
using namespace tessel::tune;
using testing::SmallGemm;

namespace {

double predict(const SmallGemm& g, const std::string& tile, isa::Hierarchy* edit = nullptr) {
  FitChecker fit(g.f, g.options);
  auto info = fit.check(tile::parse_tile_spec(tile));
  REQUIRE(info.has_value());
  Problem p = fit.problem();
  if (edit) p.hierarchy = *edit;
  return make_cost_model("analytic")->predict(p, *info);
}

}  // namespace

TEST_CASE("analytic model: more compute takes more cycles") {
  const std::string t = "m=32/32,n=32/32,k=32/16";
  CHECK(predict(SmallGemm(256), t) > predict(SmallGemm(128), t));
  SmallGemm big(128);
  big.options.sizes["K"] = 512;
  CHECK(predict(big, t) > predict(SmallGemm(128), t));
}

TEST_CASE("analytic model: slower paths and fewer cores cost more, never less") {
  SmallGemm g(256);
  const std::string t = "m=64/32,n=64/32,k=32/16";
  FitChecker fit(g.f, g.options);
  isa::Hierarchy slow = fit.problem().hierarchy;
  for (auto& p : slow.paths) p.bandwidth_bytes_per_cycle /= 4;
  CHECK(predict(g, t, &slow) > predict(g, t));
  isa::Hierarchy one = fit.problem().hierarchy;
  one.cores = 1;
  CHECK(predict(g, t, &one) > predict(g, t));
}

TEST_CASE("analytic model: breakdown parts are consistent") {
  SmallGemm g(128);
  FitChecker fit(g.f, g.options);
  const auto info = fit.check(tile::parse_tile_spec("m=64/32,n=64/32,k=32/16"));
  REQUIRE(info.has_value());
  const auto b = analytic_breakdown(fit.problem(), *info);
  CHECK(b.tiles == 4);  // 2 x 2 stage tiles
  CHECK(b.cores_used == 4);
  // one stage tile per core: (64/16)^2 fragments x 128/16 k steps, cube 1 cycle each (+ start-up)
  CHECK(b.compute_cycles >= 4 * 4 * 8);
  CHECK(b.total >= b.compute_cycles);
  CHECK(b.engine_cycles.count("mte2"));
  CHECK(make_cost_model("analytic")->predict(fit.problem(), *info) == doctest::Approx(b.total));
}

TEST_CASE("cost models are chosen by name") {
  CHECK(make_cost_model("analytic")->name() == "analytic");
  CHECK_THROWS_WITH_AS(make_cost_model("oracle"), doctest::Contains("unknown cost model 'oracle'"), UserError);
  try {
    CHECK(make_cost_model("learned")->name() == "learned");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("without XGBoost") != std::string::npos);
  }
}

TEST_CASE("learned model: fitted on measurements it ranks them like the measurements") {
  std::unique_ptr<CostModel> m;
  try {
    m = make_cost_model("learned");
  } catch (const UserError&) {
    MESSAGE("built without XGBoost: skipped");
    return;
  }
  SmallGemm g(128);
  FitChecker fit(g.f, g.options);
  const Space space = build_space(parse_space_spec("m=16-128:pow2/16|32,n=16-128:pow2/16|32,k=32/16"), fit);
  std::vector<ConfigInfo> infos;
  for (const auto& c : space.configs) infos.push_back(*fit.check(c));
  std::vector<Measured> data;
  for (const auto& i : infos) data.push_back({&i, testing::FakeMeasurer::cost(i.spec)});
  CHECK(!m->ready());
  m->fit(fit.problem(), data);
  CHECK(m->ready());
  // the best measured configuration ranks in the model's top quarter
  size_t best = 0;
  for (size_t i = 1; i < data.size(); ++i)
    if (data[i].cost < data[best].cost) best = i;
  const double pb = m->predict(fit.problem(), infos[best]);
  size_t better = 0;
  for (const auto& i : infos) better += m->predict(fit.problem(), i) < pb;
  CHECK(better <= infos.size() / 4);
}
