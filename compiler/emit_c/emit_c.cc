#include "compiler/emit_c/emit_c.h"

#include <functional>
#include <set>
#include <sstream>

#include "compiler/kernel/c_value.h"
#include "isa/base/error.h"

namespace tessel::emit_c {

namespace {

using kernel::Expr;
using kernel::ExprKind;

// C storage type of dtype t. bf16 is stored as its bits (uint16_t: gcc 12 has no bf16
// arithmetic) and computed as a float holding a bf16 value (vtype), rounded by tessel_rbf16.
std::string ctype(DType t) {
  switch (t) {
    case DType::F16: return "tessel_f16";
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I8: return "int8_t";
    case DType::U8: return "uint8_t";
    case DType::I32: return "int32_t";
    case DType::BF16: return "uint16_t";
  }
  throw UserError("--target c: dtype " + std::string(dtype_name(t)) + " is not supported by the C emitter");
}

// C type of a value of dtype t (a load of storage `s`, a store of value `v`: (T)v but for bf16)
std::string vtype(DType t) { return t == DType::BF16 ? "float" : ctype(t); }
std::string load(DType t, const std::string& s) { return t == DType::BF16 ? "tessel_bf2f(" + s + ")" : s; }
std::string store(DType t, const std::string& v) { return t == DType::BF16 ? "tessel_f2bf(" + v + ")" : "(" + ctype(t) + ")" + v; }

std::string c_long_literal(int64_t v) { return v < 0 ? "(" + std::to_string(v) + "L)" : std::to_string(v) + "L"; }

std::string cexpr(const Expr& e) { return to_c(e, {c_long_literal, "tessel_min", "tessel_max"}); }

std::string affine(const ir::AffineExpr& e, const std::map<std::string, int64_t>& sizes) {
  int64_t c = e.constant;
  for (const auto& [p, k] : e.param_coeffs) c += k * sizes.at(p);
  std::string s = "(" + std::to_string(c) + "L";
  for (const auto& [i, k] : e.index_coeffs) s += " + " + std::to_string(k) + "L*i_" + i;
  if (e.has_div())  // floor((..)/d) terms through tessel_floordiv (exact for negative numerators)
    s += " + " + cexpr(kernel::division_terms(e, sizes, [](const std::string& i) { return Expr::var("i_" + i); }));
  return s + ")";
}

// The C emitter computes in the storage types: f16 is _Float16, so every cast to it rounds; bf16
// computes in float, each result rounded by tessel_rbf16 (the interpreter's round_to_bf16).
std::string c_float_result(DType t, const std::string& v, bool primary) {
  if (t == DType::BF16) return "tessel_rbf16(" + v + ")";
  return primary ? "((" + ctype(t) + ")" + v + ")" : "((" + ctype(t) + ")(" + v + "))";
}

const kernel::CValueDialect kDialect = {
    .value_type = vtype, .float_result = c_float_result, .inf = "INFINITY", .neg_inf = "(-INFINITY)", .nan = nullptr,
    .to_float = "", .widen = "", .helper_arg = "(long)", .long_suffix = "L", .int_constant = "(float)",
    .int_size_suffix = "", .int_helpers = false, .float_negate = false};

struct Emitter {
  const kernel::Kernel& k;
  std::ostringstream os;
  int tmp = 0;

  const kernel::GlobalTensor& tensor(const std::string& n) {
    const auto* t = k.find_tensor(n);
    TESSEL_CHECK(t, "emit_c: tensor " + n + " is neither global nor bound to a buffer (promote must bind it)");
    return *t;
  }

  // linear element index of global coordinates `g` (C expressions) in the buffer or tensor
  std::string linear(int buffer, const std::string& tname, const std::vector<std::string>& g) {
    std::string s = "0L";
    if (buffer >= 0) {
      const auto& b = k.buffers.at(buffer);
      for (size_t d = 0; d < g.size(); ++d)
        s = "(" + s + " * " + std::to_string(b.extents[d]) + "L + (" + g[d] + " - " + cexpr(b.offset[d]) + "))";
    } else {
      const auto& t = tensor(tname);
      for (size_t d = 0; d < g.size(); ++d) s = "(" + s + " * " + std::to_string(t.shape[d]) + "L + " + g[d] + ")";
    }
    return s;
  }
  std::string storage(int buffer, const std::string& tname) {
    return buffer >= 0 ? k.buffers.at(buffer).name : "t_" + tname;
  }

