// The polyhedral pipeline, top to bottom (one function, compile()):
//   [online_softmax: a def that is one softmax fused into its context contraction becomes that
//    kernel (compiler/poly/online_softmax.h); the passes below do not run]
//   fold_padding -> collapse_indices -> split_reductions -> scop -> dependences -> schedule -> fusion -> intrinsics -> tile -> promote -> kernel
//   -> contraction
// `dump_after` names passes whose result is printed to stderr ("all" for every pass);
// TESSEL_TIME_PASSES=1 (or CompileOptions::time_passes) prints each pass's time.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/kernel_ir.h"
#include "compiler/poly/build_kernel.h"
#include "compiler/poly/collapse_indices.h"
#include "compiler/poly/contraction.h"
#include "compiler/poly/dependences.h"
#include "compiler/poly/fold_padding.h"
#include "compiler/poly/fusion.h"
#include "compiler/poly/intrinsics.h"
#include "compiler/poly/online_softmax.h"
#include "compiler/poly/isl_util.h"
#include "compiler/poly/promotion.h"
#include "compiler/poly/schedule.h"
#include "compiler/poly/scop.h"
#include "compiler/poly/split_division_tails.h"
#include "compiler/poly/hoist_invariants.h"
#include "compiler/poly/inline_locals.h"
#include "compiler/poly/split_reductions.h"
#include "compiler/poly/widen_bf16.h"
#include "compiler/poly/tiling.h"
#include "compiler/tile/tile_spec.h"
#include "isa/hierarchy.h"

namespace tessel {

// Where a kernel's plan came from; `tessel run`, `compile --explain`, the reports and the Python
// result say it, so a plan taken from the tuning database is never a silent change.
struct PlanSource {
  enum class Kind { Policy, Given, Tuned };
  Kind kind = Kind::Policy;   // Policy: the target's tile policy; Given: --tile; Tuned: the database
  std::string database, key;  // Tuned: the database file and the entry's key
  double cost = 0;            // Tuned: the measured cost recorded with the entry
  std::string unit;
  std::string kind_name() const;  // "policy", "given", "tuning_database"
  std::string describe() const;   // one line for people
};

struct CompileOptions {
  std::string target = "c";       // "c" or a hierarchy description path
  std::string hierarchy;          // for target c: the description whose levels the buffers use
  isa::Overrides overrides;       // --set: applied to the description before it is parsed (isa/hierarchy_override.h)
  std::map<std::string, int64_t> sizes;
  std::optional<std::string> tile;  // tile spec text; default from the hierarchy
  // A GPU target's plan in its own text form ("128x128x64/64x64/ks1/st4/wg/ws", what --explain
  // prints); the kernel IR records it (Kernel::gpu_plan). A GPU plan for a non-GPU target is a
  // user error.
  std::optional<std::string> gpu_plan;
  PlanSource plan_source;
  poly::SchedulerOptions scheduler;
  bool fuse = true;
  std::set<std::string> dump_after;
  bool time_passes = false;
  // poly::collapse_indices (on unless turned off, for comparison: `--no-collapse`); a user tile
  // spec that names an index the collapse would remove keeps the function as written
  bool collapse = true;
  // compiler/poly/online_softmax.h: a softmax whose result only feeds the contraction consuming it
  // runs as one fused kernel (on unless `--no-online-softmax`; targets that cannot lower it keep
  // the statements unfused and say why: online_softmax_obstacle)
  bool online_softmax = true;
};

// Every intermediate result; `isl` is declared first so it is destroyed last.
struct Compilation {
  poly::IslContext isl;
  isa::Hierarchy hierarchy;
  const ir::Function* function = nullptr;   // what the passes compile: the input or `folded`
  std::optional<ir::Function> folded;       // the input with padding statements folded
  std::optional<poly::CollapsedFunction> collapsed;  // then with adjacent indices collapsed
  std::optional<ir::Function> split;        // then with long reductions in two phases (GPU)
  std::vector<poly::ReductionSplit> splits;
  std::optional<ir::Function> inlined;  // then with pointwise locals inlined (GPU, c)
  std::vector<poly::InlinedLocal> inlined_locals;
  std::optional<ir::Function> hoisted;  // then with invariant values hoisted into locals (GPU, c)
  std::vector<poly::HoistedValue> hoisted_values;
  std::optional<ir::Function> division_split;  // then with division tails split off (NPU)
  std::vector<poly::DivisionTail> division_tails;
  std::optional<ir::Function> widened;  // then with bf16 arithmetic in f32 (NPU without a bf16 ALU)
  std::vector<std::string> widened_statements;
  poly::Scop scop;
  poly::Dependences deps;
  poly::ScheduleResult schedule;
  std::vector<poly::Group> groups;
  std::vector<poly::MatmulMatch> matches;  // per group (anchor)
  tile::TileSpec tile_spec;
  PlanSource plan_source;
  poly::TiledProgram tiled;
  poly::Promotion promotion;
  kernel::Kernel kernel;
  std::vector<std::string> warnings;
  // the online-softmax pass's one line for --explain: where it applied, or why not (empty: the
  // def has no softmax)
  std::string online_softmax;
  std::vector<std::pair<std::string, double>> pass_ms;
  double total_ms = 0;      // wall time of all passes
  double total_cpu_ms = 0;  // thread CPU time of all passes (what `tessel bench compile` budgets)
};

// The pass names in order.
const std::vector<std::string>& pass_names();

// Runs the pipeline; `f` must outlive the result. Sizes that `f` infers (ir::bind_sizes) need not
// be given. UserError for bad sizes, tile specs, capacity.
std::unique_ptr<Compilation> compile(const ir::Function& f, const CompileOptions& options);

// The description for a target: "c" -> the default description (davinci-910.yaml, found next to
// the source tree or the binary) unless `hierarchy` is given; otherwise the path itself; with
// `overrides` applied.
isa::Hierarchy load_target_hierarchy(const std::string& target, const std::string& hierarchy,
                                     const isa::Overrides& overrides = {});

// Whether a --tile text is a GPU plan ("128x128x64/64x64/...": block tile first) rather than a
// tile spec ("m=128/64,n=...").
bool is_gpu_plan_text(const std::string& text);
// Whether it is a fused attention kernel's GPU plan ("attention/wgmma/128x128", "attention/mma/...").
bool is_attention_plan_text(const std::string& text);

// The plan a compilation runs, for reports: its tile spec, or "fused attention (online softmax)".
std::string plan_name(const Compilation& c);

// Why `target` (with its description) cannot run the fused online-softmax kernel ("" when it can).
std::string online_softmax_obstacle(const std::string& target, const isa::Hierarchy& h);
// The same for one whole-function match: also "" only when the target's lowering takes this
// record's form (NPU: emit_npu::why_not_attention, compiler/emit_npu/attention.h, e.g. f32
// operands are refused: the cube takes f16), so refused forms compile unfused.
std::string online_softmax_obstacle(const std::string& target, const isa::Hierarchy& h, const ir::Function& f,
                                    const poly::OnlineSoftmaxMatch& match, const std::map<std::string, int64_t>& sizes);

// "M=67,N=45" -> sizes; UserError on bad syntax.
std::map<std::string, int64_t> parse_shape(const std::string& text);

}  // namespace tessel
