#include "compiler/tune/space.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "compiler/tune/fit_check.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

int64_t parse_int(const std::string& s, const std::string& entry) {
  if (s.empty() || s.size() > 12 || !std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit((unsigned char)c); }))
    throw UserError("--space: '" + entry + "': expected a positive integer, got '" + s +
                    "' (form: axis=MIN-MAX[:pow2][:xN]/A|B|C, e.g. m=64-512:pow2/32|64)");
  int64_t v = std::stoll(s);
  if (v < 1) throw UserError("--space: '" + entry + "': sizes must be at least 1");
  return v;
}

LevelRange parse_level(const std::string& text, const std::string& entry) {
  LevelRange r;
  if (text.empty()) throw UserError("--space: '" + entry + "': empty level");
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t colon = text.find(':', pos);
    parts.push_back(text.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos));
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  const std::string& base = parts[0];
  if (base.find('|') != std::string::npos || base.find('-') == std::string::npos) {
    size_t p = 0;
    while (p <= base.size()) {
      size_t bar = base.find('|', p);
      r.list.push_back(parse_int(base.substr(p, bar == std::string::npos ? std::string::npos : bar - p), entry));
      p = bar == std::string::npos ? base.size() + 1 : bar + 1;
    }
  } else {
    size_t dash = base.find('-');
    r.min = parse_int(base.substr(0, dash), entry);
    r.max = parse_int(base.substr(dash + 1), entry);
    if (r.min > r.max)
      throw UserError("--space: '" + entry + "': the range " + base + " is empty (MIN must not exceed MAX)");
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& m = parts[i];
    if (m == "pow2") r.pow2 = true;
    else if (m.size() > 1 && m[0] == 'x') r.multiple_of = parse_int(m.substr(1), entry);
    else
      throw UserError("--space: '" + entry + "': unknown modifier ':" + m + "' (modifiers: :pow2, :xN for multiples of N)");
  }
  return r;
}

std::string level_text(const LevelRange& r) {
  std::string s;
  if (!r.list.empty()) {
    for (auto v : r.list) s += (s.empty() ? "" : "|") + std::to_string(v);
  } else {
    s = std::to_string(r.min) + "-" + std::to_string(r.max);
  }
  if (r.pow2) s += ":pow2";
  if (r.multiple_of > 1) s += ":x" + std::to_string(r.multiple_of);
  return s;
}

}  // namespace

std::vector<int64_t> LevelRange::values(int64_t extent) const {
  std::set<int64_t> out;
  auto keep = [&](int64_t v) {
    if (pow2 && !is_pow2(v)) return;
    if (v % multiple_of) return;
    out.insert(std::min(v, extent));
  };
  if (!list.empty()) {
    for (auto v : list) keep(v);
  } else {
    for (int64_t v = min; v <= max; v = pow2 && is_pow2(v) ? v * 2 : v + 1) {
      keep(v);
      if (v >= extent) break;  // larger sizes clamp to the extent
    }
  }
  return {out.begin(), out.end()};
}

std::string SpaceSpec::to_string() const {
  std::string s;
  for (const auto& a : axes) {
    if (!s.empty()) s += ",";
    s += a.axis + "=" + level_text(a.outer);
    if (!a.inner_tied) s += "/" + level_text(a.inner);
  }
  return s;
}

SpaceSpec parse_space_spec(const std::string& text) {
  SpaceSpec spec;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string entry = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (entry.empty()) throw UserError("--space '" + text + "': empty entry (form: m=64-512:pow2/32|64,n=...)");
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError("--space: '" + entry + "': expected axis=OUTER[/INNER], e.g. m=64-512:pow2/32|64");
    AxisRange a;
    a.axis = entry.substr(0, eq);
    if (!(std::isalpha((unsigned char)a.axis[0]) || a.axis[0] == '_') ||
        !std::all_of(a.axis.begin(), a.axis.end(), [](char c) { return std::isalnum((unsigned char)c) || c == '_'; }))
      throw UserError("--space: '" + entry + "': '" + a.axis + "' is not an index name");
    for (const auto& b : spec.axes)
      if (b.axis == a.axis) throw UserError("--space: axis '" + a.axis + "' is given twice");
    std::string rest = entry.substr(eq + 1);
    size_t slash = rest.find('/');
    a.outer = parse_level(rest.substr(0, slash), entry);
    if (slash == std::string::npos) {
      a.inner = a.outer;
      a.inner_tied = true;
    } else {
      a.inner = parse_level(rest.substr(slash + 1), entry);
    }
    spec.axes.push_back(a);
  }
  return spec;
}

SpaceSpec default_space_spec(const tile::TileSpec& default_spec, const std::map<std::string, int64_t>& extents,
                             const std::map<std::string, int64_t>& units) {
  SpaceSpec s;
  for (const auto& t : default_spec.axes) {
    AxisRange a;
    a.axis = t.axis;
    if (t.outer <= 1) {
      a.outer.list = {1};
      a.inner = a.outer;
      a.inner_tied = true;
    } else {
      // the matrix unit's size along the axis (FitChecker gives one for every axis of the default)
      TESSEL_CHECK(units.count(t.axis), "tune: no unit size for axis " + t.axis + " (FitChecker sets one per default axis)");
      const int64_t u = std::max<int64_t>(1, units.at(t.axis));
      const int64_t e = extents.count(t.axis) ? extents.at(t.axis) : t.outer;
      a.outer.list.clear();
      // not hardware: the search range, 2 to 32 units
      for (int64_t v = 2 * u; v <= 32 * u; v *= 2) {
        a.outer.list.push_back(std::min(v, e));
        if (v >= e) break;
      }
      a.inner.min = u;
      a.inner.max = 32 * u;  // not hardware: as above
      a.inner.pow2 = is_pow2(u);
      a.inner.multiple_of = is_pow2(u) ? 1 : u;
    }
    s.axes.push_back(a);
  }
  return s;
}

