// tessel tune OP.tsl --target HIERARCHY.yaml --shape M=..,N=.. [--space SPEC] [--strategy S]
//            [--trials N] [--seed S] [--log tune.jsonl] [--db best.json] [--jobs J] [--model M]
//            [--dump-space FILE.csv] [--predict TILE ... [--run-on HIERARCHY.yaml] [--mma-path P]]
//            [--measure TILE|default ...] [--propose N]
// The auto-tuner (compiler/tune/, issue 8): builds the search space (tile configurations that fit
// the description's levels), then measures what the strategy proposes on the simulator (NPU
// descriptions, timing-only, `--jobs` processes in parallel) or the GPU, logging every measurement
// and storing the best tile spec in the database `tessel compile` / `tessel run` read.
// For drivers that measure elsewhere (scripts/tessel_dask.py, issue 18): `--measure` measures the
// given configurations and prints one log record per line (stdout, no log or database written);
// `--propose N` prints the strategy's next N configurations given the log, one JSON object a line.
// `--predict` prints the analytic model's breakdown; with `--run-on` it is priced on another
// description than `--target` (the machine a kernel compiled for --target ran on) and with
// `--mma-path` at that tensor-core path's rate (issue 19 item 2: scripts/counter_sweep.py).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "compiler/cli/commands.h"
#include "compiler/cli/pipeline_flags.h"
#include "compiler/cli/run_gpu.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/tune/cost_model.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/tune/plan_check.h"
#include "compiler/tune/plan_search.h"
#include "compiler/tune/strategy.h"
#include "compiler/tune/tuner.h"
#include "compiler/tune/tuning_log.h"
#include "isa/base/file_io.h"
#include "isa/base/error.h"
#include "npu_sim/report.h"
#include "npu_sim/simulator.h"

