#include "compiler/ir/tensor_ir.h"

#include <functional>
#include <set>

#include <algorithm>
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

int64_t floor_div(int64_t a, int64_t d) {
  TESSEL_CHECK(d > 0, "floor_div: divisor " + std::to_string(d) + " is not positive (front end)");
  const int64_t q = a / d;
  return (a % d != 0 && a < 0) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t d) { return a - d * floor_div(a, d); }

namespace {

std::string div_key(const FloorDivTerm& t) { return t.numerator.to_string() + "/" + std::to_string(t.divisor); }

// Sorts division terms, merges equal ones and drops zero coefficients (the canonical form).
void normalize_divs(std::vector<FloorDivTerm>& divs) {
  std::stable_sort(divs.begin(), divs.end(),
                   [](const FloorDivTerm& a, const FloorDivTerm& b) { return div_key(a) < div_key(b); });
  std::vector<FloorDivTerm> out;
  for (FloorDivTerm& t : divs) {
    if (!out.empty() && out.back().divisor == t.divisor && out.back().numerator == t.numerator)
      out.back().coeff += t.coeff;
    else
      out.push_back(std::move(t));
    if (out.back().coeff == 0) out.pop_back();
  }
  divs = std::move(out);
}

// Every coefficient and the constant of `e` is a multiple of d.
bool all_multiples_of(const AffineExpr& e, int64_t d) {
  for (const auto& [n, c] : e.index_coeffs)
    if (c % d) return false;
  for (const auto& [n, c] : e.param_coeffs)
    if (c % d) return false;
  for (const FloorDivTerm& t : e.divs)
    if (t.coeff % d) return false;
  return true;
}

// e / d for an `e` whose coefficients are all multiples of d (the constant part floored).
AffineExpr exact_quotient(const AffineExpr& e, int64_t d) {
  AffineExpr q = e;
  for (auto& [n, c] : q.index_coeffs) c /= d;
  for (auto& [n, c] : q.param_coeffs) c /= d;
  for (FloorDivTerm& t : q.divs) t.coeff /= d;
  q.constant = floor_div(e.constant, d);
  return q;
}

}  // namespace

AffineExpr AffineExpr::floor_div_of(const AffineExpr& num, int64_t divisor) {
  TESSEL_CHECK(divisor >= 1, "floor_div_of: divisor " + std::to_string(divisor) + " < 1 (the front end checks it)");
  if (divisor == 1) return num;
  if (all_multiples_of(num, divisor)) return exact_quotient(num, divisor);
  // floor(floor(e/a)/b) == floor(e/(a*b)) for positive a, b.
  if (num.index_coeffs.empty() && num.param_coeffs.empty() && num.constant == 0 && num.divs.size() == 1 &&
      num.divs[0].coeff == 1)
    return floor_div_of(num.divs[0].numerator, num.divs[0].divisor * divisor);
  AffineExpr r;
  r.divs.push_back({1, num, divisor});
  return r;
}

AffineExpr AffineExpr::mod_of(const AffineExpr& num, int64_t divisor) {
  return num - floor_div_of(num, divisor).scaled(divisor);
}

bool AffineExpr::uses_indices() const {
  if (!index_coeffs.empty()) return true;
  for (const FloorDivTerm& t : divs)
    if (t.numerator.uses_indices()) return true;
  return false;
}

void AffineExpr::collect_names(std::map<std::string, int64_t>* indices, std::map<std::string, int64_t>* params) const {
  if (indices)
    for (const auto& [n, c] : index_coeffs) (*indices)[n] = c;
  if (params)
    for (const auto& [n, c] : param_coeffs) (*params)[n] = c;
  for (const FloorDivTerm& t : divs) t.numerator.collect_names(indices, params);
}

bool AffineExpr::operator==(const AffineExpr& o) const {
  return constant == o.constant && index_coeffs == o.index_coeffs && param_coeffs == o.param_coeffs && divs == o.divs;
}

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
  r.divs.insert(r.divs.end(), o.divs.begin(), o.divs.end());
  normalize_divs(r.divs);
  return r;
}

AffineExpr AffineExpr::operator-(const AffineExpr& o) const { return *this + o.scaled(-1); }

