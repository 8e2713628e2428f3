#include "compiler/emit_cuda/epilogue.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/emit_cuda/launch_builder.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// plain output, m16n8 accumulator layout (mma.sync, wgmma): 64-bit stores, optionally evict-first
void direct_mma_store(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  t.explain.push_back("  accumulators stored straight to global memory (64-bit stores, no epilogue)");
  os << "  " << t.acct << "* out_ = t_" << t.anchor.output << " + (long long)blockIdx.z * " << t.M * t.N << "LL;\n";
  os << "  #pragma unroll\n  for (int i = 0; i < " << t.fmx << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << t.fn8 << "; ++j) {\n";
  os << "      const int row_ = m0_ + wm_ + i * " << t.rstep << " + lane_ / 4, col_ = n0_ + wn_ + j * 8 + (lane_ % 4) * 2;\n";
  os << "      if (col_ < " << t.N << ") {\n";
  // stream_out: evict-first stores (st.global.cs), so the output does not push the operands out of L2
  const std::string st0 = cfg.store == OutputStore::evict_first ? "__stcs((float2*)(out_ + (long long)row_ * " + S(t.N) + " + col_), " : "*(float2*)(out_ + (long long)row_ * " + S(t.N) + " + col_) = (";
  const std::string st1 = cfg.store == OutputStore::evict_first ? "__stcs((float2*)(out_ + (long long)(row_ + 8) * " + S(t.N) + " + col_), " : "*(float2*)(out_ + (long long)(row_ + 8) * " + S(t.N) + " + col_) = (";
  os << "        if (row_ < " << t.M << ") " << st0 << "make_float2(acc_[i][j][0], acc_[i][j][1]));\n";
  os << "        if (row_ + 8 < " << t.M << ") " << st1 << "make_float2(acc_[i][j][2], acc_[i][j][3]));\n";
  os << "      }\n    }\n}\n";
}

// plain output, WMMA fragments: store_matrix_sync straight to global memory
void direct_wmma_store(const TcKernel& t) {
  auto& os = t.os;
  // no epilogue, dense [batch.., M, N] output: fragments go straight to global memory
  t.explain.push_back("  accumulators stored straight to global memory (store_matrix_sync, no epilogue)");
  os << "  " << t.acct << "* out_ = t_" << t.anchor.output << " + (long long)blockIdx.z * " << t.M * t.N << "LL;\n";
  os << "  #pragma unroll\n  for (int i = 0; i < " << t.fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << t.fn << "; ++j) {\n";
  os << "      const int row_ = m0_ + wm_ + i * " << t.m.wmma.m << ", col_ = n0_ + wn_ + j * " << t.m.wmma.n << ";\n";
  os << "      if (row_ < " << t.M << " && col_ < " << t.N << ") wmma::store_matrix_sync(out_ + (long long)row_ * " << t.N
     << " + col_, acc_[i][j], " << t.N << ", wmma::mem_row_major);\n    }\n}\n";
}

// accumulators -> shared memory, one tile per K slice of the block
void stage_accumulators(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  // epilogue: accumulators -> shared (one tile per K slice) -> element-wise statements -> global
  os << "  tessel_cp_wait<0>();\n  __syncthreads();\n";
  os << "  " << t.acct << "* cs_ = (" << t.acct << "*)smem_ + ks_ * " << cfg.bm * t.ldc << ";\n";
  if (t.mma) {
    os << "  #pragma unroll\n  for (int i = 0; i < " << t.fmx << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << t.fn8 << "; ++j) {\n";
    os << "      float* p_ = cs_ + (wm_ + i * " << t.rstep << " + lane_ / 4) * " << t.ldc << " + wn_ + j * 8 + (lane_ % 4) * 2;\n";
    os << "      *(float2*)p_ = make_float2(acc_[i][j][0], acc_[i][j][1]);\n";
    os << "      *(float2*)(p_ + 8 * " << t.ldc << ") = make_float2(acc_[i][j][2], acc_[i][j][3]);\n    }\n";
  } else {
  os << "  #pragma unroll\n  for (int i = 0; i < " << t.fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << t.fn
     << "; ++j) wmma::store_matrix_sync(cs_ + (wm_ + i * 16) * " << t.ldc << " + wn_ + j * 16, acc_[i][j], " << t.ldc
     << ", wmma::mem_row_major);\n";
  }
  os << "  __syncthreads();\n";
}

// split-K across blocks by atomicAdd into the output (its zeroing kernel follows the main kernel's
// text); gives the zeroing kernel's name
std::string atomic_reduction(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  os << "  " << t.acct << "* out_ = t_" << t.anchor.output << " + (long long)blockIdx.z * " << t.M * t.N << "LL;\n";
  os << "  for (int e_ = threadIdx.x; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << t.threads << ") {\n";
  os << "    const int row_ = e_ / " << cfg.bn / 4 << ", col_ = (e_ % " << cfg.bn / 4 << ") * 4;\n";
  os << "    if (m0_ + row_ >= " << t.M << ") continue;\n";
  os << "    #pragma unroll\n    for (int q_ = 0; q_ < 4; ++q_) {\n";
  os << "      if (n0_ + col_ + q_ >= " << t.N << ") break;\n";
  os << "      " << t.acct << " v_ = 0;\n";
  os << "      #pragma unroll\n      for (int s_ = 0; s_ < " << cfg.k_split << "; ++s_) v_ += ((" << t.acct << "*)smem_)[s_ * " << cfg.bm * t.ldc
     << " + row_ * " << t.ldc << " + col_ + q_];\n";
  os << "      atomicAdd(out_ + (long long)(m0_ + row_) * " << t.N << " + n0_ + col_ + q_, v_);\n";
  os << "    }\n  }\n}\n";
  const std::string zname = t.name + "_zero";
  os << "\nextern \"C\" __global__ void __launch_bounds__(" << kZeroKernelThreads << ") " << zname << "(" << kernel_parameters(t.k) << ") {\n";
  os << "  (void)scratch;\n";
  const int64_t total = t.M * t.N * t.c.size_batch();
  os << "  for (long long i_ = blockIdx.x * " << kZeroKernelThreads << "LL + threadIdx.x; i_ < " << total << "LL; i_ += gridDim.x * " << kZeroKernelThreads << "LL) t_" << t.anchor.output
     << "[i_] = 0;\n}\n";
  t.explain.push_back("  split-K reduction: atomicAdd into the output, zeroed by " + zname + " launched first");
  return zname;
}