namespace tessel::cli {

namespace {

// One line on stdout, checked: stdout is a driver's data channel (scripts/tessel_dask.py reads the
// records), so a write that fails (a full disk, a closed pipe) is an error, never a silent loss.
void write_stdout_line(const std::string& line) {
  std::cout << line << "\n" << std::flush;
  if (!std::cout) throw UserError("tessel tune: cannot write to standard output (" + std::string(std::strerror(errno)) + ")");
}

struct TuneFlags {
  PipelineFlags pipeline;
  std::string space, strategy = "model", model = "analytic", log, db, dump_space, replay;
  std::vector<std::string> predict, measure;
  std::string run_on, mma_path;  // --predict: the machine the kernel runs on, its tensor-core path
  int propose = 0;
  int trials = 64, jobs = 0, batch = 0;
  uint64_t seed = 1;
  double timeout_s = 120;
  double max_slowdown = 4;
  bool no_progress = false;
  bool list_plans = false;
};

// The problem --predict prices: `p` (tile fit and buffers from --target) on the description
// `run_on` (the machine the kernel runs on; "" keeps --target's) with the tensor-core path
// `mma_path`. The run-on description must carry every level of the target's under the same role
// (the buffers name them).
tune::Problem priced_problem(const tune::Problem& p, const std::string& run_on, const std::string& mma_path) {
  tune::Problem out = p;
  out.mma_path = tune::parse_mma_path(mma_path);
  if (run_on.empty()) return out;
  isa::Hierarchy h = isa::load_hierarchy(run_on);
  if (h.kind != p.hierarchy.kind)
    throw UserError("--run-on " + run_on + ": a " + std::string(isa::target_kind_name(h.kind)) + " description, --target is " +
                    std::string(isa::target_kind_name(p.hierarchy.kind)));
  for (const auto& l : p.hierarchy.levels) {
    const isa::Level* same = h.find_level(l.name);
    if (!same || same->role != l.role)
      throw UserError("--run-on " + run_on + ": no level '" + l.name + "' with role " + std::string(isa::role_name(l.role)) +
                      " (the target " + p.hierarchy.name + " places buffers there)");
  }
  out.hierarchy = std::move(h);
  return out;
}

void dump_space(const tune::Space& space, tune::FitChecker& fit, const std::string& path) {
  std::ostringstream file;  // written through the checked writer at the end
  std::ostream* os = path == "-" ? static_cast<std::ostream*>(&std::cout) : &file;
  const auto& p = fit.problem();
  *os << "tile";
  std::vector<std::string> axes;
  if (!space.configs.empty())
    for (const auto& a : space.configs[0].axes) axes.push_back(a.axis);
  for (const auto& a : axes) *os << "," << a << "_outer," << a << "_inner";
  std::vector<std::string> levels;
  for (const auto& l : p.hierarchy.levels)
    if (l.role != isa::Role::Global) levels.push_back(l.name);
  for (const auto& l : levels) *os << ",bytes_" << l;
  std::vector<std::string> engines;
  for (const auto& path : p.hierarchy.paths)
    if (std::find(engines.begin(), engines.end(), path.engine) == engines.end()) engines.push_back(path.engine);
  for (const auto& e : engines) *os << ",engine_" << e;
  const std::vector<std::string> pipes = {"M", "V", "MTE1", "MTE2", "MTE3"};  // the analytic model's per-pipe busy cycles
  if (p.hierarchy.kind == isa::TargetKind::Npu)
    for (const auto& pipe : pipes) *os << ",pipe_" << pipe;
  *os << ",predicted,compute_cycles,latency_cycles,shared_global_cycles,tiles,cores_used,energy_pj,global_bytes,dram_bytes,"
         "stage_bytes,l2_fabric_bytes\n";
  for (const auto& c : space.configs) {
    const auto info = fit.check(c);
    const auto b = tune::analytic_breakdown(p, *info);
    *os << "\"" << c.to_string() << "\"";
    for (const auto& a : c.axes) *os << "," << a.outer << "," << a.inner;
    for (const auto& l : levels) *os << "," << (info->level_bytes.count(l) ? info->level_bytes.at(l) : 0);
    for (const auto& e : engines) *os << fmt::format(",{:.1f}", b.engine_cycles.count(e) ? b.engine_cycles.at(e) : 0.0);
    if (p.hierarchy.kind == isa::TargetKind::Npu)
      for (const auto& pipe : pipes)
        *os << fmt::format(",{:.1f}", b.pipe_busy_cycles.count(pipe) ? b.pipe_busy_cycles.at(pipe) : 0.0);
    *os << fmt::format(",{:.1f},{:.1f},{:.1f},{:.1f},{},{},{:.1f},{:.0f},{:.0f},{:.0f},{:.0f}\n", b.total, b.compute_cycles,
                       b.latency_cycles, b.shared_global_cycles, b.tiles, b.cores_used, b.energy_pj, b.global_bytes,
                       b.dram_bytes, b.stage_bytes, b.l2_fabric_bytes);
  }
  if (path != "-") write_file(path, file.str(), "--dump-space");
}

// The simulator in timing-only mode: total cycles, the busiest core's busy cycles per pipe and the
// energy of the run (what the tuning log records beside the analytic model's predictions).
tune::SimulateFn simulate_timing_only() {
  return [](const npu::Program& prog, const isa::Hierarchy& h) {
    npu_sim::SimOptions o;
    o.timing_only = true;
    o.detect_races = false;
    o.max_cycles = 0;
    o.fold_events = true;  // totals per instruction: the tuner reads cycles, per-pipe busy and energy only
    const npu_sim::SimRecord r = npu_sim::simulate(prog, h, {}, o).record;
    tune::SimSummary s{r.total_cycles, {}, npu_sim::energy_report(r).total_pj};
    for (const auto& core : npu_sim::pipe_stats(r))
      for (int p = 0; p < npu::kPipeCount; ++p) {
        double& busy = s.pipe_busy_cycles[std::string(npu::pipe_name(static_cast<npu::Pipe>(p)))];
        busy = std::max(busy, double(core[p].busy_cycles));
      }
    return s;
  };
}

// --measure: each spec (or the target's own tile policy, "default") measured in a forked child
// as the tuner measures, one log record per line on stdout in the order given.
void measure_and_print(const ir::Function& f, const CompileOptions& co, tune::FitChecker& fit,
                       const tune::ProblemKey& problem, const TuneFlags& o) {
  std::vector<tile::TileSpec> specs;
  for (const auto& t : o.measure) specs.push_back(t == "default" ? tile::TileSpec{} : tile::parse_tile_spec(t));
  const int jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  auto measurer = tune::make_npu_sim_measurer(f, co, simulate_timing_only(), jobs, o.timeout_s);
  const auto results = measurer->measure(specs);
  auto analytic = tune::make_cost_model("analytic");
  for (size_t k = 0; k < specs.size(); ++k) {
    const tune::Measurement& m = results[k];
    nlohmann::json j = {{"op", problem.op}, {"target", problem.target}, {"shape", problem.shape}, {"tile", o.measure[k]},
                        {"ok", m.ok},       {"unit", m.unit},           {"strategy", "measure"}, {"wall_s", m.wall_s}};
    j["description_hash"] = problem.description_hash;
    if (!problem.overrides.empty()) j["overrides"] = problem.overrides;
    if (m.ok) j["cost"] = m.cost;
    else j["error"] = m.error;
    if (!specs[k].axes.empty())
      if (const auto info = fit.check(specs[k])) j["predicted"] = analytic->predict(fit.problem(), *info);
    write_stdout_line(j.dump());
  }
}

// A path the run will write: its parent must be a writable directory and the path, where it
// exists, a writable file; checked before the space is built (exit 1 with the path).
void check_writable(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const auto st = fs::status(p, ec);
  if (!ec && fs::exists(st)) {
    if (fs::is_directory(st)) throw UserError(std::string(flag) + " " + path + ": is a directory");
    if (access(path.c_str(), W_OK) != 0) throw UserError(std::string(flag) + " " + path + ": not writable");
    return;
  }
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const auto ps = fs::status(parent, ec);
  if (ec || !fs::exists(ps))
    throw UserError(std::string(flag) + " " + path + ": the directory " + parent.string() + " does not exist");
  if (!fs::is_directory(ps)) throw UserError(std::string(flag) + " " + path + ": " + parent.string() + " is not a directory");
  if (access(parent.c_str(), W_OK) != 0)
    throw UserError(std::string(flag) + " " + path + ": the directory " + parent.string() + " is not writable");
}

void check_output_paths(const TuneFlags& o) {
  if (!o.predict.empty() || !o.measure.empty()) return;  // --predict and --measure write nothing
  if (o.propose > 0) {
    if (!o.log.empty() && access(o.log.c_str(), F_OK) == 0 && access(o.log.c_str(), R_OK) != 0)
      throw UserError("--log " + o.log + ": cannot read the file");
    return;
  }
  if (!o.dump_space.empty()) {
    if (o.dump_space != "-") check_writable(o.dump_space, "--dump-space");
    return;
  }
  if (!o.log.empty()) check_writable(o.log, "--log");
  if (!o.db.empty() && o.db != "off") check_writable(o.db, "--db");
  if (!o.replay.empty() && access(o.replay.c_str(), R_OK) != 0)
    throw UserError("--replay " + o.replay + ": cannot read the file");
}

// GPU measurements of one operator: each plan run on the GPU (CUDA-graph harness) and checked
// against the library's output for the same inputs (cuBLAS / cuDNN, where the kernel has a library
// twin) or else the default plan's outputs; a plan that computes something else is a failed
// measurement, never a result. Plans ("" : the default) share one compilation; a tile spec
// compiles its own.
class GpuPlanMeasurer {
 public:
  GpuPlanMeasurer(const ir::Function& f, const CompileOptions& co)
      : f_(f), co_(co), c_(compile(f, co)), inputs_(interp::random_inputs(f, co.sizes, 1)),
        tolerance_(emit_c::reassociated_sum_tolerance(f, co.sizes)) {}
  Compilation& compilation() { return *c_; }

