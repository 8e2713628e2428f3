#include "compiler/emit_cuda/emit_simt.h"

#include <algorithm>
#include <functional>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

using kernel::Expr;
using kernel::Node;
using kernel::NodeKind;

constexpr unsigned kThreads = 256;

void expr_vars(const Expr& e, std::set<std::string>& out) {
  if (e.kind == kernel::ExprKind::Var) out.insert(e.name);
  for (const auto& a : e.args) expr_vars(a, out);
}

bool constant_expr(const Expr& e, int64_t* v) {
  try {
    *v = e.evaluate({});
    return true;
  } catch (...) {
    return false;
  }
}

struct SimtEmitter {
  const kernel::Kernel& k;
  std::ostringstream& os;
  std::map<int, std::string> buffer_ptr;  // buffer id -> pointer name in the current kernel

  const kernel::GlobalTensor& tensor(const std::string& n) {
    const auto* t = k.find_tensor(n);
    TESSEL_CHECK(t, "emit_cuda: tensor " + n + " is neither global nor bound to a buffer (promote must bind it)");
    return *t;
  }

  std::string linear(int buffer, const std::string& tname, const std::vector<std::string>& g) {
    std::string s = "0LL";
    if (buffer >= 0) {
      const auto& b = k.buffers.at(buffer);
      for (size_t d = 0; d < g.size(); ++d)
        s = "(" + s + " * " + std::to_string(b.extents[d]) + "LL + (" + g[d] + " - " + int_expr(b.offset[d]) + "))";
    } else {
      const auto& t = tensor(tname);
      for (size_t d = 0; d < g.size(); ++d) s = "(" + s + " * " + std::to_string(t.shape[d]) + "LL + " + g[d] + ")";
    }
    return s;
  }
  std::string storage(int buffer, const std::string& tname) { return buffer >= 0 ? buffer_ptr.at(buffer) : "t_" + tname; }

  std::string affine(const ir::AffineExpr& e) {
    int64_t c = e.constant;
    for (const auto& [p, q] : e.param_coeffs) c += q * k.sizes.at(p);
    std::string s = "(" + std::to_string(c) + "LL";
    for (const auto& [i, q] : e.index_coeffs) s += " + " + std::to_string(q) + "LL*i_" + i;
    return s + ")";
  }

  std::string access(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::map<std::string, int>& binding) {
    auto it = binding.find(tname);
    const int b = it == binding.end() ? -1 : it->second;
    std::vector<std::string> g;
    for (const auto& e : idx) g.push_back(affine(e));
    return storage(b, tname) + "[" + linear(b, tname, g) + "]";
  }

  void compute(const Node& n, const std::string& pad) {
    const ir::Statement& s = k.function->statements.at(n.statement);
    os << pad << "{\n";
    std::vector<const ir::IndexVar*> vars;
    for (const auto& v : s.domain)
      if (!n.init || !v.is_reduction) vars.push_back(&v);
    TESSEL_CHECK(vars.size() == n.indices.size(), "emit_cuda: compute node of " + s.name + " has the wrong arity");
    for (size_t i = 0; i < vars.size(); ++i)
      os << pad << "  const long long i_" << vars[i]->name << " = " << int_expr(n.indices[i]) << ";\n";
    const std::string lhs = access(s.output, s.out_indices, n.binding);
    const DType T = s.acc_type;
    if (n.init) {
      os << pad << "  " << lhs << " = " << store_value(T, reduction_identity(s.reduction, T)) << ";\n";
    } else {
      ValueContext ctx;
      ctx.sizes = &k.sizes;
      ctx.affine = [&](const ir::AffineExpr& e) { return affine(e); };
      ctx.access = [&](const ir::Expr& e) { return access(e.name, e.indices, n.binding); };
      const std::string rhs = value_expr(*s.rhs, ctx);
      if (s.reduction == ir::Reduction::None) {
        os << pad << "  " << lhs << " = " << store_value(T, "(" + value_type(T) + ")" + rhs) << ";\n";
      } else {
        os << pad << "  { const " << value_type(T) << " cur_ = " << load_value(T, lhs) << ", v_ = (" << value_type(T) << ")" << rhs
           << ";\n"
           << pad << "    " << lhs << " = " << store_value(T, reduce_values(s.reduction, T, "cur_", "v_")) << "; }\n";
      }
    }
    os << pad << "}\n";
  }

