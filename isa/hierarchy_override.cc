#include "isa/hierarchy_override.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>

#include "isa/base/error.h"
#include "isa/hierarchy.h"

namespace tessel::isa {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

[[noreturn]] void bad(const std::string& key, const std::string& reason) {
  throw UserError("--set " + key + ": " + reason);
}

Overrides sorted_checked(std::vector<Override> items) {
  std::sort(items.begin(), items.end(), [](const Override& a, const Override& b) { return a.key < b.key; });
  for (size_t i = 1; i < items.size(); ++i)
    if (items[i].key == items[i - 1].key) bad(items[i].key, "given twice (" + items[i - 1].value + " and " + items[i].value + ")");
  return Overrides{std::move(items)};
}

// ---------------------------------------------------------------------------------------------
// Where a key points: the map holding the field, and the schema section of that map.
struct Target {
  YAML::Node map;
  std::string section;  // hierarchy_schema_keys section
  std::string what;     // for messages: "level 'L1'"
};

std::vector<std::string> names_in(const YAML::Node& list, const char* key) {
  std::vector<std::string> out;
  if (list && list.IsSequence())
    for (const YAML::Node& e : list)
      if (e.IsMap() && e[key] && e[key].IsScalar()) out.push_back(e[key].Scalar());
  return out;
}

std::vector<std::string> path_names(const YAML::Node& paths) {
  std::vector<std::string> out;
  if (paths && paths.IsSequence())
    for (const YAML::Node& p : paths)
      if (p.IsMap() && p["from"].IsScalar() && p["to"].IsScalar()) out.push_back(p["from"].as<std::string>() + "->" + p["to"].as<std::string>());
  return out;
}

// The element of `list` whose `key` is `name` (null node if none).
YAML::Node element(const YAML::Node& list, const char* key, const std::string& name) {
  if (list && list.IsSequence())
    for (const YAML::Node& e : list)
      if (e.IsMap() && e[key] && e[key].IsScalar() && e[key].Scalar() == name) return e;
  return YAML::Node(YAML::NodeType::Undefined);
}

Target find_path(YAML::Node& root, const std::string& key, const std::string& prefix) {
  const size_t arrow = prefix.find("->");
  const std::string from = trim(prefix.substr(0, arrow)), to = trim(prefix.substr(arrow + 2));
  YAML::Node paths = root["paths"];
  if (paths && paths.IsSequence())
    for (YAML::Node p : paths)
      if (p.IsMap() && p["from"].IsScalar() && p["to"].IsScalar() && p["from"].as<std::string>() == from && p["to"].as<std::string>() == to)
        return {p, "path", "path " + from + "->" + to};
  bad(key, "no transfer path " + from + "->" + to + " (paths: " + joined(path_names(paths)) + ")");
}

Target find_section(YAML::Node& root, const std::string& key, const std::string& name) {
  YAML::Node s = root[name];
  if (!s || !s.IsMap()) bad(key, "this description has no " + name + " section");
  return {s, name, "the " + name + " section"};
}

Target find_named(YAML::Node& root, const std::string& key, const std::string& name) {
  YAML::Node level = element(root["levels"], "name", name);
  YAML::Node unit = element(root["units"], "name", name);
  if (level.IsDefined() && unit.IsDefined()) bad(key, "'" + name + "' names both a level and a unit");
  if (level.IsDefined()) return {level, "level", "level '" + name + "'"};
  if (unit.IsDefined()) return {unit, "unit", "unit '" + name + "'"};
  bad(key, "no level or unit named '" + name + "' (levels: " + joined(names_in(root["levels"], "name")) +
               "; units: " + joined(names_in(root["units"], "name")) + "; paths: " + joined(path_names(root["paths"])) +
               "; sections: sync, gpu)");
}

Target resolve(YAML::Node& root, const std::string& key, std::string& field) {
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos) {
    field = key;
    return {root, "top", "the description"};
  }
  const std::string prefix = key.substr(0, dot);
  field = key.substr(dot + 1);
  if (prefix.empty() || field.empty()) bad(key, "expected FIELD, LEVEL.FIELD, UNIT.FIELD, FROM->TO.FIELD or sync.FIELD");
  if (prefix.find("->") != std::string::npos) return find_path(root, key, prefix);
  if (prefix == "sync" || prefix == "gpu") return find_section(root, key, prefix);
  return find_named(root, key, prefix);
}

