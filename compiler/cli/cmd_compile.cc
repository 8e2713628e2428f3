// tessel compile OP.tsl --target c|HIERARCHY.yaml --shape M=..,N=.. [--def NAME] [--tile SPEC]
//                [--print-schedule] [--print-kernel] [--dump-after PASS] [--fusion max|conservative|none]
//                [--max-operations N] [--hierarchy FILE] -o OUT
// Runs the polyhedral pipeline (compiler/pipeline.h). Target c writes C source; a hierarchy
// description writes the kernel IR text (the NPU and CUDA emitters consume the kernel IR).
#include <cctype>
#include <chrono>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "compiler/kernel/check_parallel.h"
#include "compiler/cli/commands.h"
#include "compiler/cli/explain_plan.h"
#include "compiler/cli/pipeline_flags.h"
#include "compiler/cli/run_gpu.h"
#include "compiler/cli/run_npu.h"
#include "compiler/emit_c/emit_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "compiler/program/program.h"
#include "compiler/tune/best_db.h"
#include "isa/base/file_io.h"
#include "isa/base/error.h"
#include "isa/shipped_descriptions.h"

namespace tessel::cli {


void add_pipeline_flags(CLI::App* cmd, PipelineFlags& f) {
  cmd->add_option("file", f.file, "operator definition (.tsl)")->required();
  cmd->add_option("--def", f.def, "which def of the file (default: the only one)");
  add_target_option(cmd, "--target", f.target, "c, a hierarchy description (isa/targets/*.yaml), or a shipped one's name (davinci-910, sm90, ...)");
  cmd->add_option("--shape", f.shape, "size parameters, e.g. M=1024,N=1024,K=1024 (none for a def with literal sizes only)");
  cmd->add_option("--tile", f.tile,
                  "the plan to run: a tile spec (m=128/64,n=128/32,k=64/16) or, on GPU targets, a GPU plan in the form "
                  "--explain prints (128x128x64/64x64/ks1/st4/wg/ws); one the target cannot run is exit 1 with the reason "
                  "('default': the target's own plan; without --tile: the tuning database's entry, else the target's tile policy)");
  cmd->add_flag("--no-tuned", f.no_tuned,
                "ignore the tuning database (tessel tune's best plans; path: $TESSEL_TUNE_DB, else "
                "$XDG_CACHE_HOME/tessel/best.json or ~/.cache/tessel/best.json)");
  cmd->add_flag("--no-collapse", f.no_collapse,
                "compile every index as written: no collapsing of indices that travel together as whole adjacent "
                "dimensions (C(b, m, n) +=! A(b, m, k) * W(k, n) is otherwise one GEMM over b_m; see --dump-after collapse_indices)");
  cmd->add_flag("--no-online-softmax", f.no_online_softmax,
                "keep a softmax and the contraction consuming it as separate statements (scores, max, exp, sum, "
                "context as written); by default they run as one fused kernel with a running maximum and sum, "
                "no score tensor (--explain says where it applied)");
  cmd->add_option("--partition", f.partition,
                  "how a def of many statements becomes kernels: auto (a def with two or more contractions or more than "
                  "12 statements is cut along its dependence graph, one kernel per contraction with its epilogue and one "
                  "per row chain), one (always one kernel), split (always cut)")
      ->check(CLI::IsMember({"auto", "one", "split"}));
  cmd->add_option("--hierarchy", f.hierarchy, "target c: description whose levels the buffers use (default davinci-910)");
  cmd->add_option("--fusion", f.fusion, "isl scheduler fusion: max, conservative or none (none also disables post-tiling fusion)");
  cmd->add_option("--max-operations", f.max_operations, "isl operation quota of the scheduler (0: none)");
  add_set_flag(cmd, f.set);
  cmd->add_option("--dump-after", f.dump_after, "print the IR after a pass (fold_padding, collapse_indices, split_reductions, split_division_tails, scop, dependences, schedule, fusion, intrinsics, tile, promote, kernel, contraction, all)");
}

CLI::Option* add_target_option(CLI::App* cmd, const std::string& name, std::string& target, const std::string& help) {
  // --run-on names a description to measure on: "c" is none
  const bool allow_c = name != "--run-on";
  return cmd->add_option(name, target, help)->transform([name, allow_c](std::string s) { return isa::resolve_target(s, name, allow_c); }, "",
                                                        "TARGET");
}

void add_set_flag(CLI::App* cmd, std::vector<std::string>& set) {
  cmd->add_option("--set", set,
                  "override description fields: KEY=VALUE[,...], KEY one of FIELD, LEVEL.FIELD, UNIT.FIELD, FROM->TO.FIELD, "
                  "sync.FIELD; sizes may end in KiB, MiB, GiB (e.g. L1.capacity_bytes=1MiB)");
}

CompileOptions to_compile_options(const PipelineFlags& f, const ir::Function& fn) {
  CompileOptions o;
  o.target = f.target;
  o.hierarchy = f.hierarchy;
  o.overrides = isa::parse_overrides(f.set);
  o.sizes = ir::bind_sizes(fn, parse_shape(f.shape));
  auto take = [&o](const std::string& text) {
    if (is_gpu_plan_text(text)) o.gpu_plan = text;
    else o.tile = text;
  };
  if (f.tile == "default") {
    // the target's own plan, whatever the tuning database holds (the key tune's logs give it)
  } else if (!f.tile.empty()) {
    take(f.tile);
    o.plan_source.kind = PlanSource::Kind::Given;
  } else if (!f.no_tuned) {
    if (auto t = tune::tuned_tile_for(f.file, f.def, f.target, o.sizes, o.overrides)) {  // `tessel tune`'s best, if any
      take(t->tile);
      o.plan_source = {PlanSource::Kind::Tuned, t->database, t->key, t->cost, t->unit};
    }
  }
  if (f.fusion == "max") o.scheduler.fusion = poly::FusionStrategy::Max;
  else if (f.fusion == "conservative") o.scheduler.fusion = poly::FusionStrategy::Conservative;
  else if (f.fusion == "none") {
    o.scheduler.fusion = poly::FusionStrategy::None;
    o.fuse = false;
  } else throw UserError("--fusion: '" + f.fusion + "' is not one of max, conservative, none");
  o.collapse = !f.no_collapse;
  o.online_softmax = !f.no_online_softmax;
  o.scheduler.max_operations = f.max_operations;
  o.dump_after.insert(f.dump_after.begin(), f.dump_after.end());
  return o;
}

nlohmann::json plan_source_json(const PlanSource& s) {
  nlohmann::json j{{"kind", s.kind_name()}};
  if (s.kind == PlanSource::Kind::Tuned) {
    j["database"] = s.database;
    j["key"] = s.key;
    j["cost"] = s.cost;
    j["unit"] = s.unit;
  }
  return j;
}

namespace {

// One kernel's code as `-o` writes it: C for target c, the NPU program with its syncs, CUDA, or
// the kernel IR for other descriptions.
std::string kernel_code(const Compilation& c, const std::string& target, const NpuOptions& npu, const GpuFlags& gpu,
                        std::string& npu_line) {
  if (target == "c") return emit_c::emit_c(c.kernel);
  if (c.hierarchy.kind == isa::TargetKind::Npu) return compile_npu_text(c.kernel, c.hierarchy, npu, npu_line);
  if (is_gpu_target(c)) return compile_gpu_source(c, c.kernel.user_tile.has_value(), gpu, nullptr);
  return kernel::to_string(c.kernel);
}

// `-o OUT` of a program: one file per kernel, OUT's name with `.k<i>` before its extension
// (`bert.cu` -> `bert.k0.cu`, `bert.k1.cu`, ...), in execution order; OUT itself is not written.
std::string kernel_file(const std::string& out, size_t i) {
  const size_t slash = out.find_last_of('/');
  const size_t dot = out.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return has_ext ? out.substr(0, dot) + ".k" + std::to_string(i) + out.substr(dot) : out + ".k" + std::to_string(i);
}

// A def that compiles to several kernels (compiler/program/program.h): the partition and memory
// plan with --explain, one line otherwise; -o writes each kernel's code to its own file.
void compile_program_command(const program::ProgramCompilation& p, const PipelineFlags& flags, const std::string& out,
                             const NpuOptions& npu, const GpuFlags& gpu, bool explain) {
  if (explain) std::cerr << program::explain_program(p) << explain_program_bounds(p, flags.target, gpu);
  if (!out.empty()) {
    for (size_t i = 0; i < p.kernels.size(); ++i) {
      std::string npu_line;
      write_file(kernel_file(out, i), kernel_code(*p.kernels[i], flags.target, npu, gpu, npu_line), "-o");
      if (!npu_line.empty()) std::cerr << "tessel compile: " << p.kernels[i]->function->name << ": " << npu_line << "\n";
    }
    std::cerr << fmt::format("tessel compile: wrote {} .. {} (one file per kernel, in execution order)\n",
                             kernel_file(out, 0), kernel_file(out, p.kernels.size() - 1));
  }
  std::cerr << fmt::format("tessel compile: {}: {} kernels compiled in {:.1f} ms (arena {} bytes for {} intermediates)\n",
                           p.def->name, p.kernels.size(), p.total_ms, p.memory.arena_bytes, p.memory.slots.size());
}

void add_compile_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    PipelineFlags flags;
    GpuFlags gpu;
    NpuOptions npu;
    std::string out;
    bool print_schedule = false, print_kernel = false, check_parallel = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("compile", "Compile an operator (.tsl) for a target description");
  add_pipeline_flags(cmd, opts->flags);
  cmd->add_option("-o,--output", opts->out, "output file (C source for --target c, kernel IR text otherwise)");
  cmd->add_flag("--print-schedule", opts->print_schedule, "print the isl schedule and the tiled schedule");
  cmd->add_flag("--print-kernel", opts->print_kernel, "print the kernel IR");
  cmd->add_flag("--check-parallel", opts->check_parallel,
                "execute the kernel IR's control flow and check that no loop marked parallel has two iterations "
                "touching one element with a write (exit 3 if one does: a tessel bug)");
  add_npu_flags(cmd, opts->npu);
  add_gpu_flags(cmd, opts->gpu);
  auto explain_top = std::make_shared<std::string>();  // "" : no --explain; a count or "all" (explain_plan.h)
  cmd->add_flag("--explain{5}", *explain_top,
                "the description's hash, the plan and where it came from, the bound it targets, the top 5 alternative "
                "plans with their predicted times (--explain=all: every one); GPU targets: how the kernel maps onto the "
                "GPU (TensorCores, or why not)")
      ->check([](const std::string& v) {
        if (v == "all") return std::string();
        for (char ch : v)
          if (!std::isdigit(static_cast<unsigned char>(ch))) return std::string("a positive count or 'all'");
        return v.empty() || std::stoi(v) < 1 ? std::string("a positive count or 'all'") : std::string();
      });
  cmd->callback([opts, explain_top, &ctx] {
    const bool* explain = nullptr;
    const bool explaining = !explain_top->empty();
    explain = &explaining;
    const int top = !explaining ? 5 : *explain_top == "all" ? 0 : std::stoi(*explain_top);
    const auto started = std::chrono::steady_clock::now();  // the reported time is the command's wall time
    frontend::Module m = frontend::load_module(opts->flags.file);
    const ir::Function& f = frontend::select_function(m, opts->flags.def);
    const CompileOptions co = to_compile_options(opts->flags, f);
    auto prog = program::compile_program(f, co, poly::parse_partition_mode(opts->flags.partition, "--partition"));
    if (!prog->single()) {
      if (opts->check_parallel) {  // every kernel of the program, summed
        int64_t loops = 0, accesses = 0, conflicts = 0;
        bool complete = true;
        std::string first;
        for (const auto& k : prog->kernels) {
          const kernel::ParallelCheck pc = kernel::check_parallel(k->kernel);
          loops += pc.loops;
          accesses += pc.accesses;
          conflicts += pc.conflicts;
          complete = complete && pc.complete;
          if (pc.conflicts && first.empty()) first = k->kernel.name + ": " + pc.first_conflict;
        }
        std::cout << "parallel loops: " << prog->kernels.size() << " kernels, " << loops << " instances, " << accesses
                  << " accesses" << (complete ? "" : " (budget reached: a prefix checked)") << ", " << conflicts << " conflicts\n";
        if (conflicts) {
          std::cerr << "tessel compile: internal error: a loop marked parallel carries a dependence: " << first << "\n";
          ctx.exit_code = 3;
          return;
        }
      }
      compile_program_command(*prog, opts->flags, opts->out, opts->npu, opts->gpu, explaining);
      ctx.exit_code = 0;
      return;
    }
    if (explaining) std::cerr << program::explain_program(*prog);
    auto c = std::move(prog->kernels.front());
    if (opts->print_schedule) {
      std::cout << "isl schedule:\n" << poly::str(c->schedule.schedule) << "\n"
                << poly::to_string(c->groups, c->scop) << "tile spec: " << c->tile_spec.to_string() << "\n"
                << c->tiled.to_string();
    }
    if (opts->print_kernel) std::cout << kernel::to_string(c->kernel);
    if (opts->check_parallel) {
      const kernel::ParallelCheck pc = kernel::check_parallel(c->kernel);
      std::cout << "parallel loops: " << pc.loops << " instances, " << pc.accesses << " accesses"
                << (pc.complete ? "" : " (budget reached: a prefix checked)") << ", " << pc.conflicts << " conflicts\n";
      if (pc.conflicts) {
        std::cerr << "tessel compile: internal error: a loop marked parallel carries a dependence: " << pc.first_conflict << "\n";
        ctx.exit_code = 3;
        return;
      }
    }
    if (!opts->out.empty()) {
      std::string npu_line;  // NPU targets: the .npu program with syncs (compiler/cli/run_npu.h)
      write_file(opts->out, kernel_code(*c, opts->flags.target, opts->npu, opts->gpu, npu_line), "-o");
      if (!npu_line.empty()) std::cerr << "tessel compile: " << npu_line << "\n";
    }
    // a GPU plan or tile the kernel cannot run is refused here too, not only when CUDA is written
    const bool gpu = opts->flags.target != "c" && is_gpu_target(*c);
    if (gpu && opts->out.empty() && !*explain && (!c->kernel.gpu_plan.empty() || c->kernel.user_tile || !opts->gpu.tiles.empty()))
      compile_gpu_source(*c, c->kernel.user_tile.has_value(), opts->gpu, nullptr);
    if (*explain) {
      std::cerr << "tessel compile: description " << c->hierarchy.name << " hash " << c->hierarchy.description_hash
                << (c->hierarchy.overrides.empty() ? "" : " (--set " + c->hierarchy.overrides + ")") << "\n";
      if (!gpu)
        std::cerr << "tessel compile: plan " << plan_name(*c) << " from " << c->plan_source.describe() << "\n";
      explain_plan(f, co, *c, top, std::cerr, opts->gpu);
    }
    if (*explain && opts->flags.target != "c" && is_gpu_target(*c)) {
      std::string lines;
      compile_gpu_source(*c, c->kernel.user_tile.has_value(), opts->gpu, &lines);
      std::cerr << lines;
    }
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    std::cerr << "tessel compile: " << f.name << " (" << plan_name(*c) << ") compiled in " << wall_ms << " ms\n";
    ctx.exit_code = 0;
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("compile", add_compile_command);

}  // namespace tessel::cli
