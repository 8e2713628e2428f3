#include "compiler/interp/interpreter.h"

#include "isa/base/float_minmax.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <exception>
#include <memory>
#include <set>
#include <thread>
#include <type_traits>

#include "compiler/interp/error_scale.h"
#include "compiler/interp/scalar.h"
#include "compiler/ir/builtin_math.h"
#include "isa/base/error.h"

namespace tessel::interp {

namespace {

using ir::Op;

int g_threads = 0;  // 0: hardware concurrency (at most 8)

std::string loc_text(const ir::SourceLoc& l) {
  return l.file + ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// A tensor during evaluation.
struct Buffer {
  const ir::Tensor* tensor = nullptr;
  NpyArray array;
  std::vector<int64_t> strides;  // in elements
};

// ---- expression closures ----------------------------------------------------------------------

// Values are produced one at a time (f, i) or, for the innermost loop of a statement, in batches:
// fbatch/ibatch write the values for idx[slot] = lo, lo + 1, ..., lo + n - 1 (n <= kBatch), which
// amortises the virtual calls over a whole batch. The default batch evaluates element by element;
// select keeps that default so that an operand it does not choose is never read.
constexpr int kBatch = 128;

struct Node {
  virtual ~Node() = default;
  virtual double f(const int64_t*) const { TESSEL_CHECK(false, "interpreter: float value of an integer node"); }
  virtual int64_t i(const int64_t*) const { TESSEL_CHECK(false, "interpreter: integer value of a float node"); }
  virtual void fbatch(int64_t* idx, int slot, int64_t lo, int n, double* out) const {
    for (int k = 0; k < n; ++k) {
      idx[slot] = lo + k;
      out[k] = f(idx);
    }
  }
  virtual void ibatch(int64_t* idx, int slot, int64_t lo, int n, int64_t* out) const {
    for (int k = 0; k < n; ++k) {
      idx[slot] = lo + k;
      out[k] = i(idx);
    }
  }
};
using NodePtr = std::unique_ptr<Node>;

struct SlotTerm {
  int slot;
  int64_t coeff;
};

// The floor-division terms of a quasi-affine index over domain slots:
// sum(coeff * floor((constant + sum(terms) + divs of the numerator) / divisor)), exact for
// negative numerators.
struct SlotDiv {
  int64_t coeff;
  int64_t constant;
  std::vector<SlotTerm> terms;
  std::vector<SlotDiv> divs;
  int64_t divisor;
};

int64_t div_sum(const std::vector<SlotDiv>& divs, const int64_t* idx) {
  int64_t v = 0;
  for (const SlotDiv& d : divs) {
    int64_t num = d.constant + div_sum(d.divs, idx);
    for (const SlotTerm& t : d.terms) num += t.coeff * idx[t.slot];
    v += d.coeff * ir::floor_div(num, d.divisor);
  }
  return v;
}

// Element offset of an affine access: base + sum(stride * idx[slot]); when the domain does not
// prove every access in bounds, or an index has division terms, each dimension is computed and
// checked.
struct Address {
  using Term = SlotTerm;
  int64_t base = 0;
  std::vector<Term> terms;
  bool checked = false;
  struct Dim {
    int64_t constant;
    std::vector<Term> terms;
    int64_t extent;
    int64_t stride;
    std::vector<SlotDiv> divs;
  };
  std::vector<Dim> dims;
  // For messages.
  std::string what;  // "S0 reads X(h - 1, w)"
  std::string tensor_name;
  std::vector<int64_t> shape;

  int64_t offset(const int64_t* idx) const {
    if (!checked) {
      int64_t off = base;
      for (const Term& t : terms) off += t.coeff * idx[t.slot];
      return off;
    }
    int64_t off = 0;
    for (const Dim& d : dims) {
      int64_t v = d.constant;
      for (const Term& t : d.terms) v += t.coeff * idx[t.slot];
      if (!d.divs.empty()) v += div_sum(d.divs, idx);
      if (v < 0 || v >= d.extent) out_of_bounds(idx);
      off += v * d.stride;
    }
    return off;
  }

  // Coefficient of `slot` in the flattened offset (unchecked addresses only).
  int64_t step(int slot) const {
    for (const Term& t : terms)
      if (t.slot == slot) return t.coeff;
    return 0;
  }

  [[noreturn]] void out_of_bounds(const int64_t*) const {
    std::vector<int64_t> pos;
    throw UserError(what + " outside the shape " + shape_text(shape) + " of '" + tensor_name +
                    "'; restrict the index ranges (a 'where' clause) or guard the access with select(...)");
  }
};

// Every f16 bit pattern widened to f32 (256 KiB): batch loads of f16 tensors are table lookups.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_bits_to_f32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

template <DType T>
struct AccessF : Node {
  static constexpr int kBytes = T == DType::F64 ? 8 : T == DType::F32 ? 4 : 2;
  const uint8_t* data;
  Address addr;
  double f(const int64_t* idx) const override { return load_float(T, data + addr.offset(idx) * kBytes); }
  void fbatch(int64_t* idx, int slot, int64_t lo, int n, double* out) const override {
    if (addr.checked) return Node::fbatch(idx, slot, lo, n, out);
    idx[slot] = lo;
    const uint8_t* p = data + addr.offset(idx) * kBytes;
    const int64_t step = addr.step(slot) * kBytes;
    if constexpr (T == DType::F16) {
      const float* table = f16_table();
      for (int k = 0; k < n; ++k, p += step) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        out[k] = table[h];
      }
    } else {
      for (int k = 0; k < n; ++k, p += step) out[k] = load_float(T, p);
    }
  }
};
template <DType T>
struct AccessI : Node {
  static constexpr int kBytes = T == DType::I32 ? 4 : 1;
  const uint8_t* data;
  Address addr;
  int64_t i(const int64_t* idx) const override { return load_int(T, data + addr.offset(idx) * kBytes); }
  void ibatch(int64_t* idx, int slot, int64_t lo, int n, int64_t* out) const override {
    if (addr.checked) return Node::ibatch(idx, slot, lo, n, out);
    idx[slot] = lo;
    const uint8_t* p = data + addr.offset(idx) * kBytes;
    const int64_t step = addr.step(slot) * kBytes;
    for (int k = 0; k < n; ++k, p += step) out[k] = load_int(T, p);
  }
};

struct ConstF : Node {
  double v;
  double f(const int64_t*) const override { return v; }
  void fbatch(int64_t*, int, int64_t, int n, double* out) const override { std::fill(out, out + n, v); }
};
struct ConstI : Node {
  int64_t v;
  int64_t i(const int64_t*) const override { return v; }
  void ibatch(int64_t*, int, int64_t, int n, int64_t* out) const override { std::fill(out, out + n, v); }
};

struct IndexValueNode : Node {
  int64_t base;
  std::vector<Address::Term> terms;
  std::vector<SlotDiv> divs;
  DType type;
  int64_t raw(const int64_t* idx) const {
    int64_t v = base;
    for (const auto& t : terms) v += t.coeff * idx[t.slot];
    return divs.empty() ? v : v + div_sum(divs, idx);
  }
  double f(const int64_t* idx) const override { return round_float(type, static_cast<double>(raw(idx))); }
  int64_t i(const int64_t* idx) const override { return wrap_int(type, raw(idx)); }
};

// The type a float operation of dtype T computes in: f64 in double, every other float dtype in float.
template <DType T>
using Compute = std::conditional_t<T == DType::F64, double, float>;

template <DType T>
inline double fin(Compute<T> r) {
  if constexpr (T == DType::F16) return round_to_f16(r);
  else if constexpr (T == DType::BF16) return round_to_bf16(r);
  else return r;
}


// Operands of the operator nodes (templates below derive from these, so a factory can fill them in).
struct Binary : Node {
  NodePtr a, b;
};
struct Unary : Node {
  NodePtr a;
};

template <Op OP, DType T>
struct BinF : Binary {
  double f(const int64_t* idx) const override {
    return apply(static_cast<Compute<T>>(a->f(idx)), static_cast<Compute<T>>(b->f(idx)));
  }
  void fbatch(int64_t* idx, int slot, int64_t lo, int n, double* out) const override {
    double y[kBatch];
    a->fbatch(idx, slot, lo, n, out);
    b->fbatch(idx, slot, lo, n, y);
    for (int k = 0; k < n; ++k) out[k] = apply(static_cast<Compute<T>>(out[k]), static_cast<Compute<T>>(y[k]));
  }
  static double apply(Compute<T> x, Compute<T> y) {
    if constexpr (OP == Op::Add) return fin<T>(x + y);
    else if constexpr (OP == Op::Sub) return fin<T>(x - y);
    else if constexpr (OP == Op::Mul) return fin<T>(x * y);
    else if constexpr (OP == Op::Div) return fin<T>(x / y);
    else if constexpr (OP == Op::Mod) return fin<T>(std::fmod(x, y));
    else if constexpr (OP == Op::Pow) return fin<T>(std::pow(x, y));
    else if constexpr (OP == Op::Min) return nan_min(x, y);
    else return nan_max(x, y);
  }
};

template <Op OP, DType T>
struct BinI : Binary {
  int64_t i(const int64_t* idx) const override { return apply(a->i(idx), b->i(idx)); }
  void ibatch(int64_t* idx, int slot, int64_t lo, int n, int64_t* out) const override {
    int64_t y[kBatch];
    a->ibatch(idx, slot, lo, n, out);
    b->ibatch(idx, slot, lo, n, y);
    for (int k = 0; k < n; ++k) out[k] = apply(out[k], y[k]);
  }
  static int64_t apply(int64_t x, int64_t y) {
    if constexpr (OP == Op::Add) return wrap_int(T, x + y);
    else if constexpr (OP == Op::Sub) return wrap_int(T, x - y);
    else if constexpr (OP == Op::Mul) return wrap_int(T, x * y);
    else if constexpr (OP == Op::Div) return y == 0 ? 0 : wrap_int(T, x / y);
    else if constexpr (OP == Op::Mod) return y == 0 ? 0 : wrap_int(T, x % y);
    else if constexpr (OP == Op::Pow) return 0;  // never built: the front end takes pow on floats only
    else if constexpr (OP == Op::Min) return std::min(x, y);
    else return std::max(x, y);
  }
};

template <Op OP, bool FLOAT>
struct Compare : Binary {
  int64_t i(const int64_t* idx) const override {
    if constexpr (FLOAT) return cmp(a->f(idx), b->f(idx));
    else return cmp(a->i(idx), b->i(idx));
  }
  template <class V>
  static int64_t cmp(V x, V y) {
    if constexpr (OP == Op::Lt) return x < y;
    else if constexpr (OP == Op::Le) return x <= y;
    else if constexpr (OP == Op::Gt) return x > y;
    else if constexpr (OP == Op::Ge) return x >= y;
    else if constexpr (OP == Op::Eq) return x == y;
    else return x != y;
  }
};

struct Logic : Node {
  Op op;
  NodePtr a, b;
  int64_t i(const int64_t* idx) const override {
    if (op == Op::Not) return !a->i(idx);
    if (op == Op::And) return a->i(idx) && b->i(idx);
    return a->i(idx) || b->i(idx);
  }
};

struct Select : Node {
  NodePtr c, a, b;
  double f(const int64_t* idx) const override { return c->i(idx) ? a->f(idx) : b->f(idx); }
  int64_t i(const int64_t* idx) const override { return c->i(idx) ? a->i(idx) : b->i(idx); }
};

template <Op OP, DType T>
struct UnF : Unary {
  double f(const int64_t* idx) const override { return apply(static_cast<Compute<T>>(a->f(idx))); }
  void fbatch(int64_t* idx, int slot, int64_t lo, int n, double* out) const override {
    a->fbatch(idx, slot, lo, n, out);
    for (int k = 0; k < n; ++k) out[k] = apply(static_cast<Compute<T>>(out[k]));
  }
  static double apply(Compute<T> x) {
    if constexpr (OP == Op::Neg) return -x;
    else if constexpr (OP == Op::Abs) return std::fabs(x);
    else return fin<T>(ir::unary_math<OP, Compute<T>>(x));  // compiler/ir/builtin_math.h
  }
};

struct UnI : Node {
  Op op;
  DType type;
  NodePtr a;
  int64_t i(const int64_t* idx) const override {
    const int64_t x = a->i(idx);
    if (op == Op::Neg) return wrap_int(type, -x);
    if (op == Op::Sign) return (x > 0) - (x < 0);
    return wrap_int(type, x < 0 ? -x : x);
  }
};

struct Cast : Node {
  DType from, to;
  NodePtr a;
  double f(const int64_t* idx) const override {
    return dtype_is_float(from) ? round_float(to, a->f(idx)) : round_float(to, static_cast<double>(a->i(idx)));
  }
  int64_t i(const int64_t* idx) const override {
    return dtype_is_float(from) ? float_to_int(to, a->f(idx)) : wrap_int(to, a->i(idx));
  }
  void fbatch(int64_t* idx, int slot, int64_t lo, int n, double* out) const override {
    if (dtype_is_float(from)) {
      a->fbatch(idx, slot, lo, n, out);
      if (to == DType::F64 || (to == DType::F32 && from != DType::F32 && from != DType::F64)) return;  // widening is exact
      for (int k = 0; k < n; ++k) out[k] = round_float(to, out[k]);
    } else {
      int64_t x[kBatch];
      a->ibatch(idx, slot, lo, n, x);
      for (int k = 0; k < n; ++k) out[k] = round_float(to, static_cast<double>(x[k]));
    }
  }
  void ibatch(int64_t* idx, int slot, int64_t lo, int n, int64_t* out) const override {
    if (dtype_is_float(from)) {
      double x[kBatch];
      a->fbatch(idx, slot, lo, n, x);
      for (int k = 0; k < n; ++k) out[k] = float_to_int(to, x[k]);
    } else {
      a->ibatch(idx, slot, lo, n, out);
      for (int k = 0; k < n; ++k) out[k] = wrap_int(to, out[k]);
    }
  }
};

template <template <Op, DType> class N, Op OP>
NodePtr by_type(DType t) {
  switch (t) {
    case DType::F16: return std::make_unique<N<OP, DType::F16>>();
    case DType::BF16: return std::make_unique<N<OP, DType::BF16>>();
    case DType::F32: return std::make_unique<N<OP, DType::F32>>();
    case DType::F64: return std::make_unique<N<OP, DType::F64>>();
    case DType::I8: return std::make_unique<N<OP, DType::I8>>();
    case DType::U8: return std::make_unique<N<OP, DType::U8>>();
    case DType::I32: return std::make_unique<N<OP, DType::I32>>();
  }
  return nullptr;
}

template <template <Op, DType> class N>
NodePtr by_op_type(Op op, DType t) {
  switch (op) {
    case Op::Add: return by_type<N, Op::Add>(t);
    case Op::Sub: return by_type<N, Op::Sub>(t);
    case Op::Mul: return by_type<N, Op::Mul>(t);
    case Op::Div: return by_type<N, Op::Div>(t);
    case Op::Mod: return by_type<N, Op::Mod>(t);
    case Op::Min: return by_type<N, Op::Min>(t);
    case Op::Max: return by_type<N, Op::Max>(t);
    case Op::Pow: return by_type<N, Op::Pow>(t);
    default: TESSEL_CHECK(false, "interpreter: not a binary arithmetic op");
  }
  return nullptr;
}

template <template <Op, DType> class N>
NodePtr unary_by_op_type(Op op, DType t) {
  switch (op) {
    case Op::Neg: return by_type<N, Op::Neg>(t);
    case Op::Abs: return by_type<N, Op::Abs>(t);
    case Op::Exp: return by_type<N, Op::Exp>(t);
    case Op::Log: return by_type<N, Op::Log>(t);
    case Op::Sqrt: return by_type<N, Op::Sqrt>(t);
    case Op::Rsqrt: return by_type<N, Op::Rsqrt>(t);
    case Op::Tanh: return by_type<N, Op::Tanh>(t);
#define TESSEL_UNARY_CASE(E) \
  case Op::E: return by_type<N, Op::E>(t);
    TESSEL_UNARY_CASE(Erf) TESSEL_UNARY_CASE(Floor) TESSEL_UNARY_CASE(Ceil) TESSEL_UNARY_CASE(Round)
    TESSEL_UNARY_CASE(Sign) TESSEL_UNARY_CASE(Sin) TESSEL_UNARY_CASE(Cos) TESSEL_UNARY_CASE(Tan) TESSEL_UNARY_CASE(Asin)
    TESSEL_UNARY_CASE(Acos) TESSEL_UNARY_CASE(Atan) TESSEL_UNARY_CASE(Sinh) TESSEL_UNARY_CASE(Cosh)
    TESSEL_UNARY_CASE(Asinh) TESSEL_UNARY_CASE(Acosh) TESSEL_UNARY_CASE(Atanh) TESSEL_UNARY_CASE(Sigmoid)
#undef TESSEL_UNARY_CASE
    default: TESSEL_CHECK(false, "interpreter: not a unary float op");
  }
  return nullptr;
}

template <bool FLOAT>
NodePtr compare_node(Op op) {
  switch (op) {
    case Op::Lt: return std::make_unique<Compare<Op::Lt, FLOAT>>();
    case Op::Le: return std::make_unique<Compare<Op::Le, FLOAT>>();
    case Op::Gt: return std::make_unique<Compare<Op::Gt, FLOAT>>();
    case Op::Ge: return std::make_unique<Compare<Op::Ge, FLOAT>>();
    case Op::Eq: return std::make_unique<Compare<Op::Eq, FLOAT>>();
    default: return std::make_unique<Compare<Op::Ne, FLOAT>>();
  }
}

void set_args(Node* n, NodePtr a, NodePtr b) {
  auto* x = static_cast<Binary*>(n);
  x->a = std::move(a);
  x->b = std::move(b);
}

// ---- compilation of a statement ------------------------------------------------------------

struct Compiler {
  const ir::Statement& st;
  const Sizes& sizes;
  std::map<std::string, Buffer>& buffers;
  std::vector<int64_t> lo, hi;  // per domain slot, concrete