  std::string access(const std::string& tname, const std::vector<ir::AffineExpr>& idx,
                     const std::map<std::string, int>& binding) {
    auto it = binding.find(tname);
    int b = it == binding.end() ? -1 : it->second;
    std::vector<std::string> g;
    for (const auto& e : idx) g.push_back(affine(e, k.sizes));
    return storage(b, tname) + "[" + linear(b, tname, g) + "]";
  }

  std::string value(const ir::Expr& e, const std::map<std::string, int>& binding) {
    return kernel::c_value(e, {kDialect, [&](const ir::AffineExpr& a) { return affine(a, k.sizes); },
                               [&](const ir::Expr& a) { return load(a.type, access(a.name, a.indices, binding)); }, &k.sizes});
  }

  std::string identity(ir::Reduction r, DType t) {
    const std::string T = vtype(t);
    if (r == ir::Reduction::Sum) return "((" + T + ")0)";
    if (r == ir::Reduction::Prod) return "((" + T + ")1)";
    bool mx = r == ir::Reduction::Max;
    if (dtype_is_float(t)) return "((" + T + ")(" + std::string(mx ? "-INFINITY" : "INFINITY") + "))";
    switch (t) {
      case DType::I8: return mx ? "INT8_MIN" : "INT8_MAX";
      case DType::U8: return mx ? "0" : "UINT8_MAX";
      default: return mx ? "INT32_MIN" : "INT32_MAX";
    }
  }

  void compute(const kernel::Node& n, const std::string& pad) {
    const ir::Statement& s = k.function->statements.at(n.statement);
    os << pad << "{\n";
    std::vector<const ir::IndexVar*> vars;
    if (n.init) {
      for (const auto& v : s.domain)
        if (!v.is_reduction) vars.push_back(&v);
    } else {
      for (const auto& v : s.domain) vars.push_back(&v);
    }
    TESSEL_CHECK(vars.size() == n.indices.size(), "emit_c: compute node of " + s.name + " has the wrong arity");
    for (size_t i = 0; i < vars.size(); ++i)
      os << pad << "  const long i_" << vars[i]->name << " = " << cexpr(n.indices[i]) << ";\n";
    std::string lhs = access(s.output, s.out_indices, n.binding);
    const DType A = s.acc_type;
    const std::string T = ctype(A);
    if (n.init) {
      const std::string id = identity(s.reduction, A);
      os << pad << "  " << lhs << " = " << (A == DType::BF16 ? store(A, id) : id) << ";\n";
    } else {
      std::string rhs = value(*s.rhs, n.binding);
      const bool fl = dtype_is_float(s.acc_type);
      const std::string F = A == DType::F64 ? "double" : "float";  // the type a float step computes in
      std::string cur = fl ? "((" + F + ")" + load(A, lhs) + ")" : lhs;
      std::string r = fl ? "((" + F + ")" + rhs + ")" : rhs;
      const std::string fmax = A == DType::F64 ? "tessel_dmax(" : "tessel_fmax(", fmin = A == DType::F64 ? "tessel_dmin(" : "tessel_fmin(";
      switch (s.reduction) {
        case ir::Reduction::None: os << pad << "  " << lhs << " = " << store(A, rhs) << ";\n"; break;
        case ir::Reduction::Sum: os << pad << "  " << lhs << " = " << store(A, "(" + cur + " + " + r + ")") << ";\n"; break;
        case ir::Reduction::Prod:  // integers wrap (unsigned product; the store truncates to T)
          if (fl)
            os << pad << "  " << lhs << " = " << store(A, "(" + cur + " * " + r + ")") << ";\n";
          else
            os << pad << "  " << lhs << " = (" << T << ")((unsigned long long)" << cur << " * (unsigned long long)(" << r
               << "));\n";
          break;
        case ir::Reduction::Max:
          if (fl)
            os << pad << "  " << lhs << " = " << store(A, fmax + cur + ", " + r + ")") << ";\n";
          else
            os << pad << "  { " << T << " v_ = (" << T << ")" << rhs << "; if (v_ > " << lhs << ") " << lhs << " = v_; }\n";
          break;
        case ir::Reduction::Min:
          if (fl)
            os << pad << "  " << lhs << " = " << store(A, fmin + cur + ", " + r + ")") << ";\n";
          else
            os << pad << "  { " << T << " v_ = (" << T << ")" << rhs << "; if (v_ < " << lhs << ") " << lhs << " = v_; }\n";
          break;
      }
    }
    os << pad << "}\n";
  }

