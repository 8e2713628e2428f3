#include "compiler/program/program.h"

#include <chrono>
#include <set>

#include <fmt/format.h>

#include "compiler/poly/fold_padding.h"
#include "compiler/poly/isl_util.h"
#include "isa/base/error.h"

namespace tessel::program {

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
  p->partition = poly::partition_program(src, mode);
  const auto t1 = std::chrono::steady_clock::now();
  p->partition_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (!p->partition.cut()) {
    p->kernels.push_back(compile(f, options));
    p->sizes = ir::bind_sizes(f, options.sizes);
  } else {
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
      p->functions.push_back(std::make_unique<ir::Function>(poly::kernel_function(src, p->partition, g)));
      const ir::Function& k = *p->functions.back();
      CompileOptions o = options;
      o.sizes.clear();
      for (const auto& q : k.params) o.sizes[q] = p->sizes.at(q);
      o.plan_source = PlanSource{};  // a tuned plan of the whole def names none of these kernels' loops
      o.tile.reset();
      o.gpu_plan.reset();
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
  if (p.single()) return r;
  for (size_t g = 0; g < p.kernels.size(); ++g)
    r += fmt::format("  kernel {} {}: compiled in {:.1f} ms, tile {}\n", g, p.kernels[g]->function->name,
                     p.kernels[g]->total_ms, p.kernels[g]->tile_spec.to_string());
  return r + p.memory.to_string();
}

}  // namespace tessel::program