  int slot(const std::string& index) const {
    for (size_t i = 0; i < st.domain.size(); ++i)
      if (st.domain[i].name == index) return static_cast<int>(i);
    TESSEL_CHECK(false, "index '" + index + "' of " + st.name + " is not in its domain (front end)");
    return -1;
  }

  std::vector<Address::Term> terms(const ir::AffineExpr& e, int64_t scale) const {
    std::vector<Address::Term> out;
    for (const auto& [n, c] : e.index_coeffs) out.push_back({slot(n), c * scale});
    return out;
  }

  int64_t param_part(const ir::AffineExpr& e) const {
    int64_t v = e.constant;
    for (const auto& [n, c] : e.param_coeffs) v += c * sizes.at(n);
    return v;
  }

  std::vector<SlotDiv> slot_divs(const ir::AffineExpr& e) const {
    std::vector<SlotDiv> out;
    for (const ir::FloorDivTerm& t : e.divs)
      out.push_back({t.coeff, param_part(t.numerator), terms(t.numerator, 1), slot_divs(t.numerator), t.divisor});
    return out;
  }

  Address address(const Buffer& b, const std::vector<ir::AffineExpr>& idx, const std::string& verb) const {
    Address a;
    a.tensor_name = b.tensor->name;
    a.shape = b.array.shape;
    std::string text;
    for (size_t d = 0; d < idx.size(); ++d) text += (d ? ", " : "") + idx[d].to_string();
    a.what = loc_text(st.loc) + ": " + st.name + " " + verb + " " + b.tensor->name + "(" + text + ")";
    bool empty = false;
    for (size_t s = 0; s < lo.size(); ++s) empty |= hi[s] <= lo[s];
    for (size_t d = 0; d < idx.size(); ++d) {
      Address::Dim dim{param_part(idx[d]), terms(idx[d], 1), b.array.shape[d], b.strides[d], slot_divs(idx[d])};
      if (!dim.divs.empty()) a.checked = true;  // the flat offset is not affine: compute each dimension
      // Range of this dimension's value over the box domain.
      int64_t mn = dim.constant, mx = dim.constant;
      for (const auto& t : dim.terms) {
        const int64_t l = t.coeff * lo[t.slot], h = t.coeff * (hi[t.slot] - 1);
        mn += std::min(l, h);
        mx += std::max(l, h);
      }
      if (!empty && (mn < 0 || mx >= dim.extent)) a.checked = true;
      a.base += dim.constant * dim.stride;
      for (const auto& t : dim.terms) a.terms.push_back({t.slot, t.coeff * dim.stride});
      a.dims.push_back(std::move(dim));
    }
    // Merge terms of one slot.
    std::vector<Address::Term> merged;
    for (const auto& t : a.terms) {
      auto it = std::find_if(merged.begin(), merged.end(), [&](const auto& m) { return m.slot == t.slot; });
      if (it == merged.end()) merged.push_back(t);
      else it->coeff += t.coeff;
    }
    std::erase_if(merged, [](const auto& t) { return t.coeff == 0; });
    a.terms = std::move(merged);
    return a;
  }