  void copy(const Node& n, const std::string& pad) {
    const bool out = n.dst < 0;
    const kernel::Buffer& box = k.buffers.at(out ? n.src : n.dst);
    const auto& t = tensor(n.tensor);
    const size_t r = box.extents.size();
    os << pad << "__syncthreads();\n" << pad << "for (long long e_ = threadIdx.x; e_ < " << box.elements()
       << "LL; e_ += blockDim.x) { /* copy " << (out ? "out " : "in ") << box.name << " */\n";
    os << pad << "  long long r_ = e_;\n";
    std::vector<std::string> g(r);
    std::string in_tensor = "true", in_src = "true";
    for (int d = int(r) - 1; d >= 0; --d) {
      os << pad << "  const long long y" << d << " = " << int_expr(box.offset[d]) << " + r_ % " << box.extents[d] << "LL; r_ /= "
         << box.extents[d] << "LL;\n";
    }
    for (size_t d = 0; d < r; ++d) {
      g[d] = "y" + std::to_string(d);
      in_tensor += " && " + g[d] + " >= 0 && " + g[d] + " < " + std::to_string(t.shape[d]) + "LL";
    }
    if (!out && n.src >= 0) {
      const kernel::Buffer& sb = k.buffers.at(n.src);
      for (size_t d = 0; d < r; ++d) {
        std::string rel = "(" + g[d] + " - " + int_expr(sb.offset[d]) + ")";
        in_src += " && " + rel + " >= 0 && " + rel + " < " + std::to_string(sb.extents[d]) + "LL";
      }
    }
    const std::string dst_lin = linear(box.id, n.tensor, g);
    if (out) {
      os << pad << "  if (" << in_tensor << ") t_" << n.tensor << "[" << linear(-1, n.tensor, g) << "] = " << storage(box.id, n.tensor)
         << "[" << dst_lin << "];\n";
    } else {
      const std::string src = storage(n.src, n.tensor) + "[" + linear(n.src, n.tensor, g) + "]";
      os << pad << "  " << storage(box.id, n.tensor) << "[" << dst_lin << "] = (" << in_tensor << " && " << in_src << ") ? " << src
         << " : " << store_value(box.dtype, "0") << ";\n";
    }
    os << pad << "}\n" << pad << "__syncthreads();\n";
  }

  void matmul(const kernel::MatmulOp& m, const std::string& pad) {
    const auto& A = k.buffers.at(m.a);
    const auto& B = k.buffers.at(m.b);
    const auto& C = k.buffers.at(m.c);
    // element coordinates of A[m,k], B[k,n], C[m,n] over frag_m / frag_n / frag_k (img2col views too)
    auto at = [&](const kernel::Buffer& b, const std::vector<Expr>& coords) {
      std::vector<std::string> g;
      for (const auto& c : coords) g.push_back(int_expr(c));
      return buffer_ptr.at(b.id) + "[" + linear(b.id, b.tensor, g) + "]";
    };
    const bool fl = dtype_is_float(m.acc_type);
    const std::string acc = value_type(m.acc_type);
    os << pad << "{ /* matmul fragment " << m.unit_m << "x" << m.unit_n << "x" << m.unit_k << (m.img2col ? ", img2col view" : "")
       << " (SIMT) */\n"
       << pad << "  const long long em = " << int_expr(m.em) << ", en = " << int_expr(m.en) << ", ek = " << int_expr(m.ek) << ";\n"
       << pad << "  for (long long e_ = threadIdx.x; e_ < em * en; e_ += blockDim.x) {\n"
       << pad << "    const long long frag_m = " << int_expr(m.m0) << " + e_ / en, frag_n = " << int_expr(m.n0) << " + e_ % en;\n"
       << pad << "    " << acc << " s_ = " << load_value(m.acc_type, at(C, m.c_coords)) << ";\n"
       << pad << "    for (long long fk = 0; fk < ek; ++fk) {\n"
       << pad << "      const long long frag_k = " << int_expr(m.k0) << " + fk;\n"
       << pad << "      const " << acc << " a_ = (" << acc << ")" << load_value(A.dtype, at(A, m.a_coords)) << ", b_ = (" << acc << ")"
       << load_value(B.dtype, at(B, m.b_coords)) << ";\n";
    if (fl)
      os << pad << "      s_ = s_ + a_ * b_;\n";
    else
      os << pad << "      s_ = (" << acc << ")((long long)s_ + (long long)a_ * (long long)b_);\n";
    os << pad << "    }\n"
       << pad << "    " << at(C, m.c_coords) << " = " << store_value(C.dtype, "s_") << ";\n"
       << pad << "  }\n"
       << pad << "}\n"
       << pad << "__syncthreads();\n";
  }

