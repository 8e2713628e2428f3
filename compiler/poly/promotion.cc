#include "compiler/poly/promotion.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "compiler/poly/isl_util.h"
#include "isa/base/error.h"

namespace tessel::poly {

std::string Promotion::to_string() const {
  std::ostringstream os;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    const auto& p = placements[i];
    os << "group " << b.group << " " << b.name << ": " << b.tensor << " box [";
    for (size_t d = 0; d < b.extents.size(); ++d) os << (d ? ", " : "") << b.extents[d];
    os << "] at " << b.level << " (" << isa::role_name(b.role) << ") " << b.bytes() << " B"
       << (b.double_buffered ? " x2" : "") << (p.copy_in ? " copy-in" : "") << (p.copy_out ? " copy-out" : "")
       << "\n";
  }
  return os.str();
}

namespace {

// The least and greatest value of dimension `d` of `s` once its parameters take `param_values`;
// nullopt when empty or unbounded there. Borrowed input.
std::optional<std::pair<int64_t, int64_t>> dim_bounds(const isl::set& s, unsigned d, const std::map<std::string, int64_t>& param_values) {
  isl_set* x = s.copy();
  const isl_size np = isl_set_dim(x, isl_dim_param);
  for (isl_size i = 0; i < np; ++i) {
    const char* name = isl_set_get_dim_name(x, isl_dim_param, unsigned(i));
    const auto it = name ? param_values.find(name) : param_values.end();
    if (it != param_values.end()) x = isl_set_fix_si(x, isl_dim_param, unsigned(i), int(it->second));
  }
  x = isl_set_project_out(x, isl_dim_param, 0, unsigned(std::max<isl_size>(np, 0)));
  isl::val lo = isl::manage(isl_set_dim_min_val(isl_set_copy(x), int(d)));
  isl::val hi = isl::manage(isl_set_dim_max_val(x, int(d)));
  if (lo.is_null() || hi.is_null() || !lo.is_int() || !hi.is_int()) return std::nullopt;
  return std::pair{val_to_int(lo), val_to_int(hi)};
}

struct Access {
  int statement;  // scop statement index
  bool write;
  isl::map map;   // statement -> tensor element (fixed sizes)
};

std::string range_name(const isl::map& m) { return m.range_tuple_id().name(); }

// promote, one step per method: the accesses at the fixed sizes, which tensors live in global
// memory (inputs, outputs and locals that cross stage tiles), then per group its buffers (stage,
// operand, accumulator or vector, each a fixed box over the tile origins) and the capacity check.
class Promoter {
 public:
  Promoter(const Scop& scop, const Dependences& deps, const TiledProgram& tiled, const isa::Hierarchy& h)
      : scop_(scop), deps_(deps), tiled_(tiled), h_(h), f_(*scop.function) {}

  Promotion run() {
    collect_accesses();
    place_global_tensors();
    pr_.binding.resize(tiled_.groups.size());
    for (const auto& tg : tiled_.groups) {
      place_group(tg);
      check_capacity(tg.group.id);
    }
    return std::move(pr_);
  }

 private:
  void collect_accesses() {
    std::map<std::string, int> stmt_index;
    for (size_t i = 0; i < scop_.statements.size(); ++i) stmt_index[scop_.statements[i].name] = int(i);
    auto collect = [&](const isl::union_map& um, bool write) {
      um.intersect_domain(tiled_.fixed_domain).foreach_map([&](isl::map m) {
        accesses_.push_back({stmt_index.at(m.domain_tuple_id().name()), write, m});
      });
    };
    collect(scop_.reads, false);
    collect(scop_.writes, true);
  }
  int group_of(int stmt) const { return tiled_.statement_group.at(scop_.statements[stmt].name); }

  // A local used by one group stays on chip when every flow dependence on it stays inside one
  // stage tile of the group (statement-level flow between its writers and readers
  // over-approximates the flow through it: conservative).
  bool stays_on_chip(const ir::Tensor& t, int g) const {
    isl::union_map origin = tiled_.origin_maps.at(tiled_.groups[g].marker(TileLevel::P));
    std::set<std::string> writers, readers;
    for (const auto& a : accesses_)
      if (range_name(a.map) == t.name) (a.write ? writers : readers).insert(scop_.statements[a.statement].name);
    isl::union_map flow = isl::union_map::empty(scop_.context.ctx());
    deps_.flow.foreach_map([&](isl::map d) {
      if (writers.count(d.domain_tuple_id().name()) && readers.count(d.range_tuple_id().name()) &&
          d.domain_tuple_id().name() != d.range_tuple_id().name())
        flow = flow.unite(isl::union_map(d));
    });
    isl::union_map tiles = flow.apply_domain(origin).apply_range(origin);
    isl::union_map same = isl::union_map(isl::union_set(tiles.domain()).identity());
    return tiles.is_subset(same);
  }