AffineExpr AffineExpr::scaled(int64_t k) const {
  if (k == 0) return constant_of(0);
  AffineExpr r = *this;
  for (auto& [n, c] : r.index_coeffs) c *= k;
  for (auto& [n, c] : r.param_coeffs) c *= k;
  r.constant *= k;
  for (FloorDivTerm& t : r.divs) t.coeff *= k;
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
  for (const FloorDivTerm& t : divs) v += t.coeff * floor_div(t.numerator.evaluate(indices, params), t.divisor);
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
  for (const FloorDivTerm& t : divs)
    term(t.coeff, "floor((" + t.numerator.to_string() + ")/" + std::to_string(t.divisor) + ")");
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

namespace {

std::string first_div_index(const std::vector<AffineExpr>& idx) {
  for (const AffineExpr& e : idx)
    if (e.has_div()) return indices_text(idx);
  return "";
}

std::string expr_division_use(const Expr& e, const Statement& s) {
  if (e.kind == ExprKind::Access && !first_div_index(e.indices).empty())
    return s.name + " reads " + e.name + "(" + indices_text(e.indices) + ")";
  if (e.kind == ExprKind::IndexValue && e.affine.has_div()) return s.name + " uses the index value " + e.affine.to_string();
  for (const ExprPtr& a : e.args)
    if (std::string w = expr_division_use(*a, s); !w.empty()) return w;
  return "";
}

std::string statement_division_use(const Statement& s, bool indices_only) {
  if (!first_div_index(s.out_indices).empty()) return s.name + " writes " + s.output + "(" + indices_text(s.out_indices) + ")";
  if (std::string w = expr_division_use(*s.rhs, s); !w.empty()) return w;
  if (indices_only) return "";
  for (const IndexVar& v : s.domain)
    if (v.lo.has_div() || v.hi.has_div())
      return s.name + ": range of " + v.name + " " + v.lo.to_string() + ":" + v.hi.to_string();
  return "";
}

std::string function_division_use(const Function& f, bool indices_only) {
  for (const Statement& s : f.statements)
    if (std::string w = statement_division_use(s, indices_only); !w.empty()) return w;
  if (indices_only) return "";
  for (const Tensor& t : f.tensors)
    if (!first_div_index(t.shape).empty()) return "shape of " + t.name + " [" + indices_text(t.shape) + "]";
  return "";
}

std::string loc_text(const SourceLoc& l) { return l.file + ":" + std::to_string(l.line) + ":" + std::to_string(l.col); }

}  // namespace

std::string division_use(const Function& f) { return function_division_use(f, false); }

std::optional<std::string> plain_index(const AffineExpr& e) {
  if (e.index_coeffs.size() != 1 || !e.param_coeffs.empty() || e.constant != 0 || e.has_div()) return std::nullopt;
  const auto& [name, coeff] = *e.index_coeffs.begin();
  if (coeff != 1) return std::nullopt;
  return name;
}

void for_each_access(const Expr& e, const std::function<void(const Expr&)>& fn) {
  if (e.kind == ExprKind::Access) fn(e);
  for (const auto& a : e.args) for_each_access(*a, fn);
}

bool is_ordered_product(const Statement& s) {
  return s.reduction == Reduction::Prod && (s.acc_type == DType::F16 || s.acc_type == DType::BF16);
}

bool is_column_reduction(const Statement& s) {
  if (s.reduction == Reduction::None || !s.rhs) return false;
  std::set<std::string> reduced, out;
  for (const auto& v : s.domain) (v.is_reduction ? reduced : out).insert(v.name);
  bool any = false, column = true;
  for_each_access(*s.rhs, [&](const Expr& e) {
    if (!e.indices.empty()) {
      std::map<std::string, int64_t> idx, params;
      e.indices.back().collect_names(&idx, &params);
      bool uses_out = false;
      for (const auto& [n, c] : idx) {
        if (reduced.count(n)) column = false;
        if (out.count(n)) uses_out = true;
      }
      column = column && uses_out;
      any = true;
    }
  });
  return any && column;
}
std::string index_division_use(const Function& f) { return function_division_use(f, true); }

std::map<std::string, int64_t> bind_sizes(const Function& f, const std::map<std::string, int64_t>& given,
                                          const std::string& given_by) {
  std::map<std::string, int64_t> sizes = given;
  for (const InferredSize& inf : f.inferred) {
    std::map<std::string, int64_t> needs;
    inf.value.collect_names(nullptr, &needs);
    if (!std::all_of(needs.begin(), needs.end(), [&](const auto& kv) { return given.count(kv.first); })) continue;
    const int64_t v = inf.value.evaluate({}, given);
    const std::string why = " from " + inf.from + ", " + inf.value.to_string() + " (" + loc_text(inf.loc) + ")";
    if (auto it = given.find(inf.param); it != given.end() && it->second != v)
      throw UserError(given_by + ": size parameter '" + inf.param + "' is given as " + std::to_string(it->second) +
                      " but is inferred as " + std::to_string(v) + why + "; drop it or give " + inf.param + "=" +
                      std::to_string(v));
    if (v < 1)
      throw UserError(given_by + ": size parameter '" + inf.param + "' is inferred as " + std::to_string(v) + why +
                      "; the other sizes leave it empty");
    sizes[inf.param] = v;
  }
  return sizes;
}

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
  for (const InferredSize& inf : f.inferred)
    o << "  inferred " << inf.param << " = " << inf.value.to_string() << "   (" << inf.from << ")\n";
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
      case Reduction::Prod: o << (s.init ? "*=!" : "*="); break;
    }
    o << " " << to_string(*s.rhs) << "   [acc " << dtype_name(s.acc_type) << "]\n      domain:";
    for (const IndexVar& v : s.domain)
      o << " " << v.name << " in " << v.lo.to_string() << ":" << v.hi.to_string() << (v.is_reduction ? " (reduction)" : "");
    o << "\n";
  }
  return o.str();
}

}  // namespace tessel::ir
