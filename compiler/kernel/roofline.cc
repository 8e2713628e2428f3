#include "compiler/kernel/roofline.h"
#include "compiler/kernel/gather_form.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "isa/base/error.h"

namespace tessel::kernel {
namespace {

using ir::ExprKind;
using ir::Op;

const ir::Expr* strip_casts(const ir::Expr* e) {
  while (e->kind == ExprKind::Apply && e->op == Op::Cast) e = e->args[0].get();
  return e;
}

// The operand dtype of `C +=! a * b` with a and b each a tensor read (through casts) of one dtype.
std::optional<DType> contraction_operand_dtype(const ir::Statement& s) {
  if (s.reduction != ir::Reduction::Sum) return std::nullopt;
  const ir::Expr& rhs = *s.rhs;
  if (rhs.kind != ExprKind::Apply || rhs.op != Op::Mul || rhs.args.size() != 2) return std::nullopt;
  const ir::Expr* a = strip_casts(rhs.args[0].get());
  const ir::Expr* b = strip_casts(rhs.args[1].get());
  if (a->kind != ExprKind::Access || b->kind != ExprKind::Access || a->type != b->type) return std::nullopt;
  return a->type;
}

// The context of a fused attention kernel (Kernel::attention: `O +=! E * f32(V)`, E in f32 or
// rounded): a contraction in V's dtype, since the fused kernel rounds the probabilities to it for
// the matrix unit (compiler/emit_npu/attention.h).
std::optional<DType> attention_context_dtype(const Kernel& k, const ir::Statement& s) {
  if (!k.attention || s.reduction != ir::Reduction::Sum) return std::nullopt;
  const ir::Expr& rhs = *s.rhs;
  if (rhs.kind != ExprKind::Apply || rhs.op != Op::Mul || rhs.args.size() != 2) return std::nullopt;
  const ir::Expr* a = strip_casts(rhs.args[0].get());
  const ir::Expr* b = strip_casts(rhs.args[1].get());
  if (a->kind != ExprKind::Access || b->kind != ExprKind::Access) return std::nullopt;
  if (a->name != k.attention->v.tensor && b->name != k.attention->v.tensor) return std::nullopt;
  return k.attention->v.dtype;
}

bool is_condition_op(Op op) {
  switch (op) {
    case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::Eq: case Op::Ne:
    case Op::And: case Op::Or: case Op::Not:
      return true;
    default:
      return false;
  }
}

// The widest dtype among an operation's result and operands (a condition: its operands'; a
// select: its two values').
int operation_bytes(const ir::Expr& e) {
  int bytes = is_condition_op(e.op) ? 0 : dtype_bytes(e.type);
  for (size_t i = e.op == Op::Select ? 1 : 0; i < e.args.size(); ++i) bytes = std::max(bytes, dtype_bytes(e.args[i]->type));
  return bytes;
}

struct Domain {
  uint64_t points = 1;
  std::string signature;  // "m[0,4096) n[0,1024)": operations over equal domains may be shared
};

Domain domain_of(const ir::Statement& s, const std::map<std::string, int64_t>& sizes) {
  Domain d;
  std::vector<std::string> parts;
  for (const ir::IndexVar& v : s.domain) {
    const int64_t lo = v.lo.evaluate({}, sizes), hi = v.hi.evaluate({}, sizes);
    d.points *= uint64_t(std::max<int64_t>(0, hi - lo));
    parts.push_back(v.name + "[" + std::to_string(lo) + "," + std::to_string(hi) + ")");
  }
  std::sort(parts.begin(), parts.end());
  for (const std::string& p : parts) d.signature += p + " ";
  return d;
}

// Counts each operator node of `e` not yet computed over the same domain (its text is the key).
class OperationCounter {
 public:
  OperationCounter(KernelWork& work, const VectorOpCost& cost) : work_(work), cost_(cost) {}
  void count(const ir::Expr& e, const Domain& d) {
    if (e.kind != ExprKind::Apply) return;
    if (!seen_.insert(d.signature + "|" + ir::to_string(e)).second) return;
    add(d.points * uint64_t(cost_ ? std::max(1, cost_(e)) : 1), operation_bytes(e));
    for (const ir::ExprPtr& arg : e.args) count(*arg, d);
  }
  void add(uint64_t operations, int bytes) {
    work_.vector_ops += operations;
    work_.vector_op_bytes += double(operations) * bytes;
  }

