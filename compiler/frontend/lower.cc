#include "compiler/frontend/lower.h"

#include <algorithm>
#include <optional>
#include <set>

namespace tessel::frontend {

namespace {

using ir::AffineExpr;
using ir::SourceLoc;

// The built-in functions besides select, min and max (compiler/README.md): name, operator,
// arity, and whether the operands must be floats (a weak operand then becomes f32).
struct Builtin {
  const char* name;
  ir::Op op;
  int arity;
  bool float_only;
};
const Builtin kBuiltins[] = {
    {"abs", ir::Op::Abs, 1, false},     {"exp", ir::Op::Exp, 1, true},     {"log", ir::Op::Log, 1, true},
    {"sqrt", ir::Op::Sqrt, 1, true},    {"rsqrt", ir::Op::Rsqrt, 1, true}, {"tanh", ir::Op::Tanh, 1, true},
    {"erf", ir::Op::Erf, 1, true},      {"pow", ir::Op::Pow, 2, true},     {"floor", ir::Op::Floor, 1, true},
    {"ceil", ir::Op::Ceil, 1, true},    {"round", ir::Op::Round, 1, true}, {"sign", ir::Op::Sign, 1, false},
    {"sin", ir::Op::Sin, 1, true},      {"cos", ir::Op::Cos, 1, true},     {"tan", ir::Op::Tan, 1, true},
    {"asin", ir::Op::Asin, 1, true},    {"acos", ir::Op::Acos, 1, true},   {"atan", ir::Op::Atan, 1, true},
    {"sinh", ir::Op::Sinh, 1, true},    {"cosh", ir::Op::Cosh, 1, true},   {"asinh", ir::Op::Asinh, 1, true},
    {"acosh", ir::Op::Acosh, 1, true},  {"atanh", ir::Op::Atanh, 1, true}, {"sigmoid", ir::Op::Sigmoid, 1, true},
};
const std::set<std::string> kKeywords = {"def", "where", "in"};

const Builtin* find_builtin(const std::string& n) {
  for (const Builtin& b : kBuiltins)
    if (n == b.name) return &b;
  return nullptr;
}

bool is_builtin(const std::string& n) { return find_builtin(n) || n == "select" || n == "min" || n == "max"; }

// "select, min, max, abs, exp, ...": the list an unknown-function error shows.
std::string builtin_list() {
  std::string s = "select, min, max";
  for (const Builtin& b : kBuiltins) s += std::string(", ") + b.name;
  return s;
}

std::optional<ir::Op> binary_op(const std::string& s) {
  static const std::pair<const char*, ir::Op> table[] = {
      {"+", ir::Op::Add}, {"-", ir::Op::Sub}, {"*", ir::Op::Mul}, {"/", ir::Op::Div}, {"%", ir::Op::Mod},
      {"<", ir::Op::Lt},  {"<=", ir::Op::Le}, {">", ir::Op::Gt},  {">=", ir::Op::Ge}, {"==", ir::Op::Eq},
      {"!=", ir::Op::Ne}, {"&&", ir::Op::And}, {"||", ir::Op::Or}};
  for (const auto& [sp, op] : table)
    if (s == sp) return op;
  return std::nullopt;
}

bool is_comparison(ir::Op op) {
  return op == ir::Op::Lt || op == ir::Op::Le || op == ir::Op::Gt || op == ir::Op::Ge || op == ir::Op::Eq ||
         op == ir::Op::Ne;
}

std::string dt(DType t) { return std::string(dtype_name(t)); }

// How an expression's type is known: a fixed dtype, a literal-like value that takes the type of
// its context (integer or real), or a condition (comparison / logical operator).
enum class Kind { Strong, WeakInt, WeakReal, Bool };

struct Typed {
  ir::ExprPtr e;
  Kind kind = Kind::Strong;
  SourceLoc loc;  // where to point when this operand's type is wrong
};

struct Candidate {
  AffineExpr hi;  // lo is 0
  SourceLoc loc;
  std::string from;  // "A(m, k)" dimension description for messages
};

struct IndexInfo {
  std::string name;
  SourceLoc first;
  bool on_lhs = false;
  bool in_access = false;
  std::vector<Candidate> candidates;
  const ast::Range* where = nullptr;
};

class Lowering {
 public:
  Lowering(const Source& src, const ast::Def& def) : src_(src), def_(def) {}

