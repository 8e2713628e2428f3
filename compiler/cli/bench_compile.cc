// `tessel bench compile`: compile time of the polyhedral pipeline (scop, dependences, schedule,
// fusion, intrinsics, tile, promote, kernel IR, contraction; no emitter, no host compiler) for every entry of
// the workload suites (workloads/small.yaml, gemm.yaml, conv.yaml) with the default tile spec.
// Median of three compilations, in thread CPU time (the machine is shared: wall time is reported
// too but depends on the load); a table on stdout and the rows as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/pipeline.h"

namespace tessel::cli {

nlohmann::json run_compile_bench(const std::string& hierarchy_path) {
  const std::string root = TESSEL_SOURCE_DIR;
  const char* suites[] = {"workloads/small.yaml", "workloads/gemm.yaml", "workloads/conv.yaml"};
  constexpr double kBudgetMs = 500;
  nlohmann::json rows = nlohmann::json::array();
  std::cout << fmt::format("tessel bench compile: polyhedral pipeline time per workload, default tile spec, buffers for {}\n",
                           hierarchy_path);
  std::cout << fmt::format("{:<28} {:<18} {:>8} {:>7} {:>7} {:>7} {:>7} {:>6} {:>8} {:>8}  {}\n", "workload", "def",
                           "scop+dep", "sched", "tile", "promote", "kernel", "groups", "wall ms", "cpu ms", "budget 500 ms cpu");
  int over = 0;
  double worst = 0;
  for (const char* suite_file : suites) {
    frontend::Suite suite = frontend::load_suite(root + "/" + suite_file);
    for (const auto& e : suite.entries) {
      frontend::Module m = frontend::load_module(e.file);
      const ir::Function& f = frontend::select_function(m, e.def);
      CompileOptions o;
      o.hierarchy = hierarchy_path;
      o.sizes = e.shape;
      std::vector<double> totals, walls;
      std::map<std::string, double> pass_ms;
      std::unique_ptr<Compilation> last;
      for (int rep = 0; rep < 3; ++rep) {
        last = compile(f, o);
        totals.push_back(last->total_cpu_ms);
        walls.push_back(last->total_ms);
      }
      for (const auto& [p, ms] : last->pass_ms) pass_ms[p] += ms;
      std::sort(totals.begin(), totals.end());
      std::sort(walls.begin(), walls.end());
      const double total = totals[1];
      worst = std::max(worst, total);
      over += total > kBudgetMs;
      bool matched = false;
      for (const auto& mm : last->matches) matched |= mm.matched;
      std::cout << fmt::format("{:<28} {:<18} {:>8.1f} {:>7.1f} {:>7.1f} {:>7.1f} {:>7.1f} {:>6} {:>8.1f} {:>8.1f}  {}\n",
                               e.name, f.name, pass_ms["scop"] + pass_ms["dependences"], pass_ms["schedule"],
                               pass_ms["tile"], pass_ms["promote"], pass_ms["kernel"], last->groups.size(), walls[1],
                               total, total <= kBudgetMs ? "ok" : "OVER");
      rows.push_back({{"suite", suite.name},
                      {"workload", e.name},
                      {"def", f.name},
                      {"shape", e.shape},
                      {"tile", last->tile_spec.to_string()},
                      {"groups", last->groups.size()},
                      {"matmul_matched", matched},
                      {"buffers", last->kernel.buffers.size()},
                      {"pass_ms", pass_ms},
                      {"cpu_ms_median_of_3", total},
                      {"wall_ms_median_of_3", walls[1]},
                      {"within_budget", total <= kBudgetMs}});
    }
  }
  std::cout << fmt::format("{} workloads, slowest {:.1f} ms CPU, {} over the {:.0f} ms budget\n", rows.size(), worst,
                           over, kBudgetMs);
  return {{"suite", "compile"}, {"hierarchy", hierarchy_path}, {"budget_ms", kBudgetMs}, {"rows", rows}};
}

}  // namespace tessel::cli
