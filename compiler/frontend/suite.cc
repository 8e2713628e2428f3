#include "compiler/frontend/suite.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "compiler/frontend/frontend.h"
#include "isa/base/error.h"
#include "isa/base/file_io.h"

namespace tessel::frontend {

namespace {

std::string where(const std::string& path, const YAML::Node& n) {
  return path + ":" + std::to_string(n.Mark().line + 1);
}

std::string scalar(const std::string& path, const YAML::Node& parent, const char* key, bool required,
                   const std::string& what) {
  const YAML::Node n = parent[key];
  if (!n) {
    if (required) throw UserError(where(path, parent) + ": " + what + " needs the key '" + key + "'");
    return "";
  }
  if (!n.IsScalar()) throw UserError(where(path, n) + ": '" + key + "' of " + what + " must be a string");
  return n.as<std::string>();
}

}  // namespace

Suite load_suite(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(read_bounded_file(path, "shape suite", kMaxDescriptionBytes));
  } catch (const YAML::Exception& e) {
    throw UserError(path + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
  }
  if (!root.IsMap()) throw UserError(path + ": a shape suite is a mapping with 'suite' and 'entries'");
  static const std::set<std::string> top_keys = {"suite", "description", "entries"};
  static const std::set<std::string> entry_keys = {"name", "file", "def", "shape", "tags"};
  for (const auto& kv : root)
    if (!top_keys.count(kv.first.as<std::string>()))
      throw UserError(where(path, kv.first) + ": unknown key '" + kv.first.as<std::string>() +
                      "' (expected suite, description, entries)");
  Suite s;
  s.name = scalar(path, root, "suite", true, "the suite");
  s.description = scalar(path, root, "description", false, "the suite");
  const YAML::Node entries = root["entries"];
  if (!entries || !entries.IsSequence() || entries.size() == 0)
    throw UserError(path + ": 'entries' must be a non-empty list");
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::set<std::string> names;
  for (const YAML::Node& e : entries) {
    if (!e.IsMap()) throw UserError(where(path, e) + ": each entry is a mapping (name, file, def, shape)");
    for (const auto& kv : e)
      if (!entry_keys.count(kv.first.as<std::string>()))
        throw UserError(where(path, kv.first) + ": unknown key '" + kv.first.as<std::string>() +
                        "' in an entry (expected name, file, def, shape, tags)");
    SuiteEntry entry;
    entry.name = scalar(path, e, "name", true, "an entry");
    if (!names.insert(entry.name).second) throw UserError(where(path, e) + ": entry name '" + entry.name + "' is used twice");
    entry.file = (dir / scalar(path, e, "file", true, "entry '" + entry.name + "'")).string();
    entry.def = scalar(path, e, "def", false, "entry '" + entry.name + "'");
    const YAML::Node shape = e["shape"];
    if (!shape || !shape.IsMap()) throw UserError(where(path, e) + ": entry '" + entry.name + "' needs a 'shape' mapping");
    for (const auto& kv : shape) {
      const std::string key = kv.first.as<std::string>();
      int64_t v = -1;
      try {
        v = kv.second.as<int64_t>();
      } catch (const YAML::Exception&) {
      }
      if (v < 0)
        throw UserError(where(path, kv.second) + ": size '" + key + "' of entry '" + entry.name +
                        "' must be a non-negative integer");
      entry.shape[key] = v;
    }
    if (const YAML::Node tags = e["tags"]) {
      if (!tags.IsSequence()) throw UserError(where(path, tags) + ": 'tags' must be a list");
      for (const YAML::Node& t : tags) entry.tags.push_back(t.as<std::string>());
    }
    s.entries.push_back(std::move(entry));
  }
  return s;
}

void check_suite(const Suite& suite) {
  for (const SuiteEntry& e : suite.entries) {
    const Module m = load_module(e.file);
    const ir::Function& f = select_function(m, e.def);
    const std::map<std::string, int64_t> sizes =
        ir::bind_sizes(f, e.shape, "suite '" + suite.name + "', entry '" + e.name + "'");
    for (const std::string& p : f.params)
      if (!sizes.count(p))
        throw UserError("suite '" + suite.name + "', entry '" + e.name + "': no size for '" + p + "' of '" + f.name + "'");
    for (const auto& [k, v] : e.shape) {
      bool known = false;
      for (const std::string& p : f.params) known |= p == k;
      if (!known)
        throw UserError("suite '" + suite.name + "', entry '" + e.name + "': '" + k + "' is not a size parameter of '" +
                        f.name + "'");
    }
  }
}

}  // namespace tessel::frontend