  ir::Function run() {
    f_.name = def_.name;
    f_.loc = def_.loc;
    check_name_free(def_.name, def_.loc, "operator");
    for (const ast::TensorDecl& t : def_.inputs) declare(t, ir::TensorKind::Input);
    for (const ast::TensorDecl& t : def_.outputs) declare(t, ir::TensorKind::Output);
    for (const ast::Statement& s : def_.statements)
      if (!f_.find_tensor(s.tensor)) written_later_.insert(s.tensor);
    for (const ast::Statement& s : def_.statements) statement(s);
    for (const ast::TensorDecl& t : def_.outputs)
      if (!written_.count(t.name))
        src_.error(t.loc, "output '" + t.name + "' is never written; add a statement '" + t.name + "(...) = ...'");
    if (def_.statements.empty()) src_.error(def_.loc, "operator '" + def_.name + "' has no statements");
    infer_sizes();
    // Inputs, outputs, then locals in order of first write.
    std::stable_partition(f_.tensors.begin(), f_.tensors.end(),
                          [](const ir::Tensor& t) { return t.kind != ir::TensorKind::Local; });
    return std::move(f_);
  }

 private:
  const Source& src_;
  const ast::Def& def_;
  ir::Function f_;
  std::set<std::string> params_;
  std::set<std::string> written_;
  std::set<std::string> written_later_;  // locals first written by some statement

  std::map<std::pair<size_t, std::string>, SourceLoc> where_locs_;  // (statement, index) -> its where range

  // Per statement.
  std::vector<IndexInfo> indices_;
  const ast::Statement* stmt_ = nullptr;

  [[noreturn]] void error(const SourceLoc& at, const std::string& m) const { src_.error(at, m); }

  void check_name_free(const std::string& n, const SourceLoc& at, const char* what) {
    if (parse_dtype(n)) error(at, "'" + n + "' is a dtype and cannot name a " + what);
    if (is_builtin(n)) error(at, "'" + n + "' is a built-in function and cannot name a " + what);
    if (kKeywords.count(n)) error(at, "'" + n + "' is a keyword and cannot name a " + what);
  }

  // --- affine expressions ----------------------------------------------------------------------

  enum class AffineMode { Params, DeclareParams, Index };

  static int64_t checked_mul(int64_t a, int64_t b, const Source& src, const SourceLoc& at) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) src.error(at, "integer overflow in an index or size expression");
    return r;
  }

  AffineExpr scaled(const AffineExpr& e, int64_t k, const SourceLoc& at) const {
    AffineExpr r;
    if (k == 0) return r;
    for (const auto& [n, c] : e.index_coeffs) r.index_coeffs[n] = checked_mul(c, k, src_, at);
    for (const auto& [n, c] : e.param_coeffs) r.param_coeffs[n] = checked_mul(c, k, src_, at);
    r.constant = checked_mul(e.constant, k, src_, at);
    for (const ir::FloorDivTerm& t : e.divs) r.divs.push_back({checked_mul(t.coeff, k, src_, at), t.numerator, t.divisor});
    return r;
  }

  static std::string article(const std::string& noun) {
    return (noun[0] == 'i' ? "an " : "a ") + noun;
  }
  static std::string plural(const std::string& noun) { return noun == "index" ? "indices" : noun + "s"; }

  AffineExpr affine(const ast::Expr& e, AffineMode mode, const std::string& context) {
    const std::string why = "non-affine " + context + ": ";
    const std::string rule = "; " + plural(context) + " must be sums of " +
                             (mode == AffineMode::Index ? std::string("indices and size parameters")
                                                        : std::string("size parameters")) +
                             " times integer constants, or their '/' and '%' by positive integer constants";
    switch (e.kind) {
      case ast::ExprKind::Int: return AffineExpr::constant_of(e.int_value);
      case ast::ExprKind::Real: error(e.loc, article(context) + " must be an integer, not a real number");
      case ast::ExprKind::Name: return affine_name(e, mode, context);
      case ast::ExprKind::Call:
        error(e.loc, why + "'" + e.name + "(...)' cannot appear in " + article(context) + rule);
      case ast::ExprKind::Unary:
        if (e.op == "-") return scaled(affine(*e.args[0], mode, context), -1, e.loc);
        error(e.loc, why + "'" + e.op + "' cannot appear in " + article(context) + rule);
      case ast::ExprKind::Binary: break;
    }
    if (e.op == "+" || e.op == "-") {
      const AffineExpr a = affine(*e.args[0], mode, context);
      const AffineExpr b = affine(*e.args[1], mode, context);
      AffineExpr r = e.op == "+" ? a + b : a - b;
      if (__builtin_add_overflow(a.constant, e.op == "+" ? b.constant : -b.constant, &r.constant))
        error(e.loc, "integer overflow in an index or size expression");
      return r;
    }
    if (e.op == "*") {
      const AffineExpr a = affine(*e.args[0], mode, context);
      const AffineExpr b = affine(*e.args[1], mode, context);
      if (a.is_constant()) return scaled(b, a.constant, e.loc);
      if (b.is_constant()) return scaled(a, b.constant, e.loc);
      error(e.loc, why + "'" + a.to_string() + "' times '" + b.to_string() + "' is a product of two variables" + rule);
    }
    if (e.op == "/" || e.op == "%") {
      const AffineExpr a = affine(*e.args[0], mode, context);
      const int64_t d = divisor(*e.args[1], e.op, mode, context, why);
      return e.op == "/" ? AffineExpr::floor_div_of(a, d) : AffineExpr::mod_of(a, d);
    }
    error(e.loc, why + "'" + e.op + "' cannot appear in " + article(context) + rule);
  }