 private:
  KernelWork& work_;
  const VectorOpCost& cost_;
  std::set<std::string> seen_;
};

uint64_t tensor_bytes(const GlobalTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) n *= uint64_t(d);
  return n * uint64_t(dtype_bytes(t.dtype));
}

double min_gm_path_latency(const isa::NpuMachine& m, bool out_of_gm) {
  double best = std::numeric_limits<double>::infinity();
  for (int b = 0; b < npu::kBufferCount; ++b) {
    if (b == static_cast<int>(npu::Buffer::GM)) continue;
    const isa::NpuPathSpec& p = out_of_gm ? m.path(npu::Buffer::GM, npu::Buffer(b)) : m.path(npu::Buffer(b), npu::Buffer::GM);
    if (p.exists) best = std::min(best, double(p.latency_cycles));
  }
  return std::isinf(best) ? 0 : best;
}

double max_gm_path_bandwidth(const isa::NpuMachine& m, bool out_of_gm) {
  double best = 0;
  for (int b = 0; b < npu::kBufferCount; ++b) {
    if (b == static_cast<int>(npu::Buffer::GM)) continue;
    const isa::NpuPathSpec& p = out_of_gm ? m.path(npu::Buffer::GM, npu::Buffer(b)) : m.path(npu::Buffer(b), npu::Buffer::GM);
    if (p.exists) best = std::max(best, p.bandwidth_bytes_per_cycle);
  }
  return best;
}

// Bytes over a bandwidth; no bandwidth in the description means no bound from it.
double transfer_cycles(double bytes, double bytes_per_cycle) { return bytes_per_cycle > 0 ? bytes / bytes_per_cycle : 0; }

// Splits the contractions between the cube (a shape for their operand dtype) and the vector unit
// (a multiply and an add per MAC, at the accumulator's width, f32 for floats, i32 for integers).
void place_contractions(const KernelWork& w, const isa::NpuMachine& m, NpuRoofline& r) {
  for (const auto& [dtype, macs] : w.contraction_macs) {
    const isa::CubeShape& s = m.cube(dtype);
    if (s.exists && s.a == dtype) {
      const double per_cycle = double(m.cores) * s.m0 * s.n0 * s.k0 / s.cycles;
      r.cube_macs += macs;
      r.cube_cycles += double(macs) / per_cycle;
      continue;
    }
    r.vector_ops += 2 * macs;
    r.vector_op_bytes += 2.0 * double(macs) * std::max(4, dtype_bytes(dtype));
  }
}

}  // namespace

uint64_t KernelWork::macs() const {
  uint64_t n = 0;
  for (const auto& [dtype, macs] : contraction_macs) n += macs;
  return n;
}