// split-K across blocks: this block's partial tile (its warps' K slices summed) -> scratch; the
// last block of the tile to arrive continues to the stores, summing the partials in split order
void last_block_reduction(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const std::string part_type = t.i8 ? "int" : "float";
  // split-K across blocks: this block's partial tile (its warps' K slices summed) -> scratch;
  // the last block of the tile to arrive sums the partials in split order below
  const int64_t counters = split_counter_bytes(split_k_tiles(tile_schedule(t)));
  const std::string v4 = t.i8 ? "int4" : "float4";
  emit_split_k_tile(t);  // the block's output tile: its counter and its partials' slot (tile_scheduler.h)
  os << "  unsigned* cnt_ = (unsigned*)scratch;\n";
  os << "  " << part_type << "* part_ = (" << part_type << "*)(scratch + " << counters << ") + (long long)tile_ * "
     << int64_t(cfg.k_blocks) * cfg.bm * cfg.bn << "LL;\n";
  os << "  for (int e_ = threadIdx.x; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << t.threads << ") {\n";
  os << "    const int row_ = e_ / " << cfg.bn / 4 << ", col_ = (e_ % " << cfg.bn / 4 << ") * 4;\n";
  os << "    " << v4 << " w_;\n";
  for (const char* q : {"x", "y", "z", "w"}) {
    const int qi = q[0] == 'w' ? 3 : q[0] - 'x';
    os << "    w_." << q << " = 0;\n";
    os << "    #pragma unroll\n    for (int s_ = 0; s_ < " << cfg.k_split << "; ++s_) w_." << q << " += ((" << t.acct << "*)smem_)[s_ * "
       << cfg.bm * t.ldc << " + row_ * " << t.ldc << " + col_ + " << qi << "];\n";
  }
  os << "    __stcg((" << v4 << "*)(part_ + blockIdx.y * " << cfg.bm * cfg.bn << " + row_ * " << cfg.bn << " + col_), w_);\n";
  os << "  }\n";
  os << "  __threadfence();\n  __syncthreads();\n";
  os << "  __shared__ int last_;\n";
  os << "  if (threadIdx.x == 0) {\n";
  os << "    last_ = atomicAdd(cnt_ + tile_, 1u) == " << cfg.k_blocks - 1 << "u;\n";
  os << "    if (last_) atomicExch(cnt_ + tile_, 0u);  /* ready for the next launch */\n";
  os << "  }\n  __syncthreads();\n  if (!last_) return;\n  __threadfence();\n";
}

}  // namespace

namespace {

// the anchor's output index variables (outer -> inner)
std::vector<std::string> anchor_out_vars(const TcKernel& t) {
  std::vector<std::string> out_vars;
  for (const auto& ix : t.anchor.out_indices) out_vars.push_back(ix.index_coeffs.begin()->first);
  return out_vars;
}

// C name of anchor index `v` in the element code: bv_<v> for a batch dim, else ov_<v>
std::string anchor_local(const TcKernel& t, const std::string& v) {
  for (const auto& d : t.c.batch)
    if (d.var == v) return "bv_" + v;
  return "ov_" + v;
}

// epilogue statement s's index -> the anchor index at the same output position
std::map<std::string, std::string> to_anchor_map(const TcKernel& t, const ir::Statement& s) {
  const auto out_vars = anchor_out_vars(t);
  std::map<std::string, std::string> to_anchor;
  for (size_t d = 0; d < s.out_indices.size(); ++d) to_anchor[s.out_indices[d].index_coeffs.begin()->first] = out_vars[d];
  return to_anchor;
}

std::string tensor_address(const TcKernel& t, const std::string& tname, const std::vector<ir::AffineExpr>& idx,
                           const std::function<std::string(const std::string&)>& var) {
  const auto* tensor = t.k.find_tensor(tname);
  TESSEL_CHECK(tensor, "emit_cuda: epilogue tensor " + tname + " is not global");
  std::string s = "0LL";
  for (size_t d = 0; d < idx.size(); ++d) s = "(" + s + " * " + S(tensor->shape[d]) + "LL + " + t.affine(idx[d], var) + ")";
  return s;
}

// The maximal subtrees of the fused statements' right-hand sides whose value depends on the
// output column only: every access reads a global tensor (not the accumulator or an earlier fused
// result) at indices over N and batch dims, every index value likewise, and the subtree reads at
// least one tensor (constants alone the compiler folds). Select branches and the right operand of
// && / || are only taken whole: hoisted out of their condition they could read where the
// condition keeps the element code from reading.
std::vector<std::pair<int, const ir::Expr*>> column_subtrees(const TcKernel& t) {
  const ir::Function& f = *t.k.function;
  std::set<std::string> produced{t.anchor.output};
  std::set<std::string> column_vars;
  for (const auto& d : t.c.n) column_vars.insert(d.var);
  for (const auto& d : t.c.batch) column_vars.insert(d.var);
  std::vector<std::pair<int, const ir::Expr*>> found;
  for (int si : t.c.epilogue) {
    const ir::Statement& s = f.statements.at(si);
    const auto to_anchor = to_anchor_map(t, s);
    auto over_columns = [&](const ir::AffineExpr& a) {
      std::map<std::string, int64_t> indices, params;
      a.collect_names(&indices, &params);  // also inside division terms
      for (const auto& [v, unused] : indices) {
        const std::string av = to_anchor.count(v) ? to_anchor.at(v) : v;
        if (!column_vars.count(av)) return false;
      }
      return true;
    };
    // (column only, reads a tensor)
    std::function<std::pair<bool, bool>(const ir::Expr&)> classify = [&](const ir::Expr& e) -> std::pair<bool, bool> {
      switch (e.kind) {
        case ir::ExprKind::Constant:
        case ir::ExprKind::SizeParam: return {true, false};
        case ir::ExprKind::IndexValue: return {over_columns(e.affine), false};
        case ir::ExprKind::Access: {
          if (produced.count(e.name) || !t.k.find_tensor(e.name)) return {false, false};
          for (const auto& ix : e.indices)
            if (!over_columns(ix)) return {false, true};
          return {true, true};
        }
        case ir::ExprKind::Apply: break;
      }
      bool col = true, reads = false;
      for (const auto& a : e.args) {
        const auto [c, r] = classify(*a);
        col = col && c;
        reads = reads || r;
      }
      return {col, reads};
    };
    std::function<void(const ir::Expr&)> walk = [&](const ir::Expr& e) {
      const auto [col, reads] = classify(e);
      if (col && reads) {
        found.push_back({si, &e});
        return;
      }
      if (e.kind != ir::ExprKind::Apply) return;
      const bool guarded = e.op == ir::Op::Select || e.op == ir::Op::And || e.op == ir::Op::Or;
      for (size_t i = 0; i < e.args.size(); ++i)
        if (!guarded || i == 0) walk(*e.args[i]);
    };
    walk(*s.rhs);
    produced.insert(s.output);
  }
  return found;
}

}  // namespace