  // The right operand of '/' or '%': a positive integer constant (floor semantics need d > 0).
  int64_t divisor(const ast::Expr& rhs, const std::string& op, AffineMode mode, const std::string& context,
                  const std::string& why) {
    const AffineExpr d = affine(rhs, mode, context);
    if (!d.is_constant())
      error(rhs.loc, why + "'" + op + "' by '" + d.to_string() + "', which is not a constant; the divisor of '/' and "
                     "'%' must be a positive integer constant");
    if (d.constant <= 0)
      error(rhs.loc, "the divisor of '" + op + "' in " + article(context) + " must be a positive integer constant, not " +
                         std::to_string(d.constant));
    return d.constant;
  }

  AffineExpr affine_name(const ast::Expr& e, AffineMode mode, const std::string& context) {
    const std::string& n = e.name;
    if (f_.find_tensor(n) || written_later_.count(n))
      error(e.loc, "tensor '" + n + "' cannot be used in " + article(context) + " (only indices and size parameters)");
    if (is_builtin(n) || parse_dtype(n))
      error(e.loc, "'" + n + "' is a " + std::string(is_builtin(n) ? "function" : "dtype") + " and cannot be used in " +
                       article(context));
    if (mode == AffineMode::DeclareParams) {
      check_name_free(n, e.loc, "size parameter");
      if (!params_.count(n)) {
        params_.insert(n);
        f_.params.push_back(n);
      }
      return AffineExpr::param(n);
    }
    if (params_.count(n)) return AffineExpr::param(n);
    if (mode == AffineMode::Params)
      error(e.loc, "'" + n + "' is not a size parameter; " + article(context) +
                       " may use only the size parameters of the signature (" + param_list() + ") and constants");
    IndexInfo& info = use_index(n, e.loc);
    info.in_access = true;
    return AffineExpr::index(n);
  }

  std::string param_list() const {
    std::string s;
    for (const std::string& p : f_.params) s += (s.empty() ? "" : ", ") + p;
    return s.empty() ? "none" : s;
  }

  // --- declarations ----------------------------------------------------------------------------

  void declare(const ast::TensorDecl& d, ir::TensorKind kind) {
    ir::Tensor t;
    const std::optional<DType> dtype = parse_dtype(d.dtype);
    if (!dtype) error(d.dtype_loc, "unknown dtype '" + d.dtype + "'; expected one of f16, bf16, f32, f64, i8, u8, i32");
    t.dtype = *dtype;
    t.name = d.name;
    t.kind = kind;
    t.loc = d.loc;
    check_name_free(d.name, d.loc, "tensor");
    if (const ir::Tensor* other = f_.find_tensor(d.name))
      error(d.loc, "tensor '" + d.name + "' is declared twice (first at " + line_col(other->loc) + ")");
    if (params_.count(d.name)) error(d.loc, "'" + d.name + "' is already a size parameter and cannot name a tensor");
    for (const ast::ExprPtr& dim : d.dims) t.shape.push_back(affine(*dim, AffineMode::DeclareParams, "tensor dimension"));
    f_.tensors.push_back(std::move(t));
    for (const ir::Tensor& other : f_.tensors)
      if (params_.count(other.name))
        error(other.loc, "'" + other.name + "' names both a tensor and a size parameter");
  }

  // --- inferred sizes (tensor_ir.h, InferredSize) ------------------------------------------------

  std::set<std::string> input_shape_params() const {
    std::map<std::string, int64_t> names;
    for (const ir::Tensor& t : f_.tensors)
      if (t.kind == ir::TensorKind::Input)
        for (const AffineExpr& d : t.shape) d.collect_names(nullptr, &names);
    std::set<std::string> out;
    for (const auto& [n, c] : names) out.insert(n);
    return out;
  }

