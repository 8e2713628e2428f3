#include "compiler/tune/tuning_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>
#include <sstream>
#include <set>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "isa/base/error.h"
#include "isa/base/file_io.h"

namespace tessel::tune {

std::string shape_text(const std::map<std::string, int64_t>& sizes) {
  std::string s;
  for (const auto& [n, v] : sizes) s += (s.empty() ? "" : ",") + n + "=" + std::to_string(v);
  return s;
}

std::vector<LogEntry> read_log(const std::string& path, const ProblemKey& problem, size_t* torn_bytes) {
  std::vector<LogEntry> out;
  if (torn_bytes) *torn_bytes = 0;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return out;  // none yet, or a device (/dev/null, /dev/full)
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  int n = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      // a writer killed mid-record leaves a last line without its newline: never a record. Only
      // the start of a record is taken for one; other text means the file is not a tuning log,
      // and is never cut off by the next append
      if (text.find_first_not_of(" \t\r", pos) != std::string::npos && text[text.find_first_not_of(" \t\r", pos)] != '{')
        throw UserError(path + ":" + std::to_string(n + 1) + ": not a tessel tuning log (a line that is not a JSON record); "
                        "give --log a new file or one tessel tune wrote");
      if (torn_bytes) *torn_bytes = text.size() - pos;
      break;
    }
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      const size_t first = line.find_first_not_of(" \t\r");
      if (pos >= text.size() && line[first] == '{') {  // a malformed last record: as a torn one
        if (torn_bytes) *torn_bytes = line.size() + 1;
        break;
      }
      throw UserError(path + ":" + std::to_string(n) + ": not a JSON object (" + e.what() +
                      "); not a tessel tuning log, which holds one measurement per line");
    }
    if (!j.is_object() || !j.contains("op") || !j.contains("tile"))
      throw UserError(path + ":" + std::to_string(n) + ": not a tessel tuning log record (a JSON object with op, target, "
                      "shape, tile and ok); give --log a new file or one tessel tune wrote");
    try {
      if (j.value("op", "") != problem.op || j.value("target", "") != problem.target || j.value("shape", "") != problem.shape)
        continue;
      const std::string variant = j.value("overrides", "").empty() ? "" : j.value("description_hash", "");
      if (variant != problem.variant()) continue;
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
      e.pipe_busy = j.value("pipe_busy", std::map<std::string, double>{});
      e.predicted_pipe_busy = j.value("predicted_pipe_busy", std::map<std::string, double>{});
      e.energy_pj = j.value("energy_pj", 0.0);
      e.predicted_energy_pj = j.value("predicted_energy_pj", 0.0);
      out.push_back(e);
    } catch (const nlohmann::json::exception& e) {
      throw UserError(path + ":" + std::to_string(n) + ": bad tuning log entry (" + e.what() + ")");
    }
  }
  return out;
}

namespace {

[[noreturn]] void cannot_write(const std::string& path, const std::string& step) {
  throw UserError("--log " + path + ": cannot write (" + step + "): " + std::strerror(errno));
}

// An open file descriptor holding an exclusive flock until destroyed.
struct LockedFile {
  int fd = -1;
  LockedFile(const std::string& path, int flags) {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) cannot_write(path, "open");
    while (::flock(fd, LOCK_EX) != 0)
      if (errno != EINTR) cannot_write(path, "lock");
  }
  ~LockedFile() {
    if (fd >= 0) ::close(fd);  // releases the lock
  }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;
};

}  // namespace

