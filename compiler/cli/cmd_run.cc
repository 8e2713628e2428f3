// tessel run OP.tsl --target c --shape M=..,N=.. [--tile SPEC] [--def NAME] [--seed S] [--report r.json]
//            [--set KEY=VALUE,...] [--input NAME=a.npy] [--save-inputs DIR] [--save-outputs DIR]
//            [--verify auto|full|sample|library|none] [--input-dir DIR] [--expect NAME=FILE.pb|.npy] [--expect-tol ABS[,REL]]
// --input takes .npy or ONNX TensorProto (.pb) files; --input-dir DIR gives every input NAME of the def
// with a DIR/NAME.npy (an imported model's weights); --expect compares an output with a given tensor
// (tessel import's ONNX tests) besides the reference check, and a mismatch fails the run.
// compile -> execute on the target's backend -> compare with the reference interpreter -> report.
// --verify (issue 17 item 15): `full` evaluates the whole problem on the reference interpreter;
// `sample` recomputes a few random row blocks of every output exactly (compiler/interp/row_sample.h);
// `library` compares with cuBLAS / cuDNN on the same inputs in the same process (GPU targets, a plain
// GEMM or NHWC convolution); `none` skips the check. `auto` (the default) is `full` up to
// kFullCheckPoints iteration points and beyond it `library` where the GPU kernel has a library
// twin, else `sample` where the function is row-separable, else `full`. The choice and its coverage
// are printed and reported.
// Backends are a table keyed by target kind; the NPU (issue 6) and GPU (issue 7) add theirs.
#include <cmath>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compiler/cli/commands.h"
#include "compiler/cli/gpu_roofline_writers.h"
#include "compiler/cli/inputs.h"
#include "compiler/cli/pipeline_flags.h"
#include "compiler/cli/run_gpu.h"
#include "compiler/cli/run_npu.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/row_sample.h"
#include "compiler/pipeline.h"
#include "compiler/program/program.h"
#include "isa/base/file_io.h"
#include "isa/base/error.h"