ColumnValues emit_column_values(const TcKernel& t, const std::string& pad, const std::string& first_column, int columns) {
  ColumnValues cv;
  const auto subtrees = column_subtrees(t);
  if (subtrees.empty()) return cv;
  auto& os = t.os;
  const ir::Function& f = *t.k.function;
  const bool one = columns == 1;
  std::vector<std::string> names;
  for (size_t i = 0; i < subtrees.size(); ++i) {
    const ir::Expr& e = *subtrees[i].second;
    names.push_back("hv" + S(int64_t(i)) + "_");
    os << pad << value_type(e.type) << " " << names.back() << (one ? "" : "[" + S(int64_t(columns)) + "]") << ";\n";
    cv.local[&e] = one ? names.back() : names.back() + "[q_]";
  }
  std::string p = pad;
  if (!one) {
    os << pad << "#pragma unroll\n" << pad << "for (int q_ = 0; q_ < " << columns << "; ++q_) {\n";
    p += "  ";
  } else {
    os << pad << "{\n";
    p += "  ";
  }
  os << p << "const int n_ = " << first_column << (one ? "" : " + q_") << ";\n";
  for (const auto& d : t.c.n) os << p << "int ov_" << d.var << ";\n";
  t.decompose(p, "n_", t.c.n, "ov_");
  os << p << "if (n_ < " << t.N << ") {\n";
  for (size_t i = 0; i < subtrees.size(); ++i) {
    const ir::Statement& s = f.statements.at(subtrees[i].first);
    const auto to_anchor = to_anchor_map(t, s);
    auto var = [&](const std::string& v) { return anchor_local(t, to_anchor.count(v) ? to_anchor.at(v) : v); };
    ValueContext ctx;
    ctx.sizes = &t.k.sizes;
    ctx.affine = [&](const ir::AffineExpr& a) { return t.affine(a, var); };
    ctx.access = [&](const ir::Expr& a) { return "t_" + a.name + "[" + tensor_address(t, a.name, a.indices, var) + "]"; };
    os << p << "  " << cv.local.at(subtrees[i].second) << " = " << value_expr(*subtrees[i].second, ctx) << ";\n";
  }
  os << p << "} else {\n";
  for (const auto& [si, e] : subtrees) os << p << "  " << cv.local.at(e) << " = 0;  /* a column past N: never used */\n";
  os << p << "}\n" << pad << "}\n";
  t.explain.push_back("  " + S(int64_t(subtrees.size())) + " column-only subexpression(s) of the fused statements evaluated once per column, outside the element loop");
  return cv;
}

std::vector<std::pair<std::string, DType>> element_outputs(const TcKernel& t) {
  const ir::Function& f = *t.k.function;
  std::vector<std::pair<std::string, DType>> outs;
  if (f.find_tensor(t.anchor.output)->kind == ir::TensorKind::Output) outs.push_back({t.anchor.output, t.anchor.acc_type});
  for (int si : t.c.epilogue) {
    const ir::Statement& s = f.statements.at(si);
    if (f.find_tensor(s.output)->kind == ir::TensorKind::Output) outs.push_back({s.output, s.acc_type});
  }
  return outs;
}

namespace {

// whether `tensor` is laid out as the dense row-major [batch.., M.., N..] of the contraction's
// dims, so its element (bz, m, n) is at (bz * M + m) * N + n
bool dense_output_layout(const TcKernel& t, const std::string& tensor) {
  std::vector<std::string> expect;
  std::vector<int64_t> extents;
  for (const auto* dims : {&t.c.batch, &t.c.m, &t.c.n})
    for (const auto& d : *dims) {
      expect.push_back(d.var);
      extents.push_back(d.extent);
    }
  const auto* g = t.k.find_tensor(tensor);
  return g && anchor_out_vars(t) == expect && g->shape == extents;
}

}  // namespace

