#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/kernel/divisibility.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/simt_mapping.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

using kernel::Expr;
using kernel::Node;
using kernel::NodeKind;

// threads of a block unless a group has fewer block tiles than SMs (simt_block_threads)
constexpr unsigned kThreads = kSimtThreads;
// registers per thread assumed when sizing the grid (the generated code's loops and a few values)
constexpr unsigned kRegistersPerThread = 32;
// iterations of a reduction's lane loop unrolled: their loads are independent (only the
// accumulation is a chain), so a lane keeps this many in flight
constexpr int kReductionUnroll = 8;

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
  int reductions = 0;                     // reduction nests emitted (they use red_smem_)
  kernel::Divisors divisors;              // of the kernel's variables (box offsets' alignment)
  std::map<int, int64_t> pitch;           // buffer id -> elements between its rows, where padded
  std::set<int> direct;                   // copy-in boxes read straight from global (simt_direct_buffers)
  std::set<int> direct_out;               // copy-out boxes written straight to global (simt_direct_buffers)
  std::set<std::string> owned_loop_vars;  // see owner_stable
  const Node* pending_init = nullptr;     // an init nest right before the loop being emitted (sequence)
  bool init_folded = false;               // the loop's reduction nest took pending_init over
  bool barrier_left_to_loop = false;      // a nest left its closing barrier to the enclosing loop
  const ir::Statement* reading = nullptr;  // the statement whose right-hand side is being printed
  unsigned threads = kThreads;            // of the block
  int64_t row_pitch(const kernel::Buffer& b) const {
    auto it = pitch.find(b.id);
    return it == pitch.end() ? b.extents.back() : it->second;
  }
  // Index arithmetic in 32 bits where every tensor, buffer and size fits (narrow_indices): 64-bit
  // division and remainder are long instruction sequences on the GPU.
  std::string ix = "long long", L = "LL";
  bool narrow = false;

  void set_narrow(bool n) {
    narrow = n;
    ix = n ? "int" : "long long";
    L = n ? "" : "LL";
  }
  std::string ie(const Expr& e) const {
    if (!narrow) return int_expr(e);
    static constexpr auto literal = [](int64_t v) { return "(" + std::to_string(v) + ")"; };
    return kernel::to_c(e, {+literal, "min", "max"});
  }

  const kernel::GlobalTensor& tensor(const std::string& n) {
    const auto* t = k.find_tensor(n);
    TESSEL_CHECK(t, "emit_cuda: tensor " + n + " is neither global nor bound to a buffer (promote must bind it)");
    return *t;
  }

  std::string linear(int buffer, const std::string& tname, const std::vector<std::string>& g) {
    std::string s = "0" + L;
    if (buffer >= 0) {
      const auto& b = k.buffers.at(buffer);
      for (size_t d = 0; d < g.size(); ++d) {
        const int64_t stride = d + 1 == g.size() ? row_pitch(b) : b.extents[d];
        s = "(" + s + " * " + std::to_string(stride) + L + " + (" + g[d] + " - " + ie(b.offset[d]) + "))";
      }
    } else {
      const auto& t = tensor(tname);
      for (size_t d = 0; d < g.size(); ++d) s = "(" + s + " * " + std::to_string(t.shape[d]) + L + " + " + g[d] + ")";
    }
    return s;
  }
  std::string storage(int buffer, const std::string& tname) { return buffer >= 0 ? buffer_ptr.at(buffer) : "t_" + tname; }

  // An index expression of the statement (quasi-affine: floor division and modulo by constants).
  std::string affine(const ir::AffineExpr& e) {
    return ie(kernel::from_affine(e, k.sizes, [](const std::string& i) { return Expr::var("i_" + i); }));
  }

  std::string access(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::map<std::string, int>& binding) {
    auto it = binding.find(tname);
    const int b = it == binding.end() ? -1 : it->second;
    std::vector<std::string> g;
    for (const auto& e : idx) g.push_back(affine(e));
    if (b >= 0 && direct.count(b)) return direct_read(tname, idx, g);
    if (b >= 0 && direct_out.count(b)) return "t_" + tname + "[" + linear(-1, tname, g) + "]";
    return storage(b, tname) + "[" + linear(b, tname, g) + "]";
  }
  // An element of a copy-in box read from the tensor itself: zero outside the tensor, as the copy
  // would have filled it (folded padding reads there). A dim indexed by one index variable alone
  // is inside the tensor (its range is inferred from, or checked against, the dimension).
  std::string direct_read(const std::string& tname, const std::vector<ir::AffineExpr>& idx, const std::vector<std::string>& g) {
    const auto& t = tensor(tname);
    std::string inside;
    for (size_t d = 0; d < g.size(); ++d) {
      const auto& e = idx[d];
      const bool bare = e.is_affine() && e.param_coeffs.empty() && e.constant == 0 && e.index_coeffs.size() == 1 &&
                        e.index_coeffs.begin()->second == 1;
      if (bare && reading) {
        const ir::IndexVar* v = reading->find_index(e.index_coeffs.begin()->first);
        bool within = false;
        try {
          within = v && v->lo.evaluate({}, k.sizes) >= 0 && v->hi.evaluate({}, k.sizes) <= t.shape[d];
        } catch (...) {  // a size the kernel does not bind: keep the guard
        }
        if (within) continue;
      }
      inside += std::string(inside.empty() ? "" : " && ") + "(unsigned long long)(" + g[d] + ") < " + std::to_string(t.shape[d]) + "ULL";
    }
    const std::string el = "t_" + tname + "[" + linear(-1, tname, g) + "]";
    if (inside.empty()) return el;
    return "((" + inside + ") ? " + el + " : " + store_value(t.dtype, "0") + ")";
  }

  // Whether the code so far ends with a block barrier (a second one right after it is redundant).
  bool after_barrier() const {
    const std::string text = os.str();
    const size_t end = text.find_last_not_of(" \n");
    static const std::string kBarrier = "__syncthreads();";
    return end != std::string::npos && end + 1 >= kBarrier.size() && text.compare(end + 1 - kBarrier.size(), kBarrier.size(), kBarrier) == 0;
  }

  // Binds i_<index> for the statement's domain indices the node gives (only `dims` when set).
  void bind_indices(const Node& n, const ir::Statement& s, const std::string& pad, const std::vector<size_t>* dims = nullptr) {
    std::vector<size_t> vars;
    for (size_t i = 0; i < s.domain.size(); ++i)
      if (!n.init || !s.domain[i].is_reduction) vars.push_back(i);
    TESSEL_CHECK(vars.size() == n.indices.size(), "emit_cuda: compute node of " + s.name + " has the wrong arity");
    for (size_t j = 0; j < vars.size(); ++j)
      if (!dims || std::count(dims->begin(), dims->end(), vars[j]))
        os << pad << "const " << ix << " i_" << s.domain[vars[j]].name << " = " << ie(n.indices[j]) << ";\n";
  }

  // The statement's right-hand side for one instance (its indices bound).
  std::string update_value(const Node& n, const ir::Statement& s) {
    ValueContext ctx;
    ctx.sizes = &k.sizes;
    ctx.affine = [&](const ir::AffineExpr& e) { return affine(e); };
    ctx.access = [&](const ir::Expr& e) { return access(e.name, e.indices, n.binding); };
    reading = &s;
    std::string v = value_expr(*s.rhs, ctx);
    reading = nullptr;
    return v;
  }

  void compute(const Node& n, const std::string& pad) {
    const ir::Statement& s = k.function->statements.at(n.statement);
    os << pad << "{\n";
    bind_indices(n, s, pad + "  ");
    const std::string lhs = access(s.output, s.out_indices, n.binding);
    const DType T = s.acc_type;
    if (n.init) {
      os << pad << "  " << lhs << " = " << store_value(T, reduction_identity(s.reduction, T)) << ";\n";
    } else {
      const std::string rhs = update_value(n, s);
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
    // 128-bit accesses between a global tensor and a box where a chunk of V elements along the
    // last dimension is 16-byte aligned on both sides and wholly inside or outside the tensor: the
    // tensor's row and the box's row are multiples of V and the box's offset along it is one
    // (kernel::divisor; the buffer starts 16-byte aligned)
    const int64_t V = 16 / int64_t(dtype_bytes(box.dtype));
    const int64_t off = r >= 1 ? kernel::divisor(box.offset.back(), divisors) : 1;
    const bool vec = r >= 1 && (out || n.src < 0) && V >= 2 && box.extents.back() % V == 0 && t.shape.back() % V == 0 &&
                     (off == 0 || off % V == 0);
    if (!after_barrier()) os << pad << "__syncthreads();\n";
    os << pad << "for (" << ix << " e_ = threadIdx.x; e_ < " << box.elements() / (vec ? V : 1)
       << L << "; e_ += blockDim.x) { /* copy " << (out ? "out " : "in ") << box.name << (vec ? ", 16 B per thread" : "") << " */\n";
    const std::string ux = narrow ? "unsigned" : ix;
    os << pad << "  " << ux << " r_ = e_;\n";
    std::vector<std::string> g(r);
    std::string in_tensor = "true", in_src = "true";
    for (int d = int(r) - 1; d >= 0; --d) {
      if (vec && d == int(r) - 1)
        os << pad << "  const " << ix << " y" << d << " = " << ie(box.offset[d]) << " + (" << ix << ")(r_ % " << box.extents[d] / V << L
           << ") * " << V << "; r_ /= " << box.extents[d] / V << L << ";\n";
      else
        os << pad << "  const " << ix << " y" << d << " = " << ie(box.offset[d]) << " + (" << ix << ")(r_ % " << box.extents[d] << L
           << "); r_ /= " << box.extents[d] << L << ";\n";
    }
    for (size_t d = 0; d < r; ++d) {
      g[d] = "y" + std::to_string(d);
      if (!(vec && d + 1 == r && box.extents[d] == t.shape[d] && off == 0))
        in_tensor += " && " + g[d] + " >= 0 && " + g[d] + " < " + std::to_string(t.shape[d]) + L;
    }
    if (vec) {
      const std::string b = "*(uint4*)&" + storage(box.id, n.tensor) + "[" + linear(box.id, n.tensor, g) + "]";
      const std::string gl = "*(uint4*)&t_" + n.tensor + "[" + linear(-1, n.tensor, g) + "]";
      if (out)
        os << pad << "  if (" << in_tensor << ") " << gl << " = " << b << ";\n";
      else
        os << pad << "  " << b << " = (" << in_tensor << ") ? " << gl << " : make_uint4(0, 0, 0, 0);\n";
      os << pad << "}\n" << pad << "__syncthreads();\n";
      return;
    }
    if (!out && n.src >= 0) {
      const kernel::Buffer& sb = k.buffers.at(n.src);
      for (size_t d = 0; d < r; ++d) {
        std::string rel = "(" + g[d] + " - " + ie(sb.offset[d]) + ")";
        in_src += " && " + rel + " >= 0 && " + rel + " < " + std::to_string(sb.extents[d]) + L;
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
      for (const auto& c : coords) g.push_back(ie(c));
      return buffer_ptr.at(b.id) + "[" + linear(b.id, b.tensor, g) + "]";
    };
    const bool fl = dtype_is_float(m.acc_type);
    const std::string acc = value_type(m.acc_type);
    os << pad << "{ /* matmul fragment " << m.unit_m << "x" << m.unit_n << "x" << m.unit_k << (m.img2col ? ", img2col view" : "")
       << " (SIMT) */\n"
       << pad << "  const " << ix << " em = " << ie(m.em) << ", en = " << ie(m.en) << ", ek = " << ie(m.ek) << ";\n"
       << pad << "  for (" << ix << " e_ = threadIdx.x; e_ < em * en; e_ += blockDim.x) {\n"
       << pad << "    const " << ix << " frag_m = " << ie(m.m0) << " + e_ / en, frag_n = " << ie(m.n0) << " + e_ % en;\n"
       << pad << "    " << acc << " s_ = " << load_value(m.acc_type, at(C, m.c_coords)) << ";\n"
       << pad << "    for (" << ix << " fk = 0; fk < ek; ++fk) {\n"
       << pad << "      const " << ix << " frag_k = " << ie(m.k0) << " + fk;\n"
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

  // Loops nested one in another, each holding only Lets before the next (root first).
  struct ChainLevel {
    const Node* loop;
    std::vector<const Node*> lets;  // Lets among its children, before the next level
  };
  static std::vector<ChainLevel> loop_chain(const Node& root) {
    std::vector<ChainLevel> chain;
    const Node* n = &root;
    while (n && n->kind == NodeKind::Loop) {
      ChainLevel level{n, {}};
      const Node* next = nullptr;
      bool only_lets_then_loop = true;
      for (const auto& c : n->children) {
        if (!next && c->kind == NodeKind::Let) level.lets.push_back(c.get());
        else if (!next && c->kind == NodeKind::Loop) next = c.get();
        else only_lets_then_loop = false;
      }
      if (!only_lets_then_loop) level.lets.clear();
      chain.push_back(level);
      n = only_lets_then_loop ? next : nullptr;
    }
    return chain;
  }
  static bool threads_may_share(const Node& loop) { return loop.parallel && !loop.rebinds_buffers; }

  // One thread-mapped dimension: a loop, or a stage-tile loop merged with the point loop inside
  // it (v in [lo, hi): tile = lo + floor((v - lo) / step) * step, point = v).
  struct Dim {
    const Node* loop = nullptr;
    const Node* point = nullptr;  // merged point loop
    Expr lo, hi;
    int64_t step = 1;
  };

  // Linear form of an integer expression (variables with coefficients + a constant), if it is one.
  struct Linear {
    std::map<std::string, int64_t> coeff;
    int64_t constant = 0;
    bool operator==(const Linear& o) const {
      auto nz = [](const std::map<std::string, int64_t>& m) {
        std::map<std::string, int64_t> r;
        for (const auto& [v, c] : m)
          if (c) r[v] = c;
        return r;
      };
      return constant == o.constant && nz(coeff) == nz(o.coeff);
    }
  };
  static std::optional<Linear> linear(const Expr& e) {
    Linear l;
    switch (e.kind) {
      case kernel::ExprKind::Int: l.constant = e.value; return l;
      case kernel::ExprKind::Var: l.coeff[e.name] = 1; return l;
      case kernel::ExprKind::Neg: {
        auto a = linear(e.args[0]);
        if (!a) return std::nullopt;
        for (auto& [v, c] : a->coeff) c = -c;
        a->constant = -a->constant;
        return a;
      }
      case kernel::ExprKind::Add:
      case kernel::ExprKind::Sub: {
        auto a = linear(e.args[0]), b = linear(e.args[1]);
        if (!a || !b) return std::nullopt;
        const int64_t sg = e.kind == kernel::ExprKind::Add ? 1 : -1;
        for (const auto& [v, c] : b->coeff) a->coeff[v] += sg * c;
        a->constant += sg * b->constant;
        return a;
      }
      case kernel::ExprKind::Mul: {
        auto a = linear(e.args[0]), b = linear(e.args[1]);
        if (!a || !b) return std::nullopt;
        if (!b->coeff.empty() && a->coeff.empty()) std::swap(a, b);
        if (!b->coeff.empty()) return std::nullopt;
        for (auto& [v, c] : a->coeff) c *= b->constant;
        a->constant *= b->constant;
        return a;
      }
      default: return std::nullopt;
    }
  }

  // A stage-tile loop `t` and the point loop `p` directly inside it that walks exactly its tile:
  // p in [t, t + step) with (hi - lo) a multiple of step, or p in [t, min(t + step, hi)).
  static bool merges(const Node& t, const Node& p) {
    if (p.step != 1 || t.step <= 1 || p.lo.kind != kernel::ExprKind::Var || p.lo.name != t.var) return false;
    Linear tile_end;
    tile_end.coeff[t.var] = 1;
    tile_end.constant = t.step;
    auto full = linear(p.hi);
    if (full && *full == tile_end) {
      auto lo = linear(t.lo), hi = linear(t.hi);
      if (!lo || !hi) return false;
      Linear len = *hi;
      for (const auto& [v, c] : lo->coeff) len.coeff[v] -= c;
      len.constant -= lo->constant;
      return Linear{{}, len.constant} == len && len.constant % t.step == 0;
    }
    if (p.hi.kind != kernel::ExprKind::Min) return false;
    for (int i = 0; i < 2; ++i) {
      auto a = linear(p.hi.args[i]), b = linear(p.hi.args[1 - i]), hi = linear(t.hi);
      if (a && b && hi && *a == tile_end && *b == *hi) return true;
    }
    return false;
  }

  // Groups consecutive levels [from, to) of a chain into dims (merging tile/point pairs).
  static std::vector<Dim> dims_of(const std::vector<ChainLevel>& chain, size_t from, size_t to) {
    std::vector<Dim> dims;
    for (size_t i = from; i < to; ++i) {
      const Node& l = *chain[i].loop;
      Dim d{&l, nullptr, l.lo, l.hi, l.step};
      if (i + 1 < to && merges(l, *chain[i + 1].loop)) {
        d.point = chain[i + 1].loop;
        d.step = 1;
        ++i;
      }
      dims.push_back(d);
    }
    return dims;
  }

  // Whether dims' bounds read none of the variables the chain binds (so they can be decoded from
  // one flat index).
  static bool bounds_independent(const std::vector<Dim>& dims, const std::set<std::string>& bound_in_chain) {
    for (const auto& d : dims) {
      std::set<std::string> bv;
      expr_vars(d.lo, bv);
      expr_vars(d.hi, bv);
      for (const auto& v : bv)
        if (bound_in_chain.count(v)) return false;
    }
    return true;
  }
  static std::set<std::string> bound_in(const std::vector<ChainLevel>& chain) {
    std::set<std::string> out;
    for (const auto& l : chain) {
      out.insert(l.loop->var);
      for (const Node* let : l.lets) out.insert(let->var);
    }
    return out;
  }

  // Trip count of a dim known at compile time: exact, or an upper bound (hi = min(lo + c, x)) with
  // the iteration checked against hi at run time. Constant counts make the flat index's decoding
  // a division by a constant (a multiply and a shift) instead of a runtime division.
  struct TripCount {
    std::optional<int64_t> exact, bound;
  };
  static TripCount trip_count(const Dim& d) {
    auto lo = linear(d.lo);
    auto span = [&](const Expr& h) -> std::optional<int64_t> {
      auto hl = linear(h);
      if (!lo || !hl) return std::nullopt;
      Linear x = *hl;
      for (const auto& [v, c] : lo->coeff) x.coeff[v] -= c;
      x.constant -= lo->constant;
      if (!(Linear{{}, x.constant} == x)) return std::nullopt;
      return std::max<int64_t>(0, (x.constant + d.step - 1) / d.step);
    };
    if (auto c = span(d.hi)) return {c, std::nullopt};
    if (d.hi.kind == kernel::ExprKind::Min)
      for (const auto& h : d.hi.args)
        if (auto c = span(h)) return {std::nullopt, c};
    return {};
  }

  // Declares n<i>_ / lo<i>_ and the flat trip count `total` of `dims`; then, inside a loop that sets
  // `flat`, decode_dims binds their variables and gives the condition that the iteration is real
  // (for dims counted by an upper bound; "true" otherwise).
  void count_dims(const std::vector<Dim>& dims, const std::string& tag, const std::string& pad) {
    std::string total = "1" + L;
    for (size_t i = 0; i < dims.size(); ++i) {
      const Dim& d = dims[i];
      const std::string id = tag + std::to_string(i);
      const TripCount tc = trip_count(d);
      os << pad << "const " << ix << " lo" << id << "_ = " << ie(d.lo) << ";\n";
      if (tc.exact || tc.bound)
        os << pad << "constexpr " << ix << " n" << id << "_ = " << (tc.exact ? *tc.exact : *tc.bound) << ";\n";
      else
        os << pad << "const " << ix << " n" << id << "_ = (" << ie(d.hi) << " - lo" << id << "_ + " << d.step - 1 << L << ") / " << d.step
           << L << ";\n";
      total += " * (n" + id + "_ > 0 ? n" + id + "_ : 0" + L + ")";
    }
    os << pad << "const " << ix << " total" << tag << "_ = " << total << ";\n";
  }
  // The flat index is non-negative: with 32-bit indices it is decoded as unsigned, whose division
  // and remainder by a constant are a multiply-high and a shift (signed ones need sign fix-ups).
  // With `split` > 1 the innermost dim (an exact count n, a multiple of split) is decoded only to
  // its residue q_ in [0, n / split): the thread then runs the body for q_ + u * n / split, u in
  // [0, split) (split_dim_value), so one decoding serves `split` iterations and neighbouring
  // threads still touch neighbouring elements.
  std::string decode_dims(const std::vector<Dim>& dims, const std::string& tag, const std::string& flat, const std::string& pad,
                          int64_t split = 1) {
    const std::string ux = narrow ? "unsigned" : ix;
    os << pad << ux << " r" << tag << "_ = " << flat << ";\n";
    std::string real = "true";
    for (int i = int(dims.size()) - 1; i >= 0; --i) {
      const Dim& d = dims[i];
      const std::string id = tag + std::to_string(i);
      const std::string v = d.point ? d.point->var : d.loop->var;
      const std::string n = "(" + ux + ")n" + id + "_";
      if (split > 1 && i + 1 == int(dims.size())) {
        os << pad << "const " << ix << " q" << tag << "_ = (" << ix << ")(r" << tag << "_ % (" << n << " / " << split << "u)); r" << tag
           << "_ /= " << n << " / " << split << "u;\n";
        continue;
      }
      os << pad << "const " << ix << " " << v << " = lo" << id << "_ + (" << ix << ")(r" << tag << "_ % " << n << ") * " << d.step << L
         << "; r" << tag << "_ /= " << n << ";\n";
      tile_of_point(d, id, pad);
      const TripCount tc = trip_count(d);
      if (!tc.exact && tc.bound) real += " && " + v + " < " + ie(d.hi);
    }
    return real;
  }
  // floor(x / step) for x >= 0 (a point's distance from its first tile's origin)
  std::string tile_index(const std::string& x, int64_t step) const {
    if (narrow) return "(int)((unsigned)(" + x + ") / " + std::to_string(step) + "u)";
    return "((" + x + ") / " + std::to_string(step) + L + ")";
  }
  void tile_of_point(const Dim& d, const std::string& id, const std::string& pad) {
    if (d.point)
      os << pad << "const " << ix << " " << d.loop->var << " = lo" << id << "_ + " << tile_index(d.point->var + " - lo" + id + "_", d.loop->step)
         << " * " << d.loop->step << L << ";\n";
  }
  // The innermost dim's variable for the u-th of `split` iterations (decode_dims with split).
  void split_dim_value(const std::vector<Dim>& dims, const std::string& tag, int64_t split, const std::string& u, const std::string& pad) {
    const Dim& d = dims.back();
    const std::string id = tag + std::to_string(dims.size() - 1);
    const std::string v = d.point ? d.point->var : d.loop->var;
    os << pad << "const " << ix << " " << v << " = lo" << id << "_ + (q" << tag << "_ + " << u << " * (n" << id << "_ / " << split << ")) * "
       << d.step << L << ";\n";
    tile_of_point(d, id, pad);
  }
  // How many iterations of the innermost mapped dim one thread runs per decoding: 4 or 2 where the
  // dims' counts are exact, the innermost is a multiple of it and the block still has an iteration
  // for every thread.
  int64_t inner_split(const std::vector<Dim>& dims) const {
    int64_t total = 1;
    for (const auto& d : dims) {
      const TripCount tc = trip_count(d);
      if (!tc.exact) return 1;
      total *= *tc.exact;
    }
    const int64_t n = *trip_count(dims.back()).exact;
    for (int64_t s : {4, 2})
      if (n % s == 0 && total / s >= int64_t(threads)) return s;
    return 1;
  }

  void thread_node(const Node& n, const std::string& pad) {
    switch (n.kind) {
      case NodeKind::Block:
        for (const auto& c : n.children) thread_node(*c, pad);
        return;
      case NodeKind::Loop:
        os << pad << "for (" << ix << " " << n.var << " = " << ie(n.lo) << "; " << n.var << " < " << ie(n.hi) << "; "
           << n.var << " += " << n.step << L << ") {\n";
        for (const auto& c : n.children) thread_node(*c, pad + "  ");
        os << pad << "}\n";
        return;
      case NodeKind::If:
        os << pad << "if (" << ie(n.cond) << ") {\n";
        for (const auto& c : n.children) thread_node(*c, pad + "  ");
        if (!n.else_children.empty()) {
          os << pad << "} else {\n";
          for (const auto& c : n.else_children) thread_node(*c, pad + "  ");
        }
        os << pad << "}\n";
        return;
      case NodeKind::Let: os << pad << n.var << " = " << ie(n.value) << ";\n"; return;
      case NodeKind::Compute: compute(n, pad); return;
      default: TESSEL_CHECK(false, "emit_cuda: copy or matmul inside a thread-parallel compute nest");
    }
  }

  // The longest prefix of the chain whose loops threads may share, as dims with independent bounds.
  size_t thread_prefix(const std::vector<ChainLevel>& chain) {
    size_t to = 0;
    while (to < chain.size() && threads_may_share(*chain[to].loop)) ++to;
    while (to > 0) {
      std::vector<ChainLevel> mapped(chain.begin(), chain.begin() + to);
      if (bounds_independent(dims_of(chain, 0, to), bound_in(mapped))) break;
      --to;
    }
    return to;
  }

  void parallel_region(const std::vector<ChainLevel>& chain, size_t mapped, const std::string& pad) {
    const auto dims = dims_of(chain, 0, mapped);
    os << pad << "{ /* compute nest over threads: " << mapped << " parallel loop(s) */\n";
    count_dims(dims, "t", pad + "  ");
    const int64_t split = inner_split(dims);
    os << pad << "  for (" << ix << " it_ = threadIdx.x; it_ < totalt_" << (split > 1 ? " / " + std::to_string(split) : "")
       << "; it_ += blockDim.x) {\n";
    const std::string real = decode_dims(dims, "t", "it_", pad + "    ", split);
    std::string p = pad + "    ";
    if (real != "true") os << p << "if (!(" << real << ")) continue;\n";
    if (split > 1) {
      os << p << "#pragma unroll\n" << p << "for (int u_ = 0; u_ < " << split << "; ++u_) {\n";
      p += "  ";
      split_dim_value(dims, "t", split, "u_", p);
    }
    for (size_t i = 0; i + 1 < mapped; ++i)
      for (const Node* let : chain[i].lets) thread_node(*let, p);
    for (const auto& c : chain[mapped - 1].loop->children) thread_node(*c, p);
    if (split > 1) os << pad << "    }\n";
    os << pad << "  }\n" << pad << "}\n" << pad << "__syncthreads();\n";
  }

  // A reduction nest: a loop chain down to one update, whose loops are either shared by threads
  // (the output's loops, O) or not (R: they walk the reduced elements of one output). O loops go
  // to groups of G threads (a warp or more), R loops run inside the group with the innermost
  // strided over its lanes; lanes combine by warp shuffles (xor butterfly, then warps in order
  // through shared memory), and lane 0 folds the result into the output once. The order is fixed
  // (deterministic) but is not the interpreter's: float sums are reassociated.
  //
  // With `outer` (a sequential loop whose body is Lets, copies that emit no code and this nest,
  // loop_private_candidate), the nest is emitted only when a thread owns each output over the whole
  // loop and a thread reduces an output alone (G = 1): the loop then runs inside the thread, around
  // the reduced loops, so an output's updates keep their order and its loads of every iteration
  // are in flight together; otherwise nothing is emitted and false returned.
  bool reduction_nest(const Node& root, const std::string& pad, const Node* outer = nullptr) {
    const auto chain = loop_chain(root);
    const Node& last = *chain.back().loop;
    const Node* update = nullptr;
    std::vector<const Node*> last_lets;
    for (const auto& c : last.children) {
      if (c->kind == NodeKind::Let && !update) last_lets.push_back(c.get());
      else if (c->kind == NodeKind::Compute && !c->init && !update) update = c.get();
      else return false;
    }
    if (!update) return false;
    const ir::Statement& s = k.function->statements.at(update->statement);
    if (s.reduction == ir::Reduction::None) return false;
    std::vector<ChainLevel> O, R;
    for (const auto& l : chain) {
      if (threads_may_share(*l.loop)) O.push_back(l);
      else if (l.loop->rebinds_buffers) return false;
      else R.push_back(l);
    }
    if (R.empty()) return false;  // (no O loop: one output element, the whole block reduces it)
    const auto odims = dims_of(O, 0, O.size());
    const auto rdims = dims_of(R, 0, R.size());
    std::set<std::string> chain_vars = bound_in(chain), r_vars = bound_in(R);
    for (const Node* l : last_lets) r_vars.insert(l->var), chain_vars.insert(l->var);
    if (!bounds_independent(odims, chain_vars)) return false;
    // the output element depends on O loops (and outer variables) only
    std::vector<size_t> out_dims;
    for (size_t i = 0, j = 0; i < s.domain.size(); ++i) {
      if (s.domain[i].is_reduction) continue;
      std::set<std::string> used;
      expr_vars(update->indices.at(i), used);
      for (const auto& v : used)
        if (r_vars.count(v)) return false;
      out_dims.push_back(i);
      (void)j;
    }
    for (const auto& l : O)
      for (const Node* let : l.lets) {
        std::set<std::string> used;
        expr_vars(let->value, used);
        for (const auto& v : used)
          if (r_vars.count(v)) return false;
      }
    // inner R dims bounds may read O vars, outer R vars and lets: fine (they run nested)
    const DType T = s.acc_type;
    const std::string VT = value_type(T);
    const std::string p1 = pad + "  ";
    // group size: a warp, doubled while the outputs still give every group of the block one
    // (known when the output counts are; the block has kThreads threads)
    std::optional<int64_t> outputs = 1;
    for (const auto& d : odims) {
      const TripCount tc = trip_count(d);
      outputs = tc.exact && outputs ? std::optional<int64_t>(*outputs * *tc.exact) : std::nullopt;
    }
    // a column reduction with a thread's worth of outputs per thread group: one thread per output,
    // each walking its column (neighbouring threads read neighbouring elements; no combine)
    const bool column = ir::is_column_reduction(s) && outputs && *outputs >= int64_t(threads) / 2;
    // the reduced elements of one output, all R dims flattened over the lanes where their bounds
    // read no R variable; a short reduction takes fewer lanes (at least 4 elements each, down to
    // a thread per output: its elements in the interpreter's order)
    const bool flat = rdims.size() > 1 && bounds_independent(rdims, r_vars);
    std::optional<int64_t> reduced = 1;
    for (size_t i = flat ? 0 : rdims.size() - 1; i < rdims.size(); ++i) {
      const TripCount tc = trip_count(rdims[i]);
      const std::optional<int64_t> c = tc.exact ? tc.exact : tc.bound;
      reduced = c && reduced ? std::optional<int64_t>(*reduced * *c) : std::nullopt;
    }
    int64_t lanes_cap = int64_t(threads);
    if (reduced) {
      lanes_cap = 1;
      while (lanes_cap < int64_t(threads) && lanes_cap * 2 * 4 <= *reduced) lanes_cap *= 2;
    }
    int64_t G = 0;  // known group size (0: decided at run time)
    if (column) {
      G = 1;
    } else if (outputs || lanes_cap < 32) {
      G = 32;
      if (outputs)
        while (G < int64_t(threads) && *outputs * 2 * G <= int64_t(threads)) G *= 2;
      G = std::min(G, lanes_cap);
    }
    if (outer && !(G == 1 && owner_stable(odims, s, *update) && outputs_private(O, s, *update, out_dims))) return false;
    const bool fuse_init = outer && pending_init && initialises(*pending_init, O, *update, out_dims);
    if (fuse_init) init_folded = true;
    ++reductions;
    os << pad << "{ /* reduction over lanes: " << O.size() << " output loop(s) to thread groups, " << R.size()
       << " reduced loop(s) over the group's lanes" << (outer ? ", inside the thread: the enclosing loop over " + outer->var : "")
       << " */\n";
    count_dims(odims, "o", p1);
    if (column) {
      os << p1 << "constexpr int G_ = 1; /* column reduction: a thread per output */\n";
    } else if (G) {
      os << p1 << "constexpr int G_ = " << G << ";" << (G < 32 ? " /* a short reduction: " + std::to_string(*reduced) + " element(s) per output */" : "")
         << "\n";
    } else {
      os << p1 << "int G_ = 32;\n"
         << p1 << "while (G_ < (int)blockDim.x && totalo_ * 2 * G_ <= (" + ix + ")blockDim.x) G_ *= 2;\n";
    }
    os << p1 << "const int lane_ = threadIdx.x % G_, group_ = threadIdx.x / G_, groups_ = blockDim.x / G_;\n"
       << p1 << "for (" << ix << " base_ = 0; base_ < totalo_; base_ += groups_) {\n"
       << p1 << "  const " << ix << " o_ = base_ + group_;\n"
       << p1 << "  " << VT << " acc_ = " << reduction_identity(s.reduction, T) << ";\n"
       << p1 << "  bool real_ = o_ < totalo_;\n"
       << p1 << "  if (real_) {\n";
    const std::string p3 = p1 + "    ";
    const std::string real = decode_dims(odims, "o", "o_", p3);
    os << p3 << "real_ = " << real << ";\n" << p3 << "if (real_) {\n";
    for (const auto& l : O)
      for (const Node* let : l.lets) thread_node(*let, p3);
    // R loops: outer ones whole, the innermost dim strided by lane
    std::string p = p3;
    if (outer) {
      os << p << "for (" << ix << " " << outer->var << " = " << ie(outer->lo) << "; " << outer->var << " < " << ie(outer->hi) << "; "
         << outer->var << " += " << outer->step << L << ") { /* " << kernel::loop_kind_name(outer->loop_kind) << ", per thread */\n";
      p += "  ";
      for (const auto& c : outer->children)
        if (c->kind == NodeKind::Let) thread_node(*c, p);
    }
    if (flat) {
      count_dims(rdims, "r", p);
      os << p << "#pragma unroll " << kReductionUnroll << "\n" << p << "for (" << ix << " f_ = lane_; f_ < totalr_; f_ += G_) {\n";
      p += "  ";
      const std::string rreal = decode_dims(rdims, "r", "f_", p);
      if (rreal != "true") os << p << "if (!(" << rreal << ")) continue;\n";
      for (const ChainLevel& l : R)
        for (const Node* let : l.lets) thread_node(*let, p);
    }
    for (size_t i = 0; i < (flat ? 0 : rdims.size()); ++i) {
      const Dim& d = rdims[i];
      const bool inner = i + 1 == rdims.size();
      const std::string v = d.point ? d.point->var : d.loop->var;
      if (inner) os << p << "#pragma unroll " << kReductionUnroll << "\n";
      os << p << "for (" << ix << " " << v << " = " << ie(d.lo) << (inner ? " + lane_ * " + std::to_string(d.step) + L : "") << "; "
         << v << " < " << ie(d.hi) << "; " << v << " += " << d.step << L << (inner ? " * G_" : "") << ") {\n";
      p += "  ";
      if (d.point)
        os << p << "const " << ix << " " << d.loop->var << " = " << ie(d.lo) << " + " << tile_index(v + " - " + ie(d.lo), d.loop->step)
           << " * " << d.loop->step << L << ";\n";
      for (const ChainLevel& l : R)
        if (l.loop == d.loop || l.loop == d.point)
          for (const Node* let : l.lets) thread_node(*let, p);
    }
    for (const Node* let : last_lets) thread_node(*let, p);
    os << p << "{\n";
    bind_indices(*update, s, p + "  ");
    os << p << "  const " << VT << " v_ = (" << VT << ")" << update_value(*update, s) << ";\n"
       << p << "  acc_ = " << reduce_values(s.reduction, T, "acc_", "v_") << ";\n"
       << p << "}\n";
    for (size_t i = 0; i < (flat ? 1 : rdims.size()) + (outer ? 1 : 0); ++i) {
      p.resize(p.size() - 2);
      os << p << "}\n";
    }
    os << p3 << "}\n" << p1 << "  }\n";
    // combine: butterfly inside each warp, then the group's warps in order
    if (G == 0 || G >= 32)
      os << p1 << "  for (int s_ = 16; s_ > 0; s_ >>= 1) { const " << VT << " w_ = __shfl_xor_sync(0xffffffffu, acc_, s_); acc_ = "
         << reduce_values(s.reduction, T, "acc_", "w_") << "; }\n";
    else if (G > 1)  // groups inside a warp: xor offsets below G stay in the group
      os << p1 << "  for (int s_ = " << G / 2 << "; s_ > 0; s_ >>= 1) { const " << VT << " w_ = __shfl_xor_sync(0xffffffffu, acc_, s_); acc_ = "
         << reduce_values(s.reduction, T, "acc_", "w_") << "; }\n";
    os
       << p1 << "  if (G_ > 32) {\n"
       << p1 << "    __syncthreads();\n"
       << p1 << "    if (threadIdx.x % 32 == 0) ((" << VT << "*)red_smem_)[threadIdx.x / 32] = acc_;\n"
       << p1 << "    __syncthreads();\n"
       << p1 << "    if (lane_ == 0) for (int w_ = 1; w_ < G_ / 32; ++w_) { const " << VT << " x_ = ((" << VT
       << "*)red_smem_)[threadIdx.x / 32 + w_]; acc_ = " << reduce_values(s.reduction, T, "acc_", "x_") << "; }\n"
       << p1 << "  }\n"
       << p1 << "  if (lane_ == 0 && real_) {\n";
    decode_dims(odims, "o", "o_", p1 + "    ");
    for (const auto& l : O)
      for (const Node* let : l.lets) thread_node(*let, p1 + "    ");
    bind_indices(*update, s, p1 + "    ", &out_dims);
    const std::string lhs = access(s.output, s.out_indices, update->binding);
    if (fuse_init)  // the whole reduction of the output: its identity need not be stored first
      os << p1 << "    " << lhs << " = " << store_value(T, "acc_") << "; /* the output's initialisation folded in */\n";
    else
      os << p1 << "    const " << VT << " cur_ = " << load_value(T, lhs) << ";\n"
         << p1 << "    " << lhs << " = " << store_value(T, reduce_values(s.reduction, T, "cur_", "acc_")) << ";\n";
    os << p1 << "  }\n"
       << p1 << "}\n"
       << pad << "}\n";
    if (!outer && owner_stable(odims, s, *update))
      barrier_left_to_loop = true;
    else
      os << pad << "__syncthreads();\n";
    return true;
  }

  // Inside a sequential loop whose body is this reduction nest alone (owned_loop_vars: the loop's
  // variable and the lets of its body), a thread finds the same outputs in every iteration when
  // the output dims' bounds read none of those variables and the update reads no element of its
  // own output: then only it touches its outputs across iterations and the block barrier between
  // iterations can go (one after the loop instead), so a thread's loads of successive iterations
  // overlap.
  bool owner_stable(const std::vector<Dim>& odims, const ir::Statement& s, const Node& update) const {
    if (owned_loop_vars.empty() || !bounds_independent(odims, owned_loop_vars)) return false;
    std::vector<const std::vector<ir::AffineExpr>*> reads;
    reads_of(*s.rhs, s.output, reads);
    return reads.empty() && update.kind == NodeKind::Compute;
  }
  // Whether `init` (a nest of init statements) sets exactly the outputs a reduction nest with output
  // levels O updates, on the same loops: its chain is O's loops (same variables and bounds, no
  // lets) down to one init of the update's statement at the update's output indices.
  bool initialises(const Node& init, const std::vector<ChainLevel>& O, const Node& update, const std::vector<size_t>& out_dims) {
    const auto chain = loop_chain(init);
    if (chain.size() != O.size()) return false;
    for (size_t i = 0; i < O.size(); ++i) {
      const Node& a = *chain[i].loop;
      const Node& b = *O[i].loop;
      if (a.var != b.var || a.step != b.step || ie(a.lo) != ie(b.lo) || ie(a.hi) != ie(b.hi) || !chain[i].lets.empty() ||
          !O[i].lets.empty())
        return false;
    }
    const Node& last = *chain.back().loop;
    if (last.children.size() != 1) return false;
    const Node& c = *last.children[0];
    if (c.kind != NodeKind::Compute || !c.init || c.statement != update.statement || c.indices.size() != out_dims.size()) return false;
    for (size_t j = 0; j < out_dims.size(); ++j)
      if (ie(c.indices[j]) != ie(update.indices.at(out_dims[j]))) return false;
    return true;
  }

  // Whether the output element and the O levels' lets read none of owned_loop_vars (so one
  // decoding of the outputs serves every iteration of the enclosing loop).
  bool outputs_private(const std::vector<ChainLevel>& O, const ir::Statement& s, const Node& update,
                       const std::vector<size_t>& out_dims) const {
    std::set<std::string> used;
    for (const auto& l : O)
      for (const Node* let : l.lets) expr_vars(let->value, used);
    size_t j = 0;
    for (size_t i = 0; i < s.domain.size(); ++i)
      if (!update.init || !s.domain[i].is_reduction) {
        if (std::count(out_dims.begin(), out_dims.end(), i)) expr_vars(update.indices.at(j), used);
        ++j;
      }
    for (const auto& v : used)
      if (owned_loop_vars.count(v)) return false;
    return true;
  }
  // The loop of a block-uniform walk whose body is Lets, copies of boxes read or written straight
  // from global memory (no code) and one loop nest: owner_stable may then leave the nest's barrier
  // to the end of the loop.
  std::set<std::string> loop_private_candidate(const Node& n) const {
    std::set<std::string> vars{n.var};
    int nests = 0;
    for (const auto& c : n.children) {
      if (c->kind == NodeKind::Let && nests) return {};  // the lets run before the nest
      if (c->kind == NodeKind::Let) vars.insert(c->var);
      else if (c->kind == NodeKind::Copy && ((c->dst >= 0 && direct.count(c->dst)) || (c->dst < 0 && direct_out.count(c->src)))) continue;
      else if (c->kind == NodeKind::Loop && compute_nest(*c)) ++nests;
      else return {};
    }
    return nests == 1 ? vars : std::set<std::string>{};
  }

  // Nodes in order; an init nest followed by a loop whose reduction nest runs inside the thread
  // (reduction_nest with `outer`) and initialises the same outputs is left out, the nest storing
  // its result instead of adding it to the identity. Tried by emitting the loop first: when it
  // does not take the init over, its text is dropped and both are emitted in order.
  void sequence(const std::vector<const Node*>& nodes, const std::string& pad) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = *nodes[i];
      if (i + 1 < nodes.size() && n.kind == NodeKind::Loop && compute_nest(n) && nodes[i + 1]->kind == NodeKind::Loop &&
          !compute_nest(*nodes[i + 1])) {
        const std::string before = os.str();
        pending_init = &n;
        init_folded = false;
        uniform_node(*nodes[i + 1], pad);
        pending_init = nullptr;
        if (init_folded) {
          init_folded = false;
          ++i;
          continue;
        }
        os.str(before);
        os.seekp(0, std::ios_base::end);
      }
      uniform_node(n, pad);
    }
  }

  void uniform_node(const Node& n, const std::string& pad) {
    switch (n.kind) {
      case NodeKind::Block: {
        std::vector<const Node*> nodes;
        for (const auto& c : n.children) nodes.push_back(c.get());
        sequence(nodes, pad);
        return;
      }
      case NodeKind::Loop: {
        if (compute_nest(n)) {
          // a reduction first: mapping only its output loops would leave each thread a whole row
          if (reduction_nest(n, pad)) return;
          const auto chain = loop_chain(n);
          if (const size_t mapped = thread_prefix(chain)) return parallel_region(chain, mapped, pad);
          // no loop of the nest may be shared: one thread runs it whole
          os << pad << "if (threadIdx.x == 0) { /* sequential: the nest's loops carry dependences */\n";
          thread_node(n, pad + "  ");
          os << pad << "}\n" << pad << "__syncthreads();\n";
          return;
        }
        const Node* init = pending_init;  // only this loop's own nest may fold it in
        pending_init = nullptr;
        const std::set<std::string> outer_owned = owned_loop_vars;
        owned_loop_vars = loop_private_candidate(n);
        if (!owned_loop_vars.empty()) {
          const Node* nest = nullptr;
          for (const auto& c : n.children)
            if (c->kind == NodeKind::Loop) nest = c.get();
          pending_init = init;
          const bool inside = reduction_nest(*nest, pad, &n);
          pending_init = nullptr;
          if (inside) {
            owned_loop_vars = outer_owned;
            return;
          }
        }
        os << pad << "for (" << ix << " " << n.var << " = " << ie(n.lo) << "; " << n.var << " < " << ie(n.hi) << "; "
           << n.var << " += " << n.step << L << ") { /* " << kernel::loop_kind_name(n.loop_kind) << " */\n";
        barrier_left_to_loop = false;
        for (const auto& c : n.children) uniform_node(*c, pad + "  ");
        owned_loop_vars = outer_owned;
        os << pad << "}\n";
        if (barrier_left_to_loop) os << pad << "/* the nest kept each output on one thread in every iteration */ __syncthreads();\n";
        barrier_left_to_loop = false;
        return;
      }
      case NodeKind::If:
        os << pad << "if (" << ie(n.cond) << ") {\n";
        for (const auto& c : n.children) uniform_node(*c, pad + "  ");
        if (!n.else_children.empty()) {
          os << pad << "} else {\n";
          for (const auto& c : n.else_children) uniform_node(*c, pad + "  ");
        }
        os << pad << "}\n";
        return;
      case NodeKind::Let: os << pad << n.var << " = " << ie(n.value) << ";\n"; return;
      case NodeKind::Copy:
        if (n.dst >= 0 && direct.count(n.dst)) return;  // its readers read the tensor
        if (n.dst < 0 && direct_out.count(n.src)) return;  // its writers wrote the tensor
        copy(n, pad);
        return;
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

// Whether every index value of the kernel fits 32-bit arithmetic with room to spare: tensor and
// buffer element counts and sizes below 2^30 (linear offsets, loop bounds and tile origins are
// bounded by them).
bool narrow_indices(const kernel::Kernel& k) {
  constexpr int64_t kLimit = int64_t(1) << 30;
  for (const auto& t : k.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= std::max<int64_t>(1, d);
    if (n >= kLimit) return false;
  }
  for (const auto& b : k.buffers)
    if (b.elements() >= kLimit) return false;
  for (const auto& [p, v] : k.sizes)
    if (v >= kLimit || v <= -kLimit) return false;
  return true;
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
  const kernel::Divisors divisors = kernel::variable_divisors(k);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const Node& root = *groups[gi];
    // perfectly nested ParallelCores loops with constant bounds that carry no dependence -> grid
    std::vector<const Node*> pcs;
    const Node* n = &root;
    while (n->kind == NodeKind::Loop && n->loop_kind == kernel::LoopKind::ParallelCores && n->parallel) {
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
    std::ostringstream body;
    SimtEmitter e{k, body, {}};
    e.set_narrow(narrow_indices(k));
    e.divisors = divisors;
    const SimtDirectBuffers direct = simt_direct_buffers(k, groups[gi]);
    e.direct = direct.in;
    e.direct_out = direct.out;
    e.threads = simt_block_threads(k, m, used, blocks);
    for (int id : e.direct) used.erase(id);
    for (int id : e.direct_out) used.erase(id);
    uint32_t shared = 0;
    uint64_t per_block_scratch = 0;
    std::ostringstream decl;
    const auto round_up = [&](uint64_t x) { return (x + m.vector_access_bytes - 1) / m.vector_access_bytes * m.vector_access_bytes; };
    for (int id : used) {
      const auto& b = k.buffers.at(id);
      uint64_t bytes = round_up(uint64_t(b.bytes()));
      const std::string ty = storage_type(b.dtype);
      // Rows a whole number of bank rows long put a column in one bank: a thread per row reading
      // a column (a transpose, a reduction over rows) would conflict 32 ways. Such rows get one
      // vector access of padding (rows stay 16-byte aligned; a column spreads over 8 banks).
      const uint64_t eb = dtype_bytes(b.dtype);
      if (b.extents.size() >= 2 && b.elements() > b.extents.back() && (b.extents.back() * eb) % (uint64_t(m.shared_banks) * m.shared_bank_width_bytes) == 0) {
        const int64_t padded = b.extents.back() + int64_t(m.vector_access_bytes / eb);
        const uint64_t padded_bytes = round_up(uint64_t(b.elements() / b.extents.back() * padded) * eb);
        if (shared + padded_bytes <= budget) {
          e.pitch[id] = padded;
          bytes = padded_bytes;
        }
      }
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
    for (int i = int(pcs.size()) - 1; i >= 0; --i)
      body << "    const " << e.ix << " " << pcs[i]->var << " = " << e.ie(pcs[i]->lo) << " + (br_ % " << trips[i] << e.L << ") * "
           << pcs[i]->step << e.L << "; br_ /= " << trips[i] << e.L << ";\n";
    // Copies of input boxes placed the same for every block tile (a bias, gamma, a weight row) run
    // once per block, before the loop over its tiles.
    std::vector<const Node*> hoisted;
    if (!pcs.empty()) {
      std::set<std::string> bound_inside;
      for (const Node* l : pcs) bound_inside.insert(l->var);
      kernel::for_each_node(groups[gi], [&](const Node& x, int) {
        if (x.kind == NodeKind::Let || x.kind == NodeKind::Loop) bound_inside.insert(x.var);
      });
      for (const auto& c : pcs.back()->children) {
        if (c->kind != NodeKind::Copy || c->dst < 0 || c->src >= 0) continue;
        const kernel::GlobalTensor* t = k.find_tensor(c->tensor);
        if (!t || t->kind != ir::TensorKind::Input) continue;
        std::set<std::string> used;
        for (const auto& o : k.buffers.at(c->dst).offset) expr_vars(o, used);
        bool invariant = true;
        for (const auto& v : used) invariant &= !bound_inside.count(v);
        if (invariant) hoisted.push_back(c.get());
      }
    }
    if (pcs.empty())
      e.uniform_node(root, "    ");
    else {
      std::vector<const Node*> nodes;
      for (const auto& c : pcs.back()->children)
        if (std::find(hoisted.begin(), hoisted.end(), c.get()) == hoisted.end()) nodes.push_back(c.get());
      e.sequence(nodes, "    ");
    }
    std::ostringstream before;  // the hoisted copies
    {
      SimtEmitter h{k, before, e.buffer_ptr};
      h.set_narrow(e.narrow);
      h.divisors = divisors;
      h.pitch = e.pitch;
      h.direct = e.direct;
      h.direct_out = e.direct_out;
      h.threads = e.threads;
      for (const Node* c : hoisted) h.uniform_node(*c, "  ");
    }
    if (e.reductions) {  // one 8-byte slot per warp for the reduction nests' cross-warp step
      decl << "  unsigned char* red_smem_ = smem_ + " << shared << "; /* reduction nests: a value per warp */\n";
      shared += uint32_t(8 * ((e.threads + m.warp_size - 1) / m.warp_size));
    }
    // one wave of resident blocks (shared memory and registers per SM from the machine model, a
    // block of e.threads at up to kRegistersPerThread each); the blocks loop over the tiles
    const uint64_t by_shared = m.shared_bytes_per_sm / std::max<uint64_t>(1, shared + m.shared_bytes_reserved_per_block);
    const uint64_t by_registers = m.registers_per_sm / (uint64_t(e.threads) * kRegistersPerThread);
    const int64_t resident = int64_t(std::max<uint64_t>(1, std::min(by_shared, by_registers)));
    const int64_t wave = int64_t(std::max<uint32_t>(1, m.sm_count)) * resident;
    const int64_t grid = std::max<int64_t>(1, std::min<int64_t>({blocks, per_block_scratch ? 1024 : (1 << 20), wave}));
    const std::string name = "tessel_simt_g" + std::to_string(gi);
    os << "\n/* group " << gi << ": " << pcs.size() << " ParallelCores loop(s) -> " << blocks << " block tiles, " << shared
       << " B shared, " << per_block_scratch << " B scratch per block */\n";
    os << "extern \"C\" __global__ void __launch_bounds__(" << e.threads << ") " << name << "(" << kernel_parameters(k) << ") {\n";
    os << "  extern __shared__ __align__(16) unsigned char smem_[];\n";
    os << "  unsigned char* scratch_block_ = scratch + " << scratch_bytes << "LL + (long long)blockIdx.x * " << per_block_scratch
       << "LL;\n  (void)scratch_block_;\n";
    os << decl.str();
    std::set<std::string> lets(k.let_vars.begin(), k.let_vars.end());
    for (const auto& l : lets) os << "  " << e.ix << " " << l << " = 0; (void)" << l << ";\n";
    for (const Node* l : lets_before[gi]) os << "  " << l->var << " = " << e.ie(l->value) << ";\n";
    os << before.str();
    os << "  for (" << e.ix << " bid_ = blockIdx.x; bid_ < " << blocks << e.L << "; bid_ += gridDim.x) {\n";
    os << "    " << e.ix << " br_ = bid_;\n";
    os << body.str();
    // tiles are separated by a barrier (the body's last one where it ends with one)
    os << (e.after_barrier() ? "" : "    __syncthreads();\n") << "  }\n}\n";
    scratch_bytes += per_block_scratch * uint64_t(grid);
    Launch l;
    l.kernel = name;
    l.grid[0] = unsigned(grid);
    l.block = e.threads;
    l.dynamic_shared_bytes = shared;
    launches.push_back(l);
  }
}

}  // namespace tessel::emit_cuda