  NodePtr compile(const ir::Expr& e) {
    switch (e.kind) {
      case ir::ExprKind::Constant:
      case ir::ExprKind::SizeParam: {
        const double v = e.kind == ir::ExprKind::Constant ? e.value : static_cast<double>(sizes.at(e.name));
        if (dtype_is_float(e.type)) {
          auto n = std::make_unique<ConstF>();
          n->v = round_float(e.type, v);
          return n;
        }
        auto n = std::make_unique<ConstI>();
        n->v = wrap_int(e.type, static_cast<int64_t>(v));
        return n;
      }
      case ir::ExprKind::IndexValue: {
        auto n = std::make_unique<IndexValueNode>();
        n->base = param_part(e.affine);
        n->terms = terms(e.affine, 1);
        n->divs = slot_divs(e.affine);
        n->type = e.type;
        return n;
      }
      case ir::ExprKind::Access: return access(e);
      case ir::ExprKind::Apply: break;
    }
    std::vector<NodePtr> args;
    for (const ir::ExprPtr& a : e.args) args.push_back(compile(*a));
    switch (e.op) {
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div:
      case Op::Mod:
      case Op::Min:
      case Op::Max:
      case Op::Pow: {
        if (dtype_is_float(e.type)) {
          NodePtr n = by_op_type<BinF>(e.op, e.type);
          set_args(n.get(), std::move(args[0]), std::move(args[1]));
          return n;
        }
        NodePtr n = by_op_type<BinI>(e.op, e.type);
        set_args(n.get(), std::move(args[0]), std::move(args[1]));
        return n;
      }
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::Eq:
      case Op::Ne: {
        const bool fl = dtype_is_float(e.args[0]->type);
        NodePtr n = fl ? compare_node<true>(e.op) : compare_node<false>(e.op);
        set_args(n.get(), std::move(args[0]), std::move(args[1]));
        return n;
      }
      case Op::And:
      case Op::Or:
      case Op::Not: {
        auto n = std::make_unique<Logic>();
        n->op = e.op;
        n->a = std::move(args[0]);
        if (args.size() > 1) n->b = std::move(args[1]);
        return n;
      }
      case Op::Select: {
        auto n = std::make_unique<Select>();
        n->c = std::move(args[0]);
        n->a = std::move(args[1]);
        n->b = std::move(args[2]);
        return n;
      }
      case Op::Cast: {
        auto n = std::make_unique<Cast>();
        n->from = e.args[0]->type;
        n->to = e.type;
        n->a = std::move(args[0]);
        return n;
      }
      default: break;
    }
    // Unary arithmetic.
    if (dtype_is_float(e.type)) {
      NodePtr n = unary_by_op_type<UnF>(e.op, e.type);
      static_cast<Unary*>(n.get())->a = std::move(args[0]);
      return n;
    }
    TESSEL_CHECK(e.op == Op::Neg || e.op == Op::Abs || e.op == Op::Sign, "interpreter: float-only function on integers (front end)");
    auto n = std::make_unique<UnI>();
    n->op = e.op;
    n->type = e.type;
    n->a = std::move(args[0]);
    return n;
  }