void emit_element(const TcKernel& t, const std::string& pad, bool streaming, const ColumnValues* columns, const std::string& store_slot) {
  auto& os = t.os;
  const ir::Function& f = *t.k.function;
  const std::vector<std::string> out_vars = anchor_out_vars(t);
  std::map<std::string, std::string> locals;  // tensor -> local ev_<tensor> (storage type)
  const DType ct = t.anchor.acc_type;
  os << pad << "const " << storage_type(ct) << " ev_" << t.anchor.output << " = " << store_value(ct, "v_") << ";\n";
  locals[t.anchor.output] = "ev_" + t.anchor.output;
  auto anchor_var = [&](const std::string& v) { return anchor_local(t, v); };
  for (int si : t.c.epilogue) {
    const ir::Statement& s = f.statements.at(si);
    const auto to_anchor = to_anchor_map(t, s);
    auto var = [&](const std::string& v) { return anchor_var(to_anchor.count(v) ? to_anchor.at(v) : v); };
    ValueContext ctx;
    ctx.sizes = &t.k.sizes;
    ctx.affine = [&](const ir::AffineExpr& a) { return t.affine(a, var); };
    ctx.access = [&](const ir::Expr& a) -> std::string {
      auto it = locals.find(a.name);
      if (it != locals.end()) return it->second;
      return "t_" + a.name + "[" + tensor_address(t, a.name, a.indices, var) + "]";
    };
    if (columns)
      ctx.replace = [&](const ir::Expr& e) -> std::optional<std::string> {
        auto it = columns->local.find(&e);
        if (it == columns->local.end()) return std::nullopt;
        return it->second;
      };
    const DType T = s.acc_type;
    os << pad << "const " << storage_type(T) << " ev_" << s.output << " = "
       << store_value(T, "(" + value_type(T) + ")" + value_expr(*s.rhs, ctx)) << ";\n";
    locals[s.output] = "ev_" + s.output;
  }
  std::vector<ir::AffineExpr> out_idx;
  for (const auto& v : out_vars) out_idx.push_back(ir::AffineExpr::index(v));
  for (const auto& [tensor, dtype] : element_outputs(t)) {
    const std::string& value = locals.at(tensor);
    if (!store_slot.empty()) {  // the caller stores the vector
      os << pad << "sv_" << tensor << "[" << store_slot << "] = " << value << ";\n";
      continue;
    }
    const std::string at = "t_" + tensor + "[" + tensor_address(t, tensor, out_idx, anchor_var) + "]";
    if (streaming && (dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16))  // evict-first, no memory clobber (loads stay CSE-able)
      os << pad << "tessel_stcs(&" << at << ", " << value << ");\n";
    else os << pad << at << " = " << value << ";\n";
  }
}

