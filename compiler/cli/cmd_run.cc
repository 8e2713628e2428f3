// tessel run OP.tsl --target c --shape M=..,N=.. [--tile SPEC] [--def NAME] [--seed S] [--report r.json]
//            [--set KEY=VALUE,...] [--input NAME=a.npy] [--save-inputs DIR] [--save-outputs DIR]
// compile -> execute on the target's backend -> compare with the reference interpreter -> report.
// Backends are a table keyed by target kind; the NPU (issue 6) and GPU (issue 7) add theirs.
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "compiler/cli/commands.h"
#include "compiler/cli/inputs.h"
#include "compiler/cli/pipeline_flags.h"
#include "compiler/cli/run_gpu.h"
#include "compiler/cli/run_npu.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "isa/base/file_io.h"
#include "isa/base/error.h"

namespace tessel::cli {


namespace {

using Tensors = std::map<std::string, NpyArray>;

struct BackendResult {
  Tensors outputs;
  nlohmann::json report;  // backend-specific fields
};

// One backend per target kind: runs a compiled kernel on the inputs.
struct Backend {
  const char* name;
  std::function<bool(const std::string& target, const Compilation&)> accepts;
  std::function<BackendResult(const Compilation&, const Tensors&)> execute;
};

BackendResult run_on_c(const Compilation& c, const Tensors& inputs) {
  auto runs = emit_c::run_c_batch({&c.kernel}, {inputs});
  BackendResult r;
  r.outputs = std::move(runs[0].outputs);
  r.report["c_compile_ms"] = runs[0].c_compile_ms;
  return r;
}

// The NPU and GPU backends run with the command's --sync / --trace and --gpu-tiles / --pdl values (`npu`, `gpu`,
// outliving the table).
std::vector<Backend> backends(const GpuFlags& gpu, const NpuOptions& npu) {
  std::vector<Backend> table = {
      {"c", [](const std::string& t, const Compilation&) { return t == "c"; }, run_on_c},
      {"npu", [](const std::string& t, const Compilation& c) { return t != "c" && c.hierarchy.kind == isa::TargetKind::Npu; },
       [&npu](const Compilation& c, const Tensors& in) {  // compiler/cli/run_npu.h
         BackendResult r;
         std::tie(r.outputs, r.report) = run_npu_backend(c.kernel, c.hierarchy, in, npu);
         return r;
       }},
      {"gpu", [](const std::string& t, const Compilation& c) { return t != "c" && is_gpu_target(c); },
       [&gpu](const Compilation& c, const Tensors& in) {  // compiler/cli/run_gpu.h: prints time, TFLOP/s, library ratio
         GpuRunResult g = run_on_gpu(c, in, false, !gpu.no_timing, gpu);
         std::cout << g.summary;
         return BackendResult{std::move(g.outputs), std::move(g.report)};
       }},
  };
  return table;
}

void add_run_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    PipelineFlags flags;
    GpuFlags gpu;
    NpuOptions npu;
    std::string report, save_inputs, save_outputs;
    std::vector<std::string> inputs;
    uint64_t seed = 1;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("run", "Compile, execute and verify an operator against the reference interpreter");
  add_pipeline_flags(cmd, opts->flags);
  cmd->add_option("--seed", opts->seed, "seed of the random inputs");
  cmd->add_option("--input", opts->inputs, "NAME=FILE.npy for an input (others are random), e.g. to reproduce a failure");
  cmd->add_option("--save-inputs", opts->save_inputs, "write every input as DIR/NAME.npy (to replay the run with --input)");
  cmd->add_option("--save-outputs", opts->save_outputs, "write every output the target computed as DIR/NAME.npy");
  cmd->add_option("--report", opts->report, "write a JSON report (verified, max_abs_err, compile_ms, ...)");
  add_npu_flags(cmd, opts->npu);
  add_gpu_flags(cmd, opts->gpu);
  cmd->add_flag("--no-timing", opts->gpu.no_timing,
                "GPU targets: run once and verify, without the timing harness (suites, compute-sanitizer)");
  cmd->callback([opts, &ctx] {
    frontend::Module m = frontend::load_module(opts->flags.file);
    const ir::Function& f = frontend::select_function(m, opts->flags.def);
    CompileOptions co = to_compile_options(opts->flags, f);
    auto c = compile(f, co);
    const Backend* backend = nullptr;
    const std::vector<Backend> table = backends(opts->gpu, opts->npu);
    for (const auto& b : table)
      if (b.accepts(opts->flags.target, *c)) backend = &b;
    if (!backend) {
      std::cerr << "tessel run: no backend for target " << opts->flags.target
                << " yet (the NPU and GPU backends add theirs); compiled kernel IR:\n"
                << kernel::to_string(c->kernel);
      ctx.exit_code = 2;
      return;
    }
    Tensors inputs = operator_inputs(f, co.sizes, opts->inputs, opts->seed, "tessel run");
    if (!opts->save_inputs.empty()) save_tensors(opts->save_inputs, inputs, "--save-inputs");
    BackendResult r = backend->execute(*c, inputs);
    if (!opts->save_outputs.empty()) save_tensors(opts->save_outputs, r.outputs, "--save-outputs");
    Tensors expected = interp::evaluate(f, co.sizes, inputs);
    emit_c::Verification v = emit_c::verify(expected, r.outputs, emit_c::reassociated_sum_tolerance(f, co.sizes));
    std::cout << f.name << " on " << backend->name << " (" << c->hierarchy.name << " levels), tile "
              << c->tile_spec.to_string() << ": " << (v.verified ? "verified" : "MISMATCH")
              << ", max_abs_err " << v.max_abs_err << ", compile " << c->total_ms << " ms\n";
    if (!v.verified) std::cout << "  first mismatch: " << v.first_mismatch << " (" << v.mismatches << " mismatches)\n";
    for (const auto& w : c->warnings) std::cout << "  warning: " << w << "\n";
    if (!opts->report.empty()) {
      nlohmann::json j = r.report;
      j["operator"] = f.name;
      j["target"] = opts->flags.target;
      j["backend"] = backend->name;
      j["tile"] = c->tile_spec.to_string();
      j["description"] = c->hierarchy.name;
      j["description_hash"] = c->hierarchy.description_hash;
      j["overrides"] = c->hierarchy.overrides;
      j["verified"] = v.verified;
      j["max_abs_err"] = v.max_abs_err;
      j["mismatches"] = v.mismatches;
      j["first_mismatch"] = v.first_mismatch;
      j["compile_ms"] = c->total_ms;
      j["warnings"] = c->warnings;
      std::map<std::string, double> pass_ms;
      for (const auto& [p, ms] : c->pass_ms) pass_ms[p] += ms;
      j["pass_ms"] = pass_ms;
      write_file(opts->report, j.dump(2) + "\n", "--report");
    }
    ctx.exit_code = v.verified ? 0 : 1;
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("run", add_run_command);

}  // namespace tessel::cli