  NodePtr access(const ir::Expr& e) {
    const Buffer& b = buffers.at(e.name);
    Address addr = address(b, e.indices, "reads");
    const uint8_t* data = b.array.data.data();
    switch (b.tensor->dtype) {
#define TESSEL_ACCESS(T, N)                        \
  case DType::T: {                                 \
    auto n = std::make_unique<N<DType::T>>();      \
    n->data = data;                                \
    n->addr = std::move(addr);                     \
    return n;                                      \
  }
      TESSEL_ACCESS(F16, AccessF)
      TESSEL_ACCESS(BF16, AccessF)
      TESSEL_ACCESS(F32, AccessF)
      TESSEL_ACCESS(F64, AccessF)
      TESSEL_ACCESS(I8, AccessI)
      TESSEL_ACCESS(U8, AccessI)
      TESSEL_ACCESS(I32, AccessI)
#undef TESSEL_ACCESS
    }
    return nullptr;
  }
};

bool reads_tensor(const ir::Expr& e, const std::string& name) {
  if (e.kind == ir::ExprKind::Access && e.name == name) return true;
  for (const ir::ExprPtr& a : e.args)
    if (reads_tensor(*a, name)) return true;
  return false;
}

// ---- execution -----------------------------------------------------------------------------

struct Runner {
  const ir::Statement& st;
  const Node& rhs;
  Address store;
  uint8_t* out;
  DType type;
  int bytes;
  size_t nout;
  std::vector<int64_t> lo, hi;
  bool batch_stores;  // element-wise statement that does not read its own output
  bool batch_lanes;   // reduction that does not read its own output
  // a float sum whose term magnitudes are asked for: f32 buffer of the output's shape that gets
  // sum |term| per element, from 0 (`op=!`) or from what it holds (`+=`); null otherwise
  uint8_t* mag = nullptr;