namespace tessel::cli {


namespace {

using Tensors = std::map<std::string, NpyArray>;

// Above this many iteration points (about 10-30 s of the interpreter on 2 cores) `--verify auto`
// does not evaluate the whole problem; a sample recomputes about kSamplePoints of them.
constexpr double kFullCheckPoints = 4e9;
constexpr double kSamplePoints = 5e8;
constexpr int kSampleBlocks = 4;

struct Check {
  std::string mode;      // full, sample, library, none
  std::string coverage;  // printed after the verdict
  emit_c::Verification v;
};

// --tf32 (GPU): f32 contractions read their operands rounded to TF32 (10-bit mantissa, unit
// roundoff 2^-11), so a product carries up to ~2^-10 relative error and a sum of K of them grows
// like sqrt(K): f32 outputs are compared with 4 * 2^-11 * sqrt(K) (relative and absolute) instead of
// the reassociation tolerance, and the run says so.
double tf32_tolerance(const ir::Function& f, const std::map<std::string, int64_t>& sizes) {
  double terms = 1;
  for (const auto& s : f.statements) {
    if (s.reduction != ir::Reduction::Sum) continue;
    double n = 1;
    for (const auto& iv : s.domain)
      if (iv.is_reduction) n *= double(iv.hi.evaluate({}, sizes) - iv.lo.evaluate({}, sizes));
    terms = std::max(terms, n);
  }
  return std::max(emit_c::reassociated_sum_tolerance(f, sizes), 4 * std::ldexp(1.0, -11) * std::sqrt(terms));
}

Check check_full(const ir::Function& f, const std::map<std::string, int64_t>& sizes, const Tensors& inputs, const Tensors& outputs,
                 double points, double f32_tolerance) {
  if (points > 1e9)
    std::cerr << fmt::format("tessel run: verifying on the reference interpreter ({:.3g} iteration points)...\n", points)
              << std::flush;
  Check c{"full", "every output element against the reference interpreter", {}};
  Tensors mags;
  const Tensors expected = interp::evaluate(f, sizes, inputs, &mags);
  c.v = emit_c::verify(expected, outputs, f32_tolerance, &mags);
  return c;
}

// A program whose def fails the end-to-end check is checked kernel by kernel: each kernel's outputs
// against the reference interpreter on the inputs that kernel was given (the tensors earlier
// kernels wrote on the target; program::reference_kernel_function). A deep f16 network drifts end
// to end without any kernel being wrong: an intermediate is rounded to f16 after a sum taken in
// another order than the interpreter's, one step of f16 apart, and later layers carry the step on.
// Every kernel within its tolerance verifies the program, and the end-to-end error is reported
// beside it; a kernel outside names itself.
Check check_kernel_by_kernel(const program::ProgramCompilation& p, const Tensors& pool, const Check& end_to_end) {
  Check c{"kernels", "", {}};
  for (size_t g = 0; g < p.kernels.size(); ++g) {
    const ir::Function ref = program::reference_kernel_function(p, g);
    std::map<std::string, int64_t> sizes;
    for (const auto& q : ref.params) sizes[q] = p.sizes.at(q);
    Tensors in, expected, actual, mags;
    for (const auto* t : ref.inputs()) in.emplace(t->name, pool.at(t->name));
    Tensors all = interp::evaluate(ref, sizes, in, &mags);
    for (const auto* t : p.kernels[g]->function->outputs()) {
      expected.emplace(t->name, all.at(t->name));
      actual.emplace(t->name, pool.at(t->name));
    }
    const emit_c::Verification v = emit_c::verify(expected, actual, emit_c::reassociated_sum_tolerance(ref, sizes), &mags);
    c.v.max_abs_err = std::max(c.v.max_abs_err, v.max_abs_err);
    c.v.mismatches += v.mismatches;
    if (!v.verified && c.v.verified) {
      c.v.verified = false;
      c.v.first_mismatch = "kernel " + p.kernels[g]->function->name + ": " + v.first_mismatch;
    }
  }
  c.coverage = fmt::format(
      "kernel by kernel: each of the {} kernels' outputs against the reference interpreter on the inputs the kernel was "
      "given; the def end to end: {} element(s) beyond the tolerance, max_abs_err {:.3g} (intermediates rounded to their "
      "dtype after sums in another order than the interpreter's)",
      p.kernels.size(), end_to_end.v.mismatches, end_to_end.v.max_abs_err);
  return c;
}

Check check_sample(const ir::Function& f, const std::map<std::string, int64_t>& sizes, const Tensors& inputs,
                   const Tensors& outputs, double points, int64_t rows, uint64_t seed, double f32_tolerance) {
  const int64_t per_block = std::max<int64_t>(1, int64_t(kSamplePoints / (points / double(rows)) / kSampleBlocks));
  const auto blocks = interp::choose_row_blocks(rows, kSampleBlocks, per_block, seed);
  Check c{"sample", "sampled rows against the reference interpreter: " + interp::describe_row_blocks(blocks, rows), {}};
  Tensors mags;
  const Tensors expected = interp::evaluate_rows(f, sizes, inputs, blocks, &mags);
  c.v = emit_c::verify(expected, interp::take_rows(outputs, blocks), f32_tolerance, &mags);
  c.v.first_mismatch = interp::unsample_position(c.v.first_mismatch, blocks);
  return c;
}

struct BackendResult {
  Tensors outputs;
  nlohmann::json report;  // backend-specific fields
  // GPU: the library's result standing for output `library_tensor` (GpuRunResult::library_output)
  std::optional<NpyArray> library_output;
  std::string library, library_tensor;
  Tensors intermediates;  // a program run: every tensor a kernel wrote or read (run_program's pool)
};

// One backend per target kind: runs a compiled kernel on the inputs.
struct Backend {
  const char* name;
  std::function<bool(const std::string& target, const Compilation&)> accepts;
  std::function<BackendResult(const Compilation&, const Tensors&)> execute;
  // a program of several kernels in one go (the GPU: one CUDA graph); unset: run_program below
  std::function<BackendResult(const program::ProgramCompilation&, const Tensors&)> execute_program = nullptr;
};

// A def compiled to several kernels: each runs on the backend in order, reading the def's inputs
// and the tensors earlier kernels wrote (compiler/program/program.h); the report lists each
// kernel's own fields and the memory plan. Between kernels the tensors pass through the host.
BackendResult run_program(const program::ProgramCompilation& p, const Backend& backend, const Tensors& inputs) {
  Tensors pool = inputs;
  BackendResult r;
  nlohmann::json kernels = nlohmann::json::array();
  double cycles = 0, graph_us = 0;
  for (const auto& k : p.kernels) {
    Tensors in;
    for (const auto* t : k->function->inputs()) {
      const auto it = pool.find(t->name);
      if (it == pool.end()) throw InternalError("run_program: kernel " + k->function->name + " reads " + t->name + ", which no earlier kernel wrote");
      in.emplace(t->name, it->second);
    }
    std::cout << "kernel " << k->function->name << ":\n";
    BackendResult kr = backend.execute(*k, in);
    for (auto& [n, a] : kr.outputs) pool.insert_or_assign(n, std::move(a));
    nlohmann::json j = kr.report;
    j["kernel"] = k->function->name;
    j["tile"] = plan_name(*k);
    j["compile_ms"] = k->total_ms;
    if (j.contains("total_cycles")) cycles += j["total_cycles"].get<double>();
    if (j.contains("graph_us")) graph_us += j["graph_us"].get<double>();
    kernels.push_back(std::move(j));
  }
  for (const auto* t : p.def->outputs()) r.outputs.emplace(t->name, pool.at(t->name));
  r.intermediates = std::move(pool);
  r.report["kernels"] = std::move(kernels);
  if (cycles > 0) r.report["total_cycles"] = cycles;
  if (graph_us > 0) r.report["graph_us"] = graph_us;
  r.report["memory_plan"] = {{"arena_bytes", p.memory.arena_bytes}, {"peak_live_bytes", p.memory.peak_live_bytes},
                             {"total_bytes", p.memory.total_bytes}, {"intermediates", p.memory.slots.size()}};
  std::cout << program::explain_program(p);
  if (cycles > 0) std::cout << fmt::format("program: {:.0f} cycles over {} kernels\n", cycles, p.kernels.size());
  if (graph_us > 0) std::cout << fmt::format("program: {:.2f} us over {} kernels (sum of each kernel's CUDA-graph time)\n", graph_us, p.kernels.size());
  return r;
}

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
         GpuRunResult g = run_on_gpu(c, in, c.kernel.user_tile.has_value(), !gpu.no_timing, gpu);
         std::cout << g.summary;
         return BackendResult{std::move(g.outputs), std::move(g.report), std::move(g.library_output), g.library,
                              g.library_tensor};
       },
       [&gpu](const program::ProgramCompilation& p, const Tensors& in) {  // every kernel in one CUDA graph
         GpuRunResult g = run_program_on_gpu(p, in, !gpu.no_timing, gpu);
         std::cout << g.summary << program::explain_program(p);
         return BackendResult{std::move(g.outputs), std::move(g.report), std::nullopt, "", ""};
       }},
  };
  return table;
}

