#include "compiler/emit_cuda/row_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/emit_simt.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

constexpr int kRowElements = 16;  // elements of a row per thread, at most (see analyze)
constexpr int kBlockThreads = 256;  // threads of a block when several rows share it (a choice, not hardware)

enum class Role { Matrix, Row, Col, Scalar };  // [M, N] at (row, col), [M] at row, [N] at col, []

struct StatementPlan {
  const ir::Statement* s = nullptr;
  Role out = Role::Matrix;  // Matrix: element-wise; Row: a reduction over `col` or a row scalar
  std::string row, col;     // the statement's row index; its col (Matrix) or reduced index ("": none)
};

struct TensorPlan {
  Role role = Role::Matrix;
  DType dtype = DType::F32;
  bool input = false, output = false;
  int producer = -1;  // statement index, -1 for an input
};

struct Analysis {
  RowKernelPlan plan;
  std::vector<StatementPlan> statements;
  std::map<std::string, TensorPlan> tensors;
};

// The name of `e` when it is a plain index (coefficient 1, nothing else), else "".
std::string index_name(const ir::AffineExpr& e) { return ir::plain_index(e).value_or(""); }

std::vector<int64_t> shape_of(const ir::Tensor& t, const std::map<std::string, int64_t>& sizes) {
  std::vector<int64_t> s;
  for (const auto& d : t.shape) s.push_back(d.evaluate({}, sizes));
  return s;
}

// Whether a dimension agrees with the one seen so far (the first one seen sets it).
bool agree(int64_t& v, int64_t x) {
  if (v < 0) v = x;
  return v == x;
}

// The rows M and columns N every statement of a row program shares (-1: not seen yet).
struct RowShape {
  int64_t M = -1, N = -1;
};

// The roles of statement i's reads, added to a.tensors: "" or the reason it is no row statement.
std::string plan_reads(const ir::Function& f, const kernel::Kernel& k, size_t i, const StatementPlan& sp, RowShape& rs, Analysis& a) {
  const ir::Statement& s = f.statements[i];
  std::string bad;
  ir::for_each_access(*s.rhs, [&](const ir::Expr& e) {
    if (!bad.empty()) return;
    const ir::Tensor* t = f.find_tensor(e.name);
    if (!t) {
      bad = "reads an unknown tensor " + e.name;
      return;
    }
    const auto shape = shape_of(*t, k.sizes);
    Role role;
    if (e.indices.size() == 2 && !sp.col.empty() && index_name(e.indices[0]) == sp.row && index_name(e.indices[1]) == sp.col &&
        shape[0] == rs.M && agree(rs.N, shape[1]))
      role = Role::Matrix;
    else if (e.indices.size() == 1 && index_name(e.indices[0]) == sp.row && shape[0] == rs.M)
      role = Role::Row;
    else if (e.indices.size() == 1 && !sp.col.empty() && index_name(e.indices[0]) == sp.col && agree(rs.N, shape[0]))
      role = Role::Col;
    else if (e.indices.empty() && shape.empty())
      role = Role::Scalar;
    else {
      bad = "reads " + e.name + " other than at its row, column or both";
      return;
    }
    auto [it, fresh] = a.tensors.emplace(e.name, TensorPlan{role, t->dtype, t->kind == ir::TensorKind::Input, false, -1});
    if (!fresh && it->second.role != role) bad = "reads " + e.name + " in two shapes";
    if (!fresh && it->second.producer == int(i)) bad = "reads its own output " + e.name;
    if (fresh && t->kind != ir::TensorKind::Input) bad = "reads " + e.name + " before a statement writes it";
  });
  return bad;
}