int append_log(const std::string& path, const ProblemKey& problem, const LogEntry& e) {
  make_parent_dirs(path, "--log");
  LockedFile f(path, O_RDWR | O_CREAT | O_APPEND);
  // under the lock: cut a torn tail (no newline) off, then count this problem's records
  size_t torn = 0;
  const std::vector<LogEntry> before = read_log(path, problem, &torn);
  if (torn) {
    const off_t size = ::lseek(f.fd, 0, SEEK_END);
    if (size < 0 || ::ftruncate(f.fd, size - off_t(torn)) != 0) cannot_write(path, "truncate a torn last line");
    std::cerr << "tune: " << path << ": dropped a torn last line (" << torn
              << " bytes without a newline: a tuner stopped mid-record)\n";
  }
  const int trial = int(before.size()) + 1;
  nlohmann::json j = {{"op", problem.op},   {"target", problem.target}, {"shape", problem.shape},
                      {"tile", e.tile},     {"ok", e.ok},               {"unit", e.unit},
                      {"strategy", e.strategy}, {"trial", trial},       {"predicted", e.predicted},
                      {"wall_s", e.wall_s}};
  if (!problem.description_hash.empty()) j["description_hash"] = problem.description_hash;
  if (!problem.overrides.empty()) j["overrides"] = problem.overrides;
  if (e.ok) j["cost"] = e.cost;
  else j["error"] = e.error;
  if (!e.pipe_busy.empty()) j["pipe_busy"] = e.pipe_busy;
  if (!e.predicted_pipe_busy.empty()) j["predicted_pipe_busy"] = e.predicted_pipe_busy;
  if (e.energy_pj > 0) j["energy_pj"] = e.energy_pj;
  if (e.predicted_energy_pj > 0) j["predicted_energy_pj"] = e.predicted_energy_pj;
  const std::string line = j.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(f.fd, line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) cannot_write(path, "write");
    done += size_t(w);
  }
  if (::fsync(f.fd) != 0) cannot_write(path, "fsync");
  return trial;
}

std::map<std::string, LoggedResult> logged_results(const std::string& path, const ProblemKey& problem, size_t* torn_bytes) {
  std::map<std::string, LoggedResult> out;
  if (path.empty()) return out;
  for (const auto& e : read_log(path, problem, torn_bytes)) {
    LoggedResult& l = out[e.tile];
    if (e.ok) l.cost = std::min(l.cost, e.cost);
    else ++l.failures;
  }
  return out;
}

namespace {

bool process_alive(const std::string& host, int64_t pid) {
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  if (host != name) return true;  // another machine's claim: trust its deadline
  return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

std::vector<std::string> claim_configurations(const std::string& log, const ProblemKey& problem,
                                              const std::vector<std::string>& tiles, double hold_s, int max_attempts) {
  if (log.empty()) return tiles;
  const std::string path = log + ".claims";
  make_parent_dirs(path, "--log");
  LockedFile f(path, O_RDWR | O_CREAT);
  const auto logged = logged_results(log, problem);
  const double now = double(std::time(nullptr));
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const int64_t me = int64_t(::getpid());
  // the live claims of others, and the claims file rewritten without the lapsed ones
  std::string text, kept;
  {
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::set<std::string> taken;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("until", 0.0) < now || !process_alive(j.value("host", ""), j.value("pid", int64_t(0)))) continue;
    kept += line + "\n";
    if (j.value("pid", int64_t(0)) == me && j.value("host", "") == host) continue;
    if (j.value("op", "") == problem.op && j.value("target", "") == problem.target && j.value("shape", "") == problem.shape &&
        j.value("variant", "") == problem.variant())
      taken.insert(j.value("tile", ""));
  }
  std::vector<std::string> mine;
  for (const auto& t : tiles) {
    auto it = logged.find(t);
    if (taken.count(t) || (it != logged.end() && it->second.settled(max_attempts))) continue;
    mine.push_back(t);
    kept += nlohmann::json{{"op", problem.op},     {"target", problem.target}, {"shape", problem.shape},
                           {"variant", problem.variant()}, {"tile", t},   {"host", host},
                           {"pid", me},            {"until", now + hold_s}}
                .dump() +
            "\n";
  }
  if (::ftruncate(f.fd, 0) != 0 || ::pwrite(f.fd, kept.data(), kept.size(), 0) != ssize_t(kept.size()))
    cannot_write(path, "write the claims");
  return mine;
}

}  // namespace tessel::tune