  void copy(const kernel::Node& n, const std::string& pad) {
    const bool out = n.dst < 0;
    const kernel::Buffer& box = k.buffers.at(out ? n.src : n.dst);
    const auto& t = tensor(n.tensor);
    const size_t r = box.extents.size();
    os << pad << "{ /* copy " << (out ? "out " : "in ") << box.name << " */\n";
    std::vector<std::string> g;
    std::string in_tensor = "1", in_src = "1";
    for (size_t d = 0; d < r; ++d) {
      std::string i = "x" + std::to_string(d);
      os << pad << "  for (long " << i << " = 0; " << i << " < " << box.extents[d] << "L; ++" << i << ") {\n";
      os << pad << "  const long y" << d << " = " << cexpr(box.offset[d]) << " + " << i << ";\n";
      g.push_back("y" + std::to_string(d));
      in_tensor += " && y" + std::to_string(d) + " >= 0 && y" + std::to_string(d) + " < " + std::to_string(t.shape[d]) + "L";
    }
    if (!out && n.src >= 0) {
      const kernel::Buffer& sb = k.buffers.at(n.src);
      for (size_t d = 0; d < r; ++d) {
        std::string rel = "(y" + std::to_string(d) + " - " + cexpr(sb.offset[d]) + ")";
        in_src += " && " + rel + " >= 0 && " + rel + " < " + std::to_string(sb.extents[d]) + "L";
      }
    }
    std::string dst_lin = linear(box.id, n.tensor, g);
    if (out) {
      os << pad << "    if (" << in_tensor << ") t_" << n.tensor << "[" << linear(-1, n.tensor, g) << "] = " << box.name
         << "[" << dst_lin << "];\n";
    } else {
      std::string src = storage(n.src, n.tensor) + "[" + linear(n.src, n.tensor, g) + "]";
      os << pad << "    " << box.name << "[" << dst_lin << "] = (" << in_tensor << " && " << in_src << ") ? " << src
         << " : (" << ctype(box.dtype) << ")0;\n";
    }
    for (size_t d = 0; d < r; ++d) os << pad << "  }\n";
    os << pad << "}\n";
  }

  void matmul(const kernel::MatmulOp& m, const std::string& pad) {
    const auto& A = k.buffers.at(m.a);
    const auto& B = k.buffers.at(m.b);
    const auto& C = k.buffers.at(m.c);
    const std::string acc = vtype(m.acc_type);
    const bool bf = m.acc_type == DType::BF16;  // the product and each sum rounded, as the statement's
    auto at = [&](const kernel::Buffer& b, const std::vector<Expr>& coords) {
      std::vector<std::string> g;
      for (const auto& c : coords) g.push_back(cexpr(c));
      return b.name + "[" + linear(b.id, b.tensor, g) + "]";
    };
    os << pad << "{ /* matmul fragment " << m.unit_m << "x" << m.unit_n << "x" << m.unit_k
       << (m.img2col ? ", img2col view" : "") << " */\n"
       << pad << "  const long em = " << cexpr(m.em) << ", en = " << cexpr(m.en) << ", ek = " << cexpr(m.ek) << ";\n"
       << pad << "  for (long fi = 0; fi < em; ++fi)\n"
       << pad << "    for (long fj = 0; fj < en; ++fj) {\n"
       << pad << "      const long frag_m = " << cexpr(m.m0) << " + fi, frag_n = " << cexpr(m.n0) << " + fj;\n"
       << pad << "      " << acc << " s_ = " << load(C.dtype, at(C, m.c_coords)) << ";\n"
       << pad << "      for (long fk = 0; fk < ek; ++fk) {\n"
       << pad << "        const long frag_k = " << cexpr(m.k0) << " + fk;\n"
       << pad << "        s_ = " << (bf ? "tessel_rbf16(s_ + tessel_rbf16(" : "(" + acc + ")(s_ + ") << "(" << acc << ")"
       << load(A.dtype, at(A, m.a_coords)) << " * (" << acc << ")" << load(B.dtype, at(B, m.b_coords)) << (bf ? "));\n" : ");\n")
       << pad << "      }\n"
       << pad << "      " << at(C, m.c_coords) << " = " << (bf ? store(C.dtype, "s_") : "s_") << ";\n"
       << pad << "    }\n"
       << pad << "}\n";
  }

