#include "compiler/pipeline.h"
#include "compiler/pipeline_fit.h"

#include <cctype>
#include <functional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "compiler/emit_npu/attention.h"
#include "compiler/emit_npu/held_dtypes.h"
#include "isa/base/error.h"
#include "isa/gpu_machine.h"
#include "isa/npu_machine.h"
#include "isa/shipped_descriptions.h"

namespace tessel {

namespace {

// An NPU description whose vector unit has no bf16 arithmetic but converts bf16 <-> f32 (its
// `conversions`): bf16 programs are computed in f32 there (pass widen_bf16).
bool widens_bf16(const isa::Hierarchy& h) {
  bool has_bf16 = false, to = false, from = false;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Vector)) {
    has_bf16 = has_bf16 || std::find(u->dtypes.begin(), u->dtypes.end(), DType::BF16) != u->dtypes.end();
    for (const isa::VectorConversion& c : u->conversions) {
      to = to || (c.from == DType::F32 && c.to == DType::BF16);
      from = from || (c.from == DType::BF16 && c.to == DType::F32);
    }
  }
  return !has_bf16 && to && from;
}

// Which mappings of an NPU description take a bf16 contraction accumulated in f32 as written: its
// cube where it lists a bf16 x bf16 -> f32 shape, else the vector contraction (poly/widen_bf16.h).
poly::WidenBf16Options bf16_contractions(const isa::Hierarchy& h) {
  const isa::NpuMachine m = isa::npu_machine(h);
  poly::WidenBf16Options o;
  o.cube = m.cube_bf16.exists;
  o.vector = true;
  std::string shapes;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const isa::MatrixShape& s : u->shapes)
      shapes += fmt::format("{}{} x {} -> {}", shapes.empty() ? "" : ", ", dtype_name(s.a), dtype_name(s.b), dtype_name(s.acc));
  o.no_cube = fmt::format("the cube of {} has no bf16 x bf16 -> f32 shape (its shapes: {})", h.name, shapes);
  return o;
}

// Halves every outer tile size above 1 (inner sizes clamped to them); false when none is left.
bool halve_outer_tiles(tile::TileSpec& spec) {
  bool shrunk = false;
  for (auto& a : spec.axes)
    if (a.outer > 1) {
      a.outer = (a.outer + 1) / 2;
      a.inner = std::min(a.inner, a.outer);
      shrunk = true;
    }
  return shrunk;
}

}  // namespace

std::string plan_name(const Compilation& c) {
  return c.kernel.attention ? "fused attention (online softmax)" : c.tile_spec.to_string();
}

std::string online_softmax_obstacle(const std::string& target, const isa::Hierarchy& h) {
  (void)target, (void)h;  // c, GPU and NPU targets lower the fused kernel (NPU: compiler/emit_npu/attention.h)
  return "";
}

namespace {

// The fused kernel of a whole-function match: the record, the function's global tensors, no body.
kernel::Kernel fused_attention_kernel(const ir::Function& f, const poly::OnlineSoftmaxMatch& match,
                                      const std::map<std::string, int64_t>& sizes, const std::string& target_name) {
  kernel::Kernel k;
  k.name = f.name;
  k.function = &f;
  k.sizes = sizes;
  k.target = target_name;
  for (const auto& t : f.tensors) {
    if (t.kind == ir::TensorKind::Local) continue;
    kernel::GlobalTensor g{t.name, t.dtype, {}, t.kind, false, {}};
    for (const auto& d : t.shape) g.shape.push_back(d.evaluate({}, sizes));
    k.tensors.push_back(g);
  }
  k.body = std::make_shared<kernel::Node>();
  k.attention = poly::build_attention(f, match, sizes);
  k.no_contraction = "a softmax fused into its context contraction (online softmax)";
  return k;
}

}  // namespace

