#include "compiler/emit_npu/nest_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>

#include "compiler/emit_npu/nest.h"
#include "isa/base/error.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;

// One reduction split over cores: statement `stmt` reduces along `index` (extent k x c) into
// `partial` [k, output shape...].
struct Split {
  size_t stmt = 0;
  std::string index, partial;
  int64_t k = 1, c = 1;
};

int64_t eval(const ir::AffineExpr& e, const kernel::Kernel& k) { return e.evaluate({}, k.sizes); }

int64_t tensor_bytes(const ir::Tensor& t, const kernel::Kernel& k) {
  int64_t n = dtype_bytes(t.dtype);
  for (const auto& d : t.shape) n *= eval(d, k);
  return n;
}

bool uses_division(const ir::Expr& e) {
  if (e.kind == ir::ExprKind::IndexValue) return e.affine.has_div();
  if (e.kind == ir::ExprKind::Access)
    for (const auto& i : e.indices)
      if (i.has_div()) return true;
  for (const auto& a : e.args)
    if (uses_division(*a)) return true;
  return false;
}

void read_tensors(const ir::Expr& e, std::set<std::string>& out) {
  if (e.kind == ir::ExprKind::Access) out.insert(e.name);
  for (const auto& a : e.args) read_tensors(*a, out);
}

int64_t outputs_of(const ir::Statement& s, const kernel::Kernel& k) {
  int64_t n = 1;
  for (const auto& iv : s.domain)
    if (!iv.is_reduction) n *= eval(iv.hi, k) - eval(iv.lo, k);
  return n;
}

// The split of statement i, where it pays (see nest_split.h), else nullopt.
std::optional<Split> plan_split(const kernel::Kernel& k, const isa::NpuMachine& m, size_t i, int base_cores) {
  const ir::Statement& s = k.function->statements[i];
  if (s.reduction == ir::Reduction::None || !s.init || uses_division(*s.rhs)) return std::nullopt;
  // an f16 sum or product accumulates in the interpreter's order (nest.h); partials would reassociate it
  if ((s.reduction == ir::Reduction::Sum || s.reduction == ir::Reduction::Prod) && (s.acc_type == DType::F16 || s.acc_type == DType::BF16))
    return std::nullopt;
  for (const auto& o : s.out_indices)
    if (o.has_div()) return std::nullopt;
  int64_t outputs = 1;
  const ir::IndexVar* r = nullptr;
  for (const auto& iv : s.domain) {
    if (!iv.is_reduction) outputs *= eval(iv.hi, k) - eval(iv.lo, k);
    else if (!r) r = &iv;  // the first reduced index: the outermost of the reference order
  }
  const int64_t lanes = m.vector_lanes(s.acc_type);
  // an output that fills a vector repeat on every core gives every core work already
  if (!r || eval(r->lo, k) != 0 || outputs >= int64_t(m.cores) * lanes) return std::nullopt;
  const int64_t extent = eval(r->hi, k);
  // The fewest parts that give every core a share of the partials (K x outputs >= cores): each core's
  // slice stays as long as it can be, in as few tiles; else the most parts up to the cores.
  int64_t parts = 1;
  for (int64_t d = 2; d <= std::min<int64_t>(extent, m.cores); ++d)
    if (extent % d == 0) {
      parts = d;
      if (d * outputs >= m.cores) break;
    }
  if (parts < 2) return std::nullopt;
  // The reduction's time on c cores: its reads at c cores' GM bandwidth (within the shared one)
  // after its vector work (one repeat per lanes_used elements, lanes_used: the widest read's last
  // dimension up to a repeat; a reduction's tiles load and then add, so the two add up).
  std::set<std::string> reads;
  read_tensors(*s.rhs, reads);
  int64_t bytes = 0, widest = 0, lanes_used = 1;
  for (const auto& name : reads)
    if (const ir::Tensor* t = k.function->find_tensor(name); t && !t->shape.empty()) {
      bytes += tensor_bytes(*t, k);
      if (tensor_bytes(*t, k) > widest) widest = tensor_bytes(*t, k), lanes_used = std::min(lanes, eval(t->shape.back(), k));
    }
  int64_t elements = 1;
  for (const auto& iv : s.domain) elements *= eval(iv.hi, k) - eval(iv.lo, k);
  const double core_bw = m.path(Buffer::GM, Buffer::UB).bandwidth_bytes_per_cycle;
  auto cycles = [&](double c) {
    return double(bytes) / std::min(c * core_bw, m.gm_shared_bandwidth_bytes_per_cycle) +
           double(elements) / (c * double(std::max<int64_t>(1, lanes_used)));
  };
  const double split_cores = double(std::min<int64_t>(parts * outputs, m.cores));
  const double overhead = m.cross_core_barrier_cycles + m.path(Buffer::GM, Buffer::UB).latency_cycles +
                          m.path(Buffer::UB, Buffer::GM).latency_cycles;
  if (split_cores < 2.0 * base_cores || cycles(base_cores) - cycles(split_cores) <= overhead) return std::nullopt;
  return Split{i, r->name, s.output + "_partial", parts, extent / parts};
}