// Statement i as a row statement (element-wise over whole rows and columns, a reduction of a row
// over one index, or a row scalar), its reads and its output added to `a`; "" or the reason.
std::string plan_statement(const kernel::Kernel& k, size_t i, RowShape& rs, Analysis& a) {
  const ir::Function& f = *k.function;
  auto range = [&](const ir::IndexVar& v) { return std::make_pair(v.lo.evaluate({}, k.sizes), v.hi.evaluate({}, k.sizes)); };
  const ir::Statement& s = f.statements[i];
  const ir::Tensor* out = f.find_tensor(s.output);
  if (!out || !s.rhs) return "no output tensor";
  StatementPlan sp;
  sp.s = &s;
  const auto oshape = shape_of(*out, k.sizes);
  if (s.out_indices.empty() || s.out_indices.size() > 2) return "writes a tensor of rank other than 1 or 2";
  sp.row = index_name(s.out_indices[0]);
  const ir::IndexVar* rv = sp.row.empty() ? nullptr : s.find_index(sp.row);
  if (!rv || rv->is_reduction || range(*rv) != std::make_pair<int64_t, int64_t>(0, int64_t(oshape[0])) || !agree(rs.M, oshape[0]))
    return "does not write whole rows of " + s.output;
  std::vector<const ir::IndexVar*> reduced, others;
  for (const auto& v : s.domain)
    if (v.name != sp.row) (v.is_reduction ? reduced : others).push_back(&v);
  if (s.out_indices.size() == 2) {
    sp.out = Role::Matrix;
    sp.col = index_name(s.out_indices[1]);
    const ir::IndexVar* cv = sp.col.empty() ? nullptr : s.find_index(sp.col);
    if (s.reduction != ir::Reduction::None || !reduced.empty() || others.size() != 1 || !cv || cv != others[0] ||
        range(*cv) != std::make_pair<int64_t, int64_t>(0, int64_t(oshape[1])) || !agree(rs.N, oshape[1]))
      return "is not an element-wise statement over whole rows and columns of " + s.output;
  } else {
    sp.out = Role::Row;
    if (!others.empty()) return "has an index besides its row and one reduced index";
    if (s.reduction == ir::Reduction::None) {
      if (!reduced.empty()) return "reads an index it does not reduce";
    } else {
      if (reduced.size() != 1 || !s.init) return "is not a reduction over one index from its identity";
      if (ir::is_ordered_product(s))
        return "is a 16-bit product, which rounds at every step (its order is its value: one thread per row)";
      const auto [lo, hi] = range(*reduced[0]);
      if (lo != 0 || !agree(rs.N, hi)) return "does not reduce over a whole row";
      sp.col = reduced[0]->name;
    }
  }
  if (std::string bad = plan_reads(f, k, i, sp, rs, a); !bad.empty()) return bad;
  auto [it, fresh] = a.tensors.emplace(s.output, TensorPlan{sp.out, out->dtype, false, out->kind == ir::TensorKind::Output, int(i)});
  if (!fresh) return "writes " + s.output + " a second time";
  a.statements.push_back(sp);
  return "";
}

// The layout for at most E elements of a row per thread: T the smallest power of two from a warp
// that achieves it (at most the block limit); the widest vector dividing N, narrowed while a
// narrower one makes every slot whole. Returns the registers (4 bytes) its matrix and column
// tensors take per thread.
int64_t row_layout(const Analysis& a, const RowKernelPlan& p, int min_bytes, int E, RowKernelPlan& q) {
  const int64_t N = p.cols;
  q.threads_per_row = p.warp_size;
  while ((N + q.threads_per_row - 1) / q.threads_per_row > E && q.threads_per_row < p.max_threads) q.threads_per_row *= 2;
  q.rows_per_block = std::max(1, kBlockThreads / q.threads_per_row);
  q.vec = p.vector_bytes / min_bytes;
  while (q.vec > 1 && N % q.vec != 0) q.vec /= 2;
  while (q.vec > 2 && N % (int64_t(q.threads_per_row) * q.vec) != 0 && N % (int64_t(q.threads_per_row) * (q.vec / 2)) == 0) q.vec /= 2;
  q.slots = int((N + int64_t(q.threads_per_row) * q.vec - 1) / (int64_t(q.threads_per_row) * q.vec));
  int64_t bytes = 0;
  for (const auto& [name, t] : a.tensors)
    if (t.role == Role::Matrix || t.role == Role::Col) bytes += int64_t(q.slots) * q.vec * dtype_bytes(t.dtype);
  return bytes / 4;
}