  // P of dimension `d` of `t` when the first statement writing `t` ranges that dimension's index
  // over a where-range of another length than P itself.
  std::optional<ir::InferredSize> inferred_from(const ir::Tensor& t, size_t d) const {
    const AffineExpr& dim = t.shape[d];
    if (dim.param_coeffs.size() != 1 || !(dim == AffineExpr::param(dim.param_coeffs.begin()->first))) return std::nullopt;
    const std::string& param = dim.param_coeffs.begin()->first;
    for (size_t i = 0; i < f_.statements.size(); ++i) {
      const ir::Statement& st = f_.statements[i];
      if (st.output != t.name) continue;
      const std::string& index = st.out_indices[d].index_coeffs.begin()->first;
      auto where = where_locs_.find({i, index});
      if (where == where_locs_.end()) return std::nullopt;
      const ir::IndexVar* v = st.find_index(index);
      ir::InferredSize inf{param, v->hi - v->lo,
                           "the range of '" + index + "' in " + st.name + " (dimension " + std::to_string(d) + " of " +
                               t.name + ")",
                           where->second};
      std::map<std::string, int64_t> uses;
      inf.value.collect_names(nullptr, &uses);
      if (uses.count(param)) return std::nullopt;
      return inf;
    }
    return std::nullopt;
  }

  // Output sizes that follow from the ranges writing them, none depending on another inferred one.
  void infer_sizes() {
    const std::set<std::string> fixed = input_shape_params();
    std::vector<ir::InferredSize> found;
    std::set<std::string> names;
    for (const ir::Tensor& t : f_.tensors)
      for (size_t d = 0; t.kind == ir::TensorKind::Output && d < t.shape.size(); ++d)
        if (auto inf = inferred_from(t, d); inf && !fixed.count(inf->param) && names.insert(inf->param).second)
          found.push_back(*inf);
    for (const ir::InferredSize& inf : found) {
      std::map<std::string, int64_t> uses;
      inf.value.collect_names(nullptr, &uses);
      if (std::none_of(uses.begin(), uses.end(), [&](const auto& kv) { return names.count(kv.first); }))
        f_.inferred.push_back(inf);
    }
  }

  // --- statements ------------------------------------------------------------------------------

  IndexInfo& use_index(const std::string& n, const SourceLoc& at) {
    for (IndexInfo& i : indices_)
      if (i.name == n) return i;
    if (kKeywords.count(n)) error(at, "'" + n + "' is a keyword and cannot be used as an index");
    indices_.push_back({n, at, false, false, {}, nullptr});
    return indices_.back();
  }

  IndexInfo* find_index(const std::string& n) {
    for (IndexInfo& i : indices_)
      if (i.name == n) return &i;
    return nullptr;
  }

  static std::string access_text(const std::string& tensor, const std::vector<AffineExpr>& idx) {
    std::string s = tensor + "(";
    for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + idx[i].to_string();
    return s + ")";
  }

  // The tensor statement `s` writes, checked: an existing output or local of as many dimensions as
  // indices are given, or (null) a new local under a free name.
  const ir::Tensor* written_tensor(const ast::Statement& s) {
    const ir::Tensor* target = f_.find_tensor(s.tensor);
    if (!target) {
      check_name_free(s.tensor, s.loc, "tensor");
      if (params_.count(s.tensor)) error(s.loc, "'" + s.tensor + "' is a size parameter and cannot be written");
    } else if (target->kind == ir::TensorKind::Input) {
      error(s.loc, "cannot write input tensor '" + s.tensor + "'; write an output or a new local tensor");
    } else if (target->shape.size() != s.lhs.size()) {
      error(s.loc, "'" + s.tensor + "' has " + std::to_string(target->shape.size()) + " dimension(s) but " +
                       std::to_string(s.lhs.size()) + " index(es) are given");
    }
    return target;
  }

  // Left-hand indices: distinct plain names; each a range candidate from the target's dimension.
  void lhs_indices(const ast::Statement& s, const ir::Tensor* target) {
    for (size_t i = 0; i < s.lhs.size(); ++i) {
      const ast::LhsIndex& l = s.lhs[i];
      if (params_.count(l.name))
        error(l.loc, "'" + l.name + "' is a size parameter and cannot be an index; rename the index");
      if (f_.find_tensor(l.name) || written_later_.count(l.name))
        error(l.loc, "'" + l.name + "' is a tensor and cannot be an index");
      if (is_builtin(l.name) || parse_dtype(l.name) || kKeywords.count(l.name))
        error(l.loc, "'" + l.name + "' is a reserved name and cannot be an index");
      if (find_index(l.name)) error(l.loc, "index '" + l.name + "' appears twice on the left-hand side");
      IndexInfo& info = use_index(l.name, l.loc);
      info.on_lhs = true;
      if (target) info.candidates.push_back({target->shape[i], l.loc, "dimension " + std::to_string(i) + " of " + s.tensor});
    }
  }

  // The reduction kind of the statement's operator; an accumulation without '!' needs an earlier
  // write of its tensor.
  void reduction_kind(const ast::Statement& s, ir::Statement& st) {
    if (s.op == "=") {
      st.reduction = ir::Reduction::None;
      return;
    }
    st.reduction = s.op[0] == '+'   ? ir::Reduction::Sum
                   : s.op[0] == '*' ? ir::Reduction::Prod
                   : s.op[1] == 'a' ? ir::Reduction::Max
                                    : ir::Reduction::Min;
    st.init = s.op.back() == '!';
    if (!st.init && !written_.count(s.tensor))
      error(s.op_loc, "'" + s.op + "' accumulates into the existing value of '" + s.tensor +
                          "', but no earlier statement writes it; use '" + s.op + "!' to start from the identity");
  }

