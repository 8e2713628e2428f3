#include "compiler/tune/best_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "compiler/frontend/frontend.h"
#include "isa/base/error.h"
#include "isa/base/file_io.h"
#include "isa/hierarchy.h"

namespace tessel::tune {

namespace {

nlohmann::json load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json{{"entries", nlohmann::json::object()}};
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.contains("entries") || !j["entries"].is_object()) throw std::runtime_error("no \"entries\" object");
    return j;
  } catch (const std::exception& e) {
    throw UserError(path + ": not a tessel best-config database (" + e.what() + "); remove it or pass another --db");
  }
}

}  // namespace

std::string default_db_path() {
  if (const char* p = std::getenv("TESSEL_TUNE_DB")) return std::string(p) == "off" ? "" : p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tessel/best.json";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tessel/best.json";
  return "";
}

std::optional<BestEntry> db_lookup(const std::string& path, const ProblemKey& key) {
  if (path.empty()) return std::nullopt;
  const nlohmann::json j = load(path);
  const auto& entries = j["entries"];
  auto it = entries.find(key.to_string());
  if (it == entries.end()) return std::nullopt;
  BestEntry e;
  e.tile = it->value("tile", "");
  e.cost = it->value("cost", 0.0);
  e.unit = it->value("unit", "");
  e.strategy = it->value("strategy", "");
  e.trials = it->value("trials", 0);
  if (e.tile.empty()) return std::nullopt;
  return e;
}

bool db_update(const std::string& path, const ProblemKey& key, const BestEntry& e) {
  if (path.empty()) return false;
  // read-compare-replace under an advisory lock on PATH.lock (the database itself is replaced by
  // a rename): tuners finishing together keep the better entry, not the last writer's
  make_parent_dirs(path, "--db");
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) throw UserError("--db " + path + ": cannot create the lock file " + lock_path + ": " + std::strerror(errno));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{lock};
  while (::flock(lock, LOCK_EX) != 0)
    if (errno != EINTR) throw UserError("--db " + path + ": cannot lock " + lock_path + ": " + std::strerror(errno));
  nlohmann::json j = load(path);
  auto& entries = j["entries"];
  const std::string k = key.to_string();
  if (entries.contains(k) && entries[k].value("unit", "") == e.unit && entries[k].value("cost", 0.0) <= e.cost)
    return false;
  entries[k] = {{"tile", e.tile}, {"cost", e.cost}, {"unit", e.unit}, {"strategy", e.strategy}, {"trials", e.trials}};
  make_parent_dirs(path, "--db");
  replace_file(path, j.dump(2) + "\n", "--db");
  return true;
}

std::optional<TunedPlan> tuned_tile_for(const std::string& file, const std::string& def, const std::string& target,
                                          const std::map<std::string, int64_t>& sizes, const isa::Overrides& overrides) {
  const std::string path = default_db_path();
  if (target == "c" || path.empty() || !std::filesystem::exists(path)) return std::nullopt;
  const frontend::Module m = frontend::load_module(file);
  const ir::Function& f = frontend::select_function(m, def);
  const isa::Hierarchy h = isa::load_hierarchy(target, overrides);
  const ProblemKey key{f.name, h.name, shape_text(sizes), h.overrides, h.description_hash};
  auto e = db_lookup(path, key);
  if (!e) return std::nullopt;
  if (e->tile == "default") {  // tune measured the target's own plan best: nothing to change
    std::cerr << "tessel: the tuning database " << path << ", key " << key.to_string()
              << ": the target's own plan measured best (" << e->cost << " " << e->unit << ")\n";
    return std::nullopt;
  }
  std::cerr << "tessel: plan " << e->tile << " from the tuning database " << path << ", key " << key.to_string() << " ("
            << e->cost << " " << e->unit << "; --tile overrides, --no-tuned or TESSEL_TUNE_DB=off ignores it)\n";
  return TunedPlan{e->tile, path, key.to_string(), e->cost, e->unit};
}

}  // namespace tessel::tune