// `machine`: sm_count, warp_size, max_threads and vector_bytes of the plan are read (the rest is set here)
std::optional<Analysis> analyze(const kernel::Kernel& k, const RowKernelPlan& machine, std::string* why) {
  const uint32_t sms = machine.sm_count;
  auto no = [&](const std::string& reason) -> std::optional<Analysis> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (!k.function) return no("no tensor function");
  if (k.user_tile) return no("a tile spec was given (the loop tree's mapping is kept)");
  const ir::Function& f = *k.function;
  if (!ir::division_use(f).empty()) return no("floor division or modulo in the function");
  Analysis a;
  RowShape rs;
  for (size_t i = 0; i < f.statements.size(); ++i)
    if (std::string bad = plan_statement(k, i, rs, a); !bad.empty()) return no(f.statements[i].name + ": " + bad);
  const int64_t M = rs.M, N = rs.N;
  if (M < 1 || N < 1) return no("no row of columns (every statement writes a row tensor)");
  int min_bytes = 4, matrix_tensors = 0;
  for (const auto& [name, t] : a.tensors) {
    if (t.dtype != DType::F16 && t.dtype != DType::F32) return no(name + " is " + std::string(dtype_name(t.dtype)) + " (f16 and f32 only)");
    if (t.role == Role::Matrix || t.role == Role::Col) {
      min_bytes = std::min(min_bytes, dtype_bytes(t.dtype));
      ++matrix_tensors;
    }
  }
  RowKernelPlan& p = a.plan;
  p.sm_count = machine.sm_count;
  p.warp_size = machine.warp_size;
  p.max_threads = machine.max_threads;
  p.vector_bytes = machine.vector_bytes;
  p.rows = M;
  p.cols = N;
  // Elements per thread (measured on an H200, docs/results/row_kernel_elements_h200.txt): 16, or 32
  // for a program with a row reduction whose registers stay within 64 at 32 (a warp per row for
  // rows up to 1024: no block barrier in its reductions); halved down to 8 while the rows do not
  // give every SM a block's worth of threads.
  bool reduces = false;
  for (const auto& sp : a.statements) reduces = reduces || sp.s->reduction != ir::Reduction::None;
  int E = kRowElements;
  RowKernelPlan probe;
  if (reduces && row_layout(a, p, min_bytes, 32, probe) <= 64) E = 32;
  while (sms > 0 && E > 8 && (row_layout(a, p, min_bytes, E, probe), M * probe.threads_per_row < int64_t(sms) * kBlockThreads)) E /= 2;
  const int64_t registers = row_layout(a, p, min_bytes, E, p);
  // a block per row (T >= 256) with a row reduction: its barriers leave the loads idle, so a capped
  // grid walks rows with the next one prefetched (H200, docs/results/row_kernel_elements_h200.txt:
  // layer norm 4096x3072 18.05 -> 13.00 us; the same for softmax, with two rows per block, or for
  // bias + GELU, with no barrier, is slower)
  if (reduces && p.rows_per_block == 1) {
    p.prefetch = true;
    p.blocks_per_sm = 4;
  }
  if ((N + p.threads_per_row - 1) / p.threads_per_row > std::max(E, 32))
    return no(fmt::format("rows of {} elements exceed {} per thread at {} threads", N, std::max(E, 32), p.max_threads));
  if (registers > 160)
    return no(fmt::format("{} matrix tensors of {} elements per thread need {} registers", matrix_tensors, p.slots * p.vec, registers));
  p.explain = fmt::format(
      "SIMT row kernel: {} statements on rows of {} elements held in registers, {} threads per row ({} row(s) per block, {} x {} "
      "elements per thread, {}-element vector loads and stores), {} rows{}",
      a.statements.size(), N, p.threads_per_row, p.rows_per_block, p.slots, p.vec, p.vec, M,
      p.prefetch ? fmt::format("; at most {} blocks per SM, the next row prefetched", p.blocks_per_sm) : "");
  return a;
}

