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

// The analytic model's energy and per-pipe busy cycles (compiler/tune/analytic_model.cc, "Ledger")
// by hand. 64^3 GEMM, tile m=32/16,n=32/16,k=32/16 on tests/tune/small-npu.yaml (4 cores,
// davinci-910's prices): P = 4 stage tiles (one per core), R = 2 chunks, I = 8 operand tiles per
// chunk; buffers A, B in L1 (2048 B per chunk), in L0A / L0B (512 B per operand tile), C in L0C
// (4096 B per stage tile, drained L0C -> UB -> GM).
TEST_CASE("analytic model: energy and per-pipe busy cycles of a small GEMM equal the hand computation") {
  SmallGemm g(64);
  FitChecker fit(g.f, g.options);
  const auto info = fit.check(tile::parse_tile_spec("m=32/16,n=32/16,k=32/16"));
  REQUIRE(info.has_value());
  const auto b = analytic_breakdown(fit.problem(), *info);
  const double gm = 31.2, l1 = 3.1, l0ab = 0.86, l0c_ub = 1.64, mac = 0.5, scalar = 17.5, mte1 = 0.4, mte2 = 2, mte3 = 2,
               vector_move = 0.4;
  // moves: GM -> L1 2 x 2048 B x R x P = 32768 B; L1 -> L0A and -> L0B 512 B x R x I x P = 32768 B each;
  // the drain 4096 B x P = 16384 B through UB. mmads: P x R x I = 64 of 16x16x16: 262144 MACs, each
  // reading 512 B of L0A and of L0B and writing 1024 B of L0C, reading it after the first k step (64 - P x 2 x 2 = 48).
  CHECK(b.macs == 262144);
  CHECK(b.level_energy_pj.at("GM") == doctest::Approx((32768 + 16384) * gm));
  CHECK(b.level_energy_pj.at("L1") == doctest::Approx((32768 + 65536) * l1));
  CHECK(b.level_energy_pj.at("L0A") == doctest::Approx((32768 + 64 * 512) * l0ab));
  CHECK(b.level_energy_pj.at("L0C") == doctest::Approx((16384 + 48 * 1024 + 64 * 1024) * l0c_ub));
  CHECK(b.level_energy_pj.at("UB") == doctest::Approx((16384 + 16384) * l0c_ub));
  CHECK(b.unit_energy_pj.at("cube") == doctest::Approx(262144 * mac));
  CHECK(b.unit_energy_pj.at("mte1") == doctest::Approx(65536 * mte1));
  CHECK(b.unit_energy_pj.at("vector") == doctest::Approx(16384 * vector_move));
  // issued: 16 L1 copies, 128 L0A / L0B copies, 64 mmads, 8 drain moves
  CHECK(b.unit_energy_pj.at("scalar") == doctest::Approx(216 * scalar));
  const double hand = 49152 * gm + 98304 * l1 + 2 * 65536 * l0ab + 131072 * l0c_ub + 32768 * l0c_ub + 262144 * mac +
                      65536 * mte1 + 32768 * mte2 + 16384 * mte3 + 16384 * vector_move + 216 * scalar;
  CHECK(b.energy_pj == doctest::Approx(hand));  // 2,485,628.32 pJ: 9.48 pJ/MAC
  // busy cycles of one core: 16 fragments; L0A 16 x 512 / 256 + L0B 16 x 512 / 128; 2 x 2 x 2048 / 87;
  // the drain 4096 / 128 on V and 4096 / 87 on MTE3; M and MTE1 also hold 2 flag cycles per mmad (16)
  CHECK(b.pipe_busy_cycles.at("M") == doctest::Approx(16 + 32));
  CHECK(b.pipe_busy_cycles.at("MTE1") == doctest::Approx(32 + 64 + 32));
  CHECK(b.pipe_busy_cycles.at("MTE2") == doctest::Approx(8192.0 / 87));
  CHECK(b.pipe_busy_cycles.at("V") == doctest::Approx(32));
  CHECK(b.pipe_busy_cycles.at("MTE3") == doctest::Approx(4096.0 / 87));
}