  void node(const kernel::Node& n, int depth) {
    std::string pad(2 * depth, ' ');
    switch (n.kind) {
      case kernel::NodeKind::Block:
        for (const auto& c : n.children) node(*c, depth);
        return;
      case kernel::NodeKind::Loop:
        os << pad << "for (long " << n.var << " = " << cexpr(n.lo) << "; " << n.var << " < " << cexpr(n.hi) << "; "
           << n.var << " += " << n.step << ") { /* " << kernel::loop_kind_name(n.loop_kind) << " */\n";
        for (const auto& c : n.children) node(*c, depth + 1);
        os << pad << "}\n";
        return;
      case kernel::NodeKind::If:
        os << pad << "if (" << cexpr(n.cond) << ") {\n";
        for (const auto& c : n.children) node(*c, depth + 1);
        if (!n.else_children.empty()) {
          os << pad << "} else {\n";
          for (const auto& c : n.else_children) node(*c, depth + 1);
        }
        os << pad << "}\n";
        return;
      case kernel::NodeKind::Let: os << pad << n.var << " = " << cexpr(n.value) << ";\n"; return;
      case kernel::NodeKind::Copy: copy(n, pad); return;
      case kernel::NodeKind::Compute: compute(n, pad); return;
      case kernel::NodeKind::Matmul: matmul(n.matmul, pad); return;
    }
  }
};

// The fused attention kernel (Kernel::attention, compiler/kernel/attention.h): per batch point and
// query row, the keys in blocks of kAttentionBlock with a running maximum, sum and context, the
// old state rescaled by exp(m_old - m_new) whenever the maximum grows. The scores of one block
// live in a local array: no S x T tensor.
constexpr int64_t kAttentionBlock = 64;

std::string attention_function(const kernel::Kernel& k, const std::string& symbol) {
  const kernel::Attention& a = *k.attention;
  std::ostringstream os;
  auto role_var = [](const std::string& role) { return "r_" + role; };
  auto affine_of = [&](const ir::AffineExpr& e, const std::map<std::string, std::string>& rename) {
    int64_t c = e.constant;
    for (const auto& [p, x] : e.param_coeffs) c += x * k.sizes.at(p);
    std::string s = "(" + std::to_string(c) + "L";
    for (const auto& [i, x] : e.index_coeffs) s += " + " + std::to_string(x) + "L*" + role_var(rename.at(i));
    return s + ")";
  };
  auto element = [&](const kernel::AttentionOperand& o) {
    std::string s = std::to_string(o.base) + "L";
    for (const auto& [v, c] : o.coeff) s += " + " + std::to_string(c) + "L*" + role_var(v);
    return "t_" + o.tensor + "[" + s + "]";
  };
  // an element-wise expression of the record; running values by name
  auto value = [&](const kernel::AttentionExpr& x, const std::map<std::string, std::string>& running) {
    return kernel::c_value(*x.expr, {kDialect, [&](const ir::AffineExpr& e) { return affine_of(e, x.rename); },
                                     [&](const ir::Expr& acc) -> std::string {
                                       if (auto it = x.inputs.find(acc.name); it != x.inputs.end()) return running.at(it->second);
                                       const kernel::GlobalTensor* t = k.find_tensor(acc.name);
                                       TESSEL_CHECK(t, "emit_c: the attention kernel reads " + acc.name + ", no tensor of it");
                                       std::string lin = "0L";
                                       for (size_t d = 0; d < acc.indices.size(); ++d)
                                         lin = "(" + lin + " * " + std::to_string(t->shape[d]) + "L + " + affine_of(acc.indices[d], x.rename) + ")";
                                       return load(acc.type, "t_" + acc.name + "[" + lin + "]");
                                     },
                                     &k.sizes});
  };
  int64_t values = 1;
  for (const auto& d : a.value) values *= d.extent;
  os << "/* kernel " << k.name << " for " << k.target << ": " << a.name << ", online softmax */\n";
  os << "void " << symbol << "(void** args) {\n";
  int arg = 0;
  for (const auto& t : k.tensors)
    os << "  " << ctype(t.dtype) << "* t_" << t.name << " = (" << ctype(t.dtype) << "*)args[" << arg++ << "];\n";
  os << "  static float acc[" << values << "];\n  static float s[" << kAttentionBlock << "];\n";
  std::string pad = "  ";
  std::string close;
  auto open_loop = [&](const kernel::ContractionDim& d) {
    os << pad << "for (long " << role_var(d.var) << " = 0; " << role_var(d.var) << " < " << d.extent << "L; ++" << role_var(d.var) << ") {\n";
    pad += "  ";
  };
  auto close_loop = [&] {
    pad.resize(pad.size() - 2);
    os << pad << "}\n";
  };
  // the value loops with the flat position `ve` of the context element
  auto value_loops = [&](const std::function<void()>& body) {
    os << pad << "{ long ve = 0;\n";
    for (const auto& d : a.value) open_loop(d);
    body();
    os << pad << "++ve;\n";
    for (size_t n = 0; n < a.value.size(); ++n) close_loop();
    os << pad << "}\n";
  };
  for (const auto& d : a.batch) open_loop(d);
  open_loop(a.query);
  const std::string I = role_var(a.query.var), J = role_var(a.key.var);
  os << pad << "float m = -INFINITY, l = 0.0f;\n";
  os << pad << "for (long n = 0; n < " << values << "L; ++n) acc[n] = 0.0f;\n";
  os << pad << "for (long j0 = 0; j0 < " << a.key.extent << "L; j0 += " << kAttentionBlock << "L) {\n";
  pad += "  ";
  if (a.causal_offset) os << pad << "if (j0 > " << I << " + " << *a.causal_offset << "L) break; /* causal: the rest is masked */\n";
  os << pad << "const long jn = tessel_min(" << a.key.extent << "L, j0 + " << kAttentionBlock << "L);\n";
  os << pad << "float bm = -INFINITY;\n";
  os << pad << "for (long " << J << " = j0; " << J << " < jn; ++" << J << ") {\n";
  pad += "  ";
  os << pad << "float x = 0.0f;\n";
  for (const auto& d : a.head) open_loop(d);
  os << pad << "x += (float)" << load(a.q.dtype, element(a.q)) << " * (float)" << load(a.k.dtype, element(a.k)) << ";\n";
  for (size_t n = 0; n < a.head.size(); ++n) close_loop();
  std::string cur = "x";
  if (a.score_type != DType::F32) {  // the scores as the def stores them (accumulated in f32 here)
    os << pad << vtype(a.score_type) << " xs = " << c_float_result(a.score_type, "x", true) << ";\n";
    cur = "xs";
  }
  for (size_t n = 0; n < a.steps.size(); ++n) {
    const std::string v = "v" + std::to_string(n);
    os << pad << vtype(a.steps[n].type) << " " << v << " = " << value(a.steps[n], {{"score", cur}}) << ";\n";
    cur = v;
  }
  os << pad << "s[" << J << " - j0] = (float)" << cur << ";\n";
  os << pad << "bm = tessel_fmax(bm, s[" << J << " - j0]);\n";
  close_loop();
  os << pad << "const float mn = tessel_fmax(m, bm);\n";
  os << pad << "const float mu = mn == -INFINITY ? 0.0f : mn; /* a row masked so far: no -inf - -inf */\n";
  os << pad << "const float c = expf(m - mu);\n";
  os << pad << "l *= c;\n";
  os << pad << "for (long n = 0; n < " << values << "L; ++n) acc[n] *= c;\n";
  os << pad << "for (long " << J << " = j0; " << J << " < jn; ++" << J << ") {\n";
  pad += "  ";
  os << pad << "const float p = (float)" << c_float_result(a.prob_type, "expf(s[" + J + " - j0] - mu)", true) << ";\n";
  os << pad << "l += p;\n";
  value_loops([&] { os << pad << "acc[ve] += p * (float)" << load(a.v.dtype, element(a.v)) << ";\n"; });
  close_loop();
  os << pad << "m = mn;\n";
  close_loop();
  value_loops([&] {
    // O and Z in the dtypes the def stores them in (accumulated in f32 here)
    const std::string o = c_float_result(a.context_type, a.normalise_first ? "(acc[ve] / l)" : "acc[ve]", true);
    const std::string z = c_float_result(a.sum_type, "l", true);
    std::string result;
    if (a.epilogue.expr) result = value(a.epilogue, {{"O", o}, {"Z", z}});
    else result = o;
    os << pad << element(a.out) << " = " << store(a.out.dtype, "(" + result + ")") << ";\n";
  });
  close_loop();
  for (size_t n = 0; n < a.batch.size(); ++n) close_loop();
  os << "}\n";
  (void)close;
  return os.str();
}

}  // namespace

std::string prelude() {
  return R"(#include <math.h>
#include <stdint.h>
#include <stdlib.h>
typedef _Float16 tessel_f16;
/* bf16 stored as its bits, computed in float: tessel_rbf16 rounds to nearest even on the bits,
   NaN quieted (the interpreter's round_to_bf16, compiler/interp/scalar.h) */
static inline float tessel_rbf16(float v) {
  union { float f; uint32_t u; } x = {v};
  if ((x.u & 0x7fffffffu) > 0x7f800000u) x.u |= 0x00400000u; else x.u += 0x7fffu + ((x.u >> 16) & 1u);
  x.u &= 0xffff0000u;
  return x.f;
}
static inline float tessel_bf2f(uint16_t h) { union { uint32_t u; float f; } x = {(uint32_t)h << 16}; return x.f; }
static inline uint16_t tessel_f2bf(float v) { union { float f; uint32_t u; } x = {tessel_rbf16(v)}; return (uint16_t)(x.u >> 16); }
static inline long tessel_floordiv(long a, long b) { long q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) --q; return q; }
static inline long tessel_mod(long a, long b) { return a - b * tessel_floordiv(a, b); }
static inline long tessel_min(long a, long b) { return a < b ? a : b; }
static inline long tessel_max(long a, long b) { return a > b ? a : b; }
/* the interpreter's semantics (compiler/README.md): NaN-propagating min/max, saturating
   float->int casts with NaN -> 0, integer division and remainder by zero give 0 */
static inline float tessel_fmax(float a, float b) { return (a != a || b != b) ? NAN : (a < b ? b : a); }
static inline float tessel_fmin(float a, float b) { return (a != a || b != b) ? NAN : (b < a ? b : a); }
static inline long tessel_f2i(float v, long lo, long hi) { if (v != v) return 0; if (v <= (float)lo) return lo; if (v >= (float)hi) return hi; return (long)v; }
static inline long tessel_idiv(long a, long b) { return b == 0 ? 0 : a / b; }
static inline long tessel_irem(long a, long b) { return b == 0 ? 0 : a % b; }
/* sign keeps -0 and NaN; sigmoid is 1 / (1 + exp(-x)) in f32 (compiler/ir/builtin_math.h) */
static inline float tessel_fsign(float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : x; }
static inline long tessel_isign(long x) { return (x > 0) - (x < 0); }
static inline float tessel_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* f64 computes in double: the same helpers */
static inline double tessel_dmax(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? b : a); }
static inline double tessel_dmin(double a, double b) { return (a != a || b != b) ? NAN : (b < a ? b : a); }
static inline long tessel_d2i(double v, long lo, long hi) { if (v != v) return 0; if (v <= (double)lo) return lo; if (v >= (double)hi) return hi; return (long)v; }
static inline double tessel_dsign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
static inline double tessel_dsigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
)";
}