  double mag_start(const int64_t* idx) const {
    return st.init ? 0.0 : load_float(DType::F32, mag + store.offset(idx) * 4);
  }
  void mag_save(const int64_t* idx, double m) const {
    store_float(DType::F32, mag + store.offset(idx) * 4, std::min(m, double(std::numeric_limits<float>::max())));
  }

  // The innermost output loop of an element-wise statement, a batch of values at a time.
  void store_batches(int64_t* idx, size_t level) const {
    const int slot = static_cast<int>(level);
    const bool fl = dtype_is_float(type);
    double fbuf[kBatch];
    int64_t ibuf[kBatch];
    for (int64_t v = lo[level]; v < hi[level]; v += kBatch) {
      const int n = static_cast<int>(std::min<int64_t>(kBatch, hi[level] - v));
      if (fl) rhs.fbatch(idx, slot, v, n, fbuf);
      else rhs.ibatch(idx, slot, v, n, ibuf);
      for (int k = 0; k < n; ++k) {
        idx[slot] = v + k;
        uint8_t* p = out + store.offset(idx) * bytes;
        if (fl) store_float(type, p, fbuf[k]);
        else store_int(type, p, ibuf[k]);
      }
    }
  }

  void run(int64_t first, int64_t last) const {
    std::vector<int64_t> idx(lo.size() + 1, 0);
    if (nout == 0) {
      if (first == 0) point(idx.data());
      return;
    }
    Runner part = *this;  // this thread's share of the outermost output index
    part.lo[0] = first;
    part.hi[0] = last;
    part.outer(idx.data(), 0);
  }