// A vector of `n` elements of `t` between a register array and global memory, as 16-, 8-, 4- or
// 2-byte accesses (element by element below that).
std::string move_vector(DType t, int n, const std::string& reg, const std::string& global, bool load, const std::string& pad) {
  const int bytes = n * dtype_bytes(t), step = std::min(bytes, 16);
  const char* word = step == 16 ? "uint4" : step == 8 ? "uint2" : step == 4 ? "unsigned int" : step == 2 ? "unsigned short" : nullptr;
  std::string s;
  if (!word || bytes % step != 0) {
    for (int v = 0; v < n; ++v)
      s += pad + (load ? reg + "[" + std::to_string(v) + "] = " + global + "[" + std::to_string(v) + "];\n"
                       : global + "[" + std::to_string(v) + "] = " + reg + "[" + std::to_string(v) + "];\n");
    return s;
  }
  const int per = step / dtype_bytes(t);
  for (int q = 0; q < bytes / step; ++q) {
    const std::string r = "*(" + std::string(word) + "*)&" + reg + "[" + std::to_string(q * per) + "]";
    const std::string g = "*(" + std::string(load ? "const " : "") + word + "*)&" + global + "[" + std::to_string(q * per) + "]";
    s += pad + (load ? r + " = " + g : g + " = " + r) + ";\n";
  }
  return s;
}

// The printer of one row kernel: the plan's layout (T threads per row, R rows per block, V-element
// vectors in J slots per thread, warps of W) over the analysis's statements and tensors.
struct RowKernelPrinter {
  const kernel::Kernel& k;
  const RowKernelPlan& plan;
  const Analysis& a;
  std::ostringstream& os;
  const int T = plan.threads_per_row, R = plan.rows_per_block, V = plan.vec, J = plan.slots, W = plan.warp_size;
  const std::string M = std::to_string(plan.rows) + "LL", N = std::to_string(plan.cols) + "LL";
  const std::string slot_loop = "    #pragma unroll\n    for (int j_ = 0; j_ < " + std::to_string(J) +
                                "; ++j_) {\n      const long long col0_ = ((long long)j_ * " + std::to_string(T) + " + lane_) * " +
                                std::to_string(V) + ";\n";

  static std::string reg(const std::string& name, Role r) { return (r == Role::Matrix ? "m_" : r == Role::Col ? "c_" : "s_") + name; }

  // a matrix input's row `row` (guarded by `ok`) into register array `r`
  std::string load_matrix(const std::string& name, const TensorPlan& t, const std::string& r, const std::string& row,
                          const std::string& ok) const {
    const std::string g = "t_" + name + "[" + (t.role == Role::Matrix ? row + " * " + N + " + " : std::string()) + "col0_]";
    return slot_loop + "      if (" + ok + "col0_ < " + N + ") {\n" +
           move_vector(t.dtype, V, "(&" + r + "[j_ * " + std::to_string(V) + "])", "(&" + g + ")", true, "        ") +
           "      } else {\n" + "        for (int v_ = 0; v_ < " + std::to_string(V) + "; ++v_) " + r + "[j_ * " + std::to_string(V) +
           " + v_] = " + store_value(t.dtype, "0") + ";\n" + "      }\n    }\n";
  }

  // Whether a statement reduces in f64 (red_ then holds doubles: a warp's partial in double).
  bool f64_reductions() const {
    for (const ir::Statement& s : k.function->statements)
      if (s.reduction != ir::Reduction::None && s.acc_type == DType::F64) return true;
    return false;
  }

