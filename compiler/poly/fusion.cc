#include "compiler/poly/fusion.h"

#include <algorithm>
#include <sstream>

namespace tessel::poly {

namespace {

const ir::IndexVar* find_var(const ir::Statement& s, const std::string& name) { return s.find_index(name); }

bool has_axes(const ir::Statement& s, const ir::Statement& seed, const std::vector<std::string>& axes) {
  for (const auto& a : axes) {
    const ir::IndexVar* v = find_var(s, a);
    const ir::IndexVar* w = find_var(seed, a);
    if (!v || !w || v->is_reduction || !(v->lo == w->lo) || !(v->hi == w->hi)) return false;
  }
  return true;
}

// Points of `s` over its indices that are not reduced (only `axes` when given; every index,
// reduced too, with `reduced`); 0 where a bound cannot be evaluated (a size missing), which keeps
// every join.
int64_t points_of(const ir::Statement& s, const std::vector<std::string>* axes, const FusionPolicy& p, bool reduced = false) {
  int64_t n = 1;
  for (const auto& v : s.domain) {
    if ((v.is_reduction && !reduced) || (axes && std::find(axes->begin(), axes->end(), v.name) == axes->end())) continue;
    std::map<std::string, int64_t> names;
    v.lo.collect_names(nullptr, &names);
    v.hi.collect_names(nullptr, &names);
    for (const auto& [name, unused] : names)
      if (!p.sizes.count(name)) return 0;
    n *= std::max<int64_t>(0, v.hi.evaluate({}, p.sizes) - v.lo.evaluate({}, p.sizes));
  }
  return n;
}

// The parallelism rule of FusionPolicy: joining `s` would leave it on too few tiles. Its work per
// tile counts every point, reduced ones too: a split reduction's first phase (S(c, chunk) +=! over
// 48 points a chunk) has few parallel points per channel but all of the tensor's work.
constexpr int64_t kMoreTiles = 2;  // the statement alone has at least this many times the group's tiles
bool starves(const ir::Statement& s, const ir::Statement& seed, const Group& g, const FusionPolicy& p) {
  if (p.parallel_units <= 0) return false;
  const int64_t tiles = points_of(seed, &g.tile_axes, p), points = points_of(s, nullptr, p);
  const int64_t work = points_of(s, nullptr, p, true);
  return tiles > 0 && points > 0 && tiles < p.parallel_units && points >= kMoreTiles * tiles &&
         work >= p.min_points_per_tile * tiles;
}

}  // namespace

std::vector<Group> plan_fusion(const Scop& scop, bool fuse, const FusionPolicy& policy) {
  const ir::Function& f = *scop.function;
  std::vector<Group> groups;
  int seed_stmt = -1;
  for (size_t i = 0; i < scop.statements.size(); ++i) {
    const ScopStatement& st = scop.statements[i];
    const ir::Statement& s = f.statements[st.statement];
    bool joins = false;
    if (!groups.empty()) {
      Group& g = groups.back();
      const bool same_statement = scop.statements[g.members.back()].statement == st.statement;
      // a group of 0-d statements has no tile loops: a statement with loops of its own would run
      // them inside one tile, and a contraction's fragments name tile origins the group never
      // defines (program fuzz: Y() = X() beside C(m, n) +=! ..., undeclared g0_m_o on every target)
      const bool loops_without_tile = g.tile_axes.empty() && std::any_of(s.domain.begin(), s.domain.end(),
                                                                         [](const ir::IndexVar& v) { return !v.is_reduction; });
      joins = same_statement || (fuse && !loops_without_tile && has_axes(s, f.statements[seed_stmt], g.tile_axes) &&
                                 !starves(s, f.statements[seed_stmt], g, policy));
    }
    if (!joins) {
      Group g;
      g.id = int(groups.size());
      for (const auto& v : s.domain)
        if (!v.is_reduction) g.tile_axes.push_back(v.name);
      groups.push_back(g);
      seed_stmt = st.statement;
    }
    Group& g = groups.back();
    g.members.push_back(int(i));
    if (g.anchor < 0 && !st.init && s.reduction != ir::Reduction::None) {
      g.anchor = int(i);
      for (const auto& v : s.domain)
        if (v.is_reduction) g.reduction_axes.push_back(v.name);
    }
  }
  return groups;
}

std::string to_string(const std::vector<Group>& groups, const Scop& scop) {
  std::ostringstream os;
  for (const auto& g : groups) {
    os << "group " << g.id << ": tile axes (";
    for (size_t i = 0; i < g.tile_axes.size(); ++i) os << (i ? ", " : "") << g.tile_axes[i];
    os << ")";
    if (g.anchor >= 0) {
      os << " anchor " << scop.statements[g.anchor].name << " reduction axes (";
      for (size_t i = 0; i < g.reduction_axes.size(); ++i) os << (i ? ", " : "") << g.reduction_axes[i];
      os << ")";
    }
    os << " members";
    for (int m : g.members) os << " " << scop.statements[m].name;
    os << "\n";
  }
  return os.str();
}

}  // namespace tessel::poly