  tune::Measurement measure(const std::string& plan) {
    tune::Measurement m;
    m.key = plan.empty() ? "default" : plan;
    m.unit = "s";
    const auto t0 = std::chrono::steady_clock::now();
    try {
      std::unique_ptr<Compilation> own;
      Compilation* c = c_.get();
      if (!plan.empty() && !is_gpu_plan_text(plan)) {  // a tile spec: the kernel IR changes
        CompileOptions o = co_;
        o.tile = plan;
        own = compile(f_, o);
        c = own.get();
      } else {
        c->kernel.gpu_plan = plan;
      }
      const GpuRunResult g = run_on_gpu(*c, inputs_, c->kernel.user_tile.has_value(), true);
      const double graph = g.report.value("graph_us", 0.0), us = graph > 0 ? graph : g.report.value("stream_us", 0.0);
      const std::string why = check(g);
      if (!why.empty()) m.error = why;
      else if (us <= 0) m.error = "no time measured";
      else m.ok = true, m.cost = us * 1e-6;
    } catch (const NoGpu&) {
      throw;  // no GPU here: nothing to measure (exit 2), never a logged failure
    } catch (const std::exception& e) {
      m.error = e.what();
    }
    m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return m;
  }

 private:
  // "" when the outputs agree with the library's (or, without one, the default plan's)
  std::string check(const GpuRunResult& g) {
    if (g.library_output) {
      const auto ours = g.outputs.find(g.library_tensor);
      if (ours == g.outputs.end()) return "no output " + g.library_tensor;
      const auto v = tune::check_plan_outputs({{g.library_tensor, *g.library_output}}, {{g.library_tensor, ours->second}},
                                              tolerance_, magnitudes());
      return v.verified ? "" : "output differs from " + g.library + "'s at " + v.first_mismatch;
    }
    if (!reference_) {
      if (!c_->kernel.gpu_plan.empty()) {  // the default plan's outputs first
        const std::string plan = c_->kernel.gpu_plan;
        c_->kernel.gpu_plan.clear();
        reference_ = run_on_gpu(*c_, inputs_, false, false).outputs;
        c_->kernel.gpu_plan = plan;
      } else {
        reference_ = g.outputs;
      }
    }
    const auto v = tune::check_plan_outputs(*reference_, g.outputs, tolerance_, magnitudes());
    return v.verified ? "" : "outputs differ from the default plan's at " + v.first_mismatch;
  }

