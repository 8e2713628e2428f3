#include "compiler/poly/tiling.h"

#include <algorithm>
#include <sstream>


#include "compiler/poly/isl_util.h"
#include "compiler/poly/dependences.h"
#include "isa/base/error.h"

namespace tessel::poly {

std::string origin_var(int group, const std::string& axis, bool inner) {
  return "g" + std::to_string(group) + "_" + axis + (inner ? "_i" : "_o");
}

std::string TiledGroup::marker(TileLevel level) const {
  const char* n = level == TileLevel::P ? "EnterP_g" : level == TileLevel::R ? "EnterR_g" : "EnterI_g";
  return n + std::to_string(group.id);
}

std::vector<std::string> TiledGroup::origins(TileLevel level) const {
  std::vector<std::string> v;
  for (const auto& a : group.tile_axes) v.push_back(origin_var(group.id, a, false));
  if (level == TileLevel::P) return v;
  for (const auto& a : group.reduction_axes) v.push_back(origin_var(group.id, a, false));
  if (level == TileLevel::R) return v;
  for (const auto& a : group.tile_axes) v.push_back(origin_var(group.id, a, true));
  for (const auto& a : group.reduction_axes) v.push_back(origin_var(group.id, a, true));
  return v;
}

kernel::LoopKind TiledProgram::dim_kind(int group, int time_dim) const {
  const int dim = group_kept_dims.at(group).at(time_dim);
  int p0 = 1, r0 = p0 + pmax + 1, i0 = r0 + qmax + 1, ir0 = i0 + pmax;
  if (dim >= p0 && dim < p0 + pmax) return kernel::LoopKind::ParallelCores;
  if (dim >= i0 && dim < ir0) return kernel::LoopKind::ParallelWithinCore;
  return kernel::LoopKind::Sequential;
}

std::string TiledProgram::dim_axis(int group, int time_dim, bool* inner) const {
  const int dim = group_kept_dims.at(group).at(time_dim);
  const Group& g = groups.at(group).group;
  const int p0 = 1, r0 = p0 + pmax + 1, i0 = r0 + qmax + 1, ir0 = i0 + pmax;
  *inner = dim >= i0;
  auto pick = [](const std::vector<std::string>& v, int i) { return i < int(v.size()) ? v[i] : std::string(); };
  if (dim >= p0 && dim < p0 + pmax) return pick(g.tile_axes, dim - p0);
  if (dim >= r0 && dim < r0 + qmax) return pick(g.reduction_axes, dim - r0);
  if (dim >= i0 && dim < ir0) return pick(g.tile_axes, dim - i0);
  if (dim >= ir0 && dim < ir0 + qmax) return pick(g.reduction_axes, dim - ir0);
  *inner = false;
  return "";
}

std::string TiledProgram::to_string() const {
  std::ostringstream os;
  os << "tiled schedule (" << 1 + pmax + 1 + qmax + 1 + pmax + qmax + 1 + width << " dimensions):\n";
  statement_schedule.foreach_map([&](isl::map m) { os << "  " << str(m) << "\n"; });
  return os.str();
}

namespace {

isl::map parse_map(isl::ctx ctx, const std::string& text) {
  try {
    return isl::map(ctx, text);
  } catch (const isl::exception& e) {
    TESSEL_CHECK(false, "tile: isl cannot parse the generated map " + text);
  }
  return {};
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

struct Layout {
  int pmax, qmax, width;
  std::vector<bool>* used = nullptr;  // dimensions some row sets to other than 0
  int total() const { return 1 + pmax + 1 + qmax + 1 + pmax + qmax + 1 + width; }
};

// One row of time dimensions, filled per position, zero elsewhere.
struct Row {
  std::vector<std::string> d;
  Layout L;
  explicit Row(const Layout& l, int g) : d(l.total(), "0"), L(l) { d[0] = std::to_string(g); }
  void outer_p(int i, const std::string& e) { d[1 + i] = e; }
  void phase(int p) { d[1 + L.pmax] = std::to_string(p); }
  void outer_r(int i, const std::string& e) { d[2 + L.pmax + i] = e; }
  void slot1(int s) { d[2 + L.pmax + L.qmax] = std::to_string(s); }
  void inner_p(int i, const std::string& e) { d[3 + L.pmax + L.qmax + i] = e; }
  void inner_r(int i, const std::string& e) { d[3 + 2 * L.pmax + L.qmax + i] = e; }
  void slot2(int s) { d[3 + 2 * L.pmax + 2 * L.qmax] = std::to_string(s); }
  void point(int i, const std::string& e) { d[4 + 2 * L.pmax + 2 * L.qmax + i] = e; }
  std::string text() const {
    for (size_t i = 0; i < d.size(); ++i)
      if (d[i] != "0") (*L.used)[i] = true;
    return "[" + join(d) + "]";
  }
};

std::string outer_expr(const TiledGroup& tg, const std::string& x) {
  int64_t T = tg.outer.at(x);
  if (tg.lo.at(x) >= 0 && T >= tg.hi.at(x)) return "0";  // one tile
  if (T == 1) return x;
  return std::to_string(T) + "*floor((" + x + ")/" + std::to_string(T) + ")";
}
// The operand-level tile dimension repeats the stage-level one (one inner tile per outer tile).
bool inner_redundant(const TiledGroup& tg, const std::string& x) { return tg.inner.at(x) >= tg.outer.at(x); }

std::string inner_expr(const TiledGroup& tg, const std::string& x) {
  int64_t Ti = tg.inner.at(x);
  std::string o = outer_expr(tg, x);
  if (Ti >= tg.outer.at(x)) return o;
  if (tg.outer.at(x) % Ti == 0) return std::to_string(Ti) + "*floor((" + x + ")/" + std::to_string(Ti) + ")";
  return o + " + " + std::to_string(Ti) + "*floor((" + x + " - " + o + ")/" + std::to_string(Ti) + ")";
}

// The tile origins of a level as a box (the domains are boxes in the tile axes; every member of a
// group has the same range for each tile axis).
std::string tile_box(const TiledGroup& tg, TileLevel level) {
  std::vector<std::string> c;
  auto outer = [&](const std::string& x) {
    std::string o = origin_var(tg.group.id, x, false);
    int64_t T = tg.outer.at(x), lo = tg.lo.at(x), hi = tg.hi.at(x);
    int64_t first = T * (lo >= 0 ? lo / T : -((-lo + T - 1) / T));
    c.push_back(std::to_string(first) + " <= " + o + " < " + std::to_string(hi) + " and " + o + " >= " +
                std::to_string(lo - T + 1) + " and (" + o + ") mod " + std::to_string(T) + " = 0");
  };
  auto inner = [&](const std::string& x) {
    std::string o = origin_var(tg.group.id, x, false), i = origin_var(tg.group.id, x, true);
    int64_t To = tg.outer.at(x), Ti = tg.inner.at(x), lo = tg.lo.at(x), hi = tg.hi.at(x);
    c.push_back(o + " <= " + i + " < " + o + " + " + std::to_string(To) + " and " + i + " < " + std::to_string(hi) +
                " and " + i + " >= " + std::to_string(lo - Ti + 1) + " and (" + i + " - " + o + ") mod " +
                std::to_string(Ti) + " = 0");
  };
  for (const auto& a : tg.group.tile_axes) outer(a);
  if (level != TileLevel::P)
    for (const auto& a : tg.group.reduction_axes) outer(a);
  if (level == TileLevel::I) {
    for (const auto& a : tg.group.tile_axes) inner(a);
    for (const auto& a : tg.group.reduction_axes) inner(a);
  }
  std::string s;
  for (const auto& x : c) s += (s.empty() ? "" : " and ") + x;
  return s.empty() ? "true" : s;
}



// Builds the tiled schedules of tile_program, one step per method: the parameters fixed to the
// sizes, the time layout, per group its tiles, its statements' rows (points, fragments, origin
// maps) and its markers, the fragments restricted to the operand tiles, one projected AST
// schedule per group, and the dependence check.
class Tiler {
 public:
  Tiler(const Scop& scop, const Dependences& deps, TiledProgram& out)
      : scop_(scop), deps_(deps), f_(*scop.function), ctx_(scop.context.ctx()), P_(param_prefix(f_)), out_(out) {}

  bool run(const std::vector<Group>& groups, const std::vector<MatmulMatch>& matches, const tile::TileSpec& spec,
           const Sizes& sizes) {
    fix_parameters(sizes);
    lay_out(groups);
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      L_.used = &used_by_group_[gi];
      TiledGroup tg = group_tiles(groups[gi], matches[gi], spec, sizes);
      int phase = 1;
      for (int mi : tg.group.members) schedule_statement(tg, mi, phase++);
      tg.exit_phase = phase;
      schedule_markers(tg);
      out_.groups.push_back(tg);
    }
    out_.statement_schedule = out_.statement_schedule.intersect_domain(out_.fixed_domain);
    restrict_fragments();
    split_group_schedules(groups.size());
    return dependences_respected();
  }

 private:
  void add_map(isl::union_map& um, const std::string& text) {
    isl::map m = parse_map(ctx_, P_ + text);
    um = um.unite(isl::union_map(m.intersect_params(out_.fixed_context)));
  }

  void fix_parameters(const Sizes& sizes) {
    out_.sizes = sizes;
    std::string fix = P_ + "{ : ";
    for (size_t i = 0; i < f_.params.size(); ++i) {
      auto it = sizes.find(f_.params[i]);
      TESSEL_CHECK(it != sizes.end(), "tile: size " + f_.params[i] + " unbound (the pipeline checks --shape)");
      fix += (i ? " and " : "") + f_.params[i] + " = " + std::to_string(it->second);
    }
    fix += f_.params.empty() ? "true }" : " }";
    out_.fixed_context = isl::set(ctx_, fix).intersect(scop_.context);
    out_.fixed_domain = scop_.domain.intersect_params(out_.fixed_context);
  }

  void lay_out(const std::vector<Group>& groups) {
    for (const auto& g : groups) {
      L_.pmax = std::max<int>(L_.pmax, g.tile_axes.size());
      L_.qmax = std::max<int>(L_.qmax, g.reduction_axes.size());
    }
    for (const auto& st : scop_.statements) L_.width = std::max<int>(L_.width, st.indices.size());
    used_by_group_.assign(groups.size(), std::vector<bool>(L_.total(), false));
    out_.pmax = L_.pmax;
    out_.qmax = L_.qmax;
    out_.width = L_.width;
    out_.groups.clear();
    out_.origin_maps.clear();
    out_.statement_schedule = isl::union_map::empty(ctx_);
    out_.codegen_schedule = isl::union_map::empty(ctx_);
  }

  // Axis ranges and tile sizes (axes without an entry: one tile); a fragment reads a 2-D view only
  // when every other axis is fixed inside a tile.
  TiledGroup group_tiles(const Group& g, const MatmulMatch& match, const tile::TileSpec& spec, const Sizes& sizes) const {
    TiledGroup tg;
    tg.group = g;
    tg.match = match;
    for (int mi : g.members) {
      const ir::Statement& s = f_.statements[scop_.statements[mi].statement];
      for (const auto& v : s.domain) {
        if (tg.lo.count(v.name)) continue;
        tg.lo[v.name] = v.lo.evaluate({}, sizes);
        tg.hi[v.name] = v.hi.evaluate({}, sizes);
      }
    }
    for (const auto& [axis, hi] : tg.hi) {
      const tile::AxisTile* t = spec.find(axis);
      int64_t whole = std::max<int64_t>(1, hi);
      tg.outer[axis] = t ? t->outer : whole;
      tg.inner[axis] = t ? t->inner : tg.outer[axis];
    }
    if (tg.match.matched)
      for (const auto& x : tg.match.other_axes)
        if (tg.outer.count(x) && tg.outer.at(x) != 1 && tg.hi.at(x) - tg.lo.at(x) > 1) {
          tg.match.matched = false;
          tg.match.why_not = "axis " + x + " besides m, n, k is not tiled by 1 (tile it x=1 for a matmul view)";
          break;
        }
    return tg;
  }

  // One member statement of the group in its phase: its points (or, for a matched anchor, the
  // fragment that replaces them) and its statement -> marker instance maps.
  void schedule_statement(TiledGroup& tg, int mi, int phase) {
    const Group& g = tg.group;
    const ScopStatement& st = scop_.statements[mi];
    out_.statement_group[st.name] = g.id;
    Row row(L_, g.id);
    for (size_t i = 0; i < g.tile_axes.size(); ++i) row.outer_p(i, outer_expr(tg, g.tile_axes[i]));
    row.phase(phase);
    const std::string dom = st.name + "[" + join(st.indices) + "]";
    if (mi == g.anchor) {
      tg.anchor_phase = phase;
      row.slot1(1);
      for (size_t i = 0; i < g.reduction_axes.size(); ++i) row.outer_r(i, outer_expr(tg, g.reduction_axes[i]));
      for (size_t i = 0; i < g.tile_axes.size(); ++i)
        row.inner_p(i, inner_redundant(tg, g.tile_axes[i]) ? "0" : inner_expr(tg, g.tile_axes[i]));
      for (size_t i = 0; i < g.reduction_axes.size(); ++i)
        row.inner_r(i, inner_redundant(tg, g.reduction_axes[i]) ? "0" : inner_expr(tg, g.reduction_axes[i]));
      row.slot2(1);
    }
    Row points = row;
    for (size_t i = 0; i < st.indices.size(); ++i) {
      const std::string& x = st.indices[i];
      const bool tiled_here = std::count(g.tile_axes.begin(), g.tile_axes.end(), x) ||
                              (mi == g.anchor && std::count(g.reduction_axes.begin(), g.reduction_axes.end(), x));
      // a point tile (size 1) already fixes the index in its outer tile dimension
      points.point(i, tiled_here && tg.outer.at(x) == 1 ? "0" : x);
    }
    add_map(out_.statement_schedule, "{ " + dom + " -> " + points.text() + " }");
    out_.statement_schedule = out_.statement_schedule.intersect_domain(out_.fixed_domain);
    if (mi == g.anchor && tg.match.matched) {
      schedule_fragment(tg, phase);
    } else {
      add_map(out_.codegen_schedule, "{ " + dom + " -> " + points.text() + " }");
      out_.codegen_schedule = out_.codegen_schedule.intersect_domain(
          out_.fixed_domain.unite(isl::union_set(out_.codegen_schedule.domain()).subtract(isl::union_set(out_.fixed_domain.universe()))));
    }
    add_origin_map(tg, st, dom, TileLevel::P);
    if (mi == g.anchor) {
      add_origin_map(tg, st, dom, TileLevel::R);
      add_origin_map(tg, st, dom, TileLevel::I);
    }
  }

  // The matched anchor's fragment: one instance per operand tile, in the anchor's phase.
  void schedule_fragment(const TiledGroup& tg, int phase) {
    const Group& g = tg.group;
    std::vector<std::string> args = tg.origins(TileLevel::I);
    const size_t np = g.tile_axes.size(), nr = g.reduction_axes.size();
    Row fr(L_, g.id);
    fr.phase(phase);
    fr.slot1(1);
    fr.slot2(1);
    for (size_t i = 0; i < np; ++i) fr.outer_p(i, args[i]);
    for (size_t i = 0; i < nr; ++i) fr.outer_r(i, args[np + i]);
    for (size_t i = 0; i < np; ++i) fr.inner_p(i, inner_redundant(tg, g.tile_axes[i]) ? "0" : args[np + nr + i]);
    for (size_t i = 0; i < nr; ++i) fr.inner_r(i, inner_redundant(tg, g.reduction_axes[i]) ? "0" : args[2 * np + nr + i]);
    add_map(out_.codegen_schedule, "{ Frag_g" + std::to_string(g.id) + "[" + join(args) + "] -> " + fr.text() + " }");
  }

  // statement -> marker instances of `level`
  void add_origin_map(const TiledGroup& tg, const ScopStatement& st, const std::string& dom, TileLevel level) {
    const Group& g = tg.group;
    std::vector<std::string> e;
    for (const auto& a : g.tile_axes) e.push_back(outer_expr(tg, a));
    if (level != TileLevel::P)
      for (const auto& a : g.reduction_axes) e.push_back(outer_expr(tg, a));
    if (level == TileLevel::I) {
      for (const auto& a : g.tile_axes) e.push_back(inner_expr(tg, a));
      for (const auto& a : g.reduction_axes) e.push_back(inner_expr(tg, a));
    }
    isl::map m = parse_map(ctx_, P_ + "{ " + dom + " -> " + tg.marker(level) + "[" + join(e) + "] }");
    m = m.intersect_domain(st.domain).intersect_params(out_.fixed_context);
    auto& um = out_.origin_maps[tg.marker(level)];
    um = um.is_null() ? isl::union_map(m) : um.unite(isl::union_map(m));
  }

  // Markers: their domains are the images of the statements that run in the tile.
  void schedule_markers(const TiledGroup& tg) {
    marker_schedule(tg, TileLevel::P, 0, false);
    marker_schedule(tg, TileLevel::P, tg.exit_phase, true);
    if (tg.group.anchor >= 0) {
      marker_schedule(tg, TileLevel::R, tg.anchor_phase, false);
      if (tg.match.matched) marker_schedule(tg, TileLevel::I, tg.anchor_phase, false);
    }
  }

  void marker_schedule(const TiledGroup& tg, TileLevel level, int phase_value, bool exit) {
    const Group& g = tg.group;
    std::vector<std::string> o = tg.origins(level);
    Row row(L_, g.id);
    for (size_t i = 0; i < g.tile_axes.size(); ++i) row.outer_p(i, o[i]);
    row.phase(phase_value);
    if (level != TileLevel::P) {
      for (size_t i = 0; i < g.reduction_axes.size(); ++i) row.outer_r(i, o[g.tile_axes.size() + i]);
      row.slot1(level == TileLevel::R ? 0 : 1);
    }
    if (level == TileLevel::I) {
      size_t b = g.tile_axes.size() + g.reduction_axes.size();
      for (size_t i = 0; i < g.tile_axes.size(); ++i) row.inner_p(i, inner_redundant(tg, g.tile_axes[i]) ? "0" : o[b + i]);
      for (size_t i = 0; i < g.reduction_axes.size(); ++i)
        row.inner_r(i, inner_redundant(tg, g.reduction_axes[i]) ? "0" : o[b + g.tile_axes.size() + i]);
      row.slot2(0);
    }
    std::string name = tg.marker(level);
    if (exit) name = "ExitP_g" + std::to_string(g.id);
    isl::map m = parse_map(ctx_, P_ + "{ " + name + "[" + join(o) + "] -> " + row.text() + " : " + tile_box(tg, level) + " }");
    out_.codegen_schedule = out_.codegen_schedule.unite(isl::union_map(m.intersect_params(out_.fixed_context)));
  }

  // Fragments: their domain is the operand tiles of the anchor.
  void restrict_fragments() {
    for (const auto& tg : out_.groups) {
      if (!tg.match.matched) continue;
      std::string frag = "Frag_g" + std::to_string(tg.group.id);
      isl::union_set tiles(parse_map(ctx_, P_ + "{ " + tg.marker(TileLevel::I) + "[" + join(tg.origins(TileLevel::I)) + "] -> [] : " +
                                               tile_box(tg, TileLevel::I) + " }")
                               .intersect_params(out_.fixed_context)
                               .domain());
      isl::union_map m = isl::union_map::empty(ctx_);
      out_.codegen_schedule.foreach_map([&](isl::map mm) {
        if (mm.domain_tuple_id().name() == frag) {
          std::string o = join(tg.origins(TileLevel::I));
          isl::union_set t = tiles.apply(
              isl::union_map(parse_map(ctx_, P_ + "{ " + tg.marker(TileLevel::I) + "[" + o + "] -> " + frag + "[" + o + "] }")));
          m = m.unite(isl::union_map(mm).intersect_domain(t));
        } else {
          m = m.unite(isl::union_map(mm));
        }
      });
      out_.codegen_schedule = m;
    }
  }

  // The time dimensions `used` keeps (kept_dims: their positions).
  isl::union_map projection(const std::vector<bool>& used, std::vector<int>& kept_dims) const {
    std::vector<std::string> all_dims, kept;
    kept_dims.clear();
    for (int i = 0; i < L_.total(); ++i) {
      all_dims.push_back("t" + std::to_string(i));
      if (used[i]) {
        kept_dims.push_back(i);
        kept.push_back("t" + std::to_string(i));
      }
    }
    return isl::union_map(parse_map(ctx_, "{ [" + join(all_dims) + "] -> [" + join(kept) + "] }"));
  }

  // Each group gets its own AST (dimension 0 separates them anyway), over only the time
  // dimensions some of its rows use: fewer statements and dimensions make AST generation faster.
  void split_group_schedules(size_t groups) {
    std::vector<bool> used_any(L_.total(), false);
    out_.group_schedules.assign(groups, isl::union_map::empty(ctx_));
    out_.group_kept_dims.assign(groups, {});
    for (size_t gi = 0; gi < groups; ++gi) {
      for (int i = 0; i < L_.total(); ++i) used_any[i] = used_any[i] || used_by_group_[gi][i];
      used_by_group_[gi][0] = false;  // the group number is constant inside its own AST
      isl::union_map project = projection(used_by_group_[gi], out_.group_kept_dims[gi]);
      isl::union_map mine = isl::union_map::empty(ctx_);
      const std::string suffix = "_g" + std::to_string(gi);
      out_.codegen_schedule.foreach_map([&](isl::map m) {
        std::string n = m.domain_tuple_id().name();
        auto it = out_.statement_group.find(n);
        bool in_group = it != out_.statement_group.end()
                            ? it->second == int(gi)
                            : n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
        if (in_group) mine = mine.unite(isl::union_map(m));
      });
      out_.group_schedules[gi] = mine.apply_range(project);
    }
    used_any[0] = true;
    std::vector<int> kept_any;
    out_.statement_schedule = out_.statement_schedule.apply_range(projection(used_any, kept_any));
  }

  // Dependences between groups always point forward (groups follow program order, dimension 0),
  // so only dependences inside a group need checking.
  bool dependences_respected() const {
    std::map<std::string, isl::map> sched_of;
    out_.statement_schedule.foreach_map([&](isl::map m) { sched_of[m.domain_tuple_id().name()] = m; });
    bool ok = true;
    deps_.all().foreach_map([&](isl::map d) {
      if (!ok) return;
      std::string src = d.domain_tuple_id().name(), dst = d.range_tuple_id().name();
      if (out_.statement_group.at(src) != out_.statement_group.at(dst)) return;
      // A reduction's dependences on itself only order its (associative, commutative) updates:
      // tiling the reduction axes may reorder them, as in Tensor Comprehensions and AKG.
      if (src == dst && f_.statements[scop_.find(src).statement].reduction != ir::Reduction::None) return;
      // A reduction's init covers the same tile points in an earlier phase of the same stage tile.
      if (src == dst + "_init") return;
      isl::map in_time = d.intersect_params(out_.fixed_context).apply_domain(sched_of.at(src)).apply_range(sched_of.at(dst));
      if (!in_time.is_subset(lex_lt_map(in_time.domain().space()))) ok = false;
    });
    return ok;
  }

  const Scop& scop_;
  const Dependences& deps_;
  const ir::Function& f_;
  isl::ctx ctx_;
  const std::string P_;
  TiledProgram& out_;
  Layout L_{0, 0, 0};
  std::vector<std::vector<bool>> used_by_group_;
};

}  // namespace

bool tile_program(const Scop& scop, const Dependences& deps, const std::vector<Group>& groups,
                  const std::vector<MatmulMatch>& matches, const tile::TileSpec& spec, const Sizes& sizes,
                  TiledProgram& out) {
  return Tiler(scop, deps, out).run(groups, matches, spec, sizes);
}

}  // namespace tessel::poly
