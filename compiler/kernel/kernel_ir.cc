#include "compiler/kernel/kernel_ir.h"

#include <sstream>

#include "isa/base/error.h"

namespace tessel::kernel {

const char* expr_kind_spelling(ExprKind k) {
  switch (k) {
#define TESSEL_X(e, s, a) \
  case ExprKind::e:       \
    return s;
    TESSEL_KEXPR_KINDS(TESSEL_X)
#undef TESSEL_X
  }
  return "?";
}

const char* loop_kind_name(LoopKind k) {
  switch (k) {
#define TESSEL_X(e, s) \
  case LoopKind::e:    \
    return s;
    TESSEL_LOOP_KINDS(TESSEL_X)
#undef TESSEL_X
  }
  return "?";
}

const char* node_kind_name(NodeKind k) {
  switch (k) {
#define TESSEL_X(e, s) \
  case NodeKind::e:    \
    return s;
    TESSEL_KNODE_KINDS(TESSEL_X)
#undef TESSEL_X
  }
  return "?";
}

const char* layout_name(Layout l) { return l == Layout::RowMajor ? "row_major" : "col_major"; }

Expr Expr::integer(int64_t v) {
  Expr e;
  e.kind = ExprKind::Int;
  e.value = v;
  return e;
}
Expr Expr::var(const std::string& n) {
  Expr e;
  e.kind = ExprKind::Var;
  e.name = n;
  return e;
}
Expr Expr::make(ExprKind k, std::vector<Expr> args) {
  Expr e;
  e.kind = k;
  e.args = std::move(args);
  return e;
}
Expr operator+(const Expr& a, const Expr& b) {
  if (a.is_int() && b.is_int()) return Expr::integer(a.value + b.value);
  if (b.is_int() && b.value == 0) return a;
  if (a.is_int() && a.value == 0) return b;
  return Expr::make(ExprKind::Add, {a, b});
}
Expr operator-(const Expr& a, const Expr& b) {
  if (a.is_int() && b.is_int()) return Expr::integer(a.value - b.value);
  if (b.is_int() && b.value == 0) return a;
  return Expr::make(ExprKind::Sub, {a, b});
}
Expr min_expr(const Expr& a, const Expr& b) {
  if (a.is_int() && b.is_int()) return Expr::integer(std::min(a.value, b.value));
  return Expr::make(ExprKind::Min, {a, b});
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

namespace {

Expr times(int64_t c, const Expr& v) { return c == 1 ? v : Expr::make(ExprKind::Mul, {Expr::integer(c), v}); }

}  // namespace

Expr division_terms(const ir::AffineExpr& e, const std::map<std::string, int64_t>& sizes,
                    const std::function<Expr(const std::string&)>& index_var) {
  Expr out = Expr::integer(0);
  for (const ir::FloorDivTerm& t : e.divs) {
    const Expr num = from_affine(t.numerator, sizes, index_var);
    out = out + times(t.coeff, Expr::make(ExprKind::FloorDiv, {num, Expr::integer(t.divisor)}));
  }
  return out;
}

Expr from_affine(const ir::AffineExpr& e, const std::map<std::string, int64_t>& sizes,
                 const std::function<Expr(const std::string&)>& index_var) {
  int64_t c = e.constant;
  for (const auto& [p, k] : e.param_coeffs) c += k * sizes.at(p);
  Expr out = Expr::integer(c);
  for (const auto& [x, k] : e.index_coeffs) out = out + times(k, index_var(x));
  return out + division_terms(e, sizes, index_var);
}

int64_t Expr::evaluate(const std::map<std::string, int64_t>& vars) const {
  auto ev = [&](int i) { return args[i].evaluate(vars); };
  switch (kind) {
    case ExprKind::Int: return value;
    case ExprKind::Var: {
      auto it = vars.find(name);
      TESSEL_CHECK(it != vars.end(), "kernel IR: variable '" + name + "' is unbound (build_kernel must bind it)");
      return it->second;
    }
    case ExprKind::Add: return ev(0) + ev(1);
    case ExprKind::Sub: return ev(0) - ev(1);
    case ExprKind::Mul: return ev(0) * ev(1);
    case ExprKind::Neg: return -ev(0);
    case ExprKind::FloorDiv: return floor_div(ev(0), ev(1));
    case ExprKind::Mod: { int64_t b = ev(1); return ev(0) - b * floor_div(ev(0), b); }
    case ExprKind::Min: return std::min(ev(0), ev(1));
    case ExprKind::Max: return std::max(ev(0), ev(1));
    case ExprKind::Lt: return ev(0) < ev(1);
    case ExprKind::Le: return ev(0) <= ev(1);
    case ExprKind::Eq: return ev(0) == ev(1);
    case ExprKind::Ge: return ev(0) >= ev(1);
    case ExprKind::Gt: return ev(0) > ev(1);
    case ExprKind::And: return ev(0) && ev(1);
    case ExprKind::Or: return ev(0) || ev(1);
    case ExprKind::Select: return ev(0) ? ev(1) : ev(2);
  }
  return 0;
}

std::string Expr::to_string() const {
  switch (kind) {
    case ExprKind::Int: return std::to_string(value);
    case ExprKind::Var: return name;
    case ExprKind::Neg: return "-(" + args[0].to_string() + ")";
    case ExprKind::FloorDiv:
    case ExprKind::Mod:
    case ExprKind::Min:
    case ExprKind::Max:
      return std::string(expr_kind_spelling(kind)) + "(" + args[0].to_string() + ", " + args[1].to_string() + ")";
    case ExprKind::Select:
      return "(" + args[0].to_string() + " ? " + args[1].to_string() + " : " + args[2].to_string() + ")";
    default:
      return "(" + args[0].to_string() + " " + expr_kind_spelling(kind) + " " + args[1].to_string() + ")";
  }
}

int64_t Buffer::elements() const {
  int64_t n = 1;
  for (int64_t e : extents) n *= e;
  return n;
}
int64_t Buffer::bytes() const { return elements() * dtype_bytes(dtype); }

const GlobalTensor* Kernel::find_tensor(const std::string& n) const {
  for (const auto& t : tensors)
    if (t.name == n) return &t;
  return nullptr;
}

void for_each_node(const NodePtr& root, const std::function<void(const Node&, int)>& fn) {
  std::function<void(const NodePtr&, int)> rec = [&](const NodePtr& n, int d) {
    if (!n) return;
    fn(*n, d);
    for (const auto& c : n->children) rec(c, d + 1);
    for (const auto& c : n->else_children) rec(c, d + 1);
  };
  rec(root, 0);
}

namespace {

std::string list(const std::vector<Expr>& es) {
  std::string s;
  for (size_t i = 0; i < es.size(); ++i) s += (i ? ", " : "") + es[i].to_string();
  return s;
}

std::string buffer_ref(const Kernel& k, int id, const std::string& tensor) {
  return id < 0 ? "global " + tensor : k.buffers.at(id).name;
}

void print_node(const Kernel& k, const Node& n, int depth, std::ostringstream& os) {
  std::string pad(2 * depth, ' ');
  switch (n.kind) {
    case NodeKind::Block:
      for (const auto& c : n.children) print_node(k, *c, depth, os);
      return;
    case NodeKind::Loop:
      os << pad << "for " << n.var << " in [" << n.lo.to_string() << ", " << n.hi.to_string() << ") step " << n.step
         << "  // " << loop_kind_name(n.loop_kind) << (n.parallel ? ", parallel" : "")
         << (n.rebinds_buffers ? ", rebinds buffers" : "")
         << (n.axis.empty() ? "" : std::string(", ") + (n.inner_tile ? "operand" : "stage") + " tiles of " + n.axis) << "\n";
      for (const auto& c : n.children) print_node(k, *c, depth + 1, os);
      return;
    case NodeKind::If:
      os << pad << "if " << n.cond.to_string() << "\n";
      for (const auto& c : n.children) print_node(k, *c, depth + 1, os);
      if (!n.else_children.empty()) {
        os << pad << "else\n";
        for (const auto& c : n.else_children) print_node(k, *c, depth + 1, os);
      }
      return;
    case NodeKind::Let:
      os << pad << "let " << n.var << " = " << n.value.to_string() << "\n";
      return;
    case NodeKind::Copy:
      os << pad << "copy " << buffer_ref(k, n.dst, n.tensor) << " <- " << buffer_ref(k, n.src, n.tensor) << "\n";
      return;
    case NodeKind::Compute: {
      const auto& s = k.function->statements.at(n.statement);
      os << pad << (n.init ? "init " : "compute ") << s.name << "(" << list(n.indices) << ")";
      std::string sep = "  with ";
      for (const auto& [t, b] : n.binding) {
        os << sep << t << "@" << (b < 0 ? std::string("global") : k.buffers.at(b).name);
        sep = ", ";
      }
      os << "\n";
      return;
    }
    case NodeKind::Matmul: {
      const MatmulOp& m = n.matmul;
      os << pad << "matmul " << m.unit_m << "x" << m.unit_n << "x" << m.unit_k << " fragments "
         << k.function->statements.at(m.statement).name << ": " << k.buffers.at(m.c).name << "[" << m.m0.to_string()
         << " +" << m.em.to_string() << ", " << m.n0.to_string() << " +" << m.en.to_string() << "] += A "
         << k.buffers.at(m.a).name << " (" << layout_name(m.a_layout) << ") * B " << k.buffers.at(m.b).name << " ("
         << layout_name(m.b_layout) << ") over k " << m.k0.to_string() << " +" << m.ek.to_string() << "  tile "
         << m.tile_m << "x" << m.tile_n << "x" << m.tile_k << " " << dtype_name(m.in_type) << "->"
         << dtype_name(m.acc_type) << "\n";
      return;
    }
  }
}

}  // namespace

std::string to_string(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << " for " << k.target << "\n  sizes:";
  for (const auto& [n, v] : k.sizes) os << " " << n << "=" << v;
  os << "\n";
  for (const auto& t : k.tensors) {
    os << "  tensor " << t.name << " " << dtype_name(t.dtype) << "[";
    for (size_t i = 0; i < t.shape.size(); ++i) os << (i ? ", " : "") << t.shape[i];
    os << "]" << (t.temporary ? " temporary" : "") << "\n";
  }
  for (const auto& b : k.buffers) {
    os << "  buffer " << b.name << " " << dtype_name(b.dtype) << "[";
    for (size_t i = 0; i < b.extents.size(); ++i) os << (i ? ", " : "") << b.extents[i];
    os << "] of " << b.tensor << " at " << b.level << " (" << isa::role_name(b.role) << ") offset (" << list(b.offset)
       << ") " << b.bytes() << " B" << (b.double_buffered ? " double-buffered" : "") << "\n";
  }
  os << "  body:\n";
  if (k.body) print_node(k, *k.body, 2, os);
  return os.str();
}

std::string to_c(const Expr& e, const CIntSpelling& spelling) {
  auto a = [&](int i) { return to_c(e.args[i], spelling); };
  auto infix = [&](const char* op) { return "(" + a(0) + " " + op + " " + a(1) + ")"; };
  auto call = [&](const char* fn) { return std::string(fn) + "(" + a(0) + ", " + a(1) + ")"; };
  switch (e.kind) {
    case ExprKind::Int: return spelling.literal(e.value);
    case ExprKind::Var: return e.name;
    case ExprKind::Add: return infix("+");
    case ExprKind::Sub: return infix("-");
    case ExprKind::Mul: return infix("*");
    case ExprKind::Neg: return "(-" + a(0) + ")";
    case ExprKind::FloorDiv: return call("tessel_floordiv");
    case ExprKind::Mod: return call("tessel_mod");
    case ExprKind::Min: return call(spelling.min_fn);
    case ExprKind::Max: return call(spelling.max_fn);
    case ExprKind::Lt: return infix("<");
    case ExprKind::Le: return infix("<=");
    case ExprKind::Eq: return infix("==");
    case ExprKind::Ge: return infix(">=");
    case ExprKind::Gt: return infix(">");
    case ExprKind::And: return infix("&&");
    case ExprKind::Or: return infix("||");
    case ExprKind::Select: return "(" + a(0) + " ? " + a(1) + " : " + a(2) + ")";
  }
  return "0";
}

}  // namespace tessel::kernel