void apply_one(YAML::Node& root, const Override& o) {
  std::string field;
  Target t = resolve(root, o.key, field);
  const std::set<std::string>& known = hierarchy_schema_keys(t.section);
  if (!known.count(field))
    bad(o.key, "unknown field '" + field + "' of " + t.what + " (fields: " +
                   joined(std::vector<std::string>(known.begin(), known.end())) + ")");
  YAML::Node current = t.map[field];
  if (current && !current.IsScalar())
    bad(o.key, field + " of " + t.what + " is a " + (current.IsSequence() ? "list" : "map") + ", not a value --set can replace");
  t.map[field] = o.value;
}

// Scalars in canonical form: integers in decimal, other numbers as the shortest round-trip
// decimal, everything else quoted.
std::string canonical_scalar(const std::string& s) {
  if (!s.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0 && end && *end == '\0') return std::to_string(i);
    const double d = std::strtod(s.c_str(), &end);
    if (end && *end == '\0' && std::isfinite(d)) {
      if (d == std::floor(d) && std::fabs(d) < 9e15) return std::to_string(static_cast<long long>(d));
      char buf[64];  // not hardware: %.17g needs at most 24 characters
      std::snprintf(buf, sizeof buf, "%.17g", d);
      return buf;
    }
  }
  std::string q = "\"";
  for (char c : s) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string Overrides::text() const {
  std::string out;
  for (const Override& o : items) out += (out.empty() ? "" : ",") + o.key + "=" + o.value;
  return out;
}

std::string expand_size_suffix(const std::string& key, const std::string& value) {
  static const std::pair<const char*, uint64_t> kSuffixes[] = {{"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}};
  const std::string v = trim(value);
  for (const auto& [suffix, scale] : kSuffixes) {
    const std::string sfx = suffix;
    if (v.size() <= sfx.size() || v.compare(v.size() - sfx.size(), sfx.size(), sfx) != 0) continue;
    const std::string number = trim(v.substr(0, v.size() - sfx.size()));
    char* end = nullptr;
    const double x = std::strtod(number.c_str(), &end);
    if (number.empty() || !end || *end != '\0' || !(x >= 0) || !std::isfinite(x))
      bad(key + "=" + value, "expected a non-negative number before " + sfx);
    const double bytes = x * double(scale);
    if (bytes != std::floor(bytes) || bytes > 9e15) bad(key + "=" + value, "is not a whole number of bytes");
    return std::to_string(static_cast<uint64_t>(bytes));
  }
  return v;
}

Overrides parse_overrides(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::vector<Override> items;
  for (const auto& [k, v] : pairs) {
    const std::string key = trim(k);
    if (key.empty()) bad(k + "=" + v, "empty key (expected KEY=VALUE)");
    if (trim(v).empty()) bad(key, "empty value (expected KEY=VALUE)");
    items.push_back({key, expand_size_suffix(key, v)});
  }
  return sorted_checked(std::move(items));
}

Overrides parse_overrides(const std::vector<std::string>& texts) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& text : texts) {
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t comma = text.find(',', pos);
      if (comma == std::string::npos) comma = text.size();
      const std::string item = text.substr(pos, comma - pos);
      pos = comma + 1;
      if (trim(item).empty()) {
        if (trim(text).empty()) break;
        bad("'" + text + "'", "an empty item (expected KEY=VALUE[,KEY=VALUE...])");
      }
      const size_t eq = item.find('=');
      if (eq == std::string::npos) bad(trim(item), "expected KEY=VALUE");
      pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  return parse_overrides(pairs);
}

Overrides parse_overrides(const std::string& text) { return parse_overrides(std::vector<std::string>{text}); }

void apply_overrides(YAML::Node& root, const Overrides& o, const std::string& file) {
  for (const Override& item : o.items) {
    try {
      apply_one(root, item);
    } catch (const UserError& e) {
      throw UserError(file + ": " + e.what());
    }
  }
}

std::string canonical_yaml(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      std::map<std::string, std::string> sorted;
      for (auto it = node.begin(); it != node.end(); ++it) sorted[it->first.Scalar()] = canonical_yaml(it->second);
      std::string out = "{";
      for (const auto& [k, v] : sorted) out += canonical_scalar(k) + ":" + v + ",";
      return out + "}";
    }
    case YAML::NodeType::Sequence: {
      std::string out = "[";
      for (const YAML::Node& e : node) out += canonical_yaml(e) + ",";
      return out + "]";
    }
    case YAML::NodeType::Scalar: return canonical_scalar(node.Scalar());
    default: return "~";
  }
}

std::string description_hash(const YAML::Node& root) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64-bit offset basis and prime
  for (unsigned char c : canonical_yaml(root)) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace tessel::isa