  // the sums' term magnitudes on inputs_ (the bound relative to them), computed once
  const std::optional<emit_c::Tensors>& magnitudes() {
    if (!magnitudes_done_) magnitudes_ = tune::plan_check_magnitudes(f_, co_.sizes, inputs_), magnitudes_done_ = true;
    return magnitudes_;
  }

  const ir::Function& f_;
  CompileOptions co_;
  std::optional<emit_c::Tensors> magnitudes_;
  bool magnitudes_done_ = false;
  std::unique_ptr<Compilation> c_;
  std::map<std::string, NpyArray> inputs_;
  double tolerance_;
  std::optional<std::map<std::string, NpyArray>> reference_;
};

// `tessel tune --target <gpu>.yaml` on a kernel that runs on TensorCores: the tile policy's plans
// are the space (compiler/tune/plan_search.h). Returns false (nothing done) when the kernel runs
// as SIMT code: tile specs are then the space.
bool tune_gpu_plans(const ir::Function& f, const CompileOptions& co, const TuneFlags& o, bool live) {
  GpuPlanMeasurer measurer(f, co);
  const Compilation& c = measurer.compilation();
  const std::vector<std::string> plans = gpu_plan_space(c);
  if (plans.empty()) return false;
  std::string why;
  if (!gpu_present(&why)) throw NoGpu("tessel tune: " + why);
  tune::TuneOptions to;
  to.problem = {f.name, c.hierarchy.name, tune::shape_text(co.sizes), c.hierarchy.overrides, c.hierarchy.description_hash};
  to.trials = o.trials;
  to.log = o.log;
  to.db = o.db == "off" ? "" : o.db.empty() ? tune::default_db_path() : o.db;
  to.progress = !o.no_progress;
  to.terminal = live;
  std::cerr << "tune: " << plans.size() << " TensorCore plans (the tile policy's ranking); tuning database "
            << (to.db.empty() ? std::string("off") : to.db) << (to.log.empty() ? "" : ", log " + to.log) << "\n";
  const tune::TuneResult r =
      tune::run_plan_search(plans, [&](const std::string& plan) { return measurer.measure(plan); }, to);
  if (!std::isfinite(r.best_cost))
    throw UserError("tessel tune: no plan could be measured (" + std::to_string(r.failed) + " failed; first: " + r.first_error + ")");
  std::cout << fmt::format("tune {} on {} ({}): best {} = {:.6g} {} after {} trials ({} measured, {} from the log)\n", f.name,
                           c.hierarchy.name, to.problem.shape, r.best_tile, r.best_cost, r.unit, r.trials.size(), r.measured,
                           r.resumed);
  if (r.default_cost > 0 && std::isfinite(r.default_cost))
    std::cout << fmt::format("tune: default plan = {:.6g} {}; best {}\n", r.default_cost, r.unit,
                             r.best_tile == "default" ? std::string("is the default plan")
                                                      : fmt::format("{:.3f}x faster", r.default_cost / r.best_cost));
  if (!to.db.empty()) std::cout << "tune: best-config database " << to.db << "\n";
  return true;
}

// --measure on a GPU description: each plan (or tile spec, or "default") measured in this process,
// one log record per line on stdout in the order given (what scripts/tessel_dask.py's GPU workers
// run, one per GPU).
void measure_gpu_and_print(const ir::Function& f, const CompileOptions& co, const TuneFlags& o) {
  std::string why;
  if (!gpu_present(&why)) throw NoGpu("tessel tune --measure: " + why);
  GpuPlanMeasurer measurer(f, co);
  const Compilation& c = measurer.compilation();
  for (const auto& t : o.measure) {
    const tune::Measurement m = measurer.measure(t == "default" ? std::string() : t);
    nlohmann::json j = {{"op", f.name},   {"target", c.hierarchy.name}, {"shape", tune::shape_text(co.sizes)}, {"tile", t},
                        {"ok", m.ok},     {"unit", m.unit},             {"strategy", "measure"},               {"wall_s", m.wall_s}};
    j["description_hash"] = c.hierarchy.description_hash;
    if (!c.hierarchy.overrides.empty()) j["overrides"] = c.hierarchy.overrides;
    if (m.ok) j["cost"] = m.cost;
    else j["error"] = m.error;
    write_stdout_line(j.dump());
  }
}

void add_tune_options(CLI::App* cmd, TuneFlags& o) {
  cmd->add_option("--space", o.space,
                  "search space per axis: OUTER[/INNER], each a list A|B|C or a range MIN-MAX[:pow2][:xN] "
                  "(e.g. m=64-512:pow2/32|64,k=32-256:pow2/16|32; default: around the default tile spec)");
  // Option values are checked while the command line is parsed (usage errors, exit 2), before the
  // search space is built (issue 17 item 9).
  cmd->add_option("--strategy", o.strategy, "exhaustive, random, genetic or model (default model)")
      ->check(CLI::IsMember(tune::strategy_names()));
  cmd->add_option("--model", o.model, "cost model of the model-guided strategy: analytic or learned (XGBoost)")
      ->check(CLI::IsMember(tune::cost_model_names()));
  cmd->add_option("--trials", o.trials, "configurations to measure in all, counting those the log holds (default 64)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--seed", o.seed, "seed of the random choices (default 1)");
  cmd->add_option("--log", o.log, "JSON-lines log of every measurement; a later run resumes from it");
  cmd->add_option("--db", o.db, "best-config database to update (default: $TESSEL_TUNE_DB or ~/.cache/tessel/best.json; off: none)");
  cmd->add_option("--jobs", o.jobs, "simulator measurements in parallel (default: the number of CPU cores)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--measure-timeout", o.timeout_s,
                  "simulator: seconds one measurement (compile + simulation) may take before it counts as failed (default 120)")
      ->check(CLI::Range(1e-3, 1e6));
  cmd->add_option("--batch", o.batch, "configurations the strategy proposes at once (default 8)")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-predicted-slowdown", o.max_slowdown,
                  "skip (with a note) configurations the analytic model predicts more than this many times slower than the "
                  "default plan, which is always measured first (default 4; 0: measure whatever the strategy proposes)")
      ->check(CLI::Range(0.0, 1e9));
}

// The options that answer a question and exit instead of tuning, or measure elsewhere (drivers, studies).
void add_query_options(CLI::App* cmd, TuneFlags& o) {
  cmd->add_option("--dump-space", o.dump_space,
                  "write the search space as CSV (tile, sizes, bytes per level, analytic prediction) to FILE ('-': stdout) and exit");
  cmd->add_option("--predict", o.predict,
                  "print the analytic model's prediction for these tile specs ('default': the target's own mapping "
                  "without a tile, e.g. a GPU row kernel) and exit");
  add_target_option(cmd, "--run-on", o.run_on,
                  "with --predict: price the configurations on this description (the machine the kernel runs on, e.g. "
                  "isa/targets/sm90-h100.yaml for a kernel compiled for sm75 that ran on an H100); tile fit from --target")
      ->check(CLI::ExistingFile);
  cmd->add_option("--mma-path", o.mma_path,
                  "with --predict: the tensor-core path the kernel takes (wmma, mma.sync, wgmma or simt, as tessel run "
                  "reports it); each is priced at its own rate (default: the matrix unit's shape rate)")
      ->check(CLI::IsMember({"wmma", "mma.sync", "wgmma", "simt"}));
  cmd->add_option("--measure", o.measure,
                  "measure these tile specs or, on GPU descriptions, plans ('default': the target's own plan) and print one "
                  "log record per line as JSON on stdout; writes no log or database (for drivers such as scripts/tessel_dask.py)");
  cmd->add_option("--propose", o.propose,
                  "print the strategy's next N configurations given the --log so far (one JSON object a line: op, "
                  "target, shape, tile, predicted) and exit; a driver measures them and appends them to the log")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--replay", o.replay,
                  "answer measurements from an earlier log of the same problem instead of measuring (strategy studies)");
}