ir::AffineExpr substitute(const ir::AffineExpr& e, const Split& sp, const std::string& kc, const std::string& rc) {
  auto it = e.index_coeffs.find(sp.index);
  if (it == e.index_coeffs.end()) return e;
  const int64_t a = it->second;
  ir::AffineExpr out = e;
  out.index_coeffs.erase(sp.index);
  return out + ir::AffineExpr::index(kc, a * sp.c) + ir::AffineExpr::index(rc, a);
}

ir::ExprPtr substitute(const ir::ExprPtr& e, const Split& sp, const std::string& kc, const std::string& rc) {
  auto out = std::make_shared<ir::Expr>(*e);
  if (out->kind == ir::ExprKind::IndexValue) out->affine = substitute(out->affine, sp, kc, rc);
  for (auto& i : out->indices) i = substitute(i, sp, kc, rc);
  for (auto& a : out->args) a = substitute(a, sp, kc, rc);
  return out;
}

// S: Y(o) op=! f(r)  ->  Y_partial(kc, o) op=! f(kc * C + rc)  and  Y(o) op=! Y_partial(kc, o).
std::pair<ir::Statement, ir::Statement> rewrite(const ir::Statement& s, const Split& sp) {
  const std::string kc = sp.index + "_core", rc = sp.index + "_part";
  ir::Statement partial = s;
  partial.name = s.name + "_partial";
  partial.output = sp.partial;
  partial.out_indices.insert(partial.out_indices.begin(), ir::AffineExpr::index(kc));
  partial.domain.clear();
  partial.domain.push_back({kc, ir::AffineExpr::constant_of(0), ir::AffineExpr::constant_of(sp.k), false});
  for (const auto& iv : s.domain)
    if (iv.name == sp.index) partial.domain.push_back({rc, ir::AffineExpr::constant_of(0), ir::AffineExpr::constant_of(sp.c), true});
    else partial.domain.push_back(iv);
  std::stable_partition(partial.domain.begin(), partial.domain.end(), [](const ir::IndexVar& v) { return !v.is_reduction; });
  partial.rhs = substitute(s.rhs, sp, kc, rc);

  ir::Statement combine = s;
  combine.name = s.name + "_combine";
  combine.domain.clear();
  for (const auto& iv : s.domain)
    if (!iv.is_reduction) combine.domain.push_back(iv);
  combine.domain.push_back({kc, ir::AffineExpr::constant_of(0), ir::AffineExpr::constant_of(sp.k), true});
  auto read = std::make_shared<ir::Expr>();
  read->kind = ir::ExprKind::Access;
  read->type = s.acc_type;
  read->name = sp.partial;
  read->indices = partial.out_indices;
  read->loc = s.loc;
  combine.rhs = read;
  return {partial, combine};
}

