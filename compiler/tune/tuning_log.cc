#include "compiler/tune/tuning_log.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "isa/base/error.h"
#include "isa/base/file_io.h"

namespace tessel::tune {

std::string shape_text(const std::map<std::string, int64_t>& sizes) {
  std::string s;
  for (const auto& [n, v] : sizes) s += (s.empty() ? "" : ",") + n + "=" + std::to_string(v);
  return s;
}

std::vector<LogEntry> read_log(const std::string& path, const ProblemKey& problem) {
  std::vector<LogEntry> out;
  std::ifstream in(path);
  if (!in) return out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      // a run killed mid-write leaves a partial last line: ignore only that one
      if (in.peek() == EOF) break;
      throw UserError(path + ":" + std::to_string(n) + ": not a JSON object (" + e.what() +
                      "); a tuning log holds one measurement per line");
    }
    try {
      if (j.value("op", "") != problem.op || j.value("target", "") != problem.target || j.value("shape", "") != problem.shape)
        continue;
      LogEntry e;
      e.tile = j.at("tile").get<std::string>();
      e.ok = j.value("ok", false);
      e.cost = e.ok ? j.at("cost").get<double>() : INFINITY;
      e.unit = j.value("unit", "");
      e.strategy = j.value("strategy", "");
      e.error = j.value("error", "");
      e.trial = j.value("trial", 0);
      e.predicted = j.value("predicted", 0.0);
      e.wall_s = j.value("wall_s", 0.0);
      out.push_back(e);
    } catch (const nlohmann::json::exception& e) {
      throw UserError(path + ":" + std::to_string(n) + ": bad tuning log entry (" + e.what() + ")");
    }
  }
  return out;
}

void append_log(const std::string& path, const ProblemKey& problem, const LogEntry& e) {
  nlohmann::json j = {{"op", problem.op},   {"target", problem.target}, {"shape", problem.shape},
                      {"tile", e.tile},     {"ok", e.ok},               {"unit", e.unit},
                      {"strategy", e.strategy}, {"trial", e.trial},     {"predicted", e.predicted},
                      {"wall_s", e.wall_s}};
  if (e.ok) j["cost"] = e.cost;
  else j["error"] = e.error;
  make_parent_dirs(path, "--log");
  append_record(path, j.dump() + "\n", "--log");
}

}  // namespace tessel::tune
