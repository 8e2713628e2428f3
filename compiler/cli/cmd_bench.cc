// tessel bench SUITE [--json out.json] [suite options]
// Benchmarks print a table and write JSON; they are never tests (DESIGN.md "Benchmarks are not
// tests"). Suites are rows of kSuites: add a suite by adding a row.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "compiler/cli/commands.h"
#include "compiler/cli/pipeline_flags.h"
#include "compiler/cli/run_npu.h"
#include "compiler/cli/run_gpu.h"
#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/shipped_descriptions.h"
#include "npu_sim/gemm_program.h"
#include "npu_sim/report.h"
#include "npu_sim/simulator.h"

namespace tessel::cli {

nlohmann::json run_compile_bench(const std::string& hierarchy_path);  // bench_compile.cc

namespace {

struct BenchOptions {
  std::string suite;
  std::string json_path;
  std::string target = isa::shipped_description_path("davinci-910");
  int64_t size = 1024;  // sim: GEMM M = N = K
  int cores = 1;        // sim: cores the generated program uses
  bool prepare = false;  // gpu: no GPU here, compile the kernels into the NVRTC cache
  bool exhaustive = false;  // gpu: time every tile candidate (up to 40), not the policy's shortlist
  std::vector<std::string> set;  // npu, sim: description overrides
};

// `tessel bench sim`: the simulator's own speed on a generated double-buffered GEMM, functional and
// timing-only (with and without the race detector).
nlohmann::json bench_sim(const BenchOptions& o) {
  const isa::Hierarchy target = isa::load_hierarchy(o.target, isa::parse_overrides(o.set));
  npu_sim::GemmTiling tiling;
  tiling.m = tiling.n = tiling.k = o.size;
  tiling.cores = o.cores;
  const npu::Program program = npu_sim::make_gemm_program(tiling, isa::npu_machine(target));
  std::map<std::string, NpyArray> inputs;
  for (const char* name : {"A", "B"}) {
    NpyArray a;
    a.dtype = DType::F16;
    a.shape = program.find_tensor(name)->shape;
    a.data.resize(a.element_count() * 2);
    for (size_t i = 0; i < a.data.size(); i += 2) a.data[i + 1] = 0x3c;  // 1.0 in f16
    inputs[name] = std::move(a);
  }
  struct Mode {
    const char* name;
    bool timing_only, races;
  };
  const Mode modes[] = {{"functional", false, true}, {"timing-only", true, true}, {"timing-only, no race check", true, false}};
  nlohmann::json runs = nlohmann::json::array();
  std::cout << fmt::format("tessel bench sim: {}x{}x{} f16 GEMM, tiles {}x{}x{}, {} core(s) of {}, {} instructions in the program\n",
                           tiling.m, tiling.n, tiling.k, tiling.tm, tiling.tn, tiling.tk, tiling.cores, target.name,
                           program.code.size());
  std::cout << fmt::format("{:<28} {:>12} {:>9} {:>14} {:>14} {:>12} {:>14} {:>9}\n", "mode", "cycles", "wall s",
                           "cycles/s", "core-cycles/s", "instructions", "instructions/s", "GMAC/s");
  for (const Mode& m : modes) {
    npu_sim::SimOptions options;
    options.timing_only = m.timing_only;
    options.detect_races = m.races;
    const npu_sim::SimResult r = npu_sim::simulate_emitted(program, target, m.timing_only ? std::map<std::string, NpyArray>{} : inputs, options);
    const npu_sim::SimRecord& rec = r.record;
    if (rec.deadlock) throw InternalError("bench sim: the generated GEMM deadlocked: " + *rec.deadlock);
    const double wall = rec.wall_seconds;
    const uint64_t macs = npu_sim::cube_macs(rec, program);
    const double cycles_per_s = double(rec.total_cycles) / wall;
    const double core_cycles_per_s = double(rec.total_cycles) * tiling.cores / wall;
    const double instr_per_s = double(rec.executed) / wall;
    const double gmacs = m.timing_only ? 0.0 : double(macs) / wall / 1e9;
    std::cout << fmt::format("{:<28} {:>12} {:>9.3f} {:>14.3e} {:>14.3e} {:>12} {:>14.3e} {:>9}\n", m.name, rec.total_cycles,
                             wall, cycles_per_s, core_cycles_per_s, rec.executed, instr_per_s,
                             m.timing_only ? std::string("-") : fmt::format("{:.2f}", gmacs));
    runs.push_back({{"mode", m.name},
                    {"timing_only", m.timing_only},
                    {"race_check", m.races},
                    {"simulated_cycles", rec.total_cycles},
                    {"wall_seconds", wall},
                    {"simulated_cycles_per_second", cycles_per_s},
                    {"simulated_core_cycles_per_second", core_cycles_per_s},
                    {"executed_instructions", rec.executed},
                    {"instructions_per_second", instr_per_s},
                    {"cube_macs", macs},
                    {"gmac_per_second", gmacs},
                    {"races", rec.races.size()}});
  }
  return {{"suite", "sim"},
          {"target", target.name},
          {"description_hash", target.description_hash},
          {"overrides", target.overrides},
          {"gemm", {{"m", tiling.m}, {"n", tiling.n}, {"k", tiling.k}, {"tm", tiling.tm}, {"tn", tiling.tn}, {"tk", tiling.tk}}},
          {"cores", tiling.cores},
          {"program_instructions", program.code.size()},
          {"runs", runs}};
}

// `tessel bench compile`: the polyhedral pipeline's compile time per workload (bench_compile.cc).
nlohmann::json bench_compile(const BenchOptions& o) { return run_compile_bench(o.target); }

nlohmann::json bench_npu(const BenchOptions& o) { return run_npu_bench(o.target, isa::parse_overrides(o.set)); }

struct Suite {
  const char* name;
  const char* description;
  nlohmann::json (*run)(const BenchOptions&);
};

constexpr Suite kSuites[] = {
    {"compile", "polyhedral compile time (schedule+tile+promote+kernel IR) of every workload (--target: levels)", bench_compile},
    {"npu", "NPU backend: seed GEMMs, 1024^3/4096^3, seed conv, AKG ops: cycles, cube %, syncs naive->pruned (--target)", bench_npu},
    {"sim", "NPU simulator speed: generated GEMM, functional and timing-only (--size, --cores, --target)", bench_sim},
    {"gpu", "CUDA emitter vs cuBLAS/cuDNN: seed GEMM table, 1024^3/4096^3, seed conv; both harnesses (compiler/cli/bench_gpu.cc)",
     [](const BenchOptions& o) {
       std::string why;
       if (!o.prepare && !gpu_present(&why))
         throw NoGpu("tessel bench gpu: no GPU here (" + why + "); `tessel bench gpu --prepare` compiles every kernel of the "
                     "benchmark into the NVRTC cache instead");
       return bench_gpu("", o.exhaustive);
     }},
};

void add_bench_command(CLI::App& app, CommandContext& ctx) {
  auto opts = std::make_shared<BenchOptions>();
  std::string suites;
  for (const Suite& s : kSuites) suites += fmt::format("\n  {}: {}", s.name, s.description);
  CLI::App* cmd = app.add_subcommand("bench", "Run a benchmark suite and write a table and JSON" + suites);
  cmd->add_option("suite", opts->suite, "benchmark suite")->required();
  cmd->add_option("--json", opts->json_path, "write the results as JSON here");
  add_target_option(cmd, "--target", opts->target, "hierarchy description or a shipped one's name (sim: an NPU)");
  cmd->add_option("--size", opts->size, "sim: GEMM M = N = K (default 1024)");
  cmd->add_option("--cores", opts->cores, "sim: cores the generated program uses (default 1)");
  add_set_flag(cmd, opts->set);  // npu, sim
  cmd->add_flag("--exhaustive", opts->exhaustive,
                "gpu: time every tile candidate of each row (up to 40; over 12 minutes on an H100) instead of the tile "
                "policy's shortlist of 10 (the best of each plan family)");
  cmd->add_flag("--prepare", opts->prepare, "gpu: without a GPU, compile every kernel into the NVRTC cache (exit 0) instead of exit 2");
  cmd->callback([opts, &ctx] {
    const Suite* suite = nullptr;
    std::string known;
    for (const Suite& s : kSuites) {
      if (opts->suite == s.name) suite = &s;
      known += (known.empty() ? "" : ", ") + std::string(s.name);
    }
    if (!suite) throw UserError(fmt::format("tessel bench: unknown suite '{}' (known suites: {})", opts->suite, known));
    if (!opts->set.empty() && opts->suite != "npu" && opts->suite != "sim")
      throw UserError("tessel bench " + opts->suite + ": --set applies to the npu and sim suites only");
    const nlohmann::json result = suite->run(*opts);
    if (!opts->json_path.empty()) npu_sim::write_text_file(opts->json_path, result.dump(2) + "\n");
    ctx.exit_code = 0;
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("bench", add_bench_command);

}  // namespace tessel::cli
