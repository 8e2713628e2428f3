#include "compiler/tune/fit_check.h"

#include <functional>

#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/tile/npu_gemm_plan.h"
#include "isa/npu_machine.h"
#include "isa/base/error.h"

namespace tessel::tune {

namespace {

uint32_t unit_cycles_of(const isa::Hierarchy& h, const poly::MatmulMatch& m) {
  for (const auto* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const auto& s : u->shapes)
      if (s.m == m.unit_m && s.n == m.unit_n && s.k == m.unit_k && s.a == m.in_type) return std::max<uint32_t>(1, s.cycles);
  return 1;
}

}  // namespace

MmaPath parse_mma_path(const std::string& name) {
  if (name == "wmma") return MmaPath::Wmma;
  if (name == "mma.sync") return MmaPath::MmaSync;
  if (name == "wgmma") return MmaPath::Wgmma;
  if (name == "simt" || name.empty()) return MmaPath::Unknown;
  throw UserError("unknown tensor-core path '" + name + "' (known: wmma, mma.sync, wgmma, simt)");
}

FitChecker::FitChecker(const ir::Function& f, const CompileOptions& options) {
  CompileOptions o = options;
  o.tile.reset();
  o.dump_after.clear();
  base_ = compile(f, o);
  problem_.function = base_->function;
  problem_.sizes = o.sizes;
  problem_.hierarchy = base_->hierarchy;
  problem_.default_spec = tile::default_tile_spec(*base_->function, o.sizes, base_->hierarchy);
  for (const auto& s : base_->function->statements)
    for (const auto& v : s.domain)
      problem_.extents[v.name] = std::max<int64_t>(1, (v.hi - v.lo).evaluate({}, o.sizes));
  int fallback = 1;
  for (const auto* u : base_->hierarchy.units_of_kind(isa::UnitKind::Matrix))
    if (!u->shapes.empty()) fallback = u->shapes[0].n;
  for (const auto& a : problem_.default_spec.axes) problem_.units[a.axis] = fallback;
  for (const auto& m : base_->matches)
    if (m.matched) {
      problem_.units[m.m] = m.unit_m;
      problem_.units[m.n] = m.unit_n;
      problem_.units[m.k] = m.unit_k;
    }
  source_ = &f;
  options_ = o;
  if (base_->hierarchy.kind == isa::TargetKind::Npu)
    problem_.npu_conv = emit_npu::conv_geometry(base_->kernel, isa::npu_machine(base_->hierarchy));
  else
    problem_.gpu_row_kernel = emit_cuda::plan_row_kernel(base_->kernel, isa::GpuMachine::from(base_->hierarchy), nullptr);
}

std::optional<tile::ConvPlanResult> FitChecker::conv_plan(const tile::TileSpec* spec) const {
  if (!problem_.npu_conv) return std::nullopt;
  return emit_npu::plan_convolution(base_->kernel, base_->hierarchy, spec);
}

bool FitChecker::detect_fixed_mapping(const std::vector<tile::TileSpec>& samples) {
  if (detected_) return !problem_.fixed_mapping.empty();
  detected_ = true;
  const auto first = conv_plan(nullptr);
  if (!first || !first->plan) return false;
  bool any = false;
  for (const auto& s : samples) {
    if (!check(s)) continue;
    const auto plan = conv_plan(&s);
    if (!plan->plan || !(*plan->plan == *first->plan)) return false;  // the plan reads the tile
    any = true;
  }
  if (!any) return false;
  problem_.fixed_mapping =
      "the NPU convolution tile policy (compiler/tile/npu_conv_plan.h) chooses its sizes itself here: every sampled tile "
      "spec gives the same plan";
  return true;
}

// One access of a scop statement: the tensor and its index expressions.
struct ModelAccess {
  int statement = 0;  // index into Scop::statements
  std::string tensor;
  const std::vector<ir::AffineExpr>* indices = nullptr;
};

// A buffer as the full check placed it: everything but the bytes carries over to every tile spec
// with the same matmul matches.
struct ModelBuffer {
  Footprint fp;
  std::string name;
  int64_t elem_bytes = 1;
};

struct FitChecker::FullResult {
  std::optional<ConfigInfo> info;
  std::string reason;  // promotion's overflow message when !info
  bool fused = true;   // tile_program accepted the fusion plan's groups
  std::vector<ModelBuffer> buffers;
  std::vector<std::vector<int64_t>> extents;  // per buffer
};

struct FitChecker::FastModel {
  bool enabled = true;
  std::string why_not;
  std::vector<ModelAccess> accesses;
  std::map<std::vector<bool>, std::vector<ModelBuffer>> templates;  // per-group matched flags -> buffers
  void disable(const std::string& why) {
    if (!enabled) return;
    enabled = false;
    why_not = why;
  }
};

FitChecker::~FitChecker() = default;

bool FitChecker::fast() const { return fast_ && fast_->enabled; }
std::string FitChecker::why_not_fast() const { return fast_ ? fast_->why_not : "not set up"; }
void FitChecker::set_fast(bool on) {
  if (!fast_ && on) return;
  if (!fast_) {  // off before the first check: the accesses are never needed
    fast_ = std::make_unique<FastModel>();
    fast_->disable("turned off (set_fast)");
  }
  if (!on) fast_->disable("turned off (set_fast)");
  cache_.clear();
  why_.clear();
}

namespace {

struct AxisRange {
  int64_t lo = 0, hi = 0;
};

// Whether an index of a group member is walked inside the group's stage tiles rather than spread
// over them: the group's parallel tiles are over its tile axes only (poly/fusion.h), so an index
// that is not one (a reduction, or the column index of softmax's element-wise statements fused into its row
// reductions' group) is a loop inside every stage tile, whichever member it belongs to.
bool walked_inside(const poly::Group& g, const ir::IndexVar& v) {
  if (g.tile_axes.empty()) return v.is_reduction;
  return std::find(g.tile_axes.begin(), g.tile_axes.end(), v.name) == g.tile_axes.end();
}

// The NPU cube's plan (tile::plan_gemm) runs, where M, N and K are multiples of the unit, the
// largest tiles within the spec's boxes that divide them (a box of 64 over 784 rows runs as 16):
// the model prices those. Convolutions (img2col) have a plan of their own (conv_breakdown).
void npu_dividing_tiles(GroupTiling& g, const isa::Hierarchy& h) {
  if (!g.matched || g.img2col || h.kind != isa::TargetKind::Npu) return;
  const std::pair<std::string, int64_t> axes[] = {{g.m, g.unit_m}, {g.n, g.unit_n}, {g.k, g.unit_k}};
  for (const auto& [a, u] : axes)
    if (!g.extent.count(a) || !g.outer.count(a)) return;
  if (!tile::whole_units(g.extent.at(g.m), g.extent.at(g.n), g.extent.at(g.k), g.unit_m, g.unit_n, g.unit_k)) return;
  for (const auto& [a, u] : axes) {
    const auto up = [u = u](int64_t x) { return (x + u - 1) / u * u; };
    g.outer[a] = tile::dividing_tile(g.extent.at(a), up(g.outer[a]), u);
    g.inner[a] = tile::dividing_tile(g.outer[a], up(g.inner[a]), u);
  }
}

// The tile pass's view of group g under `spec` (poly::Tiler::group_tiles): axis ranges from the
// first member that has the axis, sizes from the spec (one tile without an entry), and the match
// undone when an axis besides m, n, k is not point-tiled.
GroupTiling group_tiling(const Compilation& c, size_t gi, const tile::TileSpec& spec, const std::map<std::string, int64_t>& sizes,
                         std::map<std::string, AxisRange>& ranges) {
  const ir::Function& fn = *c.function;
  const poly::Group& g = c.groups[gi];
  GroupTiling out;
  ranges.clear();
  for (int mi : g.members)
    for (const auto& v : fn.statements[c.scop.statements[mi].statement].domain) {
      if (ranges.count(v.name)) continue;
      ranges[v.name] = {v.lo.evaluate({}, sizes), v.hi.evaluate({}, sizes)};
    }
  for (const auto& [axis, r] : ranges) {
    const tile::AxisTile* t = spec.find(axis);
    const int64_t whole = std::max<int64_t>(1, r.hi);
    out.outer[axis] = t ? t->outer : whole;
    out.inner[axis] = t ? t->inner : out.outer[axis];
    out.extent[axis] = std::max<int64_t>(1, r.hi - r.lo);
  }
  for (int s : g.members)
    for (const auto& v : fn.statements[c.scop.statements[s].statement].domain) out.reduction[v.name] = walked_inside(g, v);
  poly::MatmulMatch m = c.matches[gi];
  if (m.matched)
    for (const auto& x : m.other_axes)
      if (out.outer.count(x) && out.outer.at(x) != 1 && ranges.at(x).hi - ranges.at(x).lo > 1) {
        m.matched = false;
        break;
      }
  out.matched = m.matched;
  if (m.matched) {
    out.m = m.m;
    out.n = m.n;
    out.k = m.k;
    out.unit_m = m.unit_m;
    out.unit_n = m.unit_n;
    out.unit_k = m.unit_k;
    out.unit_cycles = unit_cycles_of(c.hierarchy, m);
    out.in_type = m.in_type;
    out.acc_type = m.acc_type;
    out.img2col = m.img2col;
  }
  return out;
}

// The extents of the fixed box hull of `tensor`'s accesses in group gi at `level`, by interval
// arithmetic; nullopt where the model is not exact (see fit_check.h).
std::optional<std::vector<int64_t>> model_box(const Compilation& c, size_t gi, const std::vector<ModelAccess>& accesses,
                                              const std::string& tensor, poly::TileLevel level, const GroupTiling& gt,
                                              const std::map<std::string, AxisRange>& ranges,
                                              const std::map<std::string, int64_t>& sizes, std::string* why) {
  const ir::Function& fn = *c.function;
  const poly::Group& g = c.groups[gi];
  auto tile_of = [&](const std::string& v) -> int64_t {  // 0: not tiled at this level
    const bool is_tile = std::find(g.tile_axes.begin(), g.tile_axes.end(), v) != g.tile_axes.end();
    const bool is_red = std::find(g.reduction_axes.begin(), g.reduction_axes.end(), v) != g.reduction_axes.end();
    if (!is_tile && !(is_red && level != poly::TileLevel::P)) return 0;
    return level == poly::TileLevel::I ? gt.inner.at(v) : gt.outer.at(v);
  };
  std::vector<int64_t> lo, hi;
  std::vector<std::map<std::string, int64_t>> linear;  // per dimension: tiled index -> coefficient
  bool any = false;
  for (const auto& a : accesses) {
    if (a.tensor != tensor) continue;
    if (std::find(g.members.begin(), g.members.end(), a.statement) == g.members.end()) continue;
    if (level != poly::TileLevel::P && a.statement != g.anchor) continue;
    const poly::ScopStatement& st = c.scop.statements[a.statement];
    const ir::Statement& s = fn.statements[st.statement];
    std::map<std::string, AxisRange> vars;
    std::map<std::string, int64_t> zero;
    for (const auto& name : st.indices) {
      const ir::IndexVar* v = s.find_index(name);
      if (!v) {
        *why = "statement " + st.name + " has no index " + name;
        return std::nullopt;
      }
      vars[name] = {v->lo.evaluate({}, sizes), v->hi.evaluate({}, sizes)};
      zero[name] = 0;
      if (vars[name].hi - vars[name].lo < 1) {
        *why = "index " + name + " of " + st.name + " has an empty range";
        return std::nullopt;
      }
    }
    if (!any) {
      lo.assign(a.indices->size(), 0);
      hi.assign(a.indices->size(), 0);
      linear.assign(a.indices->size(), {});
    } else if (a.indices->size() != lo.size()) {
      *why = "accesses of " + tensor + " differ in rank";
      return std::nullopt;
    }
    for (size_t d = 0; d < a.indices->size(); ++d) {
      const ir::AffineExpr& e = (*a.indices)[d];
      if (e.has_div()) {
        *why = "an index of " + tensor + " has floor division";
        return std::nullopt;
      }
      int64_t l = e.evaluate(zero, sizes), h = l;
      std::map<std::string, int64_t> lin;
      for (const auto& [v, coeff] : e.index_coeffs) {
        auto it = vars.find(v);
        if (it == vars.end()) {
          *why = "an index of " + tensor + " uses " + v + " outside " + st.name + "'s domain";
          return std::nullopt;
        }
        const AxisRange r = it->second;
        if (const int64_t T = tile_of(v)) {
          // the tile box starts at an origin that is a multiple of T: exact only from 0, with the
          // group's range (tile_box) equal to this statement's
          if (r.lo != 0 || !ranges.count(v) || ranges.at(v).lo != r.lo || ranges.at(v).hi != r.hi) {
            *why = "tiled index " + v + " does not range from 0 alike in every statement of the group";
            return std::nullopt;
          }
          const int64_t n = std::min(T, r.hi - r.lo);
          l += std::min<int64_t>(0, coeff * (n - 1));
          h += std::max<int64_t>(0, coeff * (n - 1));
          lin[v] = coeff;
        } else {
          l += std::min(coeff * r.lo, coeff * (r.hi - 1));
          h += std::max(coeff * r.lo, coeff * (r.hi - 1));
        }
      }
      if (!any) {
        lo[d] = l;
        hi[d] = h;
        linear[d] = lin;
      } else {
        if (lin != linear[d]) {
          *why = "accesses of " + tensor + " move differently with the tile origin";
          return std::nullopt;
        }
        lo[d] = std::min(lo[d], l);
        hi[d] = std::max(hi[d], h);
      }
    }
    any = true;
  }
  if (!any) {
    *why = "no access of " + tensor + " in group " + std::to_string(g.id);
    return std::nullopt;
  }
  std::vector<int64_t> ext;
  for (size_t d = 0; d < lo.size(); ++d) ext.push_back(hi[d] - lo[d] + 1);
  return ext;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}

}  // namespace

FitChecker::FullResult FitChecker::run_full(const tile::TileSpec& spec) {
  ++full_checks_;
  FullResult out;
  Compilation& c = *base_;
  const ir::Function& fn = *c.function;
  poly::TiledProgram tiled;
  std::vector<poly::Group> groups = c.groups;
  std::vector<poly::MatmulMatch> matches = c.matches;
  if (!poly::tile_program(c.scop, c.deps, groups, matches, spec, problem_.sizes, tiled)) {
    // as the pipeline does: tile the statements separately
    out.fused = false;
    tiled = poly::TiledProgram{};
    groups = poly::plan_fusion(c.scop, false);
    matches.clear();
    for (const auto& g : groups)
      matches.push_back(g.anchor < 0 ? poly::MatmulMatch{false, "no reduction"}
                                     : poly::match_matmul(fn.statements[c.scop.statements[g.anchor].statement], fn,
                                                          c.hierarchy));
    TESSEL_CHECK(poly::tile_program(c.scop, c.deps, groups, matches, spec, problem_.sizes, tiled),
                 "tune: the unfused tiled schedule violates a dependence (tile pass)");
  }
  const poly::Promotion pr = poly::promote(c.scop, c.deps, tiled, c.hierarchy);
  ConfigInfo info;
  info.spec = spec;
  for (size_t i = 0; i < pr.buffers.size(); ++i) {
    const auto& b = pr.buffers[i];
    const auto& p = pr.placements[i];
    Footprint fp{b.role, b.level, b.tensor, b.bytes(), b.double_buffered, p.level, p.copy_in, p.copy_out, b.group};
    info.buffers.push_back(fp);
    info.level_bytes[b.level] += uint64_t(b.bytes()) * (b.double_buffered ? 2 : 1);
    out.buffers.push_back({fp, b.name, dtype_bytes(b.dtype)});
    out.extents.push_back(b.extents);
  }
  if (pr.overflow) {
    out.reason = pr.overflow->message();
    return out;
  }
  for (const auto& tg : tiled.groups) {
    GroupTiling g;
    g.outer = tg.outer;
    g.inner = tg.inner;
    for (const auto& [axis, lo] : tg.lo) g.extent[axis] = std::max<int64_t>(1, tg.hi.at(axis) - lo);
    for (int s : tg.group.members)
      for (const auto& v : fn.statements[c.scop.statements[s].statement].domain) g.reduction[v.name] = walked_inside(tg.group, v);
    g.matched = tg.match.matched;
    if (g.matched) {
      g.m = tg.match.m;
      g.n = tg.match.n;
      g.k = tg.match.k;
      g.unit_m = tg.match.unit_m;
      g.unit_n = tg.match.unit_n;
      g.unit_k = tg.match.unit_k;
      g.unit_cycles = unit_cycles_of(c.hierarchy, tg.match);
      g.in_type = tg.match.in_type;
      g.acc_type = tg.match.acc_type;
      g.img2col = tg.match.img2col;
    }
    npu_dividing_tiles(g, c.hierarchy);
    info.groups.push_back(g);
  }
  out.info = std::move(info);
  return out;
}

std::optional<ConfigInfo> FitChecker::check_full(const tile::TileSpec& spec, std::string* why) {
  tile::check_tile_spec(spec, *base_->function);
  FullResult r = run_full(spec);
  return finish(spec, std::move(r.info), r.reason, why, false);
}

// The NPU convolution's plan, then the answer (also into the cache).
std::optional<ConfigInfo> FitChecker::finish(const tile::TileSpec& spec, std::optional<ConfigInfo> info, std::string reason,
                                             std::string* why, bool store) {
  const std::string key = spec.to_string();
  if (info)
    if (const auto plan = conv_plan(&spec); plan && !plan->plan) {
      // The NPU convolution's own tile policy (compiler/tile/npu_conv_plan.h) reads the tile beyond
      // the loop tree (weights + feature map in L1, pixel blocks x kernel positions in L0A/L0B,
      // accumulator blocks in UB): its fit report decides, without compiling.
      reason = plan->no_fit ? plan->no_fit->message(base_->kernel.name, key) : plan->unsupported;
      info.reset();
    }
  if (why) *why = info ? "" : reason;
  if (store) {
    why_[key] = info ? "" : reason;
    cache_[key] = info;
  }
  return info;
}

std::optional<ConfigInfo> FitChecker::check(const tile::TileSpec& spec, std::string* why) {
  const std::string key = spec.to_string();
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (why) *why = why_[key];
    return it->second;
  }
  ++checks_;
  Compilation& c = *base_;
  tile::check_tile_spec(spec, *c.function);
  if (!fast_) {
    fast_ = std::make_unique<FastModel>();
    for (size_t i = 0; i < c.scop.statements.size(); ++i) {
      const poly::ScopStatement& st = c.scop.statements[i];
      const ir::Statement& s = c.function->statements[st.statement];
      if (!st.init) {
        std::vector<const ir::Expr*> reads;
        std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {  // as poly::build_scop
          if (e.kind == ir::ExprKind::Access) reads.push_back(&e);
          for (const auto& a : e.args) walk(*a);
        };
        walk(*s.rhs);
        for (const auto* r : reads) fast_->accesses.push_back({int(i), r->name, &r->indices});
      }
      fast_->accesses.push_back({int(i), s.output, &s.out_indices});
    }
  }
  if (!fast_->enabled) {
    FullResult r = run_full(spec);
    return finish(spec, std::move(r.info), r.reason, why);
  }
  // the groups as the tile pass sees them under this spec
  std::vector<GroupTiling> tilings;
  std::vector<std::map<std::string, AxisRange>> ranges(c.groups.size());
  std::vector<bool> matched;
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    tilings.push_back(group_tiling(c, gi, spec, problem_.sizes, ranges[gi]));
    matched.push_back(tilings.back().matched);
  }
  // the model's answer from a set of buffers
  auto model = [&](const std::vector<ModelBuffer>& buffers, std::vector<std::vector<int64_t>>* extents,
                   std::string* reason, std::string* unsupported) -> std::optional<ConfigInfo> {
    ConfigInfo info;
    info.spec = spec;
    std::optional<tile::FitFailure> overflow;
    std::map<int, std::map<std::string, std::vector<size_t>>> by_group_level;
    for (const auto& b : buffers) {
      size_t gi = 0;
      while (gi < c.groups.size() && c.groups[gi].id != b.fp.group) ++gi;
      if (gi == c.groups.size()) {
        *unsupported = "buffer of an unknown group";
        return std::nullopt;
      }
      const auto box = model_box(c, gi, fast_->accesses, b.fp.tensor, b.fp.tile_level, tilings[gi], ranges[gi],
                                 problem_.sizes, unsupported);
      if (!box) return std::nullopt;
      if (extents) extents->push_back(*box);
      Footprint fp = b.fp;
      fp.bytes = product(*box) * b.elem_bytes;
      by_group_level[fp.group][fp.level].push_back(info.buffers.size());
      info.buffers.push_back(fp);
      info.level_bytes[fp.level] += uint64_t(fp.bytes) * (fp.double_buffered ? 2 : 1);
    }
    // promotion's capacity check: per group in order, per level by name, the first overflow
    for (const auto& g : c.groups) {
      for (const auto& [level, ids] : by_group_level[g.id]) {
        const isa::Level* lvl = c.hierarchy.find_level(level);
        uint64_t need = 0;
        std::string parts;
        bool db = false;
        for (size_t id : ids) {
          const auto& fp = info.buffers[id];
          need += uint64_t(fp.bytes) * (fp.double_buffered ? 2 : 1);
          db = db || fp.double_buffered;
          parts += (parts.empty() ? "" : " + ") + buffers[id].name + " " + std::to_string(fp.bytes) + " B" +
                   (fp.double_buffered ? " x2" : "");
        }
        if (need > lvl->capacity_bytes && !overflow)
          overflow = tile::FitFailure{lvl->role, level, c.hierarchy.name, int64_t(need), int64_t(lvl->capacity_bytes), parts, db};
      }
    }
    if (overflow) {
      *reason = overflow->message();
      return std::nullopt;
    }
    info.groups = tilings;  // (the boxes above are the tile pass's; the model prices the cube's tiles)
    for (GroupTiling& g : info.groups) npu_dividing_tiles(g, c.hierarchy);
    return info;
  };
  auto it = fast_->templates.find(matched);
  if (it == fast_->templates.end()) {
    // a new set of matches: the full check gives the buffers; the model must reproduce it exactly
    FullResult r = run_full(spec);
    if (!r.fused) {
      fast_->disable("the tile pass rejected the fused schedule for " + key + " (the check then tiles statements apart)");
    } else {
      std::vector<std::vector<int64_t>> extents;
      std::string reason, unsupported;
      const auto mine = model(r.buffers, &extents, &reason, &unsupported);
      if (!unsupported.empty()) fast_->disable(unsupported);
      else if (extents != r.extents || bool(mine) != bool(r.info) || reason != r.reason ||
               (mine && (mine->level_bytes != r.info->level_bytes || mine->groups.size() != r.info->groups.size())))
        fast_->disable("the arithmetic model disagrees with tile + promote at " + key);
      else
        fast_->templates[matched] = r.buffers;
    }
    return finish(spec, std::move(r.info), r.reason, why);
  }
  std::string reason, unsupported;
  auto info = model(it->second, nullptr, &reason, &unsupported);
  if (!unsupported.empty()) {  // not expected: the template's spec passed; be exact anyway
    fast_->disable(unsupported);
    FullResult r = run_full(spec);
    return finish(spec, std::move(r.info), r.reason, why);
  }
  return finish(spec, std::move(info), reason, why);
}

}  // namespace tessel::tune
