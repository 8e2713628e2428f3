#include "compiler/tune/plan_search.h"

#include <cmath>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "compiler/tune/progress.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class PlanSearch {
 public:
  PlanSearch(const std::vector<std::string>& plans, const PlanMeasureFn& measure, const TuneOptions& o)
      : plans_(plans), measure_(measure), o_(o), total_(std::min<int>(o.trials, int(plans.size()) + 1)),
        line_("tune plans", total_, o.progress, o.terminal, std::cerr) {
    r_.unit = "s";  // GPU plans: seconds per run (a measurement names its unit)
  }

  TuneResult run() {
    // the default plan, then the ranked plans: each a trial, from the log where it is settled
    const auto logged = logged_results(o_.log, o_.problem);
    std::vector<std::string> order{"default"};
    order.insert(order.end(), plans_.begin(), plans_.end());
    for (const auto& key : order) {
      if (int(r_.trials.size()) >= total_) break;
      auto it = logged.find(key);
      if (it != logged.end() && it->second.settled(o_.max_attempts)) {
        note(key, it->second.cost, true);
        ++r_.resumed;
      } else {
        if (it != logged.end()) ++r_.retried;
        measure_one(key);
      }
      if (key == "default") r_.default_cost = r_.trials.back().cost;
      line_.update(int(r_.trials.size()), r_.measured,
                   std::isfinite(best_) ? fmt::format("{:.4g} {} ({})", best_, r_.unit, r_.best_tile) : std::string());
    }
    line_.finish();
    r_.best_cost = best_;
    if (!o_.db.empty() && std::isfinite(best_))
      db_update(o_.db, o_.problem, {r_.best_tile, best_, r_.unit, "plans", int(r_.trials.size())});
    return r_;
  }

 private:
  void note(const std::string& key, double cost, bool resumed) {
    if (cost < best_) {
      best_ = cost;
      r_.best_tile = key;
    }
    r_.trials.push_back({int(r_.trials.size()) + 1, key, cost, best_, resumed});
  }

  void measure_one(const std::string& key) {
    Measurement m = measure_(key == "default" ? std::string() : key);
    m.key = key;
    if (r_.unit.empty()) r_.unit = m.unit;
    ++r_.measured;
    note(key, m.ok ? m.cost : kInf, false);
    if (!m.ok) {
      if (r_.failed++ == 0) r_.first_error = key + ": " + m.error;
      if (o_.progress) std::cerr << (o_.terminal ? "\n" : "") << "tune: " << key << ": " << m.error << "\n";
    }
    if (o_.log.empty()) return;
    LogEntry e;
    e.tile = key;
    e.ok = m.ok;
    e.cost = m.cost;
    e.unit = m.unit;
    e.strategy = "plans";
    e.error = m.error;
    e.trial = int(r_.trials.size());
    e.wall_s = m.wall_s;
    append_log(o_.log, o_.problem, e);
  }

  const std::vector<std::string>& plans_;
  const PlanMeasureFn& measure_;
  const TuneOptions& o_;
  const int total_;
  Progress line_;
  TuneResult r_;
  double best_ = kInf;
};

}  // namespace

TuneResult run_plan_search(const std::vector<std::string>& plans, const PlanMeasureFn& measure, const TuneOptions& options) {
  if (options.trials < 1) throw UserError("--trials: must be at least 1");
  return PlanSearch(plans, measure, options).run();
}

}  // namespace tessel::tune