namespace {

// columns per thread of an epilogue that stores vectors: 4 where every output is a dense
// [batch.., M.., N] tensor with N a multiple of 4 (aligned vector stores), else 1
//
// A blocked output (e.g. [NB, H, W, KB, 16, 16] over M = (nb, p, q, ni), N = (kb, ki)) qualifies
// too where the innermost N dim is its contiguous dim with an extent that is a multiple of 4 and
// every other stride is a multiple of 4: the 4 columns of a group are then adjacent and aligned.
bool groups_adjacent(const TcKernel& t, const std::string& tensor, int vec) {
  if (dense_output_layout(t, tensor)) return true;
  const auto* g = t.k.find_tensor(tensor);
  const auto vars = anchor_out_vars(t);
  if (!g || g->shape.size() != vars.size() || t.c.n.empty() || t.c.n.back().extent % vec) return false;
  int64_t stride = 1;
  for (size_t d = vars.size(); d-- > 0;) {
    if (vars[d] == t.c.n.back().var ? stride != 1 : stride % vec != 0) return false;
    stride *= g->shape[d];
  }
  return true;
}

int vector_store_width(const TcKernel& t) {
  constexpr int kVec = 4;
  if (t.N % kVec != 0 || t.i8) return 1;
  for (const auto& [tensor, dtype] : element_outputs(t))
    if (!groups_adjacent(t, tensor, kVec)) return 1;
  return kVec;
}

// the element offset in `tensor` of the group whose first column is `first` (a dense output:
// ((batch * M + m_) * N + first); else through the N indices of `first` decomposed into gv_<var>)
std::string group_address(const TcKernel& t, const std::string& tensor, const std::string& batch, const std::string& first) {
  if (dense_output_layout(t, tensor)) return "((long long)" + batch + " * " + S(t.M) + "LL + m_) * " + S(t.N) + "LL + " + first;
  std::set<std::string> nvars;
  for (const auto& d : t.c.n) nvars.insert(d.var);
  std::vector<ir::AffineExpr> idx;
  for (const auto& v : anchor_out_vars(t)) idx.push_back(ir::AffineExpr::index(v));
  return tensor_address(t, tensor, idx, [&](const std::string& v) { return nvars.count(v) ? "gv_" + v : anchor_local(t, v); });
}

// the N indices of column `first` as gv_<var>, where an output is not dense
void group_indices(const TcKernel& t, const std::string& pad, const std::string& first) {
  bool any = false;
  for (const auto& [tensor, dt] : element_outputs(t)) any = any || !dense_output_layout(t, tensor);
  if (!any) return;
  for (const auto& d : t.c.n) t.os << pad << "int gv_" << d.var << ";\n";
  t.decompose(pad, first, t.c.n, "gv_");
}

// C type moving `vec` elements of storage type `dt` in one access
std::string vector_type(DType dt, int vec) {
  const int bytes = dtype_bytes(dt) * vec;
  return bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "unsigned" : bytes == 2 ? "unsigned short" : "";
}

// after the statements of `vec` adjacent columns (values in sv_<tensor>[q]): one vector store per
// output at the group of first column `first` (group_address; batch index `batch`)
void vector_stores(const TcKernel& t, const std::string& pad, const std::string& batch, const std::string& first, int vec, bool streaming) {
  group_indices(t, pad, first);
  for (const auto& [tensor, dt] : element_outputs(t)) {
    const std::string V = vector_type(dt, vec);
    TESSEL_CHECK(!V.empty(), "emit_cuda: no vector type for " + S(int64_t(vec)) + " elements of the output " + tensor);
    const std::string ptr = "(" + V + "*)(t_" + tensor + " + " + group_address(t, tensor, batch, first) + ")";
    if (streaming && V != "unsigned short")
      t.os << pad << "__stcs(" << ptr << ", *(const " << V << "*)sv_" << tensor << ");\n";
    else t.os << pad << "*" << ptr << " = *(const " << V << "*)sv_" << tensor << ";\n";
  }
}

// the element-wise statements on the reduced accumulators, then the global stores
void elementwise_stores(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  // each block of a cluster: a 1/k_blocks slice of the tile
  const std::string e0 = cfg.reduce == SplitKReduce::cluster ? "threadIdx.x * " + S(cfg.k_blocks) + " + blockIdx.y" : std::string("threadIdx.x");
  const int step = cfg.reduce == SplitKReduce::cluster ? t.threads * cfg.k_blocks : t.threads;
  // a thread keeps to the same 4 columns when its step is a whole number of tile rows
  ColumnValues columns;
  if (step % (cfg.bn / 4) == 0) columns = emit_column_values(t, "  ", "n0_ + ((" + e0 + ") % " + S(cfg.bn / 4) + ") * 4", 4);
  os << "  for (int e_ = " << e0 << "; e_ < " << cfg.bm * cfg.bn / 4 << "; e_ += " << step << ") {\n";
  os << "    const int row_ = e_ / " << cfg.bn / 4 << ", col_ = (e_ % " << cfg.bn / 4 << ") * 4;\n";
  os << "    const int m_ = m0_ + row_;\n    if (m_ >= " << t.M << ") continue;\n";
  for (const auto& d : t.c.m) os << "    int ov_" << d.var << ";\n";
  t.decompose("    ", "m_", t.c.m, "ov_");
  if (cfg.reduce == SplitKReduce::cluster) {
    // 16-byte loads of every block's and every warp slice's 4 partials, all issued before the sums
    const int parts = cfg.k_blocks * cfg.k_split;
    const std::string v4 = t.i8 ? "int4" : "float4";
    os << "    " << v4 << " cv_[" << parts << "];\n";
    os << "    #pragma unroll\n    for (int s_ = 0; s_ < " << cfg.k_blocks << "; ++s_)\n      #pragma unroll\n      for (int t_ = 0; t_ < "
       << cfg.k_split << "; ++t_) cv_[s_ * " << cfg.k_split << " + t_] = tessel_cluster_ld4((const " << t.acct << "*)smem_ + t_ * "
       << cfg.bm * t.ldc << " + row_ * " << t.ldc << " + col_, s_);\n";
    os << "    " << t.acct << " cw_[4] = {0, 0, 0, 0};\n";
    os << "    #pragma unroll\n    for (int s_ = 0; s_ < " << parts
       << "; ++s_) { cw_[0] += cv_[s_].x; cw_[1] += cv_[s_].y; cw_[2] += cv_[s_].z; cw_[3] += cv_[s_].w; }\n";
  }
  const bool vec = vector_store_width(t) == 4;  // the 4 columns' outputs in one store each
  if (vec) {
    os << "    if (n0_ + col_ >= " << t.N << ") continue;\n";
    for (const auto& [tensor, dt] : element_outputs(t)) os << "    __align__(16) " << storage_type(dt) << " sv_" << tensor << "[4];\n";
  }
  os << "    #pragma unroll\n    for (int q_ = 0; q_ < 4; ++q_) {\n";
  os << "      const int n_ = n0_ + col_ + q_;\n";
  if (!vec) os << "      if (n_ >= " << t.N << ") break;\n";
  for (const auto& d : t.c.n) os << "      int ov_" << d.var << ";\n";
  t.decompose("      ", "n_", t.c.n, "ov_");
  os << "      " << t.acct << " v_ = 0;\n";
  if (cfg.reduce == SplitKReduce::cluster)
    os << "      v_ = cw_[q_];\n";
  else if (cfg.k_blocks > 1)
    os << "      #pragma unroll\n      for (int s_ = 0; s_ < " << cfg.k_blocks << "; ++s_) v_ += __ldcg(part_ + s_ * " << cfg.bm * cfg.bn
       << " + row_ * " << cfg.bn << " + col_ + q_);\n";
  else
    os << "      #pragma unroll\n      for (int s_ = 0; s_ < " << cfg.k_split << "; ++s_) v_ += ((" << t.acct << "*)smem_)[s_ * " << cfg.bm * t.ldc
       << " + row_ * " << t.ldc << " + col_ + q_];\n";
  emit_element(t, "      ", false, &columns, vec ? "q_" : "");
  os << "    }\n";
  if (vec) vector_stores(t, "    ", "blockIdx.z", "n0_ + col_", 4, false);
  os << "  }\n";
  if (cfg.reduce == SplitKReduce::cluster) os << "  tessel_cluster_sync();  /* no block leaves while the others read its shared memory */\n";
  os << "}\n";
}

}  // namespace

