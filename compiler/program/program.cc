#include "compiler/program/program.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>

#include "compiler/poly/fold_padding.h"
#include "compiler/poly/isl_util.h"
#include "compiler/pipeline_fit.h"
#include "isa/base/error.h"

namespace tessel::program {

namespace {

// A program's sizes are all bound before its kernels compile, so a floor-division term of
// parameters only (a stage's size `floor((H - 1)/4) + 1` in a shape or a range) is a number like a
// parameter: each distinct one becomes a size parameter of the kernel, `div0`, `div1`, ..., with its
// value in `sizes`. The cube and TensorCore templates read affine forms only; a function with a
// division left anywhere goes to the general lowering, which is why a whole network's stride-2
// stages need this. Divisions of indices (a pixel shuffle's `h / 2`) stay.
class SizeDivisionNamer {
 public:
  SizeDivisionNamer(const ir::Function& f, std::map<std::string, int64_t>& sizes) : f_(f), sizes_(sizes) {}

  ir::Function run() {
    ir::Function k = f_;
    for (auto& t : k.tensors)
      for (auto& d : t.shape) d = rename(d);
    for (auto& st : k.statements) {
      for (auto& o : st.out_indices) o = rename(o);
      for (auto& v : st.domain) {
        v.lo = rename(v.lo);
        v.hi = rename(v.hi);
      }
      st.rhs = rename(st.rhs);
    }
    for (const auto& [key, name] : names_) k.params.push_back(name);
    return k;
  }

 private:
  ir::AffineExpr rename(const ir::AffineExpr& e) {
    if (!e.has_div()) return e;
    ir::AffineExpr r = e;
    r.divs.clear();
    for (const auto& t : e.divs) {
      if (t.numerator.uses_indices()) {
        ir::AffineExpr kept = ir::AffineExpr::floor_div_of(t.numerator, t.divisor).scaled(t.coeff);
        r = r + kept;
        continue;
      }
      const std::string key = t.numerator.to_string() + "/" + std::to_string(t.divisor);
      auto it = names_.find(key);
      if (it == names_.end()) {
        // sizes are >= 1 (the scop's context says so): a quotient below 1 is named with an offset
        const int64_t value = ir::floor_div(t.numerator.evaluate({}, sizes_), t.divisor);
        std::string name;
        for (size_t i = names_.size(); name.empty() || taken(name); ++i) name = "div" + std::to_string(i);
        it = names_.emplace(key, name).first;
        offsets_[name] = value < 1 ? 1 - value : 0;
        sizes_[name] = value + offsets_[name];
      }
      r = r + ir::AffineExpr::param(it->second, t.coeff) - ir::AffineExpr::constant_of(t.coeff * offsets_[it->second]);
    }
    return r;
  }

  bool taken(const std::string& name) const {
    if (std::find(f_.params.begin(), f_.params.end(), name) != f_.params.end() || f_.find_tensor(name)) return true;
    for (const auto& st : f_.statements)
      for (const auto& v : st.domain)
        if (v.name == name) return true;
    return false;
  }

  ir::ExprPtr rename(const ir::ExprPtr& e) {
    auto n = std::make_shared<ir::Expr>(*e);
    for (auto& i : n->indices) i = rename(i);
    if (n->kind == ir::ExprKind::IndexValue) n->affine = rename(n->affine);
    for (auto& a : n->args) a = rename(a);
    return n;
  }