std::string online_softmax_obstacle(const std::string& target, const isa::Hierarchy& h, const ir::Function& f,
                                    const poly::OnlineSoftmaxMatch& match, const std::map<std::string, int64_t>& sizes) {
  if (std::string why = online_softmax_obstacle(target, h); !why.empty()) return why;
  if (target == "c" || h.kind != isa::TargetKind::Npu) return "";
  // the NPU lowering takes f16 operands, steps of the score, a causal mask and mask tensors read
  // along the keys; it says why not for any other form, which then stays unfused
  kernel::Kernel k = fused_attention_kernel(f, match, sizes, h.name);
  // A match inside a larger def (a program's partition, compiler/program): the tensors its
  // statements read from the rest of the def, and the one it writes, are the fused kernel's.
  std::set<std::string> produced;
  for (int i : match.statements) produced.insert(f.statements[i].output);
  auto global = [&](const std::string& name, ir::TensorKind kind) {
    if (k.find_tensor(name)) return;
    for (const auto& t : f.tensors)
      if (t.name == name) {
        kernel::GlobalTensor g{t.name, t.dtype, {}, kind, false, {}};
        for (const auto& d : t.shape) g.shape.push_back(d.evaluate({}, sizes));
        k.tensors.push_back(g);
      }
  };
  std::function<void(const ir::Expr&)> reads = [&](const ir::Expr& e) {
    if (e.kind == ir::ExprKind::Access && !produced.count(e.name)) global(e.name, ir::TensorKind::Input);
    for (const auto& a : e.args) reads(*a);
  };
  for (int i : match.statements) reads(*f.statements[i].rhs);
  global(k.attention->out.tensor, ir::TensorKind::Output);
  return emit_npu::why_not_attention(k, h);
}

const std::vector<std::string>& pass_names() {
  static const std::vector<std::string> names = {"online_softmax", "fold_padding", "collapse_indices", "inline_locals", "split_reductions", "hoist_invariants", "split_division_tails", "widen_bf16", "scop", "dependences", "schedule",
                                                 "fusion", "intrinsics", "tile", "promote", "kernel", "contraction"};
  return names;
}

std::map<std::string, int64_t> parse_shape(const std::string& text) {
  std::map<std::string, int64_t> sizes;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string e = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 >= e.size())
      throw UserError("--shape: '" + e + "': expected NAME=VALUE, e.g. M=1024,N=1024,K=1024");
    std::string v = e.substr(eq + 1);
    for (char c : v)
      if (!std::isdigit((unsigned char)c)) throw UserError("--shape: '" + e + "': size must be a positive integer");
    if (v.size() > 18 && (v.size() > 19 || v > "9223372036854775807"))
      throw UserError("--shape: '" + e + "': size must be at most 9223372036854775807");
    int64_t x = std::stoll(v);
    if (x < 1) throw UserError("--shape: '" + e + "': sizes must be at least 1");
    if (sizes.count(e.substr(0, eq)))
      throw UserError("--shape: '" + e.substr(0, eq) + "' is given twice (" + e.substr(0, eq) + "=" + std::to_string(sizes.at(e.substr(0, eq))) +
                      " and " + e + ")");
    sizes[e.substr(0, eq)] = x;
  }
  return sizes;
}

namespace {

std::string find_default_description() {
  const std::string rel = "isa/targets/davinci-910.yaml";
  if (std::string path = isa::find_shipped_file(rel); !path.empty()) return path;
  throw UserError("--target c: cannot find " + rel +
                  " (run from the source tree, set TESSEL_SOURCE_DIR, or pass --hierarchy FILE)");
}

// CPU time of this thread: what a pass costs, independent of other processes on the machine.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

class PassTimer {
 public:
  PassTimer(Compilation& c, const CompileOptions& o) : c_(c), o_(o) {}
  template <class F>
  void run(const std::string& name, F&& f, const std::function<std::string()>& dump) {
    auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_ms();
    f();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    c_.pass_ms.emplace_back(name, ms);
    c_.total_ms += ms;
    c_.total_cpu_ms += thread_cpu_ms() - cpu0;
    if (o_.time_passes) std::cerr << "tessel: pass " << name << ": " << ms << " ms\n";
    if (o_.dump_after.count(name) || o_.dump_after.count("all"))
      std::cerr << "=== after " << name << " ===\n" << dump() << "\n";
  }

 private:
  Compilation& c_;
  const CompileOptions& o_;
};

poly::MatmulMatch no_reduction_match() {
  poly::MatmulMatch m;
  m.why_not = "no reduction";
  return m;
}

}  // namespace