  void outer(int64_t* idx, size_t level) const {
    if (level == nout) return point(idx);
    if (level + 1 == nout && batch_stores) return store_batches(idx, level);
    if (level + 1 == nout && batch_lanes && hi[level] - lo[level] >= 8) return reduce_lanes(idx, level);
    for (int64_t v = lo[level]; v < hi[level]; ++v) {
      idx[level] = v;
      outer(idx, level + 1);
    }
  }

  // Calls fn(identity, step) with the accumulator type and step function of this statement.
  template <class Fn>
  void with_step(Fn&& fn) const {
    const DType t = type;
    if (dtype_is_float(type)) {
      switch (st.reduction) {
        case ir::Reduction::Max: return fn(-std::numeric_limits<double>::infinity(), nan_max<double>);
        case ir::Reduction::Min: return fn(std::numeric_limits<double>::infinity(), nan_min<double>);
        case ir::Reduction::Prod: return with_product(fn);
        default: break;
      }
      switch (type) {
        case DType::F16: return fn(0.0, [](double a, double v) { return fin<DType::F16>(float(a) + float(v)); });
        case DType::BF16: return fn(0.0, [](double a, double v) { return fin<DType::BF16>(float(a) + float(v)); });
        case DType::F64: return fn(0.0, [](double a, double v) { return a + v; });
        default: return fn(0.0, [](double a, double v) { return double(float(a) + float(v)); });
      }
    }
    switch (st.reduction) {
      case ir::Reduction::Max: return fn(int_min(t), [](int64_t a, int64_t v) { return std::max(a, v); });
      case ir::Reduction::Min: return fn(int_max(t), [](int64_t a, int64_t v) { return std::min(a, v); });
      case ir::Reduction::Prod: return with_product(fn);
      default: return fn(int64_t{0}, [t](int64_t a, int64_t v) { return wrap_int(t, a + v); });
    }
  }

  // A product: from 1, each step rounded to the accumulator type (f16 / bf16 / f32) or wrapped to
  // it (integers, as the language's integer arithmetic wraps), in domain order.
  template <class Fn>
  void with_product(Fn&& fn) const {
    const DType t = type;
    switch (type) {
      case DType::F16: return fn(1.0, [](double a, double v) { return fin<DType::F16>(float(a) * float(v)); });
      case DType::BF16: return fn(1.0, [](double a, double v) { return fin<DType::BF16>(float(a) * float(v)); });
      case DType::F32: return fn(1.0, [](double a, double v) { return double(float(a) * float(v)); });
      case DType::F64: return fn(1.0, [](double a, double v) { return a * v; });
      default:
        return fn(int64_t{1}, [t](int64_t a, int64_t v) {
          return wrap_int(t, static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(v)));
        });
    }
  }

  template <class V>
  V load(const uint8_t* p) const {
    if constexpr (std::is_same_v<V, double>) return load_float(type, p);
    else return load_int(type, p);
  }
  template <class V>
  void save(uint8_t* p, V v) const {
    if constexpr (std::is_same_v<V, double>) store_float(type, p, v);
    else store_int(type, p, v);
  }

