#include "compiler/cli/explain_plan.h"

#include "compiler/emit_cuda/simt_gemm_policy.h"
#include "compiler/emit_npu/compositions.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "compiler/cli/gpu_roofline_writers.h"
#include "compiler/cli/run_gpu.h"
#include "compiler/cli/run_npu.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/simt_gemm_policy.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/kernel/gpu_roofline.h"
#include "compiler/kernel/roofline.h"
#include "compiler/program/program.h"
#include "compiler/tune/cost_model.h"
#include "compiler/tune/fit_check.h"
#include "compiler/tune/space.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"

namespace tessel::cli {

namespace {

struct Priced {
  std::string plan;
  double predicted = 0;  // cycles; <= 0: the model cannot price it
  std::string note;
};

// The analytic model's cycles for a tile spec, 0 when it does not fit (`why`).
double predict(tune::FitChecker& fit, const tune::CostModel& model, const tile::TileSpec& spec, std::string* why) {
  const auto info = fit.check(spec, why);
  return info ? model.predict(fit.problem(), *info) : 0;
}

void print_alternatives(const std::vector<Priced>& alternatives, double chosen, double clock_mhz, int top, std::ostream& os) {
  const size_t n = top > 0 ? std::min<size_t>(size_t(top), alternatives.size()) : alternatives.size();
  os << fmt::format("  alternatives ({} of {}; --explain=all lists every one):\n", n, alternatives.size());
  for (size_t i = 0; i < n; ++i) {
    const Priced& a = alternatives[i];
    if (a.predicted <= 0) {
      os << fmt::format("    {:<42} {}\n", a.plan, a.note.empty() ? "not priced" : a.note);
      continue;
    }
    os << fmt::format("    {:<42} predicted {:>12.0f} cycles {:>10.2f} us", a.plan, a.predicted, a.predicted / clock_mhz);
    if (chosen > 0) os << fmt::format("  ({:.2f}x the chosen plan's)", a.predicted / chosen);
    os << (a.note.empty() ? "" : "  " + a.note) << "\n";
  }
}

kernel::NpuRoofline npu_roofline_of(const Compilation& c) {
  return kernel::npu_roofline(c.kernel, isa::npu_machine(c.hierarchy), emit_npu::vector_instructions);
}

// The NPU twin of gpu_roofline_text: "<prefix>bound: roofline N cycles (T us), B bound (...)".
std::string npu_roofline_text(const kernel::NpuRoofline& r, double clock_mhz, const std::string& prefix) {
  return prefix + fmt::format("bound: roofline {:.0f} cycles ({:.2f} us), {} bound (cube {:.0f}, vector {:.0f}, GM {:.0f}, "
                              "latency {:.0f} on {} cores)\n",
                              r.cycles, r.cycles / clock_mhz, kernel::roofline_bound_name(r.binds), r.cube_cycles,
                              r.vector_cycles, r.gm_cycles, r.latency_cycles, r.cores);
}

void explain_npu(const ir::Function& f, const CompileOptions& options, const Compilation& c, int top, std::ostream& os) {
  os << "plan: " << c.tile_spec.to_string() << " (from " << c.plan_source.describe() << ")\n";
  for (const std::string& line : c.widened_statements) os << "  bf16: " << line << "\n";  // pass widen_bf16
  if (c.kernel.function) os << npu_roofline_text(npu_roofline_of(c), c.hierarchy.clock_mhz, "  ");
  CompileOptions o = options;
  o.tile.reset();
  tune::FitChecker fit(f, o);
  const tune::Problem& p = fit.problem();
  const auto model = tune::make_cost_model("analytic");
  double chosen = 0;
  std::string why;
  if (c.plan_source.kind == PlanSource::Kind::Policy && tune::default_mapping_breakdown(p))
    chosen = tune::default_mapping_breakdown(p)->total;
  else
    chosen = predict(fit, *model, c.tile_spec, &why);
  if (chosen > 0) os << fmt::format("  predicted {:.0f} cycles ({:.2f} us) by the analytic model\n", chosen, chosen / c.hierarchy.clock_mhz);
  const tune::Space space = tune::build_space(tune::default_space_spec(p.default_spec, p.extents, p.units), fit);
  if (!p.fixed_mapping.empty()) {
    os << "  alternatives: none: " << p.fixed_mapping << "\n";
    return;
  }
  std::vector<Priced> alternatives;
  for (const auto& spec : space.configs) {
    if (spec.to_string() == c.tile_spec.to_string()) continue;
    alternatives.push_back({spec.to_string(), predict(fit, *model, spec, nullptr), ""});
  }
  std::stable_sort(alternatives.begin(), alternatives.end(), [](const Priced& a, const Priced& b) {
    return (a.predicted > 0) != (b.predicted > 0) ? a.predicted > 0 : a.predicted < b.predicted;
  });
  print_alternatives(alternatives, chosen, c.hierarchy.clock_mhz, top, os);
}

// A GPU plan's block / warp tiles as a tile spec of the contraction's m, n, k axes, and its
// tensor-core path, for the analytic model.
std::optional<tile::TileSpec> plan_tiles(const Compilation& c, const emit_cuda::TcConfig& g) {
  const auto& k = c.kernel.contraction;
  if (!k || k->m.size() != 1 || k->n.size() != 1 || k->k.size() != 1) return std::nullopt;
  return tile::parse_tile_spec(fmt::format("{}={}/{},{}={}/{},{}={}/{}", k->m[0].var, g.bm, g.wm, k->n[0].var, g.bn, g.wn,
                                           k->k[0].var, g.bk, std::min(g.bk, 16)));
}

const char* mma_path(const emit_cuda::TcConfig& g) { return emit_cuda::name(g.mma); }

void explain_gpu(const ir::Function& f, const CompileOptions& options, const Compilation& c, int top, std::ostream& os,
                 const GpuFlags& gpu) {
  const std::string bound = c.kernel.function ? gpu_roofline_text(kernel::gpu_roofline(c.kernel, c.hierarchy, gpu.tf32)) : "";
  const std::vector<std::string> all = gpu_plan_space(c, gpu);
  if (all.empty()) {  // SIMT: the emitter's explanation says why
    os << bound;
    return;
  }
  if (emit_cuda::SimtGemmPlan::is_plan_text(all.front())) {  // the SIMT contraction kernel: its policy's ranking, no analytic price
    const std::string chosen_text = !c.kernel.gpu_plan.empty() ? c.kernel.gpu_plan : all.front();
    const bool tf32_kernel = emit_cuda::SimtGemmPlan::parse(chosen_text).tf32;
    os << "plan: " << chosen_text << " (from " << c.plan_source.describe()
       << (tf32_kernel ? "; TF32 TensorCore contraction kernel, mma.sync m16n8k8)\n" : "; register-blocked SIMT contraction kernel)\n");
    os << bound;
    std::vector<Priced> alternatives;
    for (const auto& g : all)
      if (g != chosen_text) alternatives.push_back({g, 0.0, ""});
    print_alternatives(alternatives, 0.0, c.hierarchy.clock_mhz, top, os);
    // the plans --tf32 would run (wgmma on sm_90, else mma.sync); none where TF32 cannot run (sm_75)
    if (gpu.tf32 || !c.kernel.contraction ||
        !emit_cuda::simt_gemm_obstacle(*c.kernel.contraction, isa::GpuMachine::from(c.hierarchy), true).empty())
      return;
    GpuFlags with_tf32 = gpu;
    with_tf32.tf32 = true;
    std::string tf32;
    for (const auto& g : gpu_plan_space(c, with_tf32)) tf32 += (tf32.empty() ? "" : ", ") + g;
    if (!tf32.empty()) os << "  with --tf32 (TensorCores, TF32 inputs): " << tf32 << "\n";
    return;
  }
  std::vector<emit_cuda::TcConfig> ranked;
  for (const auto& p : all) ranked.push_back(emit_cuda::TcConfig::parse(p));
  std::vector<emit_cuda::TcConfig> order = emit_cuda::tc_shortlist(ranked, ranked.size());
  for (const auto& g : ranked)
    if (std::none_of(order.begin(), order.end(), [&](const auto& x) { return x.to_string() == g.to_string(); })) order.push_back(g);
  CompileOptions o = options;
  o.tile.reset();
  o.gpu_plan.reset();
  tune::FitChecker fit(f, o);
  const auto model = tune::make_cost_model("analytic");
  auto price = [&](const emit_cuda::TcConfig& g) {
    const auto spec = plan_tiles(c, g);
    if (!spec) return 0.0;
    tune::Problem p = fit.problem();
    p.mma_path = tune::parse_mma_path(mma_path(g));
    const auto info = fit.check(*spec);
    return info ? tune::analytic_breakdown(p, *info).total : 0.0;
  };
  const std::string chosen_text = !c.kernel.gpu_plan.empty() ? c.kernel.gpu_plan : all.front();
  const double chosen = price(emit_cuda::TcConfig::parse(chosen_text));
  os << "plan: " << chosen_text << " (from " << c.plan_source.describe() << ")";
  if (chosen > 0) os << fmt::format(", predicted {:.2f} us at {:g} MHz by the analytic model", chosen / c.hierarchy.clock_mhz, c.hierarchy.clock_mhz);
  os << "\n";
  os << bound;
  std::vector<Priced> alternatives;
  for (const auto& g : order)
    if (g.to_string() != chosen_text) alternatives.push_back({g.to_string(), price(g), ""});
  print_alternatives(alternatives, chosen, c.hierarchy.clock_mhz, top, os);
}

}  // namespace

std::string explain_program_bounds(const program::ProgramCompilation& p, const std::string& target, const GpuFlags& gpu) {
  if (target == "c") return "";
  std::string text;
  double total_us = 0;
  for (size_t g = 0; g < p.kernels.size(); ++g) {
    const Compilation& c = *p.kernels[g];
    if (!c.kernel.function) continue;
    const std::string prefix = fmt::format("  kernel {} {}: ", g, c.function->name);
    if (c.hierarchy.kind == isa::TargetKind::Gpu) {
      const kernel::GpuRoofline r = kernel::gpu_roofline(c.kernel, c.hierarchy, gpu.tf32);
      text += gpu_roofline_text(r, prefix);
      total_us += r.microseconds();
    } else {
      const kernel::NpuRoofline r = npu_roofline_of(c);
      text += npu_roofline_text(r, c.hierarchy.clock_mhz, prefix);
      total_us += r.cycles / c.hierarchy.clock_mhz;
    }
  }
  return text + fmt::format("program bound: {:.2f} us, the sum of the {} kernels' rooflines (they run one after another)\n",
                            total_us, p.kernels.size());
}

void explain_plan(const ir::Function& f, const CompileOptions& options, const Compilation& c, int top, std::ostream& os,
                  const GpuFlags& gpu) {
  if (options.target == "c") return;
  if (c.hierarchy.kind == isa::TargetKind::Gpu) explain_gpu(f, options, c, top, os, gpu);
  else explain_npu(f, options, c, top, os);
}

}  // namespace tessel::cli