std::string PlanSource::kind_name() const {
  switch (kind) {
    case Kind::Policy: return "policy";
    case Kind::Given: return "given";
    case Kind::Tuned: return "tuning_database";
  }
  return "policy";
}

std::string PlanSource::describe() const {
  switch (kind) {
    case Kind::Policy: return "the target's tile policy";
    case Kind::Given: return "--tile";
    case Kind::Tuned: {
      std::ostringstream os;
      os << "the tuning database " << database << ", key " << key << " (measured " << cost << " " << unit
         << "; --no-tuned ignores it)";
      return os.str();
    }
  }
  return "";
}

bool is_attention_plan_text(const std::string& text) { return text.rfind("attention/", 0) == 0; }

bool is_gpu_plan_text(const std::string& text) {
  if (is_attention_plan_text(text)) return true;
  // block tile "BMxBNxBK" first: digits and 'x' up to the first '/'
  const std::string head = text.substr(0, text.find('/'));
  return !head.empty() && std::isdigit(static_cast<unsigned char>(head[0])) && head.find('x') != std::string::npos &&
         head.find('=') == std::string::npos;
}

isa::Hierarchy load_target_hierarchy(const std::string& target, const std::string& hierarchy,
                                     const isa::Overrides& overrides) {
  if (target == "c") return isa::load_hierarchy(hierarchy.empty() ? find_default_description() : hierarchy, overrides);
  return isa::load_hierarchy(target, overrides);
}

