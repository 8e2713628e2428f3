// `tessel bench npu`: the NPU backend on the seed GEMM table, 1024^3 and 4096^3 GEMMs, the seed
// convolution and the AKG single operators (workloads/gemm.yaml, conv.yaml, small.yaml): cycles, the
// roofline with the % reached and the bound that binds, cube utilization over the cores used and
// over the chip, achieved MACs per cycle vs the peak of the cores used and of the whole chip, syncs
// naive -> pruned, cycles naive vs pruned; then the vector-bound kernels (workloads/vector.yaml)
// against the vector unit's and GM's peaks.
// Large problems run in the simulator's timing-only mode. A table on stdout and the rows as JSON.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "compiler/cli/run_npu.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "compiler/tune/progress.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"
#include "npu_sim/report.h"

namespace tessel::cli {
namespace {

// Every entry runs with the default tile (tile::default_tile_spec: for GEMMs a time model over the
// description). GEMMs also with the demo's 256 x 256 stage tile (scripts/demo.sh) where it fills at
// least half of the cores and differs from the default: fewer cores, each busier.
const char* const kLargeTile = "m=256/128,n=256/64,k=128/64";
bool large_tile_applies(const std::map<std::string, int64_t>& shape, int64_t cores) {
  if (!(shape.count("M") && shape.count("N") && shape.count("K") && shape.size() == 3)) return false;
  const int64_t M = shape.at("M"), N = shape.at("N");
  return M % 256 == 0 && N % 256 == 0 && 2 * (M / 256) * (N / 256) >= cores;
}

// One suite entry compiled for the NPU and run pruned then naive (the module kept alive for the
// kernel's tensor function). `mode` picks timing-only runs and race detection from the program.
struct EntryRun {
  frontend::Module module;
  std::unique_ptr<Compilation> compilation;
  NpuCompiled npu;
  NpuRunResult pruned, naive;
  bool timing_only = false;
};
std::unique_ptr<EntryRun> run_entry(const frontend::SuiteEntry& e, const std::string& hierarchy_path, const isa::Overrides& overrides,
                                    const std::optional<std::string>& tile,
                                    const std::function<void(const EntryRun&, NpuOptions&)>& mode) {
  auto r = std::make_unique<EntryRun>();
  r->module = frontend::load_module(e.file);
  const ir::Function& f = frontend::select_function(r->module, e.def);
  CompileOptions o;
  o.target = hierarchy_path;
  o.overrides = overrides;
  o.sizes = e.shape;
  o.tile = tile;
  r->compilation = compile(f, o);
  r->npu = compile_npu(r->compilation->kernel, r->compilation->hierarchy);
  NpuOptions run;
  mode(*r, run);
  r->timing_only = run.timing_only;
  std::map<std::string, NpyArray> inputs;
  if (!run.timing_only) inputs = interp::random_inputs(f, o.sizes, 1);
  run.sync = npu_sync::SyncMode::Pruned;
  r->pruned = run_npu(r->npu, r->compilation->hierarchy, inputs, run);
  run.sync = npu_sync::SyncMode::Naive;
  r->naive = run_npu(r->npu, r->compilation->hierarchy, inputs, run);
  return r;
}

// The roofline of the entry (compiler/kernel/roofline.h) and the fraction the pruned run reached.
void add_roofline(nlohmann::json& row, const NpuCompiled& npu, const NpuRunResult& pruned) {
  row["roofline"] = roofline_json(npu.roofline, pruned.record.total_cycles);
  row["roofline_cycles"] = npu.roofline.cycles;
  row["roofline_fraction"] = pruned.roofline_fraction;
  row["roofline_binds"] = kernel::roofline_bound_name(npu.roofline.binds);
}

// The vector-bound kernels (workloads/vector.yaml): the vector unit's busy share against the
// chip's vector peak (every core's V pipe busy every cycle: cores x bytes_per_repeat per cycle), and
// the operator's GM traffic (inputs read once, outputs written once) against the shared GM
// bandwidth. Both from the description; large kernels run timing-only (verified by the tests at
// smaller sizes).
void vector_rows(const std::string& hierarchy_path, const isa::Overrides& overrides, const isa::Hierarchy& target, nlohmann::json& rows,
                 const frontend::Suite& suite, const std::function<void()>& step) {
  const isa::NpuMachine m = isa::npu_machine(target);
  std::cout << fmt::format("\nvector-bound kernels: vector peak {} cores x {} B/cycle ({} f16 / {} f32 lanes per cycle), "
                           "GM {} B/cycle shared\n",
                           m.cores, m.vector_bytes_per_repeat, m.cores * m.vector_lanes(DType::F16), m.cores * m.vector_lanes(DType::F32),
                           m.gm_shared_bandwidth_bytes_per_cycle);
  std::cout << "vector %: V busy share over every core of the chip (a repeat counts its 256 B whatever its mask), V B/cyc the "
               "rate it achieves; GM %: the operator's bytes (inputs + outputs once) per cycle vs the shared GM bandwidth\n";
  std::cout << fmt::format("{:<36} {:>5} {:>11} {:>9} {:>7} {:>7} {:>9} {:>8} {:>7} {:>14} {:>11} {:>11}  {}\n", "workload", "cores",
                           "cycles", "roofline", "% roof", "bound", "vector %", "V B/cyc", "GM %", "syncs n->p", "cyc naive",
                           "cyc pruned", "mode");
  for (const auto& e : suite.entries) {
    nlohmann::json row = {{"suite", suite.name}, {"workload", e.name}, {"shape", e.shape}};
    try {
      int64_t bytes = 0, elements = 0;
      const auto r = run_entry(e, hierarchy_path, overrides, std::nullopt, [&](const EntryRun& x, NpuOptions& run) {
        for (const auto& t : x.compilation->kernel.tensors) {
          if (t.temporary) continue;
          int64_t n = 1;
          for (int64_t d : t.shape) n *= d;
          bytes += n * dtype_bytes(t.dtype);
          elements += n;
        }
        run.timing_only = elements > (int64_t(1) << 22);
        run.detect_races = !run.timing_only;
      });
      const NpuCompiled& npu = r->npu;
      const NpuRunResult &pruned = r->pruned, &naive = r->naive;
      const bool timing_only = r->timing_only;
      const double cycles = double(std::max<uint64_t>(1, pruned.record.total_cycles));
      const double vector = pruned.report["utilization"]["V"].get<double>() * npu.pruned.program.cores / m.cores;
      const double gm = double(bytes) / cycles / m.gm_shared_bandwidth_bytes_per_cycle;
      row["cores"] = npu.pruned.program.cores;
      row["total_cycles"] = pruned.record.total_cycles;
      row["cycles_naive"] = naive.record.total_cycles;
      row["cycles_pruned"] = pruned.record.total_cycles;
      row["vector_share_of_chip_peak"] = vector;
      row["vector_peak_bytes_per_cycle"] = m.cores * m.vector_bytes_per_repeat;
      row["vector_bytes_per_cycle"] = vector * m.cores * m.vector_bytes_per_repeat;
      row["operator_bytes"] = bytes;
      row["gm_share_of_peak"] = gm;
      row["syncs_naive"] = npu.naive.sync_instructions;
      row["syncs_pruned"] = npu.pruned.sync_instructions;
      row["races_pruned"] = pruned.record.races.size();
      row["timing_only"] = timing_only;
      row["utilization"] = pruned.report["utilization"];
      row["utilization_chip"] = pruned.report["utilization_chip"];
      add_roofline(row, npu, pruned);
      row["mapping"] = npu.kernel.notes;
      std::cout << fmt::format("{:<36} {:>5} {:>11} {:>9.0f} {:>6.1f}% {:>7} {:>8.1f}% {:>8.0f} {:>6.1f}% {:>6} -> {:<5} {:>11} {:>11}  {}\n",
                               e.name, npu.pruned.program.cores, pruned.record.total_cycles, npu.roofline.cycles,
                               100 * pruned.roofline_fraction, kernel::roofline_bound_name(npu.roofline.binds), 100 * vector,
                               vector * m.cores * m.vector_bytes_per_repeat, 100 * gm,
                               npu.naive.sync_instructions, npu.pruned.sync_instructions, naive.record.total_cycles,
                               pruned.record.total_cycles, timing_only ? "timing-only" : "functional");
    } catch (const UserError& err) {
      row["unsupported"] = err.what();
      std::cout << fmt::format("{:<36} not mapped: {}\n", e.name, err.what());
    }
    rows.push_back(row);
    step();
  }
}

}  // namespace

nlohmann::json run_npu_bench(const std::string& hierarchy_path, const isa::Overrides& overrides) {
  const std::string root = TESSEL_SOURCE_DIR;
  const isa::Hierarchy target = isa::load_hierarchy(hierarchy_path, overrides);
  nlohmann::json rows = nlohmann::json::array();
  std::cout << fmt::format("tessel bench npu: {} ({} cores, peak {} f16 MACs/cycle/core)\n", target.name, target.cores,
                           target.peak_macs_per_cycle(DType::F16, DType::F32));
  // cube %: busy share of the cube, mean over the cores used and over every core of the chip; % peak:
  // MACs/cycle against the peak of the cores used; % chip: against the whole chip's peak (every
  // core), the figure a user sees; roofline: the operator's bound on the whole chip.
  const double chip_peak = double(target.cores) * target.peak_macs_per_cycle(DType::F16, DType::F32);
  std::cout << "roofline: the operator's fewest cycles on the whole chip (compiler/kernel/README.md \"Roofline\"), % roof: "
               "roofline / cycles, bound: the bound that binds\n";
  std::cout << "cube % used / chip: busy share of the M pipe (its flag instructions included), mean over the cores used / over "
               "every core of the chip; % peak: MACs/cycle vs the used cores' peak; % chip: vs every core's\n";
  std::cout << "pJ/MAC: the simulator's energy of the run (every level and unit, npu_sim/README.md \"Energy\") over its MACs\n";
  std::cout << fmt::format("{:<36} {:>5} {:>11} {:>9} {:>7} {:>7} {:>7} {:>7} {:>10} {:>10} {:>6} {:>6} {:>14} {:>11} {:>11} {:>7}  {}\n",
                           "workload", "cores", "cycles", "roofline", "% roof", "bound", "cube %", "chip %", "MAC/cyc", "peak",
                           "% peak", "% chip", "syncs n->p", "cyc naive", "cyc pruned", "pJ/MAC", "mode");
  std::vector<frontend::Suite> suites;
  for (const char* suite_file : {"workloads/gemm.yaml", "workloads/conv.yaml", "workloads/small.yaml", "workloads/vector.yaml"})
    suites.push_back(frontend::load_suite(root + "/" + suite_file));
  size_t total = 0, done = 0;
  for (const auto& s : suites) total += s.entries.size();
  // progress on stderr (the table is stdout): entries done of all four suites (no best: a benchmark, not a search)
  tune::Progress progress("bench npu", int(total), true, isatty(STDERR_FILENO), std::cerr);
  auto step = [&] {
    ++done;
    progress.update(int(done), int(done), "");
  };
  for (size_t si = 0; si + 1 < suites.size(); ++si) {
    const frontend::Suite& suite = suites[si];
    for (const auto& e : suite.entries) {
      std::vector<std::pair<std::string, std::optional<std::string>>> variants{{e.name, std::nullopt}};
      if (large_tile_applies(e.shape, target.cores)) variants.push_back({e.name + " (256x256 tiles)", std::string(kLargeTile)});
      std::string default_tile;
      for (const auto& [name, tile] : variants) {
        if (tile && *tile == default_tile) continue;  // the default is the large tile already
        nlohmann::json row = {{"suite", suite.name}, {"workload", name}, {"shape", e.shape}};
        try {
          const auto r = run_entry(e, hierarchy_path, overrides, tile, [](const EntryRun& x, NpuOptions& run) {
            run.timing_only = x.npu.kernel.macs > (uint64_t(1) << 26);
            run.detect_races = x.npu.kernel.macs <= (uint64_t(1) << 31);
          });
          const Compilation* c = r->compilation.get();
          const NpuCompiled& npu = r->npu;
          const NpuRunResult &pruned = r->pruned, &naive = r->naive;
          const bool timing_only = r->timing_only;
          row["tile"] = c->tile_spec.to_string();
          if (!tile) default_tile = c->tile_spec.to_string();
          row["cores"] = npu.pruned.program.cores;
          row["total_cycles"] = pruned.record.total_cycles;
          row["cycles_naive"] = naive.record.total_cycles;
          row["cycles_pruned"] = pruned.record.total_cycles;
          row["cube_utilization"] = pruned.cube_utilization;
          row["cube_utilization_chip"] = pruned.cube_utilization_chip;
          row["macs_per_cycle"] = pruned.macs_per_cycle;
          row["peak_macs_per_cycle"] = pruned.peak_macs_per_cycle;
          row["chip_peak_macs_per_cycle"] = chip_peak;
          row["syncs_naive"] = npu.naive.sync_instructions;
          row["syncs_pruned"] = npu.pruned.sync_instructions;
          row["races_naive"] = naive.record.races.size();
          row["races_pruned"] = pruned.record.races.size();
          row["timing_only"] = timing_only;
          row["utilization"] = pruned.report["utilization"];
          row["utilization_chip"] = pruned.report["utilization_chip"];
          add_roofline(row, npu, pruned);
          row["mapping"] = npu.kernel.notes;
          const npu_sim::EnergyReport energy = npu_sim::energy_report(pruned.record);
          row["energy_pj"] = energy.total_pj;
          row["pj_per_mac"] = energy.pj_per_mac();
          std::cout << fmt::format(
              "{:<36} {:>5} {:>11} {:>9.0f} {:>6.1f}% {:>7} {:>6.1f}% {:>6.1f}% {:>10.0f} {:>10.0f} {:>5.1f}% {:>5.1f}% {:>6} -> {:<5} "
              "{:>11} {:>11} {:>7.3f}  {}\n",
              name, npu.pruned.program.cores, pruned.record.total_cycles, npu.roofline.cycles, 100 * pruned.roofline_fraction,
              kernel::roofline_bound_name(npu.roofline.binds), 100 * pruned.cube_utilization,
              100 * pruned.cube_utilization_chip, pruned.macs_per_cycle,
              pruned.peak_macs_per_cycle, 100 * pruned.macs_per_cycle / std::max(1.0, pruned.peak_macs_per_cycle),
              100 * pruned.macs_per_cycle / std::max(1.0, chip_peak), npu.naive.sync_instructions,
              npu.pruned.sync_instructions, naive.record.total_cycles, pruned.record.total_cycles, energy.pj_per_mac(),
              timing_only ? "timing-only" : "functional");
        } catch (const UserError& err) {
          row["unsupported"] = err.what();
          std::string why = err.what();
          if (why.size() > 90) why = why.substr(0, 87) + "...";
          std::cout << fmt::format("{:<36} not mapped: {}\n", name, why);
        }
        rows.push_back(row);
      }
      step();
    }
  }
  vector_rows(hierarchy_path, overrides, target, rows, suites.back(), step);
  progress.finish();
  return {{"suite", "npu"},
          {"hierarchy", hierarchy_path},
          {"description_hash", target.description_hash},
          {"overrides", target.overrides},
          {"rows", rows}};
}

}  // namespace tessel::cli
