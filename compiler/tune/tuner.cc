#include "compiler/tune/tuner.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "compiler/tune/progress.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kDefaultKey = "default";

}  // namespace

std::vector<int> propose_batch(const Space& space, FitChecker& fit, const TuneOptions& options, int n) {
  if (space.configs.empty()) throw UserError("tune: the search space is empty (no configuration fits the target)");
  std::unique_ptr<CostModel> model = make_cost_model(options.model);
  std::unique_ptr<SearchStrategy> strategy = make_strategy(options.strategy);
  SearchState state(space, fit, model.get(), options.seed);
  int logged = 0;
  for (const auto& [tile, l] : logged_results(options.log, options.problem, nullptr)) {
    const int i = space.index_of(tile);
    if (i < 0 || state.is_measured(i) || !l.settled(options.max_attempts)) continue;
    state.record(i, l.cost);
    ++logged;
  }
  const int want = std::min(n, std::min<int>(options.trials, int(space.configs.size())) - logged);
  std::vector<int> fresh;
  if (want <= 0) return fresh;
  for (int i : strategy->next_batch(state, want))
    if (!state.is_measured(i) && std::find(fresh.begin(), fresh.end(), i) == fresh.end()) fresh.push_back(i);
  return fresh;
}

namespace {

// One run of the tuning loop (run_tuning): the state it carries between the default plan, the
// log and the strategy's batches.
class TuningRun {
 public:
  TuningRun(const Space& space, FitChecker& fit, Measurer& measurer, const TuneOptions& options)
      : space_(space), fit_(fit), measurer_(measurer), o_(options), model_(make_cost_model(options.model)),
        strategy_(make_strategy(options.strategy)), analytic_(make_cost_model("analytic")),
        state_(space, fit, model_.get(), options.seed),
        total_(std::min<int>(options.trials, int(space.configs.size()) + (options.measure_default ? 1 : 0))),
        line_("tune " + options.strategy, total_, options.progress, options.terminal, std::cerr) {
    r_.unit = measurer.unit();
  }

  TuneResult run() {
    read_log(true);
    if (o_.measure_default) measure_default();
    progress();
    while (int(r_.trials.size()) < total_) {
      if (r_.measured || r_.claimed_elsewhere) read_log(false);
      if (int(r_.trials.size()) >= total_) break;
      const int before = r_.claimed_elsewhere;
      const std::vector<int> fresh = next_batch(std::min(o_.batch, total_ - int(r_.trials.size())));
      if (fresh.empty() && r_.claimed_elsewhere == before) break;
      if (!fresh.empty()) measure_batch(fresh);
    }
    if (r_.skipped && o_.progress)
      std::cerr << (o_.terminal ? "\n" : "") << "tune: skipped " << r_.skipped << " configuration(s) predicted more than "
                << o_.max_predicted_slowdown << "x slower than the default plan\n";
    line_.finish();
    if (default_elsewhere_) {  // the default plan another tuner measured: the bar for the database too
      const auto logged = logged_results(o_.log, o_.problem, nullptr);
      if (auto it = logged.find(kDefaultKey); it != logged.end() && it->second.ok()) {
        r_.default_cost = it->second.cost;
        note(kDefaultKey, -1, it->second.cost, true);
        ++r_.resumed;
      }
    }
    r_.best_cost = best_;
    if (!o_.db.empty() && std::isfinite(best_))
      db_update(o_.db, o_.problem, {r_.best_tile, best_, r_.unit, o_.strategy, int(r_.trials.size())});
    return r_;
  }

 private:
  void note(const std::string& tile, int index, double cost, bool resumed) {
    if (index >= 0) state_.record(index, cost);
    if (cost < best_) {
      best_ = cost;
      r_.best_tile = tile;
    }
    r_.trials.push_back({int(r_.trials.size()) + 1, tile, cost, best_, resumed});
  }