  static bool compute_nest(const Node& n) {
    switch (n.kind) {
      case NodeKind::Copy:
      case NodeKind::Matmul: return false;
      default: break;
    }
    for (const auto& c : n.children)
      if (!compute_nest(*c)) return false;
    for (const auto& c : n.else_children)
      if (!compute_nest(*c)) return false;
    return true;
  }

  // Loop variables used in a reduction position of an update in the subtree.
  void reduction_vars(const Node& n, std::set<std::string>& out) {
    if (n.kind == NodeKind::Compute && !n.init) {
      const ir::Statement& s = k.function->statements.at(n.statement);
      for (size_t i = 0; i < s.domain.size() && i < n.indices.size(); ++i)
        if (s.domain[i].is_reduction) expr_vars(n.indices[i], out);
    }
    for (const auto& c : n.children) reduction_vars(*c, out);
    for (const auto& c : n.else_children) reduction_vars(*c, out);
  }

  // Outer loops of a compute nest whose iterations are independent and whose bounds do not
  // depend on each other.
  std::vector<const Node*> parallel_prefix(const Node& root) {
    std::set<std::string> red;
    reduction_vars(root, red);
    std::vector<const Node*> prefix;
    std::set<std::string> prefix_vars;
    const Node* n = &root;
    while (n->kind == NodeKind::Loop && !red.count(n->var)) {
      std::set<std::string> bv;
      expr_vars(n->lo, bv);
      expr_vars(n->hi, bv);
      bool dep = false;
      for (const auto& v : bv) dep |= prefix_vars.count(v) > 0;
      if (dep) break;
      prefix.push_back(n);
      prefix_vars.insert(n->var);
      if (n->children.size() != 1 || n->children[0]->kind != NodeKind::Loop) break;
      n = n->children[0].get();
    }
    return prefix;
  }

  void thread_node(const Node& n, const std::string& pad) {
    switch (n.kind) {
      case NodeKind::Block:
        for (const auto& c : n.children) thread_node(*c, pad);
        return;
      case NodeKind::Loop:
        os << pad << "for (long long " << n.var << " = " << int_expr(n.lo) << "; " << n.var << " < " << int_expr(n.hi) << "; "
           << n.var << " += " << n.step << "LL) {\n";
        for (const auto& c : n.children) thread_node(*c, pad + "  ");
        os << pad << "}\n";
        return;
      case NodeKind::If:
        os << pad << "if (" << int_expr(n.cond) << ") {\n";
        for (const auto& c : n.children) thread_node(*c, pad + "  ");
        if (!n.else_children.empty()) {
          os << pad << "} else {\n";
          for (const auto& c : n.else_children) thread_node(*c, pad + "  ");
        }
        os << pad << "}\n";
        return;
      case NodeKind::Let: os << pad << n.var << " = " << int_expr(n.value) << ";\n"; return;
      case NodeKind::Compute: compute(n, pad); return;
      default: TESSEL_CHECK(false, "emit_cuda: copy or matmul inside a thread-parallel compute nest");
    }
  }

  void parallel_region(const std::vector<const Node*>& prefix, const std::string& pad) {
    os << pad << "{ /* compute nest over threads: " << prefix.size() << " loop(s) */\n";
    std::string total = "1LL";
    for (size_t i = 0; i < prefix.size(); ++i) {
      const Node& l = *prefix[i];
      os << pad << "  const long long lo" << i << "_ = " << int_expr(l.lo) << ", n" << i << "_ = (" << int_expr(l.hi) << " - lo" << i
         << "_ + " << l.step - 1 << "LL) / " << l.step << "LL;\n";
      total += " * (n" + std::to_string(i) + "_ > 0 ? n" + std::to_string(i) + "_ : 0LL)";
    }
    os << pad << "  const long long total_ = " << total << ";\n"
       << pad << "  for (long long it_ = threadIdx.x; it_ < total_; it_ += blockDim.x) {\n"
       << pad << "    long long r_ = it_;\n";
    for (int i = int(prefix.size()) - 1; i >= 0; --i)
      os << pad << "    const long long " << prefix[i]->var << " = lo" << i << "_ + (r_ % n" << i << "_) * " << prefix[i]->step
         << "LL; r_ /= n" << i << "_;\n";
    for (const auto& c : prefix.back()->children) thread_node(*c, pad + "    ");
    os << pad << "  }\n" << pad << "}\n" << pad << "__syncthreads();\n";
  }