std::string emit_function(const kernel::Kernel& k, const std::string& symbol) {
  if (k.attention) return attention_function(k, symbol);
  Emitter e{k, {}, 0};
  auto& os = e.os;
  os << "/* kernel " << k.name << " for " << k.target << " */\n";
  os << "void " << symbol << "(void** args) {\n";
  int arg = 0;
  for (const auto& t : k.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.temporary)
      os << "  " << ctype(t.dtype) << "* t_" << t.name << " = (" << ctype(t.dtype) << "*)calloc(" << n << ", sizeof("
         << ctype(t.dtype) << "));\n";
    else
      os << "  " << ctype(t.dtype) << "* t_" << t.name << " = (" << ctype(t.dtype) << "*)args[" << arg++ << "];\n";
  }
  for (const auto& b : k.buffers)
    os << "  static " << ctype(b.dtype) << " " << b.name << "[" << b.elements() << "]; /* " << b.level << " ("
       << isa::role_name(b.role) << ") */\n";
  std::set<std::string> lets(k.let_vars.begin(), k.let_vars.end());
  for (const auto& l : lets) os << "  long " << l << " = 0;\n";
  e.node(*k.body, 1);
  for (const auto& l : lets) os << "  (void)" << l << ";\n";
  for (const auto& t : k.tensors)
    if (t.temporary) os << "  free(t_" << t.name << ");\n";
  os << "}\n";
  return os.str();
}

std::string emit_c(const kernel::Kernel& k, const std::string& symbol) { return prelude() + emit_function(k, symbol); }

}  // namespace tessel::emit_c