// One --predict line (and its energy line): the analytic model's breakdown of configuration `t`.
void print_prediction(const std::string& t, const tune::AnalyticBreakdown& b, const tune::Problem& priced) {
  std::cout << fmt::format("{}: predicted {:.1f} cycles (compute {:.1f}, latency {:.1f}, shared global {:.1f}",
                           t, b.total, b.compute_cycles, b.latency_cycles, b.shared_global_cycles);
  for (const auto& [e, c] : b.engine_cycles) std::cout << fmt::format(", {} {:.1f}", e, c);
  std::cout << fmt::format("; {} tiles on {} cores)", b.tiles, b.cores_used);
  // bytes per level and the time at the description's clock (issue 19: compared with ncu)
  // (l2 fabric: the global bytes looked up again in their home partition of a partitioned L2)
  std::cout << fmt::format("; bytes: global {:.0f}, dram {:.0f}, stage {:.0f}, l2 fabric {:.0f}; {:.3f} us at {:g} MHz\n",
                           b.global_bytes, b.dram_bytes, b.stage_bytes, b.l2_fabric_bytes,
                           b.total / priced.hierarchy.clock_mhz, priced.hierarchy.clock_mhz);
  if (b.energy_pj > 0) {
    std::cout << fmt::format("  energy {:.4g} nJ", b.energy_pj / 1000);
    if (b.macs > 0) std::cout << fmt::format(" ({:.3f} pJ/MAC)", b.energy_pj / b.macs);
    for (const auto& [pipe, busy] : b.pipe_busy_cycles) std::cout << fmt::format(", {} busy {:.1f}", pipe, busy);
    std::cout << "\n";
  }
}