// "ABS[,REL]" of --expect-tol.
std::pair<double, double> parse_expect_tolerance(const std::string& text) {
  const size_t comma = text.find(',');
  try {
    size_t used = 0;
    const double a = std::stod(text.substr(0, comma), &used);
    const double r = comma == std::string::npos ? 0 : std::stod(text.substr(comma + 1));
    if (a < 0 || r < 0) throw std::invalid_argument("negative");
    return {a, r};
  } catch (const std::exception&) {
    throw UserError("--expect-tol: expected ABS[,REL] (non-negative numbers, e.g. 1e-4,1e-3), got '" + text + "'");
  }
}

// --expect NAME=FILE for each item: printed, and a mismatch names the tensor, the worst element and the errors.
std::vector<ExpectCheck> check_expectations(const ir::Function& f, const std::vector<std::string>& items, const Tensors& outputs,
                                            double abs_tol, double rel_tol) {
  std::vector<ExpectCheck> out;
  for (const auto& item : items) {
    auto [name, path] = name_path(item, "--expect");
    const auto it = outputs.find(name);
    if (it == outputs.end()) {
      std::string all;
      for (const auto& [n, a] : outputs) all += (all.empty() ? "" : ", ") + n;
      throw UserError("--expect: '" + name + "' is not an output of '" + f.name + "' (outputs: " + all + ")");
    }
    ExpectCheck e = check_expected(name, path, it->second, abs_tol, rel_tol);
    std::cout << fmt::format("  expect {}: {} ({} elements, max_abs_err {:.3g}, tolerance {:.3g} + {:.3g} * |expected|)", name,
                             e.ok ? "matches " + path : "MISMATCH with " + path, e.elements, e.max_abs_err, abs_tol, rel_tol)
              << "\n";
    if (!e.ok)
      std::cerr << "tessel run: --expect " << name << ": " << e.mismatches << " of " << e.elements << " elements differ from " << path
                << "; worst " << e.worst << "\n";
    out.push_back(std::move(e));
  }
  return out;
}

