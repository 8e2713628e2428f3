#include "compiler/tune/tuner.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "compiler/tune/progress.h"
#include "isa/base/error.h"

namespace tessel::tune {

std::vector<int> propose_batch(const Space& space, FitChecker& fit, const TuneOptions& options, int n) {
  if (space.configs.empty()) throw UserError("tune: the search space is empty (no configuration fits the target)");
  std::unique_ptr<CostModel> model = make_cost_model(options.model);
  std::unique_ptr<SearchStrategy> strategy = make_strategy(options.strategy);
  SearchState state(space, fit, model.get(), options.seed);
  int logged = 0;
  if (!options.log.empty())
    for (const auto& e : read_log(options.log, options.problem)) {
      const int i = space.index_of(e.tile);
      if (i < 0 || state.is_measured(i)) continue;
      state.record(i, e.ok ? e.cost : std::numeric_limits<double>::infinity());
      ++logged;
    }
  const int want = std::min(n, std::min<int>(options.trials, int(space.configs.size())) - logged);
  std::vector<int> fresh;
  if (want <= 0) return fresh;
  for (int i : strategy->next_batch(state, want))
    if (!state.is_measured(i) && std::find(fresh.begin(), fresh.end(), i) == fresh.end()) fresh.push_back(i);
  return fresh;
}

TuneResult run_tuning(const Space& space, FitChecker& fit, Measurer& measurer, const TuneOptions& options) {
  if (space.configs.empty()) throw UserError("tune: the search space is empty (no configuration fits the target)");
  if (options.trials < 1) throw UserError("--trials: must be at least 1");
  std::unique_ptr<CostModel> model = make_cost_model(options.model);
  std::unique_ptr<SearchStrategy> strategy = make_strategy(options.strategy);
  auto analytic = make_cost_model("analytic");
  SearchState state(space, fit, model.get(), options.seed);
  TuneResult r;
  r.unit = measurer.unit();
  double best = std::numeric_limits<double>::infinity();
  auto note = [&](int i, double cost, bool resumed) {
    state.record(i, cost);
    if (cost < best) {
      best = cost;
      r.best_tile = space.configs[size_t(i)].to_string();
    }
    r.trials.push_back({int(r.trials.size()) + 1, space.configs[size_t(i)].to_string(), cost, best, resumed});
  };
  // what the log holds: at the start (resume) and before every batch (another tuner sharing the
  // log may have measured since: its records count as trials here too)
  auto from_log = [&](bool first) {
    if (options.log.empty()) return;
    size_t torn = 0;
    for (const auto& e : read_log(options.log, options.problem, &torn)) {
      const int i = space.index_of(e.tile);
      if (i < 0 || state.is_measured(i)) continue;
      note(i, e.ok ? e.cost : std::numeric_limits<double>::infinity(), true);
      ++r.resumed;
    }
    if (torn && first)
      std::cerr << "tune: " << options.log << ": skipping a torn last line (" << torn
                << " bytes: a tuner stopped mid-record); the next record replaces it\n";
  };
  from_log(true);
  const int total = std::min<int>(options.trials, int(space.configs.size()));
  Progress line("tune " + options.strategy, total, options.progress, options.terminal, std::cerr);
  auto progress = [&](bool final) {
    line.update(int(r.trials.size()), r.measured,
                std::isfinite(best) ? fmt::format("{:.6g} {} ({})", best, r.unit, r.best_tile) : std::string());
    if (final) line.finish();
  };
  progress(false);
  while (int(r.trials.size()) < total) {
    if (r.measured) from_log(false);
    if (int(r.trials.size()) >= total) break;
    const int want = std::min(options.batch, total - int(r.trials.size()));
    std::vector<int> batch = strategy->next_batch(state, want);
    std::vector<int> fresh;
    for (int i : batch)
      if (!state.is_measured(i) && std::find(fresh.begin(), fresh.end(), i) == fresh.end()) fresh.push_back(i);
    if (fresh.empty()) break;
    std::vector<tile::TileSpec> specs;
    for (int i : fresh) specs.push_back(space.configs[size_t(i)]);
    const auto results = measurer.measure(specs);
    for (size_t k = 0; k < fresh.size(); ++k) {
      const Measurement& m = results[k];
      const double cost = m.ok ? m.cost : std::numeric_limits<double>::infinity();
      note(fresh[k], cost, false);
      ++r.measured;
      if (!options.log.empty()) {
        LogEntry e;
        e.tile = m.key;
        e.ok = m.ok;
        e.cost = m.cost;
        e.unit = measurer.unit();
        e.strategy = options.strategy;
        e.error = m.error;
        e.trial = int(r.trials.size());
        e.predicted = analytic->predict(fit.problem(), state.info(fresh[k]));
        e.wall_s = m.wall_s;
        if (!m.pipe_busy_cycles.empty()) {  // a simulator measurement: log the model's view beside it
          const AnalyticBreakdown b = analytic_breakdown(fit.problem(), state.info(fresh[k]));
          e.pipe_busy = m.pipe_busy_cycles;
          e.predicted_pipe_busy = b.pipe_busy_cycles;
          e.energy_pj = m.energy_pj;
          e.predicted_energy_pj = b.energy_pj;
        }
        append_log(options.log, options.problem, e);
      }
      if (!m.ok) {
        if (r.failed++ == 0) r.first_error = m.key + ": " + m.error;
        if (options.progress) std::cerr << (options.terminal ? "\n" : "") << "tune: " << m.key << ": " << m.error << "\n";
      }
    }
    progress(false);
  }
  progress(true);
  r.best_cost = best;
  if (!options.db.empty() && std::isfinite(best))
    db_update(options.db, options.problem, {r.best_tile, best, r.unit, options.strategy, int(r.trials.size())});
  return r;
}

}  // namespace tessel::tune