  // `where` clauses: each ranges one index the statement uses, once.
  void where_ranges(const ast::Statement& s) {
    for (const ast::Range& r : s.where) {
      IndexInfo* info = find_index(r.index);
      if (!info)
        error(r.loc, "'where' gives a range for '" + r.index + "', which this statement does not use as an index");
      if (info->where) error(r.loc, "index '" + r.index + "' is ranged twice (first at " + line_col(info->where->loc) + ")");
      info->where = &r;
    }
  }

  // An index's range: its `where` clause, else the tensor dimensions it indexes on its own (which
  // must agree); an index only on the right of '=' is an error (a reduction needs '+=!' etc.).
  ir::IndexVar index_range(IndexInfo& info, const ast::Statement& s, const ir::Statement& st) {
    if (!info.on_lhs && !info.in_access && !info.where)
      error(info.first, "unknown name '" + info.name + "': not a tensor, a size parameter (" + param_list() +
                            ") or an index of this statement");
    ir::IndexVar v;
    v.name = info.name;
    v.is_reduction = !info.on_lhs;
    if (info.where) {
      v.lo = affine(*info.where->lo, AffineMode::Params, "range bound");
      v.hi = affine(*info.where->hi, AffineMode::Params, "range bound");
      where_locs_[{f_.statements.size(), v.name}] = info.where->loc;
    } else if (info.candidates.empty() && info.on_lhs && !info.in_access) {
      error(info.first, "index '" + info.name + "' on the left-hand side is bound nowhere: it indexes no tensor on "
                        "the right and '" + s.tensor + "' is a new local whose shape comes from its indices; use it "
                        "on the right or add 'where " + info.name + " in lo:hi'");
    } else if (info.candidates.empty()) {
      error(info.first, "cannot infer the range of index '" + info.name +
                            "': it never indexes a tensor dimension on its own; add 'where " + info.name +
                            " in lo:hi'");
    } else {
      const Candidate& c0 = info.candidates[0];
      for (const Candidate& c : info.candidates)
        if (!(c.hi == c0.hi))
          error(c.loc, "conflicting ranges for index '" + info.name + "': 0:" + c.hi.to_string() + " from " + c.from +
                           " here, but 0:" + c0.hi.to_string() + " from " + c0.from + " at " + line_col(c0.loc) +
                           "; add 'where " + info.name + " in lo:hi' to choose one");
      v.lo = AffineExpr::constant_of(0);
      v.hi = c0.hi;
    }
    if (v.is_reduction && st.reduction == ir::Reduction::None)
      error(info.first, "index '" + info.name + "' appears only on the right-hand side of '=': use '+=!' (or '*=!', "
                            "'max=!', 'min=!') to reduce over it, or add it to the left-hand side");
    return v;
  }

  // A new local written by `st`: its dtype the right-hand side's (a weak literal's default), its
  // shape its indices' ranges in left-hand order.
  DType declare_local(const ast::Statement& s, const ir::Statement& st, const Typed& rhs) {
    if (rhs.kind == Kind::Bool) error(rhs.loc, "a condition cannot be stored; use select(c, 1, 0)");
    const DType out_type = rhs.kind == Kind::WeakInt ? DType::I32 : rhs.kind == Kind::WeakReal ? DType::F32 : rhs.e->type;
    ir::Tensor t;
    t.name = s.tensor;
    t.dtype = out_type;
    t.kind = ir::TensorKind::Local;
    t.loc = s.loc;
    for (const ast::LhsIndex& l : s.lhs) t.shape.push_back(st.find_index(l.name)->hi);
    f_.tensors.push_back(std::move(t));
    written_later_.erase(s.tensor);
    return out_type;
  }

  void statement(const ast::Statement& s) {
    indices_.clear();
    stmt_ = &s;
    ir::Statement st;
    st.name = "S" + std::to_string(f_.statements.size());
    st.output = s.tensor;
    st.loc = s.loc;
    const ir::Tensor* target = written_tensor(s);
    lhs_indices(s, target);
    reduction_kind(s, st);
    Typed rhs = expr(*s.rhs);
    where_ranges(s);
    std::vector<ir::IndexVar> outs, reds;
    for (IndexInfo& info : indices_) {
      ir::IndexVar v = index_range(info, s, st);
      (v.is_reduction ? reds : outs).push_back(v);
    }
    // Output indices in left-hand order.
    for (const ast::LhsIndex& l : s.lhs)
      for (const ir::IndexVar& v : outs)
        if (v.name == l.name) st.domain.push_back(v);
    for (const ir::IndexVar& v : reds) st.domain.push_back(v);
    for (const ast::LhsIndex& l : s.lhs) st.out_indices.push_back(AffineExpr::index(l.name));
    const DType out_type = target ? target->dtype : declare_local(s, st, rhs);
    st.rhs = coerce(rhs, out_type, "stored in " + dt(out_type) + " tensor '" + s.tensor + "'");
    st.acc_type = out_type;
    written_.insert(s.tensor);
    f_.statements.push_back(std::move(st));
  }