int Space::index_of(const std::string& key) const {
  auto it = index.find(key);
  return it == index.end() ? -1 : it->second;
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> axis_candidates(const SpaceSpec& spec,
                                                                      const std::map<std::string, int64_t>& extents,
                                                                      SpaceStats* stats) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> per_axis;
  for (const auto& a : spec.axes) {
    auto it = extents.find(a.axis);
    if (it == extents.end()) {
      std::string known;
      for (const auto& [n, e] : extents) known += (known.empty() ? "" : ", ") + n;
      throw UserError("--space: unknown axis '" + a.axis + "' (index names: " + known + ")");
    }
    const int64_t e = it->second;
    auto dedup = [&](std::vector<int64_t> vs, size_t* removed) {
      // domination: keep the smallest size of each tile count
      std::vector<int64_t> out;
      std::set<int64_t> counts;
      for (auto v : vs)
        if (counts.insert((e + v - 1) / v).second) out.push_back(v);
        else if (removed) ++*removed;
      return out;
    };
    size_t removed = 0;
    const auto outers = dedup(a.outer.values(e), &removed);
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (auto o : outers) {
      if (a.inner_tied) {
        pairs.push_back({o, o});
        continue;
      }
      // inner tiles within an outer tile of size o: same rule against o
      std::vector<int64_t> inners;
      std::set<int64_t> counts;
      for (auto i : a.inner.values(e)) {
        if (i > o || o % i) continue;
        if (counts.insert((o + i - 1) / i).second) inners.push_back(i);
        else ++removed;
      }
      for (auto i : inners) pairs.push_back({o, i});
    }
    if (pairs.empty())
      throw UserError("--space: axis '" + a.axis + "' has no candidate (outer " + level_text(a.outer) + ", inner " +
                      level_text(a.inner) + " at extent " + std::to_string(e) +
                      "; inner sizes must divide outer ones)");
    if (stats) stats->dominated += removed;
    per_axis.push_back(pairs);
  }
  return per_axis;
}

namespace {

// a contains b: every size of a at least b's (so a's footprints contain b's)
bool contains(const std::vector<std::pair<int64_t, int64_t>>& a, const std::vector<std::pair<int64_t, int64_t>>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first < b[i].first || a[i].second < b[i].second) return false;
  return true;
}

}  // namespace

SpaceSpec with_default_axes(const SpaceSpec& spec_in, const tile::TileSpec& defaults) {
  SpaceSpec spec = spec_in;
  for (const auto& d : defaults.axes) {
    bool named = false;
    for (const auto& a : spec.axes) named = named || a.axis == d.axis;
    if (named) continue;
    AxisRange a;
    a.axis = d.axis;
    a.outer.list = {d.outer};
    a.inner.list = {d.inner};
    spec.axes.push_back(a);
  }
  return spec;
}

Space build_space(const SpaceSpec& spec_in, FitChecker& fit, const std::function<void(size_t, size_t)>& progress) {
  const Problem& p = fit.problem();
  const SpaceSpec spec = with_default_axes(spec_in, p.default_spec);
  Space space;
  const auto per_axis = axis_candidates(spec, p.extents, &space.stats);
  std::vector<size_t> idx(per_axis.size(), 0);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> failing;
  const size_t checks0 = fit.checks(), full0 = fit.full_checks();
  size_t total = 1;
  for (const auto& c : per_axis) total *= c.size();
  while (true) {
    if (progress && space.stats.enumerated % 64 == 0) progress(space.stats.enumerated, total);
    std::vector<std::pair<int64_t, int64_t>> sizes;
    for (size_t a = 0; a < per_axis.size(); ++a) sizes.push_back(per_axis[a][idx[a]]);
    ++space.stats.enumerated;
    tile::TileSpec t;
    for (size_t a = 0; a < per_axis.size(); ++a) t.axes.push_back({spec.axes[a].axis, sizes[a].first, sizes[a].second});
    bool fits = false;
    if (std::none_of(failing.begin(), failing.end(), [&](const auto& f) { return contains(sizes, f); })) {
      fits = fit.check(t).has_value();
      if (!fits) failing.push_back(sizes);
    }
    if (fits) {
      space.index[config_key(t)] = int(space.configs.size());
      space.configs.push_back(t);
    } else {
      ++space.stats.not_fitting;
      if (space.stats.examples_not_fitting.size() < 8) space.stats.examples_not_fitting.push_back(config_key(t));
    }
    // odometer, last axis fastest; candidates ascend so a failing tile is met before its supersets
    size_t a = per_axis.size();
    while (a > 0) {
      --a;
      if (++idx[a] < per_axis[a].size()) break;
      idx[a] = 0;
      if (a == 0) {
        a = per_axis.size() + 1;
        break;
      }
    }
    if (a == per_axis.size() + 1 || per_axis.empty()) break;
  }
  if (space.configs.size() > 1 && fit.detect_fixed_mapping({space.configs.front(), space.configs.back()})) {
    // one program whatever the tile: keep the default spec (where it fits) or the first that fits
    const tile::TileSpec keep = fit.check(p.default_spec) ? p.default_spec : space.configs.front();
    space.stats.same_program = space.configs.size() - 1;
    space.configs = {keep};
    space.index = {{config_key(keep), 0}};
  }
  space.stats.fit_checks = fit.checks() - checks0;
  space.stats.full_checks = fit.full_checks() - full0;
  if (progress) progress(space.stats.enumerated, total);
  return space;
}

}  // namespace tessel::tune