  const ir::Function& f_;
  std::map<std::string, int64_t>& sizes_;
  std::map<std::string, std::string> names_;  // "numerator/divisor" -> parameter
  std::map<std::string, int64_t> offsets_;    // parameter -> its value less the quotient
};

}  // namespace

std::unique_ptr<ProgramCompilation> compile_program(const ir::Function& f, const CompileOptions& options,
                                                    poly::PartitionMode mode) {
  const auto t0 = std::chrono::steady_clock::now();
  auto p = std::make_unique<ProgramCompilation>();
  p->def = &f;
  {
    poly::IslContext isl;
    p->folded = poly::fold_padding(isl.ctx(), f);
  }
  p->partitioned = p->folded ? &*p->folded : &f;
  const ir::Function& src = *p->partitioned;
  // softmaxes fused into their context contractions are kernels of their own, on targets that
  // lower them (compiler/poly/online_softmax.h); `--partition one` keeps the def whole
  std::vector<std::vector<int>> fused;
  {
    const poly::OnlineSoftmaxSearch found = poly::find_online_softmax(src);
    std::optional<isa::Hierarchy> h;
    if (!found.matches.empty()) h = load_target_hierarchy(options.target, options.hierarchy, options.overrides);
    // each match asks the target's lowering whether it takes that form (the NPU refuses f32
    // operands: such a softmax stays unfused), which needs every size bound
    const std::map<std::string, int64_t> bound = found.matches.empty() ? std::map<std::string, int64_t>{} : ir::bind_sizes(src, options.sizes);
    const bool all_bound = std::all_of(src.params.begin(), src.params.end(), [&](const std::string& q) { return bound.count(q) > 0; });
    // softmaxes after a contraction that did not match, with the reason (a softmax of an input is no candidate)
    for (const auto& r : found.rejected)
      if (r.find("its input is not one local written by a contraction") == std::string::npos) p->online_softmax.push_back("not applied: " + r);
    for (const auto& m : found.matches) {
      std::string why = !options.online_softmax ? "--no-online-softmax"
                        : mode == poly::PartitionMode::One && m.statements.size() != src.statements.size()
                            ? "--partition one keeps the def whole"
                        : all_bound ? online_softmax_obstacle(options.target, *h, src, m, bound)
                                    : online_softmax_obstacle(options.target, *h);
      if (why.empty()) fused.push_back(m.statements);
      p->online_softmax.push_back(why.empty() ? "applied: " + m.summary + " is one kernel (no score tensor)"
                                              : "not applied to " + m.summary + ": " + why);
    }
  }
  p->partition = poly::partition_program(src, mode, fused);
  const auto t1 = std::chrono::steady_clock::now();
  p->partition_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (!p->partition.cut()) {
    // `auto` keeps a small def as one kernel; where no tile of that kernel fits the description
    // (statements fused over loops that leave one operand's box whole), its statements are cut
    // into kernels of their own instead, and --explain says so
    const bool may_cut = mode == poly::PartitionMode::Auto && src.statements.size() > 1 &&
                         options.plan_source.kind != PlanSource::Kind::Given;
    CompileFit whole = compile_unless_no_tile_fits(f, options);
    if (whole.compilation) {
      p->kernels.push_back(std::move(whole.compilation));
      p->sizes = ir::bind_sizes(f, options.sizes);
    } else {
      if (may_cut) p->partition = poly::partition_program(src, poly::PartitionMode::Split, fused);
      if (!p->partition.cut()) throw UserError(whole.no_tile_fits);
      p->partition_note = fmt::format("cut into {} kernels: as one kernel, {}", p->partition.groups.size(), whole.no_tile_fits);
    }
  }
  if (p->partition.cut()) {
    if ((options.tile || options.gpu_plan) && options.plan_source.kind == PlanSource::Kind::Given)
      throw UserError(fmt::format("--tile: {} compiles to {} kernels (`tessel compile --explain` lists them); a tile spec "
                                  "names one kernel's loops: give --partition one to compile it as one kernel",
                                  f.name, p->partition.groups.size()));
    p->sizes = ir::bind_sizes(f, options.sizes);
    for (const auto& q : f.params)
      if (!p->sizes.count(q)) {
        std::string need;
        for (const auto& r : f.params) need += (need.empty() ? "" : ",") + r + "=...";
        throw UserError("--shape: no size for " + q + " (" + f.name + " needs " + need + ")");
      }
    for (size_t g = 0; g < p->partition.groups.size(); ++g) {
      CompileOptions o = options;
      o.sizes.clear();
      const ir::Function cut = poly::kernel_function(src, p->partition, g);
      for (const auto& q : cut.params) o.sizes[q] = p->sizes.at(q);
      p->functions.push_back(std::make_unique<ir::Function>(SizeDivisionNamer(cut, o.sizes).run()));
      const ir::Function& k = *p->functions.back();
      o.plan_source = PlanSource{};  // a tuned plan of the whole def names none of these kernels' loops
      o.tile.reset();
      o.gpu_plan.reset();
      // isl's maximal fusion over quasi-affine accesses (`/`, `%` in indices: an imported Flatten
      // or Reshape) can spend minutes in its ILP without reaching the operation quota (GMP
      // arithmetic is not counted, conservative fusion too); such a kernel is scheduled without isl
      // fusion, and the post-tiling fusion still groups its statements (measured: ONNX's expanded
      // LayerNormalization, 4-D, axis 2: 0.2 s against more than 120 s)
      if (o.scheduler.fusion != poly::FusionStrategy::None && !ir::index_division_use(k).empty())
        o.scheduler.fusion = poly::FusionStrategy::None;
      p->kernels.push_back(compile(k, o));
    }
  }
  const Compilation& first = *p->kernels.front();
  const int64_t alignment = options.target == "c" ? 1 : int64_t(first.hierarchy.level(isa::Role::Global).alignment_bytes);
  p->memory = plan_memory(src, p->partition, p->sizes, alignment);
  for (const auto& k : p->kernels) p->total_cpu_ms += k->total_cpu_ms;
  p->total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

namespace {

bool reads(const ir::Statement& s, const std::string& tensor) {
  bool found = false;
  ir::for_each_access(*s.rhs, [&](const ir::Expr& a) { found |= a.name == tensor; });
  return found;
}

}  // namespace

ir::Function reference_kernel_function(const ProgramCompilation& p, size_t g) {
  if (p.single()) return *p.def;
  if (!p.folded) return poly::kernel_function(*p.def, p.partition, g);
  // fold_padding only removes statements: the def's i-th kept statement is the folded j-th
  const ir::Function& def = *p.def;
  std::vector<int> kept;
  std::vector<int> removed;
  for (size_t i = 0; i < def.statements.size(); ++i)
    (p.folded->find_tensor(def.statements[i].output) ? kept : removed).push_back(int(i));
  if (kept.size() != p.folded->statements.size())
    throw InternalError("reference_kernel_function: the folded def is not the def less its padding statements");
  poly::ProgramPartition q = p.partition;
  for (auto& group : q.groups) {
    std::set<int> members;
    for (int j : group.statements) members.insert(kept[size_t(j)]);
    for (int r : removed)
      for (int i : std::set<int>(members))
        if (reads(def.statements[size_t(i)], def.statements[size_t(r)].output)) members.insert(r);
    group.statements.assign(members.begin(), members.end());
  }
  return poly::kernel_function(def, q, g);
}

std::string explain_program(const ProgramCompilation& p) {
  std::string r = "program: " + poly::to_string(p.partition, *p.partitioned);
  for (const auto& line : p.online_softmax) r += "online softmax: " + line + "\n";
  if (!p.partition_note.empty()) r += "partition: " + p.partition_note + "\n";
  for (const auto& k : p.kernels)
    for (const auto& t : k->division_tails) r += "division tail: " + t.to_string() + "\n";
  if (p.single()) {
    const Compilation& c = *p.kernels.front();
    if (c.kernel.attention) r += kernel::to_string(*c.kernel.attention);
    return r;
  }
  for (size_t g = 0; g < p.kernels.size(); ++g) {
    r += fmt::format("  kernel {} {}: compiled in {:.1f} ms, tile {}\n", g, p.kernels[g]->function->name,
                     p.kernels[g]->total_ms, plan_name(*p.kernels[g]));
  }
  return r + p.memory.to_string();
}

}  // namespace tessel::program