  // --- expressions -----------------------------------------------------------------------------

  static std::shared_ptr<ir::Expr> node(ir::ExprKind k, DType t, const SourceLoc& loc) {
    auto e = std::make_shared<ir::Expr>();
    e->kind = k;
    e->type = t;
    e->loc = loc;
    return e;
  }

  static Typed apply(ir::Op op, DType t, Kind kind, std::vector<ir::ExprPtr> args, const SourceLoc& loc) {
    auto e = node(ir::ExprKind::Apply, t, loc);
    e->op = op;
    e->args = std::move(args);
    return {e, kind, loc};
  }

  // Gives a weak (literal-like) expression the dtype `t`.
  ir::ExprPtr materialize(const ir::ExprPtr& e, DType t, const SourceLoc& at) const {
    auto copy = std::make_shared<ir::Expr>(*e);
    switch (e->kind) {
      case ir::ExprKind::Constant:
        if (!dtype_is_float(t) && e->value != static_cast<double>(static_cast<int64_t>(e->value)))
          error(e->loc, "the real number " + ir::to_string(*e) + " cannot be used as " + dt(t) + " without a cast");
        [[fallthrough]];
      case ir::ExprKind::SizeParam:
      case ir::ExprKind::IndexValue:
        copy->type = t;
        return copy;
      case ir::ExprKind::Access: return e;  // strong: never reached
      case ir::ExprKind::Apply: break;
    }
    if (e->op == ir::Op::Select) {
      copy->args[1] = materialize(e->args[1], t, at);
      copy->args[2] = materialize(e->args[2], t, at);
    } else {
      for (auto& a : copy->args) a = materialize(a, t, at);
    }
    copy->type = t;
    return copy;
  }

  [[noreturn]] void condition_as_number(const Typed& x) const {
    error(x.loc, "a condition (comparison, '&&', '||', '!') cannot be used as a number; use select(c, 1, 0)");
  }

  // The right-hand side (or an argument) converted to `t` under the promotion rules.
  ir::ExprPtr coerce(const Typed& x, DType t, const std::string& what) const {
    switch (x.kind) {
      case Kind::Bool: condition_as_number(x);
      case Kind::WeakInt: return materialize(x.e, t, x.loc);
      case Kind::WeakReal:
        if (!dtype_is_float(t))
          error(x.loc, "a real-valued expression cannot be " + what + " without a cast such as " + dt(t) + "(...)");
        return materialize(x.e, t, x.loc);
      case Kind::Strong: break;
    }
    if (x.e->type != t)
      error(x.loc, "type mismatch: a " + dt(x.e->type) + " value cannot be " + what + "; convert it explicitly with " +
                       dt(t) + "(...)");
    return x.e;
  }

  static DType default_type(Kind k) { return k == Kind::WeakReal ? DType::F32 : DType::I32; }

  // Brings two operands to one type: the common dtype, or weak if both are weak.
  std::pair<ir::ExprPtr, ir::ExprPtr> unify(const Typed& a, const Typed& b, const std::string& op, DType& type,
                                            Kind& kind) const {
    if (a.kind == Kind::Bool) condition_as_number(a);
    if (b.kind == Kind::Bool) condition_as_number(b);
    if (a.kind == Kind::Strong && b.kind == Kind::Strong) {
      if (a.e->type != b.e->type)
        error(b.loc, "type mismatch: " + dt(a.e->type) + " " + op + " " + dt(b.e->type) +
                         "; tessel never converts implicitly between dtypes: cast one operand, e.g. " +
                         dt(b.e->type) + "(...) or " + dt(a.e->type) + "(...)");
      type = a.e->type;
      kind = Kind::Strong;
      return {a.e, b.e};
    }
    if (a.kind == Kind::Strong || b.kind == Kind::Strong) {
      const Typed& strong = a.kind == Kind::Strong ? a : b;
      type = strong.e->type;
      kind = Kind::Strong;
      const std::string what = "combined with " + std::string(type == DType::I8 || type == DType::I32 ? "an " : "a ") +
                               dt(type) + " operand of '" + op + "'";
      return {coerce(a, type, what), coerce(b, type, what)};
    }
    kind = (a.kind == Kind::WeakReal || b.kind == Kind::WeakReal) ? Kind::WeakReal : Kind::WeakInt;
    type = default_type(kind);
    return {a.e, b.e};
  }