namespace {

// the staged chunk's element loop, vec adjacent columns per thread: a 16-byte shared read, the
// statements per column (unrolled), one vector store per output at the dense address
// ((bz_ * M + m_) * N + n_)
void staged_vector_loop(const TcKernel& t, const std::string& p2, const ColumnValues& columns, int vec) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int cw = kStagedChunkColumns, ld = cw + kAccumulatorRowPad, gpr = cw / vec;  // column groups per row
  const auto outs = element_outputs(t);
  os << p2 << "#pragma unroll " << kStagedElementUnroll << "\n" << p2 << "for (int e_ = wt_; e_ < " << cfg.wm * gpr << "; e_ += "
     << t.m.threads_per_warpgroup() << ") {\n";
  const std::string p3 = p2 + "  ";
  os << p3 << "const int m_ = m0_ + wrow0_ + e_ / " << gpr << ", nb_ = n0_ + c_ * " << cw << " + (e_ % " << gpr << ") * " << vec << ";\n";
  os << p3 << "if (m_ >= mend_ || nb_ >= " << t.N << ") continue;\n";
  for (const auto& d : t.c.m) os << p3 << "int ov_" << d.var << ";\n";
  t.decompose(p3, "m_", t.c.m, "ov_");
  const std::string vt = t.acct == "float" ? "float4" : "int4";
  os << p3 << "const " << vt << " w_ = *(const " << vt << "*)(es_ + (e_ / " << gpr << ") * " << ld << " + (e_ % " << gpr << ") * " << vec << ");\n";
  for (const auto& [tensor, dt] : outs) os << p3 << "__align__(16) " << storage_type(dt) << " sv_" << tensor << "[" << vec << "];\n";
  os << p3 << "#pragma unroll\n" << p3 << "for (int q_ = 0; q_ < " << vec << "; ++q_) {\n";
  const std::string p4 = p3 + "  ";
  os << p4 << "const int n_ = nb_ + q_;\n";
  for (const auto& d : t.c.n) os << p4 << "int ov_" << d.var << ";\n";
  t.decompose(p4, "n_", t.c.n, "ov_");
  os << p4 << "const " << t.acct << " v_ = (&w_.x)[q_];\n";
  emit_element(t, p4, cfg.store == OutputStore::evict_first, &columns, "q_");
  os << p3 << "}\n";
  if (cfg.store == OutputStore::tma) {  // into the chunk's output buffer (rows of 128 B, unit u of row r at u ^ (r % 8)), for the TMA store
    const auto& [tensor, dt] = outs.at(0);
    const int per_row = kSwizzleRowBytes / dtype_bytes(dt), per_unit = kDescriptorUnitBytes / dtype_bytes(dt);
    os << p3 << "{ const int rr_ = e_ / " << gpr << ", cc_ = (e_ % " << gpr << ") * " << vec << ", bx_ = cc_ / " << per_row << ", u_ = (cc_ % "
       << per_row << ") / " << per_unit << ";\n";
    os << p3 << "  " << vector_type(dt, vec) << "* o_ = (" << vector_type(dt, vec) << "*)(ob_ + bx_ * " << cfg.wm * per_row << " + rr_ * " << per_row
       << " + ((u_ ^ (rr_ & 7)) * " << per_unit << ") + cc_ % " << per_unit << ");\n";
    os << p3 << "  *o_ = *(const " << vector_type(dt, vec) << "*)sv_" << tensor << "; }\n";
  } else {
    vector_stores(t, p3, "bz_", "nb_", vec, cfg.store == OutputStore::evict_first);
  }
  os << p2 << "}\n";
}

}  // namespace

namespace {

// the consumer warpgroup's named barrier (2 + ew_) of the staged epilogues
std::string warpgroup_barrier(const TcKernel& t) {
  return "asm volatile(\"bar.sync %0, " + S(t.m.threads_per_warpgroup()) + ";\\n\" ::\"r\"(2 + ew_) : \"memory\");";
}

// a chunk written to shared memory leaves through the TMA unit: the writes fenced to the async
// proxy, the warpgroup's barrier, then its first thread (lead_) stores each box (source, column)
void issue_tma_stores(const TcKernel& t, const std::string& pad, const std::vector<std::pair<std::string, std::string>>& boxes) {
  auto& os = t.os;
  os << pad << "asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\");  /* the writes, visible to the TMA unit */\n";
  os << pad << warpgroup_barrier(t) << "\n";
  auto store = [&](const std::pair<std::string, std::string>& b) {
    return "tessel_tma_store" + S(t.c.batch.empty() ? 2 : 3) + "(&tmap_c_, " + b.first + ", " + b.second + ", m0_ + wrow0_" +
           (t.c.batch.empty() ? "" : ", bz_") + ");";
  };
  if (boxes.size() == 1) {
    os << pad << "if (lead_) " << store(boxes[0]) << "\n";
    return;
  }
  os << pad << "if (lead_) {\n";
  for (const auto& b : boxes) os << pad << "  " << store(b) << "\n";
  os << pad << "}\n";
}

}  // namespace

TensorMapSpec output_store_map(const TcKernel& t) {
  TensorMapSpec s;
  s.tensor = t.c.plain_output ? t.anchor.output : t.c.stored_outputs.at(0).first;
  s.dtype = t.c.plain_output ? DType::F32 : t.c.stored_outputs.at(0).second;
  const uint64_t eb = uint64_t(dtype_bytes(s.dtype));
  s.dims = {uint64_t(t.N), uint64_t(t.M)};
  s.strides = {uint64_t(t.N) * eb};
  s.box = {uint32_t(kSwizzleRowBytes / eb), uint32_t(t.cfg.wm)};  // one 128-byte swizzle row of columns
  if (!t.c.batch.empty()) {
    s.dims.push_back(uint64_t(t.c.size_batch()));
    s.strides.push_back(uint64_t(t.M) * uint64_t(t.N) * eb);
    s.box.push_back(1);
  }
  s.swizzle_bytes = kSwizzleRowBytes;
  return s;
}

void emit_tma_store_helpers(const TcKernel& t) {
  const int r = t.c.batch.empty() ? 2 : 3;
  t.os << "static __device__ __forceinline__ void tessel_tma_store" << r << "(const tessel_tmap* map, const void* src";
  for (int i = 0; i < r; ++i) t.os << ", int c" << i;
  t.os << ") {\n  asm volatile(\"cp.async.bulk.tensor." << r << "d.global.shared::cta.bulk_group [%0, {";
  for (int i = 0; i < r; ++i) t.os << (i ? ", " : "") << "%" << i + 2;
  t.os << "}], [%1];\\n\" ::\"l\"(map), \"r\"((unsigned)__cvta_generic_to_shared(src))";
  for (int i = 0; i < r; ++i) t.os << ", \"r\"(c" << i << ")";
  t.os << " : \"memory\");\n  asm volatile(\"cp.async.bulk.commit_group;\\n\" ::: \"memory\");\n}\n";
}