  void uniform_node(const Node& n, const std::string& pad) {
    switch (n.kind) {
      case NodeKind::Block:
        for (const auto& c : n.children) uniform_node(*c, pad);
        return;
      case NodeKind::Loop: {
        if (compute_nest(n)) {
          auto prefix = parallel_prefix(n);
          if (!prefix.empty()) return parallel_region(prefix, pad);
        }
        os << pad << "for (long long " << n.var << " = " << int_expr(n.lo) << "; " << n.var << " < " << int_expr(n.hi) << "; "
           << n.var << " += " << n.step << "LL) { /* " << kernel::loop_kind_name(n.loop_kind) << " */\n";
        for (const auto& c : n.children) uniform_node(*c, pad + "  ");
        os << pad << "}\n";
        return;
      }
      case NodeKind::If:
        os << pad << "if (" << int_expr(n.cond) << ") {\n";
        for (const auto& c : n.children) uniform_node(*c, pad + "  ");
        if (!n.else_children.empty()) {
          os << pad << "} else {\n";
          for (const auto& c : n.else_children) uniform_node(*c, pad + "  ");
        }
        os << pad << "}\n";
        return;
      case NodeKind::Let: os << pad << n.var << " = " << int_expr(n.value) << ";\n"; return;
      case NodeKind::Copy: copy(n, pad); return;
      case NodeKind::Compute:
        os << pad << "if (threadIdx.x == 0) {\n";
        compute(n, pad + "  ");
        os << pad << "}\n" << pad << "__syncthreads();\n";
        return;
      case NodeKind::Matmul: matmul(n.matmul, pad); return;
    }
  }
};

void buffers_used(const Node& n, std::set<int>& out) {
  if (n.kind == NodeKind::Copy) {
    if (n.src >= 0) out.insert(n.src);
    if (n.dst >= 0) out.insert(n.dst);
  }
  if (n.kind == NodeKind::Compute)
    for (const auto& [t, b] : n.binding)
      if (b >= 0) out.insert(b);
  if (n.kind == NodeKind::Matmul) {
    out.insert(n.matmul.a);
    out.insert(n.matmul.b);
    out.insert(n.matmul.c);
  }
  for (const auto& c : n.children) buffers_used(*c, out);
  for (const auto& c : n.else_children) buffers_used(*c, out);
}

}  // namespace

std::string kernel_parameters(const kernel::Kernel& k) {
  std::string p;
  for (const auto& t : k.tensors) p += storage_type(t.dtype) + "* __restrict__ t_" + t.name + ", ";
  return p + "unsigned char* __restrict__ scratch";
}