  // What the log holds: at the start (resume) and before every batch (another tuner sharing the
  // log may have measured since: its records count as trials here too).
  void read_log(bool first) {
    size_t torn = 0;
    for (const auto& [tile, l] : logged_results(o_.log, o_.problem, &torn)) {
      const int i = space_.index_of(tile);
      if (tile == kDefaultKey || i < 0 || (state_.is_measured(i) && !elsewhere_.count(i))) continue;
      if (!l.settled(o_.max_attempts)) {
        if (first) retry_.insert(i);
        continue;
      }
      elsewhere_.erase(i);  // measured by the tuner that claimed it
      note(tile, i, l.cost, true);
      ++r_.resumed;
    }
    if (torn && first)
      std::cerr << "tune: " << o_.log << ": skipping a torn last line (" << torn
                << " bytes: a tuner stopped mid-record); the next record replaces it\n";
    if (first && !retry_.empty() && o_.progress)
      std::cerr << "tune: " << retry_.size() << " configuration(s) failed in the log before; measuring them again\n";
  }

  void measure_default() {
    const auto logged = logged_results(o_.log, o_.problem, nullptr);
    auto it = logged.find(kDefaultKey);
    double cost = kInf;
    if (it != logged.end() && it->second.settled(o_.max_attempts)) {
      cost = it->second.cost;
      note(kDefaultKey, -1, cost, true);
      ++r_.resumed;
    } else if (claim_configurations(o_.log, o_.problem, {kDefaultKey}, o_.claim_hold_s, o_.max_attempts).empty()) {
      default_elsewhere_ = true;  // another tuner sharing the log measures it: taken from the log at the end
      ++r_.claimed_elsewhere;
    } else {
      const Measurement m = measurer_.measure({tile::TileSpec{}}).at(0);
      cost = m.ok ? m.cost : kInf;
      note(kDefaultKey, -1, cost, false);
      log_result(m, nullptr);
    }
    r_.default_cost = default_elsewhere_ ? 0 : cost;
    // the model's view of the default plan: the bar a proposed configuration must come near
    const Problem& p = fit_.problem();
    if (auto own = default_mapping_breakdown(p)) default_predicted_ = own->total;
    else if (auto info = fit_.check(fit_.compiled_tile_spec())) default_predicted_ = analytic_->predict(p, *info);
  }

  std::vector<int> next_batch(int want) {
    std::vector<int> fresh;
    // configurations that failed before go first (bounded retries)
    for (auto it = retry_.begin(); it != retry_.end() && int(fresh.size()) < want;) {
      if (!state_.is_measured(*it)) fresh.push_back(*it), ++r_.retried;
      it = retry_.erase(it);
    }
    for (int round = 0; int(fresh.size()) < want && round < 64; ++round) {
      const std::vector<int> batch = strategy_->next_batch(state_, want - int(fresh.size()));
      if (batch.empty()) break;
      bool any = false;
      for (int i : batch) {
        if (state_.is_measured(i) || std::find(fresh.begin(), fresh.end(), i) != fresh.end()) continue;
        any = true;
        if (too_slow(i)) continue;
        fresh.push_back(i);
      }
      if (!any) break;
    }
    return claim(fresh);
  }

  // The configurations of `fresh` this tuner may measure: those another tuner sharing the log has
  // claimed are left to it (kept out of the strategy's proposals until its result is in the log).
  std::vector<int> claim(const std::vector<int>& fresh) {
    if (o_.log.empty() || fresh.empty()) return fresh;
    std::vector<std::string> tiles;
    for (int i : fresh) tiles.push_back(space_.configs[size_t(i)].to_string());
    const std::vector<std::string> mine = claim_configurations(o_.log, o_.problem, tiles, o_.claim_hold_s, o_.max_attempts);
    std::vector<int> out;
    for (int i : fresh)
      if (std::find(mine.begin(), mine.end(), space_.configs[size_t(i)].to_string()) != mine.end()) {
        out.push_back(i);
      } else {
        state_.record(i, kInf);  // not proposed again; its result replaces this when it is logged
        elsewhere_.insert(i);
        ++r_.claimed_elsewhere;
      }
    return out;
  }