  void place_global_tensors() {
    std::map<std::string, std::set<int>> groups_of;
    for (const auto& a : accesses_) groups_of[range_name(a.map)].insert(group_of(a.statement));
    std::set<std::string> on_chip;
    for (const auto& t : f_.tensors)
      if (t.kind == ir::TensorKind::Local && groups_of[t.name].size() == 1 && stays_on_chip(t, *groups_of[t.name].begin()))
        on_chip.insert(t.name);
    for (const auto& t : f_.tensors) {
      if (t.kind == ir::TensorKind::Local && (on_chip.count(t.name) || groups_of[t.name].empty())) continue;
      kernel::GlobalTensor gt;
      gt.name = t.name;
      gt.dtype = t.dtype;
      for (const auto& d : t.shape) gt.shape.push_back(d.evaluate({}, tiled_.sizes));
      gt.kind = t.kind;
      gt.temporary = t.kind == ir::TensorKind::Local;
      pr_.tensors.push_back(gt);
    }
  }

  // Read only by the anchor (not its own output): a reduction-level (stage) buffer.
  bool is_r_level(const Group& g, const std::set<int>& members, const std::string& t) const {
    if (g.anchor < 0) return false;
    bool only_anchor_reads = true, any = false;
    for (const auto& a : accesses_) {
      if (!members.count(a.statement) || range_name(a.map) != t) continue;
      if (a.statement != g.anchor || a.write) only_anchor_reads = false;
      // reads of the anchor's own output are P-level
      if (t == f_.statements[scop_.statements[g.anchor].statement].output) only_anchor_reads = false;
      any = true;
    }
    return any && only_anchor_reads;
  }

  void place_group(const TiledGroup& tg) {
    const Group& g = tg.group;
    const int gid = g.id;
    std::set<int> members(g.members.begin(), g.members.end());
    std::vector<std::string> tensors_in_group;
    for (const auto& a : accesses_)
      if (members.count(a.statement)) {
        std::string t = range_name(a.map);
        if (std::find(tensors_in_group.begin(), tensors_in_group.end(), t) == tensors_in_group.end()) tensors_in_group.push_back(t);
      }
    const MatmulMatch& mm = tg.match;
    for (const auto& t : tensors_in_group) {
      if (is_r_level(g, members, t)) {
        int id = make_buffer(tg, members, t, TileLevel::R, isa::Role::Stage);
        pr_.binding[gid][t] = id;
        if (mm.matched && (t == mm.a || t == mm.b)) {
          int op = make_buffer(tg, members, t, TileLevel::I, t == mm.a ? isa::Role::OperandA : isa::Role::OperandB);
          pr_.placements[op].copy_in = true;
          pr_.placements[op].copy_out = false;
          pr_.placements[op].src = id;
          pr_.buffers[op].double_buffered = true;
        }
      } else {
        isa::Role role = mm.matched && t == mm.c ? isa::Role::Accumulator : isa::Role::Vector;
        pr_.binding[gid][t] = make_buffer(tg, members, t, TileLevel::P, role);
      }
    }
  }