struct RunOptions {
  PipelineFlags flags;
  GpuFlags gpu;
  NpuOptions npu;
  std::string report, save_inputs, save_outputs;
  std::vector<std::string> inputs, expect;
  std::string input_dir, expect_tol = "1e-4,1e-3";
  uint64_t seed = 1;
  std::string verify = "auto";
};

void add_run_options(CLI::App* cmd, RunOptions& o) {
  cmd->add_option("--seed", o.seed, "seed of the random inputs");
  cmd->add_option("--input", o.inputs, "NAME=FILE.npy for an input (others are random), e.g. to reproduce a failure");
  cmd->add_option("--input-dir", o.input_dir, "DIR: every input NAME with a DIR/NAME.npy (an imported model's weights; --input wins)");
  cmd->add_option("--expect", o.expect, "NAME=FILE.pb|FILE.npy: compare output NAME with this tensor element by element");
  cmd->add_option("--expect-tol", o.expect_tol, "ABS[,REL]: --expect accepts |e - a| <= ABS + REL * |e| (default 1e-4,1e-3)");
  cmd->add_option("--save-inputs", o.save_inputs, "write every input as DIR/NAME.npy (to replay the run with --input)");
  cmd->add_option("--save-outputs", o.save_outputs, "write every output the target computed as DIR/NAME.npy");
  cmd->add_option("--report", o.report, "write a JSON report (verified, max_abs_err, compile_ms, ...)");
  cmd->add_option("--verify", o.verify,
                  "how the outputs are checked: full (the reference interpreter on the whole problem), sample (random row "
                  "blocks recomputed exactly), library (cuBLAS/cuDNN on the same inputs, GPU), none; auto: full up to 4e9 "
                  "iteration points, else library or sample")
      ->check(CLI::IsMember({"auto", "full", "sample", "library", "none"}));
  add_npu_flags(cmd, o.npu);
  add_gpu_flags(cmd, o.gpu);
  cmd->add_flag("--no-timing", o.gpu.no_timing,
                "GPU targets: run once and verify, without the timing harness (suites, compute-sanitizer)");
}

// What --verify decided for one run: the mode asked for, whether the problem is too large for the
// full check, and how its rows separate.
struct VerifyChoice {
  std::string mode;
  bool large = false;
  double points = 0;
  interp::RowSeparability sep;
};

// The outputs checked as --verify says: none, against the GPU library's output, on sampled rows,
// or in full (then kernel by kernel where a program of several kernels differs end to end).
Check check_outputs(const VerifyChoice& vc, const ir::Function& f, const CompileOptions& co, const program::ProgramCompilation& prog,
                    const BackendResult& r, const Tensors& inputs, uint64_t seed, double f32_tolerance) {
  Check check;
  if (vc.mode == "none") {
    check.mode = "none";
    check.coverage = "not checked (--verify none)";
  } else if (vc.mode == "library" || (vc.mode == "auto" && vc.large && r.library_output)) {
    if (!r.library_output)
      throw UserError("--verify library: " + f.name + " has no library twin (a plain f16 GEMM or NHWC convolution with no "
                      "epilogue); use full or sample");
    check.mode = "library";
    check.coverage = "every element of " + r.library_tensor + " against " + r.library + " on the same inputs";
    const auto ours = r.outputs.find(r.library_tensor);
    if (ours == r.outputs.end()) throw InternalError("--verify library: no output " + r.library_tensor);
    check.v = emit_c::verify(Tensors{{r.library_tensor, *r.library_output}}, Tensors{{r.library_tensor, ours->second}}, f32_tolerance);
  } else if (vc.mode == "sample" || (vc.mode == "auto" && vc.large && vc.sep.separable)) {
    check = check_sample(f, co.sizes, inputs, r.outputs, vc.points, vc.sep.rows, seed, f32_tolerance);
  } else {
    check = check_full(f, co.sizes, inputs, r.outputs, vc.points, f32_tolerance);
    if (!check.v.verified && !prog.single() && !r.intermediates.empty())
      check = check_kernel_by_kernel(prog, r.intermediates, check);
  }
  return check;
}