namespace {

// Each tensor's byte size with checked arithmetic (a shape from --shape may be absurd), and, on a
// target whose description has global memory, the inputs and outputs together must fit it (NPU and
// GPU kernels place them there; locals live on chip or in scratch the emitter sizes).
void check_tensor_sizes(const ir::Function& f, const std::map<std::string, int64_t>& sizes, const isa::Hierarchy* target) {
  const isa::Level* global = target ? target->level_with_role(isa::Role::Global) : nullptr;
  uint64_t total = 0;
  for (const ir::Tensor& t : f.tensors) {
    std::string dims;
    uint64_t bytes = dtype_bytes(t.dtype);
    bool overflow = false;
    for (const ir::AffineExpr& d : t.shape) {
      const int64_t n = d.evaluate({}, sizes);
      dims += (dims.empty() ? "" : " x ") + std::to_string(n);
      if (n < 1) {  // an empty dimension: the frontend's checks name it
        bytes = 0;
        break;
      }
      overflow = overflow || __builtin_mul_overflow(bytes, static_cast<uint64_t>(n), &bytes) || bytes > uint64_t(INT64_MAX);
    }
    if (overflow)
      throw UserError(fmt::format("--shape: tensor '{}' ({} {}) needs more than {} bytes; its size overflows", t.name,
                                  dtype_name(t.dtype), dims, INT64_MAX));
    if (!global || t.kind == ir::TensorKind::Local) continue;
    total += bytes;  // no overflow: each term is below 2^63 and checked against the capacity below
    if (bytes > global->capacity_bytes || total > global->capacity_bytes)
      throw UserError(fmt::format("--shape: tensor '{}' ({} {}) needs {} bytes; with the tensors before it the program "
                                  "needs {} bytes of global memory, but {} of {} holds {} bytes",
                                  t.name, dtype_name(t.dtype), dims, bytes, total, global->name, target->name,
                                  global->capacity_bytes));
  }
}

// The options' sizes bound and checked against the def's parameters, and --dump-after's pass names.
void check_compile_options(const ir::Function& f, CompileOptions& options) {
  for (const auto& d : options.dump_after)
    if (d != "all" && std::find(pass_names().begin(), pass_names().end(), d) == pass_names().end()) {
      std::string known;
      for (const auto& n : pass_names()) known += (known.empty() ? "" : ", ") + n;
      throw UserError("--dump-after: unknown pass '" + d + "' (passes: " + known + ", all)");
    }
  options.sizes = ir::bind_sizes(f, options.sizes);
  for (const auto& p : f.params)
    if (!options.sizes.count(p))
      throw UserError("--shape: no size for " + p + " (" + f.name + " needs " + [&] {
        std::string s;
        for (const auto& q : f.params) s += (s.empty() ? "" : ",") + q + "=...";
        return s;
      }() + ")");
  for (const auto& [n, v] : options.sizes)
    if (std::find(f.params.begin(), f.params.end(), n) == f.params.end())
      throw UserError("--shape: " + f.name + " has no size parameter " + n);
}

// A def that is one softmax fused into its context contraction: that kernel, from the record
// (true: c holds it and compiling is done). Else c->online_softmax says why not, where the def
// has such a match; an attention plan for a def without the fused kernel is refused.
bool compile_fused_attention(Compilation& c, const ir::Function& f, const CompileOptions& options, PassTimer& timer) {
  if (options.online_softmax) {
    std::string why;
    const auto match = poly::whole_function_match(f, &why);
    const std::string obstacle = match ? online_softmax_obstacle(options.target, c.hierarchy, f, *match, options.sizes) : "";
    if (match && obstacle.empty()) {
      // a GPU attention plan (attention/wgmma/..., attention/mma/..., attention/simt/...) is the
      // kernel's plan, which the CUDA emitter carries out or refuses with the reason; a tile spec or
      // a contraction plan names loops this kernel does not have
      const bool attention_plan = options.gpu_plan && is_attention_plan_text(*options.gpu_plan);
      if ((options.tile || (options.gpu_plan && !attention_plan)) && options.plan_source.kind == PlanSource::Kind::Given)
        throw UserError("--tile: " + f.name + " runs as one fused attention kernel (online softmax: " + match->summary +
                        "), whose plans read attention/wgmma/128x128, attention/mma/128x64/w8/st2 or attention/simt/w4 "
                        "(--explain names the one chosen); --no-online-softmax compiles the statements unfused, with a tile spec");
      timer.run("online_softmax", [&] { c.kernel = fused_attention_kernel(f, *match, options.sizes, c.hierarchy.name); },
                [&] { return kernel::to_string(*c.kernel.attention); });
      if (attention_plan) c.kernel.gpu_plan = *options.gpu_plan;
      c.online_softmax = "applied: " + match->summary + " runs as one kernel, no " + std::to_string(c.kernel.attention->query.extent) +
                         " x " + std::to_string(c.kernel.attention->key.extent) + " score tensor (--no-online-softmax: unfused)";
      if (c.kernel.attention->causal_offset)
        c.online_softmax += "; causal mask recognised (keys j <= i + " + std::to_string(*c.kernel.attention->causal_offset) + ")";
      return true;
    }
    if (match) c.online_softmax = "not applied on " + c.hierarchy.name + ": " + obstacle;
  }
  if (options.gpu_plan && is_attention_plan_text(*options.gpu_plan))
    throw UserError("--tile " + *options.gpu_plan + ": an attention plan, but " + f.name + " does not compile to a fused attention kernel (" +
                    (c.online_softmax.empty() ? std::string("no softmax fused into a contraction: `tessel compile --explain` says why")
                                              : "online softmax " + c.online_softmax) + ")");
  return false;
}

// collapse_indices: contiguous index runs merged (poly::collapse_indices), unless a user tile spec
// names an index the collapse removes (the statements then stay as written).
void collapse_index_runs(Compilation& c, const CompileOptions& options) {
  if (!options.collapse) return;
  c.collapsed = poly::collapse_indices(*c.function, options.sizes);
  if (!c.collapsed) return;
  if (options.tile) {
    const tile::TileSpec spec = tile::parse_tile_spec(*options.tile);
    bool names_removed = false;
    for (const auto& [s, names] : c.collapsed->removed_indices)
      for (const auto& n : names) names_removed = names_removed || spec.find(n);
    if (names_removed) {
      c.collapsed.reset();
      return;
    }
  }
  c.function = &c.collapsed->function;
}

std::string collapse_dump(const Compilation& c) {
  if (!c.collapsed) return std::string("(no indices collapsed)");
  std::string s;
  for (const auto& x : c.collapsed->steps) s += x.to_string() + "\n";
  return s + ir::to_string(c.collapsed->function);
}

// The intrinsic match of each fusion group's anchor statement (none for a group without one).
void match_intrinsics(Compilation& c) {
  const ir::Function& fn = *c.function;
  c.matches.clear();
  for (const auto& g : c.groups)
    c.matches.push_back(g.anchor < 0 ? no_reduction_match()
                                     : poly::match_matmul(fn.statements[c.scop.statements[g.anchor].statement], fn, c.hierarchy));
}

std::string intrinsics_dump(const Compilation& c) {
  std::string s;
  for (size_t i = 0; i < c.matches.size(); ++i) {
    const auto& m = c.matches[i];
    s += "group " + std::to_string(i) + ": " +
         (m.matched ? "matmul fragment " + std::to_string(m.unit_m) + "x" + std::to_string(m.unit_n) + "x" +
                          std::to_string(m.unit_k) + " A=" + m.a + " (" + kernel::layout_name(m.a_layout) + ") B=" +
                          m.b + " (" + kernel::layout_name(m.b_layout) + ") C=" + m.c
                    : "no match: " + m.why_not) + "\n";
  }
  return s;
}

// tile + promote; without a user spec, the default shrunk while promotion reports an overflow.
// Where the boxes do not limit the mapping (the NPU's vector lowering, any GPU kernel) an
// overflowing default is kept with a warning; an overflowing user tile is a UserError naming it.
// Returns "" or the fit failure: no default tile fits, the reason naming the last tile tried.
std::string tile_and_promote(Compilation& c, const ir::Function& f, const CompileOptions& options, PassTimer& timer) {
  const bool user_tile = options.tile.has_value();
  for (int attempt = 0;; ++attempt) {
    timer.run("tile", [&] {
      if (!poly::tile_program(c.scop, c.deps, c.groups, c.matches, c.tile_spec, options.sizes, c.tiled)) {
        c.warnings.push_back("fused tiles would violate a dependence; statements are tiled separately");
        c.groups = poly::plan_fusion(c.scop, false);
        match_intrinsics(c);
        bool ok = poly::tile_program(c.scop, c.deps, c.groups, c.matches, c.tile_spec, options.sizes, c.tiled);
        TESSEL_CHECK(ok, "tile: the unfused tiled schedule violates a dependence (tile pass)");
      }
    }, [&] { return "tile spec: " + c.tile_spec.to_string() + "\n" + c.tiled.to_string(); });
    timer.run("promote", [&] { c.promotion = poly::promote(c.scop, c.deps, c.tiled, c.hierarchy); },
              [&] { return c.promotion.to_string(); });
    if (!c.promotion.overflow) break;
    const bool gpu = c.hierarchy.kind == isa::TargetKind::Gpu;
    if (!user_tile && attempt <= 12 && halve_outer_tiles(c.tile_spec)) continue;
    // The NPU maps kernels without a matmul from the tensor IR with its own UB tiles
    // (compiler/emit_npu/nest.h): their promotion's boxes only describe the loop tree. The GPU's
    // SIMT code keeps the boxes that exceed shared memory in per-block global scratch
    // (compiler/emit_cuda/emit_simt.h).
    // On a GPU the boxes never limit the mapping: the TensorCore kernels take their tiles from the
    // plan, not from these buffers, and the SIMT walk keeps what does not fit in scratch; so a
    // default plan exists whatever the sizes (issue: a 6-statement attention at 512 tokens).
    const bool vector_only = std::none_of(c.matches.begin(), c.matches.end(), [](const poly::MatmulMatch& m) { return m.matched; });
    if (!user_tile && ((vector_only && c.hierarchy.kind == isa::TargetKind::Npu) || gpu)) {
      c.warnings.push_back("the default tile " + c.tile_spec.to_string() + " overflows: " + c.promotion.overflow->what() +
                           (c.hierarchy.kind == isa::TargetKind::Npu ? " (the NPU's vector lowering tiles rows itself)"
                                                                     : " (the SIMT code keeps the larger boxes in global scratch)"));
      c.promotion.overflow.reset();
      break;
    }
    if (user_tile) throw UserError(c.promotion.overflow->message());
    return fmt::format("{}: no tile fits {}: the default tile, shrunk to {}, still does not fit: {}; smaller sizes "
                       "(--shape) or a description with more room (--set) can",
                       f.name, c.hierarchy.name, c.tile_spec.to_string(), c.promotion.overflow->what());
  }
  return "";
}

std::string found_text(const std::string& x) { return x; }
template <class Found>
std::string found_text(const Found& x) {
  return x.to_string();
}

// A pass that may rewrite the function: where `applies`, `rewritten` = rewrite(*c.function, &found),
// which then becomes c.function; --dump-after shows what it found and the rewritten function, else `none`.
template <class Found, class Rewrite>
void rewrite_pass(PassTimer& timer, Compilation& c, const std::string& name, bool applies, std::optional<ir::Function>& rewritten,
                  std::vector<Found>& found, const char* none, Rewrite&& rewrite) {
  timer.run(name, [&] {
    if (!applies) return;
    rewritten = rewrite(*c.function, &found);
    if (rewritten) c.function = &*rewritten;
  }, [&] {
    std::string s;
    for (const auto& x : found) s += found_text(x) + "\n";
    return rewritten ? s + ir::to_string(*rewritten) : std::string(none);
  });
}

}  // namespace