  Typed expr(const ast::Expr& e) {
    switch (e.kind) {
      case ast::ExprKind::Int:
      case ast::ExprKind::Real: {
        auto c = node(ir::ExprKind::Constant, e.kind == ast::ExprKind::Int ? DType::I32 : DType::F32, e.loc);
        c->value = e.kind == ast::ExprKind::Int ? static_cast<double>(e.int_value) : e.real_value;
        return {c, e.kind == ast::ExprKind::Int ? Kind::WeakInt : Kind::WeakReal, e.loc};
      }
      case ast::ExprKind::Name: return name_value(e);
      case ast::ExprKind::Call: return call(e);
      case ast::ExprKind::Unary: {
        Typed x = expr(*e.args[0]);
        if (e.op == "!") {
          if (x.kind != Kind::Bool) error(x.loc, "'!' needs a condition (a comparison), not a number");
          return apply(ir::Op::Not, DType::I32, Kind::Bool, {x.e}, e.loc);
        }
        if (x.kind == Kind::Bool) condition_as_number(x);
        if (x.kind == Kind::Strong && x.e->type == DType::U8)
          error(e.loc, "cannot negate an unsigned u8 value; cast it first, e.g. -i32(x)");
        return apply(ir::Op::Neg, x.e->type, x.kind, {x.e}, e.loc);
      }
      case ast::ExprKind::Binary: break;
    }
    const ir::Op op = *binary_op(e.op);
    Typed a = expr(*e.args[0]);
    Typed b = expr(*e.args[1]);
    if (op == ir::Op::And || op == ir::Op::Or) {
      if (a.kind != Kind::Bool) error(a.loc, "'" + e.op + "' needs conditions on both sides (comparisons), not numbers");
      if (b.kind != Kind::Bool) error(b.loc, "'" + e.op + "' needs conditions on both sides (comparisons), not numbers");
      return apply(op, DType::I32, Kind::Bool, {a.e, b.e}, e.loc);
    }
    DType type;
    Kind kind;
    auto [x, y] = unify(a, b, e.op, type, kind);
    if (is_comparison(op)) {
      if (kind != Kind::Strong) {  // compare weak operands in their default type
        type = default_type(kind);
        x = materialize(x, type, a.loc);
        y = materialize(y, type, b.loc);
      }
      auto r = apply(op, DType::I32, Kind::Bool, {x, y}, e.loc);
      return r;
    }
    Typed r = apply(op, type, kind, {x, y}, e.loc);
    r.loc = a.loc;
    return r;
  }

  Typed name_value(const ast::Expr& e) {
    const std::string& n = e.name;
    if (params_.count(n)) {
      auto p = node(ir::ExprKind::SizeParam, DType::I32, e.loc);
      p->name = n;
      return {p, Kind::WeakInt, e.loc};
    }
    if (f_.find_tensor(n) || written_later_.count(n))
      error(e.loc, "tensor '" + n + "' needs indices, as in " + n + "(...)");
    if (is_builtin(n)) error(e.loc, "'" + n + "' is a function; call it as " + n + "(...)");
    if (parse_dtype(n)) error(e.loc, "'" + n + "' is a dtype; cast a value with " + n + "(x)");
    use_index(n, e.loc);
    auto v = node(ir::ExprKind::IndexValue, DType::I32, e.loc);
    v->affine = AffineExpr::index(n);
    return {v, Kind::WeakInt, e.loc};
  }

  void arity(const ast::Expr& e, size_t n) const {
    if (e.args.size() != n)
      error(e.name_loc, "'" + e.name + "' takes " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") + ", but " +
                            std::to_string(e.args.size()) + " " + (e.args.size() == 1 ? "is" : "are") + " given");
  }

  // A float-only function's operand: a strong float as it is, a weak one in f32, else an error.
  Typed float_operand(Typed x, const std::string& n) const {
    if (x.kind == Kind::Strong && !dtype_is_float(x.e->type))
      error(x.loc, "'" + n + "' needs a floating-point argument, not " + dt(x.e->type) + "; cast it, e.g. " + n + "(f32(...))");
    if (x.kind != Kind::Strong) {
      x.e = materialize(x.e, DType::F32, x.loc);
      x.kind = Kind::Strong;
    }
    return x;
  }