// NaN matches NaN and inf matches inf in the comparison, so a run whose values overflowed
// (a deep f16 network on inputs of the wrong scale) would verify silently: say so
void warn_non_finite(const Tensors& outputs) {
  for (const auto& [name, a] : outputs) {
    int64_t bad = 0;
    const int64_t n = a.element_count();
    for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(interp::element_as_double(a, i));
    if (bad)
      std::cout << fmt::format("  warning: {} of {} elements of {} are NaN or infinite; the check compares them as equal "
                               "where the interpreter's are too (give inputs at the scale the def expects: --input, --input-dir)\n",
                               bad, n, name);
  }
}

// The run's lines on stdout: the plan, the verdict, the check's coverage and tolerance, the first
// mismatch and any non-finite outputs.
void print_run_summary(const ir::Function& f, const CompileOptions& co, const program::ProgramCompilation& prog,
                       const Compilation& c, const Backend& backend, const Check& check, bool tf32, double f32_tolerance,
                       const Tensors& outputs) {
  const emit_c::Verification& v = check.v;
  const std::string plan = !prog.single()                ? fmt::format("of {} kernels", prog.kernels.size())
                           : !c.kernel.gpu_plan.empty() ? c.kernel.gpu_plan
                                                        : plan_name(c);
  std::cout << f.name << " on " << backend.name << " (" << c.hierarchy.name << " levels), tile " << plan
            << (c.plan_source.kind == PlanSource::Kind::Tuned ? " (from the tuning database)" : "") << ": "
            << (check.mode == "none" ? "not verified" : v.verified ? "verified" : "MISMATCH");
  if (check.mode != "none") std::cout << ", max_abs_err " << v.max_abs_err;
  std::cout << ", compile " << prog.total_ms << " ms\n  check: " << check.mode << ": " << check.coverage << "\n";
  if (tf32 && check.mode != "none")
    std::cout << fmt::format("  tolerance: --tf32: f32 outputs compared with {:.3g} (relative and absolute) instead of {:.3g}: the "
                             "operands were rounded to TF32 (10-bit mantissa)\n",
                             f32_tolerance, emit_c::reassociated_sum_tolerance(f, co.sizes));
  if (!v.verified && check.mode != "none")
    std::cout << "  first mismatch: " << v.first_mismatch << " (" << v.mismatches << " mismatches)\n";
  if (check.mode != "none") warn_non_finite(outputs);
}

// The --report JSON: the backend's report with the plan, its source, the check and the compile times.
nlohmann::json run_report(const RunOptions& o, const ir::Function& f, const program::ProgramCompilation& prog, const Compilation& c,
                          const Backend& backend, const BackendResult& r, const Check& check, bool tf32, double f32_tolerance,
                          const std::vector<ExpectCheck>& expected) {
  const emit_c::Verification& v = check.v;
  nlohmann::json j = r.report;
  j["operator"] = f.name;
  j["target"] = o.flags.target;
  j["backend"] = backend.name;
  j["tile"] = plan_name(c);
  if (!c.kernel.gpu_plan.empty()) j["gpu_plan"] = c.kernel.gpu_plan;
  j["plan_source"] = plan_source_json(c.plan_source);
  j["description"] = c.hierarchy.name;
  j["description_hash"] = c.hierarchy.description_hash;
  j["overrides"] = c.hierarchy.overrides;
  j["verified"] = check.mode != "none" && v.verified;  // false with --verify none (not checked)
  j["verify"] = check.mode;
  if (tf32) j["tf32_tolerance"] = f32_tolerance;
  if (backend.name == std::string("gpu") && c.kernel.function)  // the NPU backend reports its own
    j["roofline"] = gpu_roofline_json(kernel::gpu_roofline(c.kernel, c.hierarchy, tf32), j.value("graph_us", 0.0));
  j["verify_coverage"] = check.coverage;
  j["max_abs_err"] = v.max_abs_err;
  j["mismatches"] = v.mismatches;
  j["first_mismatch"] = v.first_mismatch;
  j["compile_ms"] = prog.total_ms;
  j["warnings"] = c.warnings;
  std::map<std::string, double> pass_ms;
  for (const auto& [p, ms] : c.pass_ms) pass_ms[p] += ms;
  j["pass_ms"] = pass_ms;
  if (!expected.empty()) {
    nlohmann::json ex = nlohmann::json::array();
    bool expected_ok = true;
    for (const auto& e : expected) {
      expected_ok &= e.ok;
      ex.push_back({{"tensor", e.tensor}, {"file", e.file}, {"ok", e.ok}, {"elements", e.elements}, {"mismatches", e.mismatches},
                    {"max_abs_err", e.max_abs_err}, {"abs_tol", e.abs_tol}, {"rel_tol", e.rel_tol}, {"worst", e.worst}});
    }
    j["expect"] = ex;
    j["expect_ok"] = expected_ok;
  }
  return j;
}