// --predict: the analytic model's prediction of each configuration, priced on --run-on's
// description at --mma-path's rate where given.
void print_predictions(tune::FitChecker& fit, const TuneFlags& o) {
  const tune::Problem& p = fit.problem();
  const tune::Problem priced = priced_problem(p, o.run_on, o.mma_path);
  // 'default': the target's own mapping without a tile spec (as `tessel run` without --tile)
  auto spec_of = [&](const std::string& t) { return t == "default" ? fit.compiled_tile_spec() : tile::parse_tile_spec(t); };
  std::vector<tile::TileSpec> specs;
  for (const auto& t : o.predict) specs.push_back(spec_of(t));
  if (fit.detect_fixed_mapping(specs)) std::cout << "note: " << p.fixed_mapping << "\n";
  for (const auto& t : o.predict) {
    std::optional<tune::AnalyticBreakdown> own = t == "default" ? tune::default_mapping_breakdown(priced) : std::nullopt;
    std::string why;
    const auto info = own ? std::nullopt : fit.check(spec_of(t), &why);
    if (!own && !info) {
      std::cout << t << ": does not fit: " << why << "\n";
      continue;
    }
    if (own && priced.gpu_row_kernel) std::cout << "note: default: the register row kernel, " << priced.gpu_row_kernel->explain << "\n";
    print_prediction(t, own ? *own : tune::analytic_breakdown(priced, *info), priced);
  }
}

