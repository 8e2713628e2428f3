// The tuning loop: the target's own plan (no tile spec, key "default") is measured first, then a
// strategy proposes batches, the measurer measures them, every measurement is appended to the log
// and recorded in the search state, a progress line shows trial i/N per measured trial, the best
// so far and the ETA. Configurations the log already holds for this problem count as trials and
// are never measured again, except failures: a configuration whose measurements all failed is
// measured again until it has failed `max_attempts` times (a transient failure is retried, and
// says so). A proposed configuration the analytic model predicts more than
// `max_predicted_slowdown` times slower than the default plan is skipped with a note (its compile
// and simulation would cost minutes for a result that cannot win by the model; 0: no skipping).
// Tuners sharing a log claim each batch before measuring it (tuning_log.h claim_configurations):
// what another has claimed is left to it and counted when its result reaches the log.
// The best configuration goes to the database, and only when it beats the default plan; when
// the default wins, the database records "default" (the target's own plan), so a worse entry
// from an earlier run no longer applies.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/tune/best_db.h"
#include "compiler/tune/measure.h"
#include "compiler/tune/strategy.h"

namespace tessel::tune {

struct TuneOptions {
  ProblemKey problem;
  std::string strategy = "model";
  std::string model = "analytic";  // for the model-guided strategy
  int trials = 64;                 // not hardware: total, including configurations the log already holds
  uint64_t seed = 1;
  std::string log;                 // "" : no log
  std::string db;                  // "" : no database update
  bool progress = true;            // the progress line on stderr (compiler/tune/progress.h)
  bool terminal = false;           // stderr is a terminal: one line rewritten in place
  int batch = 8;                   // measured together (parallel on the simulator)
  bool measure_default = true;     // the target's own plan first (a trial of its own, key "default")
  double max_predicted_slowdown = 4;  // skip configurations predicted this much slower than the default (0: off)
  int max_attempts = 2;            // failed measurements of one configuration before it counts as failed
  double claim_hold_s = 1800;      // how long a claim on a configuration (tuning_log.h) holds without its result
};

struct Trial {
  int trial = 0;
  std::string tile;
  double cost = 0;       // +inf for a failed measurement
  double best_so_far = 0;
  bool resumed = false;  // read from the log
};

struct TuneResult {
  std::string best_tile;
  double best_cost = 0;
  std::string unit;
  int measured = 0;  // measured by this run
  int resumed = 0;   // taken from the log
  int failed = 0;    // measurements of this run that failed
  int retried = 0;   // configurations that had failed in the log, measured again
  int skipped = 0;   // proposed configurations skipped for their predicted time
  int claimed_elsewhere = 0;  // proposed configurations another tuner sharing the log had claimed
  double default_cost = 0;  // the default plan's measured cost (+inf when it failed; 0 when not measured)
  std::string first_error;
  std::vector<Trial> trials;
};

// The strategy's next `n` configurations (indices into `space`), given what the log
// (`options.log`, may be empty) holds for the problem: one step of the tuning loop without measuring,
// for a driver that measures elsewhere (scripts/tessel_dask.py measures on Dask and appends the
// results to the log, then asks again). Deterministic for a given seed and log. Empty: the strategy
// is done or `options.trials` configurations are logged.
std::vector<int> propose_batch(const Space& space, FitChecker& fit, const TuneOptions& options, int n);

TuneResult run_tuning(const Space& space, FitChecker& fit, Measurer& measurer, const TuneOptions& options);

}  // namespace tessel::tune
