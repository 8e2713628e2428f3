// propose_batch (compiler/tune/tuner.h) and the progress line (compiler/tune/progress.h), issue 18:
// an outside driver (scripts/tessel_dask.py) asks for batches given the log, measures them
// elsewhere and appends them; the tuner's progress line on a terminal and in a log file.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "compiler/tune/progress.h"
#include "compiler/tune/tuner.h"
#include "tune_test_util.h"

using namespace tessel;
using namespace tessel::tune;
using testing::FakeMeasurer;
using testing::SmallGemm;

namespace {

struct Driven {
  SmallGemm g{128};
  FitChecker fit{g.f, g.options};
  Space space = build_space(parse_space_spec("m=16-128:pow2/16|32,n=16-128:pow2/16|32,k=16-128:pow2/16"), fit);
  TuneOptions options(const std::string& strategy, int trials, const std::string& log) {
    TuneOptions o;
    o.problem = {"matmul", "tune-test-npu", "K=128,M=128,N=128"};
    o.strategy = strategy;
    o.trials = trials;
    o.seed = 3;
    o.log = log;
    o.progress = false;
    o.measure_default = false;  // a driver proposes the strategy's configurations
    return o;
  }
  // The driver's loop: propose, measure (fake), append; the tiles in log order.
  std::vector<std::string> drive(const std::string& strategy, int trials, int batch, const std::string& log) {
    std::filesystem::remove(log);
    const TuneOptions o = options(strategy, trials, log);
    FakeMeasurer m;
    std::vector<std::string> order;
    for (std::vector<int> b; !(b = propose_batch(space, fit, o, batch)).empty();) {
      CHECK(int(b.size()) <= batch);
      std::vector<tile::TileSpec> specs;
      for (int i : b) specs.push_back(space.configs[size_t(i)]);
      for (const auto& r : m.measure(specs)) {
        LogEntry e;
        e.tile = r.key;
        e.ok = true;
        e.cost = r.cost;
        e.unit = "cycles";
        append_log(log, o.problem, e);
        order.push_back(r.key);
      }
    }
    return order;
  }
};

Driven& driven() {
  static Driven d;
  return d;
}

std::string temp_log(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("tessel_propose_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("propose_batch: a driver's loop measures each configuration once and stops at --trials") {
  Driven& d = driven();
  REQUIRE(d.space.configs.size() > 40);
  for (const std::string strategy : {"model", "random", "genetic", "exhaustive"}) {
    CAPTURE(strategy);
    const auto order = d.drive(strategy, 30, 7, temp_log(strategy));
    CHECK(order.size() == 30);
    CHECK(std::set<std::string>(order.begin(), order.end()).size() == 30);
    // the same seed and log give the same batches
    CHECK(d.drive(strategy, 30, 7, temp_log(strategy + "2")) == order);
  }
}

TEST_CASE("propose_batch: the model strategy's batches have the driver's size, the first is run_tuning's") {
  Driven& d = driven();
  const std::string log = temp_log("first");
  std::filesystem::remove(log);
  const auto first = propose_batch(d.space, d.fit, d.options("model", 64, log), 16);
  CHECK(first.size() == 16);  // not capped at the tuner's default batch of 8
  FakeMeasurer m;
  TuneOptions o = d.options("model", 8, "");
  run_tuning(d.space, d.fit, m, o);
  const auto eight = propose_batch(d.space, d.fit, d.options("model", 64, log), 8);
  REQUIRE(m.keys.size() == 8);
  for (size_t k = 0; k < 8; ++k) CHECK(d.space.configs[size_t(eight[k])].to_string() == m.keys[k]);
  // nothing left to propose once the log holds --trials configurations
  CHECK(d.drive("model", 5, 8, log).size() == 5);
  CHECK(propose_batch(d.space, d.fit, d.options("model", 5, log), 8).empty());
}

TEST_CASE("progress: the line's fields, a plain line per step off a terminal, one rewritten line on it") {
  CHECK(Progress::text("tune model", 16, 64, 8, "11176 cycles (m=256/128)", 4.0) ==
        "tune model: 16/64  best 11176 cycles (m=256/128)  2/s  ETA 0:24");
  // resumed steps (done 10, fresh 0) give no rate yet
  CHECK(Progress::text("sweep", 10, 40, 0, "", 1.0) == "sweep: 10/40  best -  -/s  ETA ?");
  CHECK(Progress::text("sweep", 40, 40, 30, "9 cycles", 3600.0) == "sweep: 40/40  best 9 cycles  0.00833/s  ETA 0:00");
  CHECK(Progress::text("x", 0, 8000, 1, "", 1.0) == "x: 0/8000  best -  1/s  ETA 2:13:20");
  std::ostringstream plain;
  Progress p("bench", 3, true, false, plain);
  p.update(0, 0, "");
  p.update(1, 1, "5 cycles");
  p.update(1, 1, "5 cycles");  // the same step again: no second line
  p.update(3, 3, "4 cycles");
  p.finish();
  const std::string s = plain.str();
  CHECK(s.find('\r') == std::string::npos);
  CHECK(std::count(s.begin(), s.end(), '\n') == 3);
  CHECK(s.find("bench: 3/3  best 4 cycles") != std::string::npos);
  std::ostringstream term;
  Progress t("bench", 3, true, true, term);
  t.update(0, 0, "");
  t.update(3, 3, "4 cycles");  // the last step is always shown
  t.finish();
  const std::string ts = term.str();
  CHECK(ts.rfind("\rbench: 0/3", 0) == 0);
  CHECK(ts.find("\rbench: 3/3  best 4 cycles") != std::string::npos);
  CHECK(std::count(ts.begin(), ts.end(), '\n') == 1);
  CHECK(ts.back() == '\n');
  std::ostringstream off;
  Progress q("x", 2, false, true, off);
  q.update(1, 1, "1");
  q.finish();
  CHECK(off.str().empty());
}
