// Replayed measurements: costs looked up in an earlier tuning log of the same problem (e.g. an
// exhaustive run), so strategies can be compared over many seeds without measuring again. The
// simulator is deterministic, so a replay returns what measuring would. Configurations the log
// does not hold fail with a message saying so.
#include <fstream>

#include "compiler/tune/measure.h"
#include "compiler/tune/tuning_log.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

class ReplayMeasurer : public Measurer {
 public:
  ReplayMeasurer(const std::string& path, const ProblemKey& problem) : path_(path) {
    if (!std::ifstream(path)) throw UserError("--replay " + path + ": cannot read the tuning log");
    for (const auto& e : read_log(path, problem)) {
      entries_[e.tile] = e;
      if (unit_.empty()) unit_ = e.unit;
    }
    if (entries_.empty())
      throw UserError("--replay " + path + ": the log holds no measurement of " + problem.to_string());
  }
  std::string name() const override { return "replay"; }
  std::string unit() const override { return unit_; }
  std::vector<Measurement> measure(const std::vector<tile::TileSpec>& specs) override {
    std::vector<Measurement> out;
    for (const auto& s : specs) {
      Measurement m;
      m.key = s.axes.empty() ? "default" : s.to_string();
      m.unit = unit_;
      auto it = entries_.find(m.key);
      if (it == entries_.end()) {
        m.error = "not in the replayed log " + path_;
      } else {
        m.ok = it->second.ok;
        m.cost = it->second.cost;
        m.error = it->second.error;
      }
      landed(out.size(), m);
      out.push_back(m);
    }
    return out;
  }

 private:
  std::string path_, unit_;
  std::map<std::string, LogEntry> entries_;
};

}  // namespace

std::unique_ptr<Measurer> make_replay_measurer(const std::string& log, const ProblemKey& problem) {
  return std::make_unique<ReplayMeasurer>(log, problem);
}

}  // namespace tessel::tune