  // The kernel's head: loop-invariant inputs (column vectors, scalars) once per block, and with
  // prefetch the block's first row of each matrix input; then the loop over rows opens.
  void head() {
    const int block = T * R;
    os << "\n/* " << plan.explain << " */\n"
       << "extern \"C\" __global__ void __launch_bounds__(" << block << ") tessel_row_g0(" << kernel_parameters(k) << ") {\n"
       << "  __shared__ " << (f64_reductions() ? "double" : "float") << " red_[" << std::max(1, block / W) << "];\n"
       << "  (void)red_;\n"
       << "  const int lane_ = threadIdx.x % " << T << ", grp_ = threadIdx.x / " << T << ";\n";
    for (const auto& [name, t] : a.tensors) {
      if (!t.input || (t.role != Role::Col && t.role != Role::Scalar)) continue;
      const std::string st = storage_type(t.dtype), r = reg(name, t.role);
      if (t.role == Role::Col) {
        os << "  " << st << " " << r << "[" << J * V << "];\n  {\n" << load_matrix(name, t, r, "", "") << "  }\n";
      } else {
        os << "  const " << st << " " << r << " = t_" << name << "[0];\n";
      }
    }
    if (plan.prefetch)
      for (const auto& [name, t] : a.tensors)
        if (t.input && t.role == Role::Matrix) {
          const std::string st = storage_type(t.dtype);
          os << "  " << st << " n_" << name << "[" << J * V << "];\n  {\n    const long long first_ = (long long)blockIdx.x * " << R
             << " + grp_;\n"
             << load_matrix(name, t, "n_" + name, "first_", "first_ < " + M + " && ") << "  }\n";
        }
    os << "  for (long long base_ = (long long)blockIdx.x * " << R << "; base_ < " << M << "; base_ += (long long)gridDim.x * " << R
       << ") {\n"
       << "    const long long row_ = base_ + grp_;\n"
       << "    const bool valid_ = row_ < " << M << ";\n";
  }

  // per-row registers and loads (with prefetch: the prefetched row, and the next one fetched)
  void row_registers() {
    for (const auto& [name, t] : a.tensors) {
      if (t.input && (t.role == Role::Col || t.role == Role::Scalar)) continue;
      const std::string st = storage_type(t.dtype), r = reg(name, t.role);
      if (t.role == Role::Matrix || t.role == Role::Col)
        os << "    " << st << " " << r << "[" << J * V << "];\n";
      else
        os << "    " << st << " " << r << ";\n";
      if (!t.input) continue;
      if (t.role == Role::Matrix) {
        if (plan.prefetch) {
          os << "    #pragma unroll\n    for (int i_ = 0; i_ < " << J * V << "; ++i_) " << r << "[i_] = n_" << name << "[i_];\n"
             << "    {\n      const long long next_ = row_ + (long long)gridDim.x * " << R << ";\n"
             << load_matrix(name, t, "n_" + name, "next_", "next_ < " + M + " && ") << "    }\n";
        } else {
          os << load_matrix(name, t, r, "row_", "valid_ && ");
        }
      } else if (t.role == Role::Row) {
        os << "    " << r << " = valid_ ? t_" << name << "[row_] : " << store_value(t.dtype, "0") << ";\n";
      }
    }
  }