  Typed builtin_call(const ast::Expr& e, const Builtin& b) {
    const std::string& n = e.name;
    arity(e, b.arity);
    if (b.arity == 2) {  // pow: both operands of one dtype (rule 1), then a float one
      Typed a = expr(*e.args[0]);
      Typed c = expr(*e.args[1]);
      if (a.kind == Kind::Bool) condition_as_number(a);
      if (c.kind == Kind::Bool) condition_as_number(c);
      DType type;
      Kind kind;
      auto [x, y] = unify(a, c, n, type, kind);
      if (kind == Kind::Strong && !dtype_is_float(type))
        error(a.loc, "'" + n + "' needs floating-point arguments, not " + dt(type) + "; cast them, e.g. " + n + "(f32(...), f32(...))");
      if (kind != Kind::Strong) {
        x = materialize(x, DType::F32, a.loc);
        y = materialize(y, DType::F32, c.loc);
        type = DType::F32;
      }
      return apply(b.op, type, Kind::Strong, {x, y}, e.loc);
    }
    Typed x = expr(*e.args[0]);
    if (x.kind == Kind::Bool) condition_as_number(x);
    if (b.float_only) x = float_operand(x, n);
    else if (b.op == ir::Op::Abs && x.kind == Kind::Strong && x.e->type == DType::U8)
      error(x.loc, "abs of an unsigned u8 value is the value itself; drop abs()");
    return apply(b.op, x.e->type, x.kind, {x.e}, e.loc);
  }

  Typed call(const ast::Expr& e) {
    const std::string& n = e.name;
    if (const std::optional<DType> t = parse_dtype(n)) {
      arity(e, 1);
      Typed x = expr(*e.args[0]);
      if (x.kind == Kind::WeakInt || x.kind == Kind::WeakReal) {
        // Integer literals and size parameters are computed in i32, real literals in f32 (in f64
        // when cast to f64, so f64(1e300) keeps its value), then cast.
        const DType from = x.kind == Kind::WeakReal && *t == DType::F64 ? DType::F64 : default_type(x.kind);
        x.e = materialize(x.e, from, x.loc);
        if (from == *t) return {x.e, Kind::Strong, e.loc};
      }
      return apply(ir::Op::Cast, *t, Kind::Strong, {x.e}, e.loc);
    }
    if (n == "select") {
      arity(e, 3);
      Typed c = expr(*e.args[0]);
      if (c.kind != Kind::Bool) error(c.loc, "the first argument of select must be a condition (a comparison)");
      Typed a = expr(*e.args[1]);
      Typed b = expr(*e.args[2]);
      DType type;
      Kind kind;
      auto [x, y] = unify(a, b, "select", type, kind);
      return apply(ir::Op::Select, type, kind, {c.e, x, y}, e.loc);
    }
    if (n == "min" || n == "max") {
      arity(e, 2);
      Typed a = expr(*e.args[0]);
      Typed b = expr(*e.args[1]);
      DType type;
      Kind kind;
      auto [x, y] = unify(a, b, n, type, kind);
      return apply(n == "min" ? ir::Op::Min : ir::Op::Max, type, kind, {x, y}, e.loc);
    }
    if (const Builtin* b = find_builtin(n)) return builtin_call(e, *b);
    const ir::Tensor* t = f_.find_tensor(n);
    if (!t) {
      if (written_later_.count(n))
        error(e.name_loc, "reads '" + n + "' before any statement writes it; move the statement that writes '" + n +
                              "' before this one");
      std::string known;
      for (const ir::Tensor& x : f_.tensors) known += (known.empty() ? "" : ", ") + x.name;
      error(e.name_loc, "unknown tensor or function '" + n + "'; tensors: " + (known.empty() ? "none" : known) +
                            "; functions: " + builtin_list() + " and the casts f16, bf16, f32, f64, i8, u8, i32");
    }
    if (t->kind != ir::TensorKind::Input && !written_.count(n))
      error(e.name_loc, "reads '" + n + "' before any statement writes it" +
                            std::string(t->kind == ir::TensorKind::Output ? " (outputs start undefined)" : ""));
    if (e.args.size() != t->shape.size())
      error(e.name_loc, "'" + n + "' has " + std::to_string(t->shape.size()) + " dimension(s) but " +
                            std::to_string(e.args.size()) + " index(es) are given");
    auto a = node(ir::ExprKind::Access, t->dtype, e.loc);
    a->name = n;
    for (size_t i = 0; i < e.args.size(); ++i) {
      AffineExpr idx = affine(*e.args[i], AffineMode::Index, "index");
      if (idx.index_coeffs.size() == 1 && idx.param_coeffs.empty() && idx.constant == 0 && !idx.has_div() &&
          idx.index_coeffs.begin()->second == 1) {
        IndexInfo* info = find_index(idx.index_coeffs.begin()->first);
        info->candidates.push_back({t->shape[i], e.args[i]->loc, "dimension " + std::to_string(i) + " of " + n});
      }
      a->indices.push_back(std::move(idx));
    }
    return {a, Kind::Strong, e.loc};
  }
};

}  // namespace

ir::Function lower_def(const Source& src, const ast::Def& def) { return Lowering(src, def).run(); }

}  // namespace tessel::frontend
