// The tuning log: one JSON object per line per measurement, appended as measurements arrive (a
// run killed half-way keeps what it measured). A later run of the same problem (operator, target,
// shape, description variant) reads it back and does not measure those configurations again.
// Scripts plot it.
//   {"op":"matmul","target":"davinci-910","shape":"K=1024,M=1024,N=1024","tile":"m=128/64,...",
//    "ok":true,"cost":15407,"unit":"cycles","strategy":"model","trial":12,"predicted":1.2e4,"wall_s":1.3,
//    "description_hash":"3f0c...","overrides":"L1.capacity_bytes=524288",
//    "pipe_busy":{"M":8192,...},"predicted_pipe_busy":{"M":8192,...},"energy_pj":2.1e7,"predicted_energy_pj":2.0e7}
// A description variant (`--set`, isa/hierarchy_override.h) is its own problem: records match by
// description_hash when the problem has overrides; records without overrides (or written before
// the field existed) belong to the unmodified description.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessel::tune {

struct ProblemKey {
  std::string op, target, shape;  // shape: NAME=VALUE sorted by name
  std::string overrides;          // canonical --set text ("" for the description as written)
  std::string description_hash;   // of the effective description (recorded; identifies a variant)
  // The variant part of the key: "" for the description as written, else its hash.
  std::string variant() const { return overrides.empty() ? "" : description_hash; }
  bool operator<(const ProblemKey& o) const {
    return std::make_tuple(op, target, shape, variant()) < std::make_tuple(o.op, o.target, o.shape, o.variant());
  }
  bool operator==(const ProblemKey& o) const { return !(*this < o) && !(o < *this); }
  std::string to_string() const { return op + "|" + target + "|" + shape + (variant().empty() ? "" : "|" + variant()); }
};
std::string shape_text(const std::map<std::string, int64_t>& sizes);

struct LogEntry {
  std::string tile;
  bool ok = false;
  double cost = 0;
  std::string unit, strategy, error;
  int trial = 0;
  double predicted = 0, wall_s = 0;
  // Simulator measurements: the measured and the analytic model's per-pipe busy cycles (busiest
  // core) and energy (pJ); written only when present ("pipe_busy", "predicted_pipe_busy",
  // "energy_pj", "predicted_energy_pj"): scripts/pipe_correlation.py reads them.
  std::map<std::string, double> pipe_busy, predicted_pipe_busy;
  double energy_pj = 0, predicted_energy_pj = 0;
};

// Entries of `path` for `problem`, in file order (no file: none). Malformed lines are a UserError
// naming the file and line, except a last line without its newline (a writer killed mid-record):
// skipped, its size in `torn_bytes` (when given).
std::vector<LogEntry> read_log(const std::string& path, const ProblemKey& problem, size_t* torn_bytes = nullptr);
// Appends one record as a whole line under an advisory lock (flock) on the log, fsync'd before the
// lock is released, so that tuners sharing a log never interleave or lose records: a torn last
// line left by a killed writer is cut off first (reported on stderr), and `e.trial` is replaced by
// the problem's record count in the log plus one (trial numbers stay unique across tuners).
// Returns the trial number written. UserError naming the path when the file cannot be written.
int append_log(const std::string& path, const ProblemKey& problem, const LogEntry& e);

// Claims of configurations being measured, beside the log in LOG.claims (JSON lines: op, target,
// shape, variant, tile, host, pid, until): tuners sharing a log claim what they are about to
// measure, under the claims file's lock, so two tuners never measure one configuration at the same
// time (two with the same seed used to measure the same 16). A claim lapses when its `until`
// (seconds since the epoch) has passed or its process is gone from this host. Returns the tiles
// of `tiles` this process now holds (the others: settled in the log, or claimed by another).
std::vector<std::string> claim_configurations(const std::string& log, const ProblemKey& problem,
                                              const std::vector<std::string>& tiles, double hold_s, int max_attempts);

// What a log holds for one configuration: its best successful cost (+inf when none) and how many
// of its measurements failed. A configuration is settled (a trial, not measured again) once it
// was measured, or failed `max_attempts` times: a transient failure is retried, a persistent one
// is not retried forever.
struct LoggedResult {
  double cost = std::numeric_limits<double>::infinity();
  int failures = 0;
  bool ok() const { return cost < std::numeric_limits<double>::infinity(); }
  bool settled(int max_attempts) const { return ok() || failures >= max_attempts; }
};
// The log's records of `problem` by tile text (no log or "" : none).
std::map<std::string, LoggedResult> logged_results(const std::string& path, const ProblemKey& problem,
                                                   size_t* torn_bytes = nullptr);

}  // namespace tessel::tune