  // The buffer of tensor t at `level`: the fixed box hull of the group's accesses per tile origin.
  int make_buffer(const TiledGroup& tg, const std::set<int>& members, const std::string& t, TileLevel level, isa::Role role) {
    const Group& g = tg.group;
    const int gid = g.id;
    isl::union_map origin = tiled_.origin_maps.at(tg.marker(level));
    isl::union_map acc = isl::union_map::empty(scop_.context.ctx());
    bool read = false, written = false, init_written = false;
    for (const auto& a : accesses_) {
      if (!members.count(a.statement) || range_name(a.map) != t) continue;
      if (level != TileLevel::P && a.statement != g.anchor) continue;
      acc = acc.unite(isl::union_map(a.map));
      if (a.write) {
        written = true;
        const ScopStatement& st = scop_.statements[a.statement];
        const ir::Statement& s = f_.statements[st.statement];
        if (st.init || s.reduction == ir::Reduction::None) init_written = true;
      } else {
        read = true;
      }
    }
    isl::union_map fp = acc.apply_domain(origin);
    isl::map m;
    fp.foreach_map([&](isl::map x) { m = m.is_null() ? x : m.unite(x); });
    TESSEL_CHECK(!m.is_null(), "promote: tensor " + t + " has no accesses in group " + std::to_string(gid));
    // A footprint with no fixed box (a tile origin that reaches the tensor through `%` or `/` of
    // a tiled index, such as an imported Flatten X(i0 / 3, i0 % 3, ...)) is buffered whole: the
    // tensor's own box, offset 0, a correct over-approximation that the capacity check then
    // accepts or refuses with its reason.
    isl::fixed_box box = m.range_simple_fixed_box_hull();
    const bool whole = !box.is_valid();
    kernel::Buffer b;
    b.id = int(pr_.buffers.size());
    b.tensor = t;
    const ir::Tensor* ten = f_.find_tensor(t);
    TESSEL_CHECK(ten, "promote: unknown tensor " + t);
    b.dtype = ten->dtype;
    b.role = role;
    const isa::Level* lvl = h_.level_with_role(role);
    TESSEL_CHECK(lvl, "promote: hierarchy " + h_.name + " has no level with role " + std::string(isa::role_name(role)));
    b.level = lvl->name;
    b.group = gid;
    b.name = t + "_" + lvl->name + "_g" + std::to_string(gid);
    if (whole) {
      for (const auto& d : ten->shape) {
        b.extents.push_back(std::max<int64_t>(1, d.evaluate({}, tiled_.sizes)));
        b.offset.push_back(kernel::Expr::integer(0));
      }
    } else {
      isl::multi_val sizes = box.size();
      isl::multi_aff offset = box.offset();
      std::vector<std::string> names = tg.origins(level);
      const isl::set range = m.range();
      for (unsigned d = 0; d < sizes.size(); ++d) {
        // A hull at least as wide as the tensor (accesses that move against each other over the
        // tile origins, X(i, j) + X(j, i)) is the tensor's own extent where every access stays
        // inside it: a buffer never holds more than its tensor.
        const int64_t extent = ten->shape[d].evaluate({}, tiled_.sizes);
        if (val_to_int(sizes.at(d)) >= extent) {
          const auto bounds = dim_bounds(range, d, tiled_.sizes);
          if (bounds && bounds->first >= 0 && bounds->second < extent) {
            b.extents.push_back(std::max<int64_t>(1, extent));
            b.offset.push_back(kernel::Expr::integer(0));
            continue;
          }
        }
        b.extents.push_back(val_to_int(sizes.at(d)));
        b.offset.push_back(aff_to_expr(offset.at(d), names, tiled_.sizes));
      }
    }
    Placement p;
    p.buffer = b.id;
    p.level = level;
    const bool global =
        pr_.tensors.end() != std::find_if(pr_.tensors.begin(), pr_.tensors.end(), [&](const auto& x) { return x.name == t; });
    p.copy_in = read && (!written || !init_written) && global;
    p.copy_out = written && global;
    b.double_buffered = p.copy_in && role != isa::Role::Accumulator;
    pr_.buffers.push_back(b);
    pr_.placements.push_back(p);
    return b.id;
  }

  // Capacity per level of the group's buffers (a double-buffered one counts twice): the first
  // overflow is reported.
  void check_capacity(int gid) {
    std::map<std::string, std::vector<int>> by_level;
    for (const auto& b : pr_.buffers)
      if (b.group == gid) by_level[b.level].push_back(b.id);
    for (const auto& [level, ids] : by_level) {
      const isa::Level* lvl = h_.find_level(level);
      uint64_t need = 0;
      std::string parts;
      bool db = false;
      for (int id : ids) {
        const auto& b = pr_.buffers[id];
        need += uint64_t(b.bytes()) * (b.double_buffered ? 2 : 1);
        db = db || b.double_buffered;
        parts += (parts.empty() ? "" : " + ") + b.name + " " + std::to_string(b.bytes()) + " B" + (b.double_buffered ? " x2" : "");
      }
      if (need > lvl->capacity_bytes && !pr_.overflow)
        pr_.overflow = tile::FitFailure{lvl->role, level, h_.name, int64_t(need), int64_t(lvl->capacity_bytes), parts, db};
    }
  }

  const Scop& scop_;
  const Dependences& deps_;
  const TiledProgram& tiled_;
  const isa::Hierarchy& h_;
  const ir::Function& f_;
  std::vector<Access> accesses_;
  Promotion pr_;
};

}  // namespace

Promotion promote(const Scop& scop, const Dependences& deps, const TiledProgram& tiled, const isa::Hierarchy& h) {
  return Promoter(scop, deps, tiled, h).run();
}

}  // namespace tessel::poly