CompileFit compile_unless_no_tile_fits(const ir::Function& f, const CompileOptions& options_in) {
  CompileOptions options = options_in;
  if (const char* t = std::getenv("TESSEL_TIME_PASSES"); t && std::string(t) == "1") options.time_passes = true;
  check_compile_options(f, options);

  auto c = std::make_unique<Compilation>();
  c->function = &f;
  c->hierarchy = load_target_hierarchy(options.target, options.hierarchy, options.overrides);
  c->plan_source = options.plan_source;
  if (options.gpu_plan && (options.target == "c" || c->hierarchy.kind != isa::TargetKind::Gpu))
    throw UserError("--tile " + *options.gpu_plan + ": a GPU plan (block tile x warp tile / options), but " +
                    (options.target == "c" ? std::string("target c") : c->hierarchy.name) +
                    " is not a GPU description; NPU and c targets take tile specs such as m=128/64,n=128/32,k=64/16" +
                    (options.plan_source.kind == PlanSource::Kind::Tuned ? " (" + options.plan_source.describe() + ")" : ""));
  check_tensor_sizes(f, options.sizes, options.target == "c" ? nullptr : &c->hierarchy);
  if (options.target != "c" && c->hierarchy.kind == isa::TargetKind::Npu) emit_npu::check_held_dtypes(f, c->hierarchy);
  isl::ctx ctx = c->isl.ctx();
  PassTimer timer(*c, options);

  if (compile_fused_attention(*c, f, options, timer)) return {std::move(c), ""};
  timer.run("fold_padding", [&] {
    c->folded = poly::fold_padding(ctx, f);
    if (c->folded) c->function = &*c->folded;
  }, [&] { return c->folded ? ir::to_string(*c->folded) : std::string("(no padding statement folded)"); });
  timer.run("collapse_indices", [&] { collapse_index_runs(*c, options); }, [&] { return collapse_dump(*c); });
  // GPU and c targets: cheap pointwise locals are computed in their readers
  // (compiler/poly/inline_locals.h)
  const bool gpu_or_c = options.target == "c" || c->hierarchy.kind == isa::TargetKind::Gpu;
  rewrite_pass(timer, *c, "inline_locals", gpu_or_c, c->inlined, c->inlined_locals, "(no local inlined)",
               [&](const ir::Function& g, auto* found) { return poly::inline_locals(g, options.sizes, found); });
  // GPU targets: long reductions to few outputs run in two phases (compiler/poly/split_reductions.h);
  // a user tile spec names the original indices, so it keeps the statements as written
  rewrite_pass(timer, *c, "split_reductions", c->hierarchy.kind == isa::TargetKind::Gpu && options.target != "c" && !options.tile, c->split,
               c->splits, "(no reduction split)", [&](const ir::Function& g, auto* found) {
                 poly::SplitPolicy policy;
                 policy.parallel_units = isa::GpuMachine::from(c->hierarchy).sm_count;
                 return poly::split_reductions(g, options.sizes, policy, found);
               });
  // GPU and c targets: costly values that use only some of a statement's indices are computed once
  // per point of those indices (compiler/poly/hoist_invariants.h)
  rewrite_pass(timer, *c, "hoist_invariants", gpu_or_c, c->hoisted, c->hoisted_values, "(no invariant value hoisted)",
               [&](const ir::Function& g, auto* found) { return poly::hoist_invariants(g, options.sizes, found); });
  // NPU targets: a divided index whose range is not a whole number of quotients runs as the whole
  // quotients and a tail (compiler/poly/split_division_tails.h)
  rewrite_pass(timer, *c, "split_division_tails", c->hierarchy.kind == isa::TargetKind::Npu && options.target != "c", c->division_split,
               c->division_tails, "(no division tail)",
               [&](const ir::Function& g, auto* found) { return poly::split_division_tails(g, options.sizes, found); });
  // NPU targets whose vector unit converts bf16 but has no bf16 arithmetic: bf16 computed in f32
  // (compiler/poly/widen_bf16.h)
  rewrite_pass(timer, *c, "widen_bf16", c->hierarchy.kind == isa::TargetKind::Npu && options.target != "c" && widens_bf16(c->hierarchy),
               c->widened, c->widened_statements, "(no bf16 arithmetic)",
               [&](const ir::Function& g, auto* found) { return poly::widen_bf16(g, found, bf16_contractions(c->hierarchy)); });
  const ir::Function& fn = *c->function;
  timer.run("scop", [&] { c->scop = poly::build_scop(ctx, fn); }, [&] {
    return "domain: " + poly::str(c->scop.domain) + "\nreads: " + poly::str(c->scop.tagged_reads) +
           "\nwrites: " + poly::str(c->scop.tagged_writes);
  });
  timer.run("dependences", [&] { c->deps = poly::compute_dependences(c->scop); }, [&] {
    return "flow: " + poly::str(c->deps.flow) + "\nanti: " + poly::str(c->deps.anti) + "\noutput: " + poly::str(c->deps.output);
  });
  timer.run("schedule", [&] {
    c->schedule = poly::compute_schedule(c->scop, c->deps, options.scheduler);
    if (c->schedule.fell_back) {
      c->warnings.push_back(c->schedule.warning);
      std::cerr << "tessel: warning: " << c->schedule.warning << "\n";
    }
  }, [&] { return poly::str(c->schedule.schedule); });
  timer.run("fusion", [&] {
    poly::FusionPolicy fusion;  // GPU targets: no statement of many points inside a group of few tiles
    if (c->hierarchy.kind == isa::TargetKind::Gpu && options.target != "c")
      fusion = {.parallel_units = isa::GpuMachine::from(c->hierarchy).sm_count, .sizes = options.sizes};
    c->groups = poly::plan_fusion(c->scop, options.fuse, fusion);
  },
            [&] { return poly::to_string(c->groups, c->scop); });
  timer.run("intrinsics", [&] { match_intrinsics(*c); }, [&] { return intrinsics_dump(*c); });

  if (options.tile) {
    c->tile_spec = tile::parse_tile_spec(*options.tile);
    tile::check_tile_spec(c->tile_spec, c->collapsed ? c->collapsed->function : f);
  } else {
    c->tile_spec = tile::default_tile_spec(fn, options.sizes, c->hierarchy);
  }
  if (std::string unfit = tile_and_promote(*c, f, options, timer); !unfit.empty()) return {nullptr, unfit};
  for (size_t g = 0; g < c->tiled.groups.size() && g < c->matches.size(); ++g) c->matches[g] = c->tiled.groups[g].match;
  timer.run("kernel", [&] { c->kernel = poly::build_kernel(c->scop, c->deps, c->tiled, c->promotion, c->hierarchy); },
            [&] { return kernel::to_string(c->kernel); });
  timer.run("contraction", [&] { poly::record_contraction(c->kernel); }, [&] { return poly::contraction_to_string(c->kernel); });
  if (c->collapsed)
    for (auto& t : c->kernel.tensors)
      if (const auto it = c->collapsed->original_shapes.find(t.name); it != c->collapsed->original_shapes.end())
        t.declared_shape = it->second;
  if (options.tile) c->kernel.user_tile = c->tile_spec;
  if (options.gpu_plan) c->kernel.gpu_plan = *options.gpu_plan;
  return {std::move(c), ""};
}

std::unique_ptr<Compilation> compile(const ir::Function& f, const CompileOptions& options) {
  CompileFit r = compile_unless_no_tile_fits(f, options);
  if (!r.compilation) throw UserError(r.no_tile_fits);
  return std::move(r.compilation);
}

}  // namespace tessel
