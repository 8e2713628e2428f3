#include "compiler/ir/tensor_ir.h"

#include <array>
#include <sstream>

#include "isa/base/error.h"

namespace tessel::ir {

namespace {

void add_into(std::map<std::string, int64_t>& into, const std::map<std::string, int64_t>& from, int64_t k) {
  for (const auto& [name, c] : from) {
    const int64_t v = (into[name] += c * k);
    if (v == 0) into.erase(name);
  }
}

struct OpInfo {
  const char* spelling;
  int arity;
};
constexpr std::array kOps = {
#define TESSEL_X(e, spelling, arity) OpInfo{spelling, arity},
    TESSEL_EXPR_OPS(TESSEL_X)
#undef TESSEL_X
};

}  // namespace

const char* op_spelling(Op op) { return kOps[static_cast<size_t>(op)].spelling; }
int op_arity(Op op) { return kOps[static_cast<size_t>(op)].arity; }

AffineExpr AffineExpr::constant_of(int64_t c) {
  AffineExpr e;
  e.constant = c;
  return e;
}

AffineExpr AffineExpr::index(const std::string& name, int64_t coeff) {
  AffineExpr e;
  if (coeff) e.index_coeffs[name] = coeff;
  return e;
}

AffineExpr AffineExpr::param(const std::string& name, int64_t coeff) {
  AffineExpr e;
  if (coeff) e.param_coeffs[name] = coeff;
  return e;
}

AffineExpr AffineExpr::operator+(const AffineExpr& o) const {
  AffineExpr r = *this;
  add_into(r.index_coeffs, o.index_coeffs, 1);
  add_into(r.param_coeffs, o.param_coeffs, 1);
  r.constant += o.constant;
  return r;
}

AffineExpr AffineExpr::operator-(const AffineExpr& o) const { return *this + o.scaled(-1); }

AffineExpr AffineExpr::scaled(int64_t k) const {
  if (k == 0) return constant_of(0);
  AffineExpr r = *this;
  for (auto& [n, c] : r.index_coeffs) c *= k;
  for (auto& [n, c] : r.param_coeffs) c *= k;
  r.constant *= k;
  return r;
}

int64_t AffineExpr::evaluate(const std::map<std::string, int64_t>& indices,
                             const std::map<std::string, int64_t>& params) const {
  int64_t v = constant;
  for (const auto& [n, c] : index_coeffs) {
    auto it = indices.find(n);
    TESSEL_CHECK(it != indices.end(), "index '" + n + "' has no value while evaluating " + to_string());
    v += c * it->second;
  }
  for (const auto& [n, c] : param_coeffs) {
    auto it = params.find(n);
    TESSEL_CHECK(it != params.end(), "size parameter '" + n + "' has no value while evaluating " + to_string());
    v += c * it->second;
  }
  return v;
}

std::string AffineExpr::to_string() const {
  std::string out;
  auto term = [&](int64_t c, const std::string& name) {
    if (out.empty()) {
      if (c == -1) out += "-";
      else if (c != 1) out += std::to_string(c) + "*";
    } else {
      out += c < 0 ? " - " : " + ";
      if (c != 1 && c != -1) out += std::to_string(c < 0 ? -c : c) + "*";
    }
    out += name;
  };
  for (const auto& [n, c] : index_coeffs) term(c, n);
  for (const auto& [n, c] : param_coeffs) term(c, n);
  if (out.empty()) return std::to_string(constant);
  if (constant > 0) out += " + " + std::to_string(constant);
  if (constant < 0) out += " - " + std::to_string(-constant);
  return out;
}

const IndexVar* Statement::find_index(const std::string& n) const {
  for (const IndexVar& v : domain)
    if (v.name == n) return &v;
  return nullptr;
}

const Tensor* Function::find_tensor(const std::string& n) const {
  for (const Tensor& t : tensors)
    if (t.name == n) return &t;
  return nullptr;
}

std::vector<const Tensor*> Function::inputs() const {
  std::vector<const Tensor*> out;
  for (const Tensor& t : tensors)
    if (t.kind == TensorKind::Input) out.push_back(&t);
  return out;
}

std::vector<const Tensor*> Function::outputs() const {
  std::vector<const Tensor*> out;
  for (const Tensor& t : tensors)
    if (t.kind == TensorKind::Output) out.push_back(&t);
  return out;
}

namespace {

std::string indices_text(const std::vector<AffineExpr>& idx) {
  std::string s;
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + idx[i].to_string();
  return s;
}

std::string number_text(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

std::string to_string(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Constant: return number_text(e.value);
    case ExprKind::SizeParam: return e.name;
    case ExprKind::IndexValue: return "(" + e.affine.to_string() + ")";
    case ExprKind::Access: return e.name + "(" + indices_text(e.indices) + ")";
    case ExprKind::Apply: break;
  }
  if (e.op == Op::Cast) return std::string(dtype_name(e.type)) + "(" + to_string(*e.args.at(0)) + ")";
  const int arity = op_arity(e.op);
  const bool infix = arity == 2 && !(e.op == Op::Min || e.op == Op::Max);
  if (infix) return "(" + to_string(*e.args[0]) + " " + op_spelling(e.op) + " " + to_string(*e.args[1]) + ")";
  if (e.op == Op::Neg) return "-" + to_string(*e.args[0]);
  if (e.op == Op::Not) return "!" + to_string(*e.args[0]);
  std::string s = std::string(op_spelling(e.op)) + "(";
  for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + to_string(*e.args[i]);
  return s + ")";
}

std::string to_string(const Function& f) {
  std::ostringstream o;
  o << "func " << f.name << "(params:";
  for (const std::string& p : f.params) o << " " << p;
  o << ")\n";
  for (const Tensor& t : f.tensors) {
    const char* kind = t.kind == TensorKind::Input ? "input " : t.kind == TensorKind::Output ? "output" : "local ";
    o << "  " << kind << " " << dtype_name(t.dtype) << "[" << indices_text(t.shape) << "] " << t.name << "\n";
  }
  for (const Statement& s : f.statements) {
    o << "  " << s.name << ": " << s.output << "(" << indices_text(s.out_indices) << ") ";
    switch (s.reduction) {
      case Reduction::None: o << "="; break;
      case Reduction::Sum: o << (s.init ? "+=!" : "+="); break;
      case Reduction::Max: o << (s.init ? "max=!" : "max="); break;
      case Reduction::Min: o << (s.init ? "min=!" : "min="); break;
    }
    o << " " << to_string(*s.rhs) << "   [acc " << dtype_name(s.acc_type) << "]\n      domain:";
    for (const IndexVar& v : s.domain)
      o << " " << v.name << " in " << v.lo.to_string() << ":" << v.hi.to_string() << (v.is_reduction ? " (reduction)" : "");
    o << "\n";
  }
  return o.str();
}

}  // namespace tessel::ir
