// The tuning loop: a strategy proposes batches, the measurer measures them, every measurement is
// appended to the log and recorded in the search state, a progress line shows trial i/N, the best
// so far and the ETA. Configurations the log already holds for this problem count as trials and
// are never measured again. The best configuration goes to the database.
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