// The phases' functions: every tensor of the kernel and the partials. A partial runs in a phase of
// its own (so that its cores are its own: the reduced index's parts, not those of the statements
// before it); the combine opens the next phase with the statements after it whose outputs are no
// larger than its own (statistics: a mean from a sum), and the first larger one opens another
// (the normalisation, spread over its own cores rather than those of the few statistics).
std::vector<std::unique_ptr<ir::Function>> phase_functions(const kernel::Kernel& k, const std::vector<Split>& splits) {
  const ir::Function& f = *k.function;
  ir::Function base = f;
  base.statements.clear();
  for (const Split& sp : splits) {
    const ir::Tensor& out = *f.find_tensor(f.statements[sp.stmt].output);
    ir::Tensor p{sp.partial, f.statements[sp.stmt].acc_type, out.shape, ir::TensorKind::Local, out.loc};
    p.shape.insert(p.shape.begin(), ir::AffineExpr::constant_of(sp.k));
    base.tensors.push_back(p);
  }
  std::vector<std::unique_ptr<ir::Function>> phases;
  phases.push_back(std::make_unique<ir::Function>(base));
  int64_t statistics = -1;  // the outputs of the combine that opened this phase (-1: none)
  for (size_t i = 0, next = 0; i < f.statements.size(); ++i) {
    if (next < splits.size() && splits[next].stmt == i) {
      auto [partial, combine] = rewrite(f.statements[i], splits[next++]);
      if (!phases.back()->statements.empty()) phases.push_back(std::make_unique<ir::Function>(base));
      phases.back()->statements.push_back(partial);
      phases.push_back(std::make_unique<ir::Function>(base));
      phases.back()->statements.push_back(combine);
      statistics = outputs_of(combine, k);
      continue;
    }
    if (statistics >= 0 && outputs_of(f.statements[i], k) > statistics) {
      phases.push_back(std::make_unique<ir::Function>(base));
      statistics = -1;
    }
    phases.back()->statements.push_back(f.statements[i]);
  }
  return phases;
}

// A phase as a kernel: every tensor a GM tensor of the kernel (locals stored, so a later phase can
// read them), in one order for every phase so that they bind to the same offsets.
kernel::Kernel phase_kernel(const kernel::Kernel& k, const ir::Function& f) {
  kernel::Kernel out;
  out.name = k.name;
  out.function = &f;
  out.sizes = k.sizes;
  out.tensors = k.tensors;
  out.target = k.target;
  // a temporary is the kernel's own, kept in UB where the row pipeline reads it back; a phase's
  // temporaries are read by the next phases, from GM: stored as outputs of the phase
  for (kernel::GlobalTensor& t : out.tensors)
    if (t.temporary) t.temporary = false, t.kind = ir::TensorKind::Output;
  for (const ir::Tensor& t : f.tensors) {
    if (k.find_tensor(t.name)) continue;
    kernel::GlobalTensor g{t.name, t.dtype, {}, ir::TensorKind::Output, false, {}};
    for (const auto& d : t.shape) g.shape.push_back(eval(d, k));
    out.tensors.push_back(g);
  }
  return out;
}

// More parts where the partial alone, emitted, runs on more cores (the output's lanes are no
// cores: batch-norm's channels), up to every core; the fewest parts that reach the most cores.
void choose_parts(const kernel::Kernel& k, const isa::Hierarchy& target, Split& sp) {
  const isa::NpuMachine m = isa::npu_machine(target);
  const int64_t extent = sp.k * sp.c;
  int best_cores = 0;
  Split best = sp;
  for (int64_t d = sp.k; d <= std::min<int64_t>(extent, m.cores); ++d) {
    if (extent % d != 0) continue;
    Split trial = sp;
    trial.k = d, trial.c = extent / d;
    const auto functions = phase_functions(k, {trial});
    const ir::Function* f = nullptr;  // the partial's phase (it runs alone)
    for (const auto& g : functions)
      if (g->statements.size() == 1 && g->statements[0].output == sp.partial) f = g.get();
    if (!f) return;
    const kernel::Kernel pk = phase_kernel(k, *f);
    if (!why_not_nest(pk, m).empty()) continue;
    const int cores = emit_nest_phase(pk, target).program.cores;
    if (cores > best_cores) best_cores = cores, best = trial;
    if (cores >= m.cores) break;
  }
  sp = best;
}