  void point(int64_t* idx) const {
    uint8_t* p = out + store.offset(idx) * bytes;
    if (st.reduction == ir::Reduction::None) {
      if (dtype_is_float(type)) store_float(type, p, rhs.f(idx));
      else store_int(type, p, rhs.i(idx));
      return;
    }
    with_step([&](auto identity, auto step) {
      using V = decltype(identity);
      V acc = st.init ? identity : load<V>(p);
      double m = mag ? mag_start(idx) : 0;
      reduce(idx, nout, acc, step, mag ? &m : nullptr);
      save<V>(p, acc);
      if (mag) mag_save(idx, m);
    });
  }

  // A reduction whose innermost output index has lanes = a batch of output points reduced side by
  // side: each lane still sums over the reduction indices in domain order, so results are those
  // of point(), but a batch reads neighbouring elements (for matmul, a row of B) at once.
  void reduce_lanes(int64_t* idx, size_t level) const {
    const int slot = static_cast<int>(level);
    with_step([&](auto identity, auto step) {
      using V = decltype(identity);
      V acc[kBatch];
      uint8_t* where[kBatch];
      double m[kBatch];
      for (int64_t v = lo[level]; v < hi[level]; v += kBatch) {
        const int n = static_cast<int>(std::min<int64_t>(kBatch, hi[level] - v));
        for (int k = 0; k < n; ++k) {
          idx[slot] = v + k;
          where[k] = out + store.offset(idx) * bytes;
          acc[k] = st.init ? identity : load<V>(where[k]);
          if (mag) m[k] = mag_start(idx);
        }
        lanes(idx, slot, v, n, nout, acc, step, mag ? m : nullptr);
        for (int k = 0; k < n; ++k) {
          save<V>(where[k], acc[k]);
          idx[slot] = v + k;
          if (mag) mag_save(idx, m[k]);
        }
      }
    });
  }

  // m: the lanes' sums of |term| (a float sum's magnitudes), or null
  template <class V, class Step>
  void lanes(int64_t* idx, int slot, int64_t first, int n, size_t level, V* acc, Step step, double* m) const {
    if (level == lo.size()) {
      V buf[kBatch];
      if constexpr (std::is_same_v<V, double>) rhs.fbatch(idx, slot, first, n, buf);
      else rhs.ibatch(idx, slot, first, n, buf);
      for (int k = 0; k < n; ++k) acc[k] = step(acc[k], buf[k]);
      if constexpr (std::is_same_v<V, double>)
        if (m)
          for (int k = 0; k < n; ++k) m[k] += std::fabs(buf[k]);
      return;
    }
    for (int64_t v = lo[level]; v < hi[level]; ++v) {
      idx[level] = v;
      lanes(idx, slot, first, n, level + 1, acc, step, m);
    }
  }

  // m: the sum of |term| (a float sum's magnitude), or null
  template <class V, class Step>
  void reduce(int64_t* idx, size_t level, V& acc, Step step, double* m) const {
    if (level == lo.size()) {
      if constexpr (std::is_same_v<V, double>) {
        const double v = rhs.f(idx);
        acc = step(acc, v);
        if (m) *m += std::fabs(v);
      } else {
        acc = step(acc, rhs.i(idx));
      }
      return;
    }
    if (level + 1 == lo.size()) {  // innermost loop: batches of values, summed in order
      V buf[kBatch];
      const int slot = static_cast<int>(level);
      for (int64_t v = lo[level]; v < hi[level]; v += kBatch) {
        const int n = static_cast<int>(std::min<int64_t>(kBatch, hi[level] - v));
        if constexpr (std::is_same_v<V, double>) rhs.fbatch(idx, slot, v, n, buf);
        else rhs.ibatch(idx, slot, v, n, buf);
        for (int k = 0; k < n; ++k) acc = step(acc, buf[k]);
        if constexpr (std::is_same_v<V, double>)
          if (m)
            for (int k = 0; k < n; ++k) *m += std::fabs(buf[k]);
      }
      return;
    }
    for (int64_t v = lo[level]; v < hi[level]; ++v) {
      idx[level] = v;
      reduce(idx, level + 1, acc, step, m);
    }
  }
};

int thread_count() {
  if (g_threads > 0) return g_threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hw, 1u, 8u));
}