void register_epilogue(const TcKernel& t, const std::string& pad) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  // accumulator element (i, j, q) of lane l: row i * 64 + (warp's 16 rows) + l / 4 (+ 8 for q >= 2),
  // column j * 8 + (l % 4) * 2 (+ 1 for odd q): the m16n8 layout of each warp's wgmma slice
  if (cfg.store == OutputStore::tma && t.c.plain_output) {
    // 32-column chunks of the warpgroup's wm rows: rows of 128 B, 16-byte unit u of row r at u ^ (r % 8)
    // (the tensor map's 128-byte swizzle), two buffers: a chunk is written while the TMA unit reads
    // the one before; one thread per warpgroup waits for the reads and issues the stores
    const int cw = kTmaStoreChunkColumns, wpgt = int(t.m.threads_per_warpgroup());
    t.explain.push_back("  epilogue through the TMA unit: each consumer warpgroup writes " + S(cfg.wm) + "x" + S(cw) +
                        " chunks of its accumulators into a 128-byte-swizzled double buffer in shared memory; one thread issues a "
                        "tensor-map store per chunk (clipped at the output's edges)");
    os << pad << "{\n";
    const std::string p1 = pad + "  ";
    os << p1 << "const int ew_ = " << (cfg.schedule == WsSchedule::pingpong ? "cw_" : "wg_") << ", wrow0_ = wm_ - (warp_ % " << t.m.warps_per_warpgroup << ") * "
       << t.m.wgmma->m / int(t.m.warps_per_warpgroup) << ", wr_ = wm_ - wrow0_;\n";
    os << p1 << "const bool lead_ = threadIdx.x % " << wpgt << " == 0;\n";
    os << p1 << "#pragma unroll\n" << p1 << "for (int c_ = 0; c_ < " << cfg.bn / cw << "; ++c_) {\n";
    const std::string p2 = p1 + "  ";
    os << p2 << "float* buf_ = Es_ + (ew_ * 2 + (c_ & 1)) * " << cfg.wm * cw << ";\n";
    os << p2 << "if (lead_) asm volatile(\"cp.async.bulk.wait_group.read 1;\\n\" ::: \"memory\");  /* this buffer's last store has read it */\n";
    os << p2 << warpgroup_barrier(t) << "\n";
    os << p2 << "#pragma unroll\n" << p2 << "for (int i = 0; i < " << t.fmx << "; ++i)\n" << p2 << "  #pragma unroll\n" << p2 << "  for (int jj = 0; jj < "
       << cw / 8 << "; ++jj) {\n";
    os << p2 << "    const int r_ = i * " << t.rstep << " + wr_ + lane_ / 4, u_ = jj * 2 + (lane_ % 4) / 2;\n";
    os << p2 << "    float* p_ = buf_ + r_ * " << cw << " + ((u_ ^ (r_ & 7)) << 2) + (lane_ & 1) * 2;  /* row r_ + 8: the same unit */\n";
    os << p2 << "    *(float2*)p_ = make_float2(acc_[i][c_ * " << cw / 8 << " + jj][0], acc_[i][c_ * " << cw / 8 << " + jj][1]);\n";
    os << p2 << "    *(float2*)(p_ + 8 * " << cw << ") = make_float2(acc_[i][c_ * " << cw / 8 << " + jj][2], acc_[i][c_ * " << cw / 8 << " + jj][3]);\n";
    os << p2 << "  }\n";
    issue_tma_stores(t, p2, {{"buf_", "n0_ + c_ * " + S(cw)}});
    os << p1 << "}\n" << pad << "}\n";
    return;
  }
  if (t.direct) {
    t.explain.push_back("  epilogue from registers: accumulators stored straight to global memory (64-bit stores" +
                        std::string(cfg.store == OutputStore::evict_first ? ", evict-first" : "") + ")");
    os << pad << t.acct << "* out_ = t_" << t.anchor.output << " + (long long)bz_ * " << t.M * t.N << "LL;\n";
    os << pad << "#pragma unroll\n" << pad << "for (int i = 0; i < " << t.fmx << "; ++i)\n" << pad << "  #pragma unroll\n" << pad
       << "  for (int j = 0; j < " << t.fn8 << "; ++j) {\n";
    os << pad << "    const int row_ = m0_ + wm_ + i * " << t.rstep << " + lane_ / 4, col_ = n0_ + j * 8 + (lane_ % 4) * 2;\n";
    const std::string st = cfg.store == OutputStore::evict_first ? "__stcs((float2*)(out_ + (long long)" : "*(float2*)(out_ + (long long)";
    const std::string mid = cfg.store == OutputStore::evict_first ? "), " : ") = (";
    os << pad << "    if (col_ < " << t.N << ") {\n";
    os << pad << "      if (row_ < mend_) " << st << "row_ * " << t.N << " + col_" << mid << "make_float2(acc_[i][j][0], acc_[i][j][1]));\n";
    os << pad << "      if (row_ + 8 < mend_) " << st << "(row_ + 8) * " << t.N << " + col_" << mid
       << "make_float2(acc_[i][j][2], acc_[i][j][3]));\n";
    os << pad << "    }\n" << pad << "  }\n";
    return;
  }
  // fused statements or a layout the accumulators cannot be stored in straight: each consumer
  // warpgroup stages 64-column chunks of its rows in shared memory (its own buffer, its own named
  // barrier) and walks them row-major, so the statements' per-column operands and the stores are
  // coalesced and the element code is one loop body
  const int cw = kStagedChunkColumns, ld = cw + kAccumulatorRowPad;
  t.explain.push_back("  epilogue: each consumer warpgroup stages " + S(cfg.wm) + "x" + S(cw) +
                      " accumulator chunks in shared memory, then the fused statements and " +
                      (cfg.store == OutputStore::tma ? std::string("the results into a 128-byte-swizzled chunk of the output that one thread stores through "
                                                   "the TMA unit (clipped at the output's edges)")
                                     : "coalesced stores" + std::string(cfg.store == OutputStore::evict_first ? " (evict-first)" : "")));
  os << pad << "{\n";
  const std::string p1 = pad + "  ";
  os << p1 << "const int ew_ = " << (cfg.schedule == WsSchedule::pingpong ? "cw_" : "wg_") << ", wrow0_ = wm_ - (warp_ % " << t.m.warps_per_warpgroup << ") * "
     << t.m.wgmma->m / int(t.m.warps_per_warpgroup) << ";\n";
  os << p1 << "float* es_ = Es_ + ew_ * " << cfg.wm * ld << ";\n";
  os << p1 << "const int wt_ = threadIdx.x % " << t.m.threads_per_warpgroup() << ", wr_ = wm_ - wrow0_;\n";
  const int consumers = cfg.schedule == WsSchedule::pingpong ? 2 : cfg.bm / cfg.wm;
  std::string out_type;
  if (cfg.store == OutputStore::tma) {  // the fused output's chunk per consumer warpgroup, after the accumulator chunks, for the TMA store
    out_type = storage_type(t.c.stored_outputs.at(0).second);
    os << p1 << out_type << "* ob_ = (" << out_type << "*)(Es_ + " << consumers * cfg.wm * ld << ") + ew_ * " << cfg.wm * cw << ";\n";
    os << p1 << "const bool lead_ = threadIdx.x % " << t.m.threads_per_warpgroup() << " == 0;\n";
  }
  os << p1 << "#pragma unroll\n" << p1 << "for (int c_ = 0; c_ < " << cfg.bn / cw << "; ++c_) {\n";
  const std::string p2 = p1 + "  ";
  // a thread's elements e_ = wt_ + i * (threads per warpgroup) all lie in column wt_ % cw
  TESSEL_CHECK(t.m.threads_per_warpgroup() % cw == 0, "emit_cuda: staged epilogue chunk wider than a warpgroup's step");
  // with vec > 1 a thread takes vec adjacent columns (one 16-byte shared read, one vector store per
  // output): still the same columns on every step
  const int vec = vector_store_width(t);
  const ColumnValues columns =
      vec > 1 ? emit_column_values(t, p2, "n0_ + c_ * " + S(cw) + " + (wt_ % " + S(cw / vec) + ") * " + S(vec), vec)
              : emit_column_values(t, p2, "n0_ + c_ * " + S(cw) + " + wt_ % " + S(cw), 1);
  if (cfg.store == OutputStore::tma) os << p2 << "if (lead_) asm volatile(\"cp.async.bulk.wait_group.read 0;\\n\" ::: \"memory\");  /* the last store has read ob_ */\n";
  os << p2 << warpgroup_barrier(t) << "  /* the chunk before is read */\n";
  os << p2 << "#pragma unroll\n" << p2 << "for (int i = 0; i < " << t.fmx << "; ++i)\n" << p2 << "  #pragma unroll\n" << p2 << "  for (int jj = 0; jj < " << cw / 8
     << "; ++jj) {\n";
  os << p2 << "    float* p_ = es_ + (i * " << t.rstep << " + wr_ + lane_ / 4) * " << ld << " + jj * 8 + (lane_ % 4) * 2;\n";
  os << p2 << "    *(float2*)p_ = make_float2(acc_[i][c_ * " << cw / 8 << " + jj][0], acc_[i][c_ * " << cw / 8 << " + jj][1]);\n";
  os << p2 << "    *(float2*)(p_ + 8 * " << ld << ") = make_float2(acc_[i][c_ * " << cw / 8 << " + jj][2], acc_[i][c_ * " << cw / 8 << " + jj][3]);\n";
  os << p2 << "  }\n";
  os << p2 << warpgroup_barrier(t) << "  /* the chunk is staged */\n";
  if (cfg.store == OutputStore::tma) {
    TESSEL_CHECK(vec > 1, "emit_cuda: TMA stores of fused outputs need the 4-column groups");
    staged_vector_loop(t, p2, columns, vec);
    const int per_row = kSwizzleRowBytes / dtype_bytes(t.c.stored_outputs.at(0).second);
    std::vector<std::pair<std::string, std::string>> boxes;
    for (int b = 0; b < cw / per_row; ++b) boxes.push_back({"ob_ + " + S(b * cfg.wm * per_row), "n0_ + c_ * " + S(cw) + " + " + S(b * per_row)});
    issue_tma_stores(t, p2, boxes);
  } else if (vec > 1) {
    staged_vector_loop(t, p2, columns, vec);
  } else {
    os << p2 << "#pragma unroll " << kStagedElementUnroll << "\n" << p2 << "for (int e_ = wt_; e_ < " << cfg.wm * cw << "; e_ += " << t.m.threads_per_warpgroup() << ") {\n";
    const std::string p3 = p2 + "  ";
    os << p3 << "const int m_ = m0_ + wrow0_ + e_ / " << cw << ", n_ = n0_ + c_ * " << cw << " + e_ % " << cw << ";\n";
    os << p3 << "if (m_ >= mend_ || n_ >= " << t.N << ") continue;\n";
    for (const auto& d : t.c.m) os << p3 << "int ov_" << d.var << ";\n";
    t.decompose(p3, "m_", t.c.m, "ov_");
    for (const auto& d : t.c.n) os << p3 << "int ov_" << d.var << ";\n";
    t.decompose(p3, "n_", t.c.n, "ov_");
    os << p3 << "const " << t.acct << " v_ = (" << t.acct << ")es_[(e_ / " << cw << ") * " << ld << " + e_ % " << cw << "];\n";
    emit_element(t, p3, cfg.store == OutputStore::evict_first, &columns);
    os << p2 << "}\n";
  }
  os << p1 << "}\n" << pad << "}\n";
}

void emit_epilogue(const TcKernel& t, std::vector<Launch>* before) {
  if (t.direct && t.mma) return direct_mma_store(t);
  if (t.direct) return direct_wmma_store(t);
  stage_accumulators(t);
  if (t.cfg.k_blocks > 1) {
    // cluster: the warps' K slices stay apart; the stores sum k_blocks x k_split partials
    if (t.cfg.reduce == SplitKReduce::cluster) {
      t.os << "  tessel_cluster_sync();  /* every block's partial tile is in its shared memory */\n";
    } else if (t.cfg.reduce == SplitKReduce::atomic) {
      const std::string zero = atomic_reduction(t);
      if (before) before->push_back(zero_output_launch(t, zero));
      return;
    } else {
      last_block_reduction(t);
    }
  }
  elementwise_stores(t);
}

}  // namespace tessel::emit_cuda