// `tessel run`: compile, pick the backend, execute, check and report. Returns the exit status.
int run_operator(RunOptions& o) {
  frontend::Module m = frontend::load_module(o.flags.file);
  const ir::Function& f = frontend::select_function(m, o.flags.def);
  CompileOptions co = to_compile_options(o.flags, f);
  auto prog = program::compile_program(f, co, poly::parse_partition_mode(o.flags.partition, "--partition"));
  const Compilation* c = prog->kernels.front().get();  // picks the backend; the only kernel of a one-kernel def
  const Backend* backend = nullptr;
  const std::vector<Backend> table = backends(o.gpu, o.npu);
  for (const auto& b : table)
    if (b.accepts(o.flags.target, *c)) backend = &b;
  if (!backend) {
    std::cerr << "tessel run: no backend for target " << o.flags.target
              << " yet (the NPU and GPU backends add theirs); compiled kernel IR:\n"
              << kernel::to_string(c->kernel);
    return 2;
  }
  VerifyChoice vc{o.verify, false, interp::iteration_points(f, co.sizes), interp::row_separability(f, co.sizes)};
  vc.large = vc.points > kFullCheckPoints;
  if (vc.mode == "library" && backend->name != std::string("gpu"))
    throw UserError("--verify library: only GPU targets (cuBLAS / cuDNN in the same process); use full or sample");
  if (vc.mode == "sample" && !vc.sep.separable)
    throw UserError("--verify sample: " + f.name + " is not row-separable (" + vc.sep.reason + "); use full");
  o.gpu.library_output = vc.mode == "library" || (vc.mode == "auto" && vc.large);
  std::vector<std::string> given = o.inputs;
  if (!o.input_dir.empty())
    for (auto& item : input_dir_items(f, o.input_dir, o.inputs)) given.push_back(item);
  const auto [expect_abs, expect_rel] = parse_expect_tolerance(o.expect_tol);
  Tensors inputs = operator_inputs(f, co.sizes, given, o.seed, "tessel run");
  if (!o.save_inputs.empty()) save_tensors(o.save_inputs, inputs, "--save-inputs");
  BackendResult r = prog->single()              ? backend->execute(*c, inputs)
                    : backend->execute_program ? backend->execute_program(*prog, inputs)
                                               : run_program(*prog, *backend, inputs);
  if (!o.save_outputs.empty()) save_tensors(o.save_outputs, r.outputs, "--save-outputs");
  const bool tf32 = o.gpu.tf32 && backend->name == std::string("gpu");
  const double f32_tolerance = tf32 ? tf32_tolerance(f, co.sizes) : emit_c::reassociated_sum_tolerance(f, co.sizes);
  const Check check = check_outputs(vc, f, co, *prog, r, inputs, o.seed, f32_tolerance);
  print_run_summary(f, co, *prog, *c, *backend, check, tf32, f32_tolerance, r.outputs);
  const std::vector<ExpectCheck> expected = check_expectations(f, o.expect, r.outputs, expect_abs, expect_rel);
  bool expected_ok = true;
  for (const auto& e : expected) expected_ok &= e.ok;
  for (const auto& w : c->warnings) std::cout << "  warning: " << w << "\n";
  if (c->plan_source.kind == PlanSource::Kind::Tuned) std::cout << "  plan from " << c->plan_source.describe() << "\n";
  if (!o.report.empty())
    write_file(o.report, run_report(o, f, *prog, *c, *backend, r, check, tf32, f32_tolerance, expected).dump(2) + "\n", "--report");
  const bool verified = check.mode != "none" && check.v.verified;
  return (verified || check.mode == "none") && expected_ok ? 0 : 1;
}

void add_run_command(CLI::App& app, CommandContext& ctx) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Compile, execute and verify an operator against the reference interpreter");
  add_pipeline_flags(cmd, opts->flags);
  add_run_options(cmd, *opts);
  cmd->callback([opts, &ctx] { ctx.exit_code = run_operator(*opts); });
}

}  // namespace

TESSEL_REGISTER_COMMAND("run", add_run_command);

}  // namespace tessel::cli