// Phase code runs on cores [0, cores) of `total`: wrapped in a loop of one trip there, none elsewhere
// (the loop's counter and bound are read once, so the phase may reuse the registers).
void append_phase(npu::Program& out, const npu::Program& phase, int total) {
  const bool guard = phase.cores < total;
  if (guard) {
    out.add(Opcode::Slt, {Operand::reg_(30), Operand::reg_(npu::kRegCoreId), Operand::imm_(phase.cores)});
    out.add(Opcode::Loop, {Operand::reg_(31), Operand::imm_(0), Operand::reg_(30), Operand::imm_(1)});
  }
  out.code.insert(out.code.end(), phase.code.begin(), phase.code.end() - 1);  // without its pipe_barrier ALL
  if (guard) out.add(Opcode::EndLoop, {});
}

bool same_binding(const npu::Program& a, const npu::Program& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (a.tensors[i].name != b.tensors[i].name || a.tensors[i].gm_offset != b.tensors[i].gm_offset) return false;
  return true;
}

}  // namespace

std::optional<NpuKernel> emit_split_reductions(const kernel::Kernel& kernel, const isa::Hierarchy& target) {
  const isa::NpuMachine m = isa::npu_machine(target);
  if (!kernel.function || m.cores < 2) return std::nullopt;
  // A split that would not pay against one core pays against none: most kernels stop here, before
  // the kernel as one phase (the baseline a split must beat: its cores) is emitted.
  bool candidate = false;
  for (size_t i = 0; i < kernel.function->statements.size() && !candidate; ++i)
    candidate = plan_split(kernel, m, i, 1).has_value();
  if (!candidate || !why_not_nest(kernel, m).empty()) return std::nullopt;
  const NpuKernel whole = emit_nest_phase(kernel, target);
  std::vector<Split> splits;
  for (size_t i = 0; i < kernel.function->statements.size(); ++i)
    if (auto sp = plan_split(kernel, m, i, whole.program.cores)) {
      choose_parts(kernel, target, *sp);
      splits.push_back(*sp);
    }
  if (splits.empty()) return std::nullopt;
  const auto functions = phase_functions(kernel, splits);
  std::vector<NpuKernel> phases;
  for (const auto& f : functions) {
    const kernel::Kernel pk = phase_kernel(kernel, *f);
    if (!why_not_nest(pk, m).empty()) return std::nullopt;
    phases.push_back(emit_nest_phase(pk, target));
    if (!same_binding(phases.front().program, phases.back().program)) return std::nullopt;
  }
  // Only where the cores the partials run on are at least twice those of the kernel as one phase.
  for (size_t j = 0; j < phases.size(); ++j)
    if (functions[j]->statements.size() == 1 && functions[j]->statements[0].output.ends_with("_partial") &&
        phases[j].program.cores < 2 * whole.program.cores)
      return std::nullopt;

  NpuKernel out;
  npu::Program& p = out.program;
  p.source_name = phases.front().program.source_name;
  p.tensors = phases.front().program.tensors;
  for (auto& t : p.tensors)
    if (!kernel.find_tensor(t.name) || kernel.find_tensor(t.name)->temporary) t.role = npu::TensorRole::Scratch;
  for (const NpuKernel& ph : phases) p.cores = std::max(p.cores, ph.program.cores);
  int64_t scratch = 0;
  for (const Split& sp : splits) scratch += tensor_bytes(*functions.back()->find_tensor(sp.partial), kernel);
  for (size_t j = 0; j < phases.size(); ++j) {
    append_phase(p, phases[j].program, p.cores);
    if (j + 1 < phases.size()) p.add(Opcode::SyncAll, {});
    for (const std::string& n : phases[j].notes) out.notes.push_back(fmt::format("phase {}: {}", j, n));
  }
  p.add(Opcode::PipeBarrier, {Operand::pipe_(npu::Pipe::All)});
  std::string what;
  for (const Split& sp : splits)
    what += fmt::format("{}{} along {} over {} cores ({} each)", what.empty() ? "" : "; ",
                        kernel.function->statements[sp.stmt].output, sp.index, sp.k, sp.c);
  out.notes.push_back(fmt::format("reductions split over cores: {}; partials in GM scratch ({} bytes), {} sync_all, "
                                  "then combined ({} phases on {} cores)",
                                  what, scratch, phases.size() - 1, phases.size(), p.cores));
  npu::validate_program(p);
  return out;
}

}  // namespace tessel::emit_npu