  // Predicted more than max_predicted_slowdown x the default plan: recorded as skipped (never
  // proposed again, not a trial, not logged).
  bool too_slow(int i) {
    if (o_.max_predicted_slowdown <= 0 || default_predicted_ <= 0) return false;
    const double predicted = analytic_->predict(fit_.problem(), state_.info(i));
    if (predicted <= o_.max_predicted_slowdown * default_predicted_) return false;
    state_.record(i, kInf);
    ++r_.skipped;
    return true;
  }

  void measure_batch(const std::vector<int>& fresh) {
    std::vector<tile::TileSpec> specs;
    for (int i : fresh) specs.push_back(space_.configs[size_t(i)]);
    int landed = 0;
    double live = best_;
    std::string live_tile = r_.best_tile;
    measurer_.on_result = [&](size_t, const Measurement& m) {
      ++landed;
      if (m.ok && m.cost < live) live = m.cost, live_tile = m.key;
      line_.update(int(r_.trials.size()) + landed, r_.measured + landed, best_text(live, live_tile));
    };
    const auto results = measurer_.measure(specs);
    measurer_.on_result = nullptr;
    for (size_t k = 0; k < fresh.size(); ++k) {
      const Measurement& m = results[k];
      note(m.key, fresh[k], m.ok ? m.cost : kInf, false);
      log_result(m, &state_.info(fresh[k]));
    }
    progress();
  }

  void log_result(const Measurement& m, const ConfigInfo* info) {
    ++r_.measured;
    if (!m.ok) {
      if (r_.failed++ == 0) r_.first_error = m.key + ": " + m.error;
      if (o_.progress) std::cerr << (o_.terminal ? "\n" : "") << "tune: " << m.key << ": " << m.error << "\n";
    }
    if (o_.log.empty()) return;
    LogEntry e;
    e.tile = m.key;
    e.ok = m.ok;
    e.cost = m.cost;
    e.unit = measurer_.unit();
    e.strategy = o_.strategy;
    e.error = m.error;
    e.trial = int(r_.trials.size());
    e.wall_s = m.wall_s;
    if (info) {
      e.predicted = analytic_->predict(fit_.problem(), *info);
      if (!m.pipe_busy_cycles.empty()) {  // a simulator measurement: log the model's view beside it
        const AnalyticBreakdown b = analytic_breakdown(fit_.problem(), *info);
        e.pipe_busy = m.pipe_busy_cycles;
        e.predicted_pipe_busy = b.pipe_busy_cycles;
        e.energy_pj = m.energy_pj;
        e.predicted_energy_pj = b.energy_pj;
      }
    } else {
      e.predicted = default_predicted_;
    }
    append_log(o_.log, o_.problem, e);
  }

  std::string best_text(double best, const std::string& tile) const {
    return std::isfinite(best) ? fmt::format("{:.6g} {} ({})", best, r_.unit, tile) : std::string();
  }
  void progress() { line_.update(int(r_.trials.size()), r_.measured, best_text(best_, r_.best_tile)); }

  const Space& space_;
  FitChecker& fit_;
  Measurer& measurer_;
  const TuneOptions& o_;
  std::unique_ptr<CostModel> model_;
  std::unique_ptr<SearchStrategy> strategy_;
  std::unique_ptr<CostModel> analytic_;
  SearchState state_;
  const int total_;
  Progress line_;
  TuneResult r_;
  double best_ = kInf;
  double default_predicted_ = 0;
  std::set<int> retry_;
  std::set<int> elsewhere_;  // claimed by another tuner sharing the log
  bool default_elsewhere_ = false;
};

}  // namespace

TuneResult run_tuning(const Space& space, FitChecker& fit, Measurer& measurer, const TuneOptions& options) {
  if (space.configs.empty()) throw UserError("tune: the search space is empty (no configuration fits the target)");
  if (options.trials < 1) throw UserError("--trials: must be at least 1");
  return TuningRun(space, fit, measurer, options).run();
}

}  // namespace tessel::tune