  // A statement's right-hand side for element v_ of slot j_ of the row. An f32 division by a row
  // value (reads of row tensors, sizes, constants, the row index) is a multiplication by its
  // reciprocal, computed once per row into `reciprocals`: a correctly rounded division per element
  // costs more issue slots than a memory-bound row kernel has (softmax's E / Den). The product is
  // within 1.5 ulp of f32 of the quotient (row_kernel.h).
  std::string statement_value(const StatementPlan& sp, std::ostringstream& reciprocals) const {
    const ir::Statement& s = *sp.s;
    ValueContext ctx;
    ctx.sizes = &k.sizes;
    ctx.access = [&](const ir::Expr& e) {
      const TensorPlan& t = a.tensors.at(e.name);
      const std::string r = reg(e.name, t.role);
      return t.role == Role::Matrix || t.role == Role::Col ? r + "[j_ * " + std::to_string(V) + " + v_]" : r;
    };
    ctx.affine = [&](const ir::AffineExpr& e) {
      std::string s_ = "(" + std::to_string(e.constant) + "LL";
      for (const auto& [n, c] : e.index_coeffs)
        s_ += " + " + std::to_string(c) + "LL * " + (n == sp.row ? std::string("row_") : "(col0_ + v_)");
      for (const auto& [n, c] : e.param_coeffs) s_ += " + " + std::to_string(c * k.sizes.at(n)) + "LL";
      return s_ + ")";
    };
    int n_rcp = 0;
    std::function<bool(const ir::Expr&)> row_value = [&](const ir::Expr& e) {
      if (e.kind == ir::ExprKind::Access) return a.tensors.count(e.name) && a.tensors.at(e.name).role == Role::Row;
      if (e.kind == ir::ExprKind::IndexValue) {
        for (const auto& [n, c] : e.affine.index_coeffs)
          if (n != sp.row) return false;
        return true;
      }
      for (const auto& x : e.args)
        if (!row_value(*x)) return false;
      return true;
    };
    ctx.replace = [&](const ir::Expr& e) -> std::optional<std::string> {
      if (e.kind != ir::ExprKind::Apply || e.op != ir::Op::Div || e.type != DType::F32 || e.args.size() != 2 || !row_value(*e.args[1]) ||
          row_value(*e.args[0]))
        return std::nullopt;
      // named by statement too: every statement's reciprocals share the kernel's scope (issue 31)
      const std::string r = "rcp" + s.name + "_" + std::to_string(n_rcp++) + "_";
      reciprocals << "    const float " << r << " = 1.0f / (float)(" << value_expr(*e.args[1], ctx) << ");\n";
      return "((float)(" + value_expr(*e.args[0], ctx) + ") * " + r + ")";
    };
    return value_expr(*s.rhs, ctx);
  }

  // A row reduction of `value` into `target`: each lane over its slots, then the lanes by xor
  // shuffles, then (a row wider than a warp) the row's warps through red_.
  void row_reduction(const ir::Statement& s, DType T_out, const std::string& value, const std::string& target) {
    const std::string VT = value_type(T_out);
    const std::string op = reduce_values(s.reduction, T_out, "acc_", "x_");
    os << "    {\n      " << VT << " acc_ = " << reduction_identity(s.reduction, T_out) << ";\n"
       << slot_loop << "      if (col0_ < " << N << ") {\n"
       << "        #pragma unroll\n        for (int v_ = 0; v_ < " << V << "; ++v_) { const " << VT << " x_ = (" << VT << ")" << value
       << "; acc_ = " << op << "; }\n"
       << "      }\n    }\n"
       << "      for (int o_ = " << W / 2 << "; o_ > 0; o_ >>= 1) { const " << VT << " x_ = __shfl_xor_sync(0xffffffffu, acc_, o_); acc_ = " << op
       << "; }\n";
    if (T == W) {
      os << "      acc_ = __shfl_sync(0xffffffffu, acc_, 0);  /* every lane uses lane 0's value */\n";
    } else {
      os << "      __syncthreads();\n"
         << "      if (threadIdx.x % " << W << " == 0) red_[threadIdx.x / " << W << "] = acc_;\n"
         << "      __syncthreads();\n"
         << "      acc_ = red_[grp_ * " << T / W << "];\n"
         << "      for (int w_ = 1; w_ < " << T / W << "; ++w_) { const " << VT << " x_ = red_[grp_ * " << T / W << " + w_]; acc_ = "
         << op << "; }\n";
    }
    os << "      " << target << " = " << store_value(T_out, "acc_") << ";\n    }\n";
  }