KernelWork count_work(const Kernel& k, const VectorOpCost& cost) {
  TESSEL_CHECK(k.function != nullptr, "roofline: the kernel has no tensor-IR function (build_kernel sets it)");
  KernelWork w;
  GatherForm gather;
  if (why_not_gather_form(k, gather).empty()) {  // moving the selected rows: no element operations
    for (const GlobalTensor* t : {gather.I, gather.Y})
      if (!t->temporary) (t == gather.Y ? w.gm_write_bytes : w.gm_read_bytes) += tensor_bytes(*t);
    if (!gather.X->temporary) w.gm_read_bytes += uint64_t(std::min(gather.rows, gather.D) * gather.row_bytes);
    return w;
  }
  std::set<int> inlined;
  if (k.contraction) inlined.insert(k.contraction->inlined.begin(), k.contraction->inlined.end());
  OperationCounter ops(w, cost);
  const auto& statements = k.function->statements;
  for (size_t i = 0; i < statements.size(); ++i) {
    if (inlined.count(int(i))) continue;
    const ir::Statement& s = statements[i];
    const Domain d = domain_of(s, k.sizes);
    if (const auto dtype = contraction_operand_dtype(s) ? contraction_operand_dtype(s) : attention_context_dtype(k, s)) {
      w.contraction_macs[*dtype] += d.points;
      continue;
    }
    ops.count(*s.rhs, d);
    if (s.reduction != ir::Reduction::None) ops.add(d.points, std::max(dtype_bytes(s.acc_type), dtype_bytes(s.rhs->type)));
  }
  for (const GlobalTensor& t : k.tensors) {
    if (t.temporary) continue;
    if (t.kind == ir::TensorKind::Input) w.gm_read_bytes += tensor_bytes(t);
    if (t.kind == ir::TensorKind::Output) w.gm_write_bytes += tensor_bytes(t);
  }
  return w;
}

const char* roofline_bound_name(RooflineBound b) {
  static constexpr const char* kNames[] = {
#define TESSEL_X(e, s) s,
      TESSEL_ROOFLINE_BOUNDS(TESSEL_X)
#undef TESSEL_X
  };
  return kNames[static_cast<size_t>(b)];
}

std::optional<RooflineBound> parse_roofline_bound(const std::string& name) {
  for (int b = 0; b <= static_cast<int>(RooflineBound::Latency); ++b)
    if (name == roofline_bound_name(static_cast<RooflineBound>(b))) return static_cast<RooflineBound>(b);
  return std::nullopt;
}

double NpuRoofline::fraction_of(uint64_t measured_cycles) const {
  return measured_cycles ? cycles / double(measured_cycles) : 0.0;
}

NpuRoofline npu_roofline(const KernelWork& w, const isa::NpuMachine& m) {
  NpuRoofline r;
  r.work = w;
  r.cores = m.cores;
  r.vector_ops = w.vector_ops;
  r.vector_op_bytes = w.vector_op_bytes;
  place_contractions(w, m, r);
  const double cores = double(std::max(1, m.cores));
  r.vector_cycles = transfer_cycles(r.vector_op_bytes, cores * m.vector_bytes_per_repeat);
  if (m.vector_max_repeat > 0)
    r.scalar_cycles = std::ceil(r.vector_cycles / m.vector_max_repeat) * m.scalar_cycles;
  const double read = double(w.gm_read_bytes), written = double(w.gm_write_bytes);
  r.gm_cycles = std::max({transfer_cycles(read + written, m.gm_shared_bandwidth_bytes_per_cycle),
                          transfer_cycles(read, cores * max_gm_path_bandwidth(m, true)),
                          transfer_cycles(written, cores * max_gm_path_bandwidth(m, false))});
  r.latency_cycles = min_gm_path_latency(m, true) + min_gm_path_latency(m, false);
  if (r.cube_macs) r.latency_cycles += m.cube_startup_cycles;
  if (r.vector_ops) r.latency_cycles += m.vector_startup_cycles;
  const std::array<std::pair<double, RooflineBound>, 4> throughput = {
      {{r.cube_cycles, RooflineBound::Cube}, {r.vector_cycles, RooflineBound::Vector},
       {r.scalar_cycles, RooflineBound::Scalar}, {r.gm_cycles, RooflineBound::GM}}};
  const auto widest = *std::max_element(throughput.begin(), throughput.end(),
                                        [](const auto& a, const auto& b) { return a.first < b.first; });
  r.cycles = widest.first + r.latency_cycles;
  r.binds = r.latency_cycles > widest.first ? RooflineBound::Latency : widest.second;
  return r;
}

}  // namespace tessel::kernel