void emit_simt(const kernel::Kernel& k, const isa::GpuMachine& m, std::ostringstream& os, std::vector<Launch>& launches,
               uint64_t& scratch_bytes) {
  // One kernel per top-level ParallelCores loop nest; a run of other top-level nodes (sequential
  // code, copies, lets) is one single-block kernel, so its buffers live in one shared memory.
  std::vector<kernel::NodePtr> top;
  if (k.body->kind == NodeKind::Block)
    top = k.body->children;
  else
    top.push_back(k.body);
  auto is_grid_loop = [](const Node& n) {
    int64_t v;
    return n.kind == NodeKind::Loop && n.loop_kind == kernel::LoopKind::ParallelCores && constant_expr(n.lo, &v) &&
           constant_expr(n.hi, &v);
  };
  std::vector<kernel::NodePtr> groups;
  std::vector<std::vector<const Node*>> lets_before;  // top-level lets each kernel must replay
  std::vector<const Node*> lets_seen;
  for (const auto& n : top) {
    if (is_grid_loop(*n)) {
      groups.push_back(n);
      lets_before.push_back(lets_seen);
    } else {
      if (groups.empty() || is_grid_loop(*groups.back())) {
        auto b = std::make_shared<Node>();
        b->kind = NodeKind::Block;
        groups.push_back(b);
        lets_before.push_back(lets_seen);
      }
      groups.back()->children.push_back(n);
    }
    if (n->kind == NodeKind::Let) lets_seen.push_back(n.get());
  }
  const uint64_t budget = m.shared_bytes_per_block_optin;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Node& root = *groups[gi];
    // perfectly nested ParallelCores loops with constant bounds -> grid
    std::vector<const Node*> pcs;
    const Node* n = &root;
    while (n->kind == NodeKind::Loop && n->loop_kind == kernel::LoopKind::ParallelCores) {
      int64_t lo, hi;
      if (!constant_expr(n->lo, &lo) || !constant_expr(n->hi, &hi)) break;
      pcs.push_back(n);
      if (n->children.size() != 1) break;
      n = n->children[0].get();
    }
    int64_t blocks = 1;
    std::vector<int64_t> trips;
    for (const Node* l : pcs) {
      const int64_t t = std::max<int64_t>(0, (l->hi.evaluate({}) - l->lo.evaluate({}) + l->step - 1) / l->step);
      trips.push_back(t);
      blocks *= t;
    }
    std::set<int> used;
    buffers_used(root, used);
    SimtEmitter e{k, os, {}};
    uint32_t shared = 0;
    uint64_t per_block_scratch = 0;
    std::ostringstream decl;
    for (int id : used) {
      const auto& b = k.buffers.at(id);
      const uint64_t bytes = (uint64_t(b.bytes()) + m.vector_access_bytes - 1) / m.vector_access_bytes * m.vector_access_bytes;
      const std::string ty = storage_type(b.dtype);
      if (shared + bytes <= budget) {
        decl << "  " << ty << "* " << b.name << " = (" << ty << "*)(smem_ + " << shared << "); /* " << b.level << " ("
             << isa::role_name(b.role) << "), shared */\n";
        shared += uint32_t(bytes);
      } else {
        decl << "  " << ty << "* " << b.name << " = (" << ty << "*)(scratch_block_ + " << per_block_scratch << "LL); /* " << b.level
             << ", global scratch: over the shared budget */\n";
        per_block_scratch += bytes;
      }
      e.buffer_ptr[id] = b.name;
    }
    const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(blocks, per_block_scratch ? 1024 : (1 << 20)));
    const std::string name = "tessel_simt_g" + std::to_string(gi);
    os << "\n/* group " << gi << ": " << pcs.size() << " ParallelCores loop(s) -> " << blocks << " block tiles, " << shared
       << " B shared, " << per_block_scratch << " B scratch per block */\n";
    os << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") " << name << "(" << kernel_parameters(k) << ") {\n";
    os << "  extern __shared__ __align__(16) unsigned char smem_[];\n";
    os << "  unsigned char* scratch_block_ = scratch + " << scratch_bytes << "LL + (long long)blockIdx.x * " << per_block_scratch
       << "LL;\n  (void)scratch_block_;\n";
    os << decl.str();
    std::set<std::string> lets(k.let_vars.begin(), k.let_vars.end());
    for (const auto& l : lets) os << "  long long " << l << " = 0; (void)" << l << ";\n";
    for (const Node* l : lets_before[gi]) os << "  " << l->var << " = " << int_expr(l->value) << ";\n";
    os << "  for (long long bid_ = blockIdx.x; bid_ < " << blocks << "LL; bid_ += gridDim.x) {\n";
    os << "    long long br_ = bid_;\n";
    for (int i = int(pcs.size()) - 1; i >= 0; --i)
      os << "    const long long " << pcs[i]->var << " = " << int_expr(pcs[i]->lo) << " + (br_ % " << trips[i] << "LL) * "
         << pcs[i]->step << "LL; br_ /= " << trips[i] << "LL;\n";
    if (pcs.empty())
      e.uniform_node(root, "    ");
    else
      for (const auto& c : pcs.back()->children) e.uniform_node(*c, "    ");
    os << "    __syncthreads();\n  }\n}\n";
    scratch_bytes += per_block_scratch * uint64_t(grid);
    Launch l;
    l.kernel = name;
    l.grid[0] = unsigned(grid);
    l.block = kThreads;
    l.dynamic_shared_bytes = shared;
    launches.push_back(l);
  }
}

}  // namespace tessel::emit_cuda