  // One statement: its matrix elements slot by slot (stored where an output), or its row value.
  void statement(const StatementPlan& sp) {
    const ir::Statement& s = *sp.s;
    const TensorPlan& out = a.tensors.at(s.output);
    const DType T_out = out.dtype;
    std::ostringstream reciprocals;
    const std::string value = statement_value(sp, reciprocals);
    const std::string VT = value_type(T_out);
    const std::string target = reg(s.output, sp.out);
    os << "    /* " << s.name << ": " << s.output << " */\n" << reciprocals.str();
    if (sp.out == Role::Matrix) {
      os << slot_loop << "      if (col0_ < " << N << ") {\n"
         << "        #pragma unroll\n        for (int v_ = 0; v_ < " << V << "; ++v_) " << target << "[j_ * " << V << " + v_] = "
         << store_value(T_out, "(" + VT + ")" + value) << ";\n"
         << "      }\n    }\n";
      if (out.output)
        os << slot_loop << "      if (valid_ && col0_ < " << N << ") {\n"
           << move_vector(T_out, V, "(&" + target + "[j_ * " + std::to_string(V) + "])", "(&t_" + s.output + "[row_ * " + N + " + col0_])", false,
                          "        ")
           << "      }\n    }\n";
      return;
    }
    if (s.reduction == ir::Reduction::None)
      os << "    " << target << " = " << store_value(T_out, "(" + VT + ")" + value) << ";\n";
    else
      row_reduction(s, T_out, value, target);
    if (out.output) os << "    if (valid_ && lane_ == 0) t_" << s.output << "[row_] = " << target << ";\n";
  }
};

}  // namespace

std::optional<RowKernelPlan> plan_row_kernel(const kernel::Kernel& k, const isa::GpuMachine& m, std::string* why_not) {
  if (m.warp_size != 32) {  // the full-warp shuffle masks (0xffffffff) are written for 32 lanes
    if (why_not) *why_not = "row kernels are written for 32-lane warps (the description's warp_size is " + std::to_string(m.warp_size) + ")";
    return std::nullopt;
  }
  RowKernelPlan machine;
  machine.sm_count = m.sm_count;
  machine.warp_size = int(m.warp_size);
  machine.max_threads = int(m.max_threads_per_block);
  machine.vector_bytes = int(m.vector_access_bytes);
  auto a = analyze(k, machine, why_not);
  if (!a) return std::nullopt;
  return a->plan;
}

void emit_row_kernel(const kernel::Kernel& k, const RowKernelPlan& plan, std::ostringstream& os, std::vector<Launch>& launches) {
  std::string why;
  RowKernelPlan machine = plan;
  machine.sm_count = 0;  // the statements' analysis only: the layout is the plan's
  const auto analysis = analyze(k, machine, &why);
  TESSEL_CHECK(analysis, "emit_row_kernel: not a row program: " + why);
  RowKernelPrinter printer{k, plan, *analysis, os};
  printer.head();
  printer.row_registers();
  for (const StatementPlan& sp : analysis->statements) printer.statement(sp);
  os << "  }\n}\n";
  const int R = plan.rows_per_block;
  Launch l;
  l.kernel = "tessel_row_g0";
  int64_t blocks = (plan.rows + R - 1) / R;
  if (plan.blocks_per_sm > 0 && plan.sm_count > 0) blocks = std::min<int64_t>(blocks, int64_t(plan.blocks_per_sm) * plan.sm_count);
  l.grid[0] = unsigned(std::min<int64_t>(blocks, int64_t(1) << 30));
  l.block = unsigned(plan.threads_per_row * R);
  launches.push_back(l);
}

}  // namespace tessel::emit_cuda