// The configurations of `spec` that fit, with a progress line on stderr when building them takes
// a while, and the space's summary.
tune::Space build_search_space(const tune::SpaceSpec& spec, tune::FitChecker& fit, const TuneFlags& o, bool live) {
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  bool shown = false;
  const tune::Space space = tune::build_space(spec, fit, [&](size_t done, size_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (o.no_progress || (done < total && now - last < std::chrono::milliseconds(live ? 200 : 2000))) return;
    // quick builds print only the summary below
    if (done < total ? now - t0 < std::chrono::milliseconds(500) : !shown) return;
    shown = true;
    last = now;
    std::cerr << fmt::format("{}tune: building the space: {}/{} configurations checked ({:.1f} s){}", live ? "\r" : "",
                             done, total, std::chrono::duration<double>(now - t0).count(), live && done < total ? "" : "\n")
              << std::flush;
  });
  std::cerr << fmt::format("tune: space {}: {} configurations fit ({} enumerated, {} dominated sizes removed, {} do not "
                           "fit; {} fit checks, {} by tile + promote; {:.1f} s)\n",
                           spec.to_string(), space.configs.size(), space.stats.enumerated, space.stats.dominated,
                           space.stats.not_fitting, space.stats.fit_checks, space.stats.full_checks,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const tune::Problem& p = fit.problem();
  if (!p.fixed_mapping.empty())
    std::cerr << "tune: note: " << p.fixed_mapping << ": the space keeps one configuration (" << space.stats.same_program
              << " others are the same program)\n";
  return space;
}

// What measures a tile spec: an earlier log (--replay), the simulator (NPU descriptions, `jobs`
// processes) or the GPU (on `gpu_inputs`, which must outlive the measurer).
std::unique_ptr<tune::Measurer> make_tile_measurer(const ir::Function& f, const CompileOptions& co, const tune::Problem& p,
                                                   const tune::ProblemKey& problem, const TuneFlags& o,
                                                   std::map<std::string, NpyArray>& gpu_inputs) {
  if (!o.replay.empty()) return tune::make_replay_measurer(o.replay, problem);
  if (p.hierarchy.kind == isa::TargetKind::Npu) {
    const int jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
    return tune::make_npu_sim_measurer(f, co, simulate_timing_only(), jobs, o.timeout_s);
  }
  gpu_inputs = interp::random_inputs(f, co.sizes, 1);
  return tune::make_gpu_measurer(f, co, [&gpu_inputs](const Compilation& c) {
    const GpuRunResult g = run_on_gpu(c, gpu_inputs, true, true);
    return g.report.value("stream_us", 0.0) * 1e-6;
  });
}

tune::TuneOptions tile_tune_options(const tune::ProblemKey& problem, const TuneFlags& o, bool live) {
  tune::TuneOptions to;
  to.problem = problem;
  to.strategy = o.strategy;
  to.model = o.model;
  to.trials = o.trials;
  to.seed = o.seed;
  to.log = o.log;
  to.db = o.db == "off" ? "" : o.db.empty() ? tune::default_db_path() : o.db;
  to.progress = !o.no_progress;
  to.terminal = live;
  to.max_predicted_slowdown = o.max_slowdown;
  if (o.batch > 0) to.batch = o.batch;
  return to;
}

// --propose: the strategy's next configurations given the log, one JSON object a line.
void print_proposals(const tune::Space& space, tune::FitChecker& fit, const tune::TuneOptions& to, int count) {
  for (int i : tune::propose_batch(space, fit, to, count)) {
    const auto info = fit.check(space.configs[size_t(i)]);
    write_stdout_line(nlohmann::json{{"op", to.problem.op}, {"target", to.problem.target}, {"shape", to.problem.shape},
                                     {"tile", space.configs[size_t(i)].to_string()},
                                     {"predicted", tune::analytic_breakdown(fit.problem(), *info).total}}
                          .dump());
  }
}

void print_tune_result(const tune::TuneResult& r, const std::string& op, tune::FitChecker& fit, const tune::TuneOptions& to) {
  if (r.failed) std::cerr << "tune: " << r.failed << " measurement(s) failed (first: " << r.first_error << ")\n";
  std::cout << fmt::format("tune {} on {} ({}): best {} = {:.6g} {} after {} trials ({} measured, {} from the log)\n",
                           op, fit.problem().hierarchy.name, to.problem.shape, r.best_tile, r.best_cost, r.unit, r.trials.size(),
                           r.measured, r.resumed);
  if (r.default_cost > 0)
    std::cout << fmt::format("tune: default plan ({}) = {:.6g} {}; best {}{}\n", fit.compiled_tile_spec().to_string(),
                             r.default_cost, r.unit,
                             r.best_tile == "default" ? std::string("is the default plan")
                                                      : fmt::format("{:.3f}x faster", r.default_cost / r.best_cost),
                             r.skipped ? fmt::format("; {} skipped for their predicted time", r.skipped) : "");
  if (!to.db.empty()) std::cout << "tune: best-config database " << to.db << "\n";
}

// The tile-spec search (NPU descriptions, and GPU kernels that run as SIMT code) and the queries
// over its space (--predict, --measure, --dump-space, --propose). Returns the exit status.
int tune_tile_specs(const ir::Function& f, const CompileOptions& co, const TuneFlags& o) {
  tune::FitChecker fit(f, co);
  // every configuration through tile + promote (slow; for checking the fit check's model)
  if (const char* full = std::getenv("TESSEL_TUNE_FULL_FIT"); full && std::string(full) == "1") fit.set_fast(false);
  const tune::Problem& p = fit.problem();
  if ((!o.run_on.empty() || !o.mma_path.empty()) && o.predict.empty())
    throw UserError("tessel tune: --run-on and --mma-path go with --predict");
  if (!o.predict.empty()) {
    print_predictions(fit, o);
    return 0;
  }
  const tune::ProblemKey problem{f.name, p.hierarchy.name, tune::shape_text(co.sizes), p.hierarchy.overrides,
                                 p.hierarchy.description_hash};
  if (!o.measure.empty()) {
    measure_and_print(f, co, fit, problem, o);
    return 0;
  }
  const tune::SpaceSpec spec = o.space.empty() ? tune::default_space_spec(p.default_spec, p.extents, p.units)
                                               : tune::parse_space_spec(o.space);
  const bool live = !o.no_progress && isatty(STDERR_FILENO);
  const tune::Space space = build_search_space(spec, fit, o, live);
  if (!o.dump_space.empty()) {
    dump_space(space, fit, o.dump_space);
    return 0;
  }
  std::map<std::string, NpyArray> gpu_inputs;
  const std::unique_ptr<tune::Measurer> measurer = make_tile_measurer(f, co, p, problem, o, gpu_inputs);
  const tune::TuneOptions to = tile_tune_options(problem, o, live);
  if (o.propose > 0) {
    print_proposals(space, fit, to, o.propose);
    return 0;
  }
  std::cerr << "tune: tuning database " << (to.db.empty() ? std::string("off") : to.db)
            << (to.log.empty() ? "" : ", log " + to.log) << "\n";
  const tune::TuneResult r = tune::run_tuning(space, fit, *measurer, to);
  if (r.best_tile.empty())
    throw UserError("tessel tune: no configuration could be measured (" + std::to_string(r.failed) +
                    " failed; first: " + r.first_error + ")");
  print_tune_result(r, f.name, fit, to);
  return r.best_tile.empty() ? 1 : 0;
}

// `tessel tune`: GPU plan listings and measurements, the GPU plan search where the kernel runs on
// TensorCores, else the tile-spec search. Returns the exit status.
int run_tune(const TuneFlags& o) {
  if (o.pipeline.target == "c")
    throw UserError("tessel tune: --target must be a hierarchy description (isa/targets/*.yaml): the tuner measures on "
                    "the NPU simulator or the GPU");
  check_output_paths(o);
  frontend::Module m = frontend::load_module(o.pipeline.file);
  const ir::Function& f = frontend::select_function(m, o.pipeline.def);
  PipelineFlags pf = o.pipeline;
  pf.target = "c";  // no tuned tile from the database: the tuner chooses tiles itself
  CompileOptions co = to_compile_options(pf, f);
  co.target = o.pipeline.target;
  co.tile.reset();
  co.gpu_plan.reset();
  co.plan_source = {};
  const bool plain_search = o.space.empty() && o.predict.empty() && o.measure.empty() && o.propose == 0 &&
                            o.dump_space.empty() && o.replay.empty();
  const bool gpu = isa::load_hierarchy(co.target, co.overrides).kind == isa::TargetKind::Gpu;
  if (gpu && o.list_plans) {
    GpuPlanMeasurer listing(f, co);  // compiles only: no GPU needed to list
    const auto plans = gpu_plan_space(listing.compilation());
    if (plans.empty()) throw UserError("tessel tune --list-plans: " + f.name + " runs as SIMT code on " + co.target + " (no TensorCore plans); tile specs are its space (--dump-space)");
    for (const auto& pl : plans) write_stdout_line(pl);
    return 0;
  }
  if (o.list_plans) throw UserError("tessel tune --list-plans: GPU descriptions only (NPU plans: --dump-space)");
  if (gpu && !o.measure.empty()) {
    measure_gpu_and_print(f, co, o);
    return 0;
  }
  if (plain_search && gpu && tune_gpu_plans(f, co, o, !o.no_progress && isatty(STDERR_FILENO))) return 0;
  return tune_tile_specs(f, co, o);
}

void add_tune_command(CLI::App& app, CommandContext& ctx) {
  auto o = std::make_shared<TuneFlags>();
  CLI::App* cmd = app.add_subcommand("tune", "Search tile sizes for an operator on a target (simulator or GPU)");
  add_pipeline_flags(cmd, o->pipeline);
  add_tune_options(cmd, *o);
  add_query_options(cmd, *o);
  cmd->add_flag("--no-progress", o->no_progress, "no live progress line");
  cmd->add_flag("--list-plans", o->list_plans,
                "GPU descriptions: print the tile policy's TensorCore plans, ranked, one per line (the --tile texts a GPU "
                "sweep measures) and exit");
  cmd->callback([o, &ctx] { ctx.exit_code = run_tune(*o); });
}

}  // namespace

TESSEL_REGISTER_COMMAND("tune", add_tune_command);

}  // namespace tessel::cli
