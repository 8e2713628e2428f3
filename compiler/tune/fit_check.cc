#include "compiler/tune/fit_check.h"

#include "compiler/emit_npu/conv.h"
#include "compiler/emit_npu/emit_npu.h"
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

FitChecker::~FitChecker() = default;

std::optional<ConfigInfo> FitChecker::check(const tile::TileSpec& spec, std::string* why) {
  const std::string key = spec.to_string();
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (why) *why = why_[key];
    return it->second;
  }
  ++checks_;
  Compilation& c = *base_;
  const ir::Function& fn = *c.function;
  tile::check_tile_spec(spec, fn);
  poly::TiledProgram tiled;
  std::vector<poly::Group> groups = c.groups;
  std::vector<poly::MatmulMatch> matches = c.matches;
  if (!poly::tile_program(c.scop, c.deps, groups, matches, spec, problem_.sizes, tiled)) {
    // as the pipeline does: tile the statements separately
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
  if (pr.overflow) {
    const std::string reason = pr.overflow->message();
    cache_[key] = std::nullopt;
    why_[key] = reason;
    if (why) *why = reason;
    return std::nullopt;
  }
  ConfigInfo info;
  info.spec = spec;
  for (size_t i = 0; i < pr.buffers.size(); ++i) {
    const auto& b = pr.buffers[i];
    const auto& p = pr.placements[i];
    Footprint fp{b.role, b.level, b.tensor, b.bytes(), b.double_buffered, p.level, p.copy_in, p.copy_out, b.group};
    info.buffers.push_back(fp);
    info.level_bytes[b.level] += uint64_t(b.bytes()) * (b.double_buffered ? 2 : 1);
  }
  for (const auto& tg : tiled.groups) {
    GroupTiling g;
    g.outer = tg.outer;
    g.inner = tg.inner;
    for (const auto& [axis, lo] : tg.lo) g.extent[axis] = std::max<int64_t>(1, tg.hi.at(axis) - lo);
    for (int s : tg.group.members)
      for (const auto& v : fn.statements[c.scop.statements[s].statement].domain) g.reduction[v.name] = v.is_reduction;
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
    info.groups.push_back(g);
  }
  if (const auto plan = conv_plan(&spec); plan && !plan->plan) {
    // The NPU convolution's own tile policy (compiler/tile/npu_conv_plan.h) reads the tile beyond
    // the loop tree (weights + feature map in L1, pixel blocks x kernel positions in L0A/L0B,
    // accumulator blocks in UB): its fit report decides, without compiling.
    const std::string reason = plan->no_fit ? plan->no_fit->message(base_->kernel.name, key)
                                            : plan->unsupported;
    if (why) *why = reason;
    why_[key] = reason;
    cache_[key] = std::nullopt;
    return std::nullopt;
  }
  cache_[key] = info;
  return info;
}

}  // namespace tessel::tune