// `mag`: the statement's sum-of-|term| buffer (magnitude_buffer), or null.
void run_statement(const ir::Statement& st, const Sizes& sizes, std::map<std::string, Buffer>& buffers, Buffer* mag) {
  Compiler c{st, sizes, buffers, {}, {}};
  int64_t points = 1;
  for (const ir::IndexVar& v : st.domain) {
    c.lo.push_back(v.lo.evaluate({}, sizes));
    c.hi.push_back(v.hi.evaluate({}, sizes));
    points *= std::max<int64_t>(0, c.hi.back() - c.lo.back());
  }
  size_t nout = 0;
  while (nout < st.domain.size() && !st.domain[nout].is_reduction) ++nout;
  // an empty domain writes nothing, but an empty reduced range still sets `op=!`'s outputs to the identity
  const size_t checked = st.reduction != ir::Reduction::None && st.init ? nout : c.lo.size();
  for (size_t s = 0; s < checked; ++s)
    if (c.hi[s] <= c.lo[s]) return;
  for (size_t s = checked; s < c.lo.size(); ++s) c.hi[s] = std::max(c.hi[s], c.lo[s]);
  NodePtr rhs = c.compile(*st.rhs);
  Buffer& out = buffers.at(st.output);
  const bool reads_own_output = reads_tensor(*st.rhs, st.output);
  Runner r{st,   *rhs, c.address(out, st.out_indices, "writes"), out.array.data.data(), out.tensor->dtype,
           dtype_bytes(out.tensor->dtype), nout, c.lo, c.hi,
           st.reduction == ir::Reduction::None && !reads_own_output,
           st.reduction != ir::Reduction::None && !reads_own_output, mag ? mag->array.data.data() : nullptr};
  const int threads = thread_count();
  const bool parallel = nout > 0 && threads > 1 && points >= 4096 && !reads_own_output &&
                        c.hi[0] - c.lo[0] >= 2;
  if (!parallel) {
    r.run(nout ? c.lo[0] : 0, nout ? c.hi[0] : 1);
    return;
  }
  const int64_t extent = c.hi[0] - c.lo[0];
  const int n = static_cast<int>(std::min<int64_t>(threads, extent));
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t) {
    const int64_t first = c.lo[0] + extent * t / n, last = c.lo[0] + extent * (t + 1) / n;
    pool.emplace_back([&, t, first, last] {
      try {
        r.run(first, last);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

// The scale buffers of evaluate's term magnitudes (error_scale.h): per tracked tensor T an f32
// buffer of T's shape named scale_name(T) among the statements' buffers (scale statements read and
// write it as a tensor), its ir::Tensor kept here.
struct Scales {
  std::set<std::string> tracked;
  std::deque<ir::Tensor> tensors;

  // T's scale buffer, holding |T| where T had no scale
  Buffer& buffer(const std::string& t, std::map<std::string, Buffer>& buffers) {
    const Buffer& out = buffers.at(t);
    auto it = buffers.find(scale_name(t));
    if (it == buffers.end()) {
      ir::Tensor& s = tensors.emplace_back(*out.tensor);
      s.name = scale_name(t), s.dtype = DType::F32, s.kind = ir::TensorKind::Local;
      Buffer b{&s, {}, out.strides};
      b.array.dtype = DType::F32;
      b.array.shape = out.array.shape;
      b.array.data.resize(out.array.data.size() / dtype_bytes(out.tensor->dtype) * 4);
      it = buffers.emplace(s.name, std::move(b)).first;
    }
    if (tracked.insert(t).second)
      for (int64_t i = 0, n = out.array.element_count(), bytes = dtype_bytes(out.tensor->dtype); i < n; ++i)
        store_float(DType::F32, it->second.array.data.data() + i * 4, std::fabs(load_float(out.tensor->dtype, out.array.data.data() + i * bytes)));
    return it->second;
  }

  // Before `st` runs: its scale statement run (nothing returned), or the buffer a float sum of
  // unscaled terms adds their |term| to, or nothing (a statement of no scale: its output loses its)
  Buffer* prepare(const ir::Statement& st, const Sizes& sizes, std::map<std::string, Buffer>& buffers) {
    const bool fl = dtype_is_float(buffers.at(st.output).tensor->dtype);
    if (fl)
      if (const std::optional<ir::Statement> s = scale_statement(st, tracked)) {
        buffer(st.output, buffers);
        run_statement(*s, sizes, buffers, nullptr);
        return nullptr;
      }
    if (fl && st.reduction == ir::Reduction::Sum) return &buffer(st.output, buffers);
    tracked.erase(st.output);
    return nullptr;
  }
};

}  // namespace

void set_thread_count(int threads) { g_threads = threads; }

Tensors evaluate(const ir::Function& f, const Sizes& given, const Tensors& inputs, Tensors* term_magnitudes) {
  const Sizes sizes = ir::bind_sizes(f, given);
  check_inputs(f, sizes, inputs);
  std::map<std::string, Buffer> buffers;
  for (const ir::Tensor& t : f.tensors) {
    Buffer b;
    b.tensor = &t;
    const std::vector<int64_t> shape = tensor_shape(t, sizes);
    if (t.kind == ir::TensorKind::Input) {
      b.array = inputs.at(t.name);
    } else {
      b.array.dtype = t.dtype;
      b.array.shape = shape;
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      b.array.data.assign(static_cast<size_t>(n * dtype_bytes(t.dtype)), 0);
    }
    b.strides = strides_of(b.array.shape);
    buffers.emplace(t.name, std::move(b));
  }
  Scales scales;
  for (const ir::Statement& st : f.statements)
    run_statement(st, sizes, buffers, term_magnitudes ? scales.prepare(st, sizes, buffers) : nullptr);
  Tensors out;
  if (term_magnitudes) term_magnitudes->clear();
  for (const ir::Tensor* t : f.outputs()) {
    out[t->name] = std::move(buffers.at(t->name).array);
    if (term_magnitudes && scales.tracked.count(t->name))
      (*term_magnitudes)[t->name] = std::move(buffers.at(scale_name(t->name)).array);
  }
  return out;
}

}  // namespace tessel::interp
