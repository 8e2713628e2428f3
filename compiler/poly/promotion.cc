#include "compiler/poly/promotion.h"

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

struct Access {
  int statement;  // scop statement index
  bool write;
  isl::map map;   // statement -> tensor element (fixed sizes)
};

std::string range_name(const isl::map& m) { return m.range_tuple_id().name(); }

}  // namespace

Promotion promote(const Scop& scop, const Dependences& deps, const TiledProgram& tiled, const isa::Hierarchy& h) {
  const ir::Function& f = *scop.function;
  Promotion pr;
  std::map<std::string, int> stmt_index;
  for (size_t i = 0; i < scop.statements.size(); ++i) stmt_index[scop.statements[i].name] = int(i);
  std::vector<Access> accesses;
  auto collect = [&](const isl::union_map& um, bool write) {
    um.intersect_domain(tiled.fixed_domain).foreach_map([&](isl::map m) {
      accesses.push_back({stmt_index.at(m.domain_tuple_id().name()), write, m});
    });
  };
  collect(scop.reads, false);
  collect(scop.writes, true);
  auto group_of = [&](int stmt) { return tiled.statement_group.at(scop.statements[stmt].name); };

  // which groups touch each tensor, and whether locals stay on chip
  std::map<std::string, std::set<int>> groups_of;
  for (const auto& a : accesses) groups_of[range_name(a.map)].insert(group_of(a.statement));
  std::set<std::string> on_chip;
  for (const auto& t : f.tensors) {
    if (t.kind != ir::TensorKind::Local || groups_of[t.name].size() != 1) continue;
    int g = *groups_of[t.name].begin();
    // every flow dependence on t must stay inside one stage tile of g (statement-level flow
    // between t's writers and readers over-approximates the flow through t: conservative)
    isl::union_map origin = tiled.origin_maps.at(tiled.groups[g].marker(TileLevel::P));
    std::set<std::string> writers, readers;
    for (const auto& a : accesses)
      if (range_name(a.map) == t.name) (a.write ? writers : readers).insert(scop.statements[a.statement].name);
    isl::union_map flow = isl::union_map::empty(scop.context.ctx());
    deps.flow.foreach_map([&](isl::map d) {
      if (writers.count(d.domain_tuple_id().name()) && readers.count(d.range_tuple_id().name()) &&
          d.domain_tuple_id().name() != d.range_tuple_id().name())
        flow = flow.unite(isl::union_map(d));
    });
    isl::union_map tiles = flow.apply_domain(origin).apply_range(origin);
    isl::union_map same = isl::union_map(isl::union_set(tiles.domain()).identity());
    if (tiles.is_subset(same)) on_chip.insert(t.name);
  }
  for (const auto& t : f.tensors) {
    if (t.kind == ir::TensorKind::Local && (on_chip.count(t.name) || groups_of[t.name].empty())) continue;
    kernel::GlobalTensor gt;
    gt.name = t.name;
    gt.dtype = t.dtype;
    for (const auto& d : t.shape) gt.shape.push_back(d.evaluate({}, tiled.sizes));
    gt.kind = t.kind;
    gt.temporary = t.kind == ir::TensorKind::Local;
    pr.tensors.push_back(gt);
  }

  pr.binding.resize(tiled.groups.size());
  for (const auto& tg : tiled.groups) {
    const Group& g = tg.group;
    const int gid = g.id;
    std::set<int> members(g.members.begin(), g.members.end());
    std::vector<std::string> tensors_in_group;
    for (const auto& a : accesses)
      if (members.count(a.statement)) {
        std::string t = range_name(a.map);
        if (std::find(tensors_in_group.begin(), tensors_in_group.end(), t) == tensors_in_group.end())
          tensors_in_group.push_back(t);
      }
    auto is_r_level = [&](const std::string& t) {
      if (g.anchor < 0) return false;
      bool only_anchor_reads = true, any = false;
      for (const auto& a : accesses) {
        if (!members.count(a.statement) || range_name(a.map) != t) continue;
        if (a.statement != g.anchor || a.write) only_anchor_reads = false;
        // reads of the anchor's own output are P-level
        if (t == f.statements[scop.statements[g.anchor].statement].output) only_anchor_reads = false;
        any = true;
      }
      return any && only_anchor_reads;
    };
    auto make_buffer = [&](const std::string& t, TileLevel level, isa::Role role) {
      isl::union_map origin = tiled.origin_maps.at(tg.marker(level));
      isl::union_map acc = isl::union_map::empty(scop.context.ctx());
      bool read = false, written = false, init_written = false;
      for (const auto& a : accesses) {
        if (!members.count(a.statement) || range_name(a.map) != t) continue;
        if (level != TileLevel::P && a.statement != g.anchor) continue;
        acc = acc.unite(isl::union_map(a.map));
        if (a.write) {
          written = true;
          const ScopStatement& st = scop.statements[a.statement];
          const ir::Statement& s = f.statements[st.statement];
          if (st.init || s.reduction == ir::Reduction::None) init_written = true;
        } else {
          read = true;
        }
      }
      isl::union_map fp = acc.apply_domain(origin);
      isl::map m;
      fp.foreach_map([&](isl::map x) { m = m.is_null() ? x : m.unite(x); });
      TESSEL_CHECK(!m.is_null(), "promote: tensor " + t + " has no accesses in group " + std::to_string(gid));
      isl::fixed_box box = m.range_simple_fixed_box_hull();
      TESSEL_CHECK(box.is_valid(), "promote: the footprint of " + t + " in group " + std::to_string(gid) +
                                       " has no fixed box hull (tile pass must give boxes)");
      kernel::Buffer b;
      b.id = int(pr.buffers.size());
      b.tensor = t;
      const ir::Tensor* ten = f.find_tensor(t);
      TESSEL_CHECK(ten, "promote: unknown tensor " + t);
      b.dtype = ten->dtype;
      b.role = role;
      const isa::Level* lvl = h.level_with_role(role);
      TESSEL_CHECK(lvl, "promote: hierarchy " + h.name + " has no level with role " + std::string(isa::role_name(role)));
      b.level = lvl->name;
      b.group = gid;
      b.name = t + "_" + lvl->name + "_g" + std::to_string(gid);
      isl::multi_val sizes = box.size();
      isl::multi_aff offset = box.offset();
      std::vector<std::string> names = tg.origins(level);
      for (unsigned d = 0; d < sizes.size(); ++d) {
        b.extents.push_back(val_to_int(sizes.at(d)));
        b.offset.push_back(aff_to_expr(offset.at(d), names, tiled.sizes));
      }
      Placement p;
      p.buffer = b.id;
      p.level = level;
      const bool global = pr.tensors.end() != std::find_if(pr.tensors.begin(), pr.tensors.end(),
                                                           [&](const auto& x) { return x.name == t; });
      p.copy_in = read && (!written || !init_written) && global;
      p.copy_out = written && global;
      b.double_buffered = p.copy_in && role != isa::Role::Accumulator;
      pr.buffers.push_back(b);
      pr.placements.push_back(p);
      return b.id;
    };
    const MatmulMatch& mm = tg.match;
    for (const auto& t : tensors_in_group) {
      if (is_r_level(t)) {
        int id = make_buffer(t, TileLevel::R, isa::Role::Stage);
        pr.binding[gid][t] = id;
        if (mm.matched && (t == mm.a || t == mm.b)) {
          int op = make_buffer(t, TileLevel::I, t == mm.a ? isa::Role::OperandA : isa::Role::OperandB);
          pr.placements[op].copy_in = true;
          pr.placements[op].copy_out = false;
          pr.placements[op].src = id;
          pr.buffers[op].double_buffered = true;
        }
      } else {
        isa::Role role = mm.matched && t == mm.c ? isa::Role::Accumulator : isa::Role::Vector;
        pr.binding[gid][t] = make_buffer(t, TileLevel::P, role);
      }
    }
    // capacity per level
    std::map<std::string, std::vector<int>> by_level;
    for (const auto& b : pr.buffers)
      if (b.group == gid) by_level[b.level].push_back(b.id);
    for (const auto& [level, ids] : by_level) {
      const isa::Level* lvl = h.find_level(level);
      uint64_t need = 0;
      std::string parts;
      bool db = false;
      for (int id : ids) {
        const auto& b = pr.buffers[id];
        need += uint64_t(b.bytes()) * (b.double_buffered ? 2 : 1);
        db = db || b.double_buffered;
        parts += (parts.empty() ? "" : " + ") + b.name + " " + std::to_string(b.bytes()) + " B" +
                 (b.double_buffered ? " x2" : "");
      }
      if (need > lvl->capacity_bytes && !pr.overflow)
        pr.overflow = tile::FitFailure{lvl->role, level, h.name, int64_t(need), int64_t(lvl->capacity_bytes), parts, db};
    }
  }
  return pr;
}

}  // namespace tessel::poly
