// Tensor IR: what the front end produces from a .tsl `def`, what the reference interpreter
// evaluates and what the polyhedral core turns into a scop.
//
// A Function is an ordered list of Statements over named tensors. Each statement has an iteration
// domain (named indices, each with a half-open quasi-affine range in the size parameters), one
// output access, an expression tree whose tensor accesses are quasi-affine in the indices and
// parameters (floor division by constants allowed), a reduction kind and dtypes. Every index
// expression is an AffineExpr, so the polyhedral core can turn domains and accesses into isl sets
// and maps without re-parsing anything.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "isa/base/dtype.h"

namespace tessel::ir {

struct SourceLoc {
  std::string file;
  int line = 0;  // 1-based
  int col = 0;   // 1-based
};

struct FloorDivTerm;

// sum(coeff * index) + sum(coeff * param) + constant + sum(coeff * floor(numerator / divisor)):
// a quasi-affine expression as isl reads it. Index and parameter names never collide (the front
// end rejects an index named like a size parameter). Modulo by a constant is kept as its
// definition, `e % d` = `e - d*floor(e/d)` (mod_of), so there is one kind of division term.
//
// Asking about division (for consumers that lower only affine forms): has_div() says whether any
// floor-division term is present; evaluate() gives the exact value at a point (floor semantics,
// also for negative numerators); ir::division_use(Function) names the first place a function
// uses one. A consumer that reads index_coeffs / param_coeffs directly must first check has_div()
// and reject the kernel with a UserError when it cannot lower the division terms.
struct AffineExpr {
  std::map<std::string, int64_t> index_coeffs;  // index name -> coefficient (no zero entries)
  std::map<std::string, int64_t> param_coeffs;  // size parameter -> coefficient (no zero entries)
  int64_t constant = 0;
  // Floor-division terms: sorted by (numerator text, divisor), no zero coefficients, no two with
  // the same numerator and divisor, numerators never constant, divisors >= 2.
  std::vector<FloorDivTerm> divs;

  static AffineExpr constant_of(int64_t c);
  static AffineExpr index(const std::string& name, int64_t coeff = 1);
  static AffineExpr param(const std::string& name, int64_t coeff = 1);
  // floor(num / divisor) and num % divisor (the latter in [0, divisor)), divisor >= 1, simplified
  // where exact (constant numerator, divisor 1, every coefficient a multiple of the divisor).
  static AffineExpr floor_div_of(const AffineExpr& num, int64_t divisor);
  static AffineExpr mod_of(const AffineExpr& num, int64_t divisor);
  AffineExpr operator+(const AffineExpr& o) const;
  AffineExpr operator-(const AffineExpr& o) const;
  AffineExpr scaled(int64_t k) const;
  bool has_div() const { return !divs.empty(); }
  bool is_affine() const { return divs.empty(); }
  bool is_constant() const { return index_coeffs.empty() && param_coeffs.empty() && divs.empty(); }
  // Mentions an index, also inside a division term.
  bool uses_indices() const;
  // Every index / parameter name it mentions, also inside division terms.
  void collect_names(std::map<std::string, int64_t>* indices, std::map<std::string, int64_t>* params) const;
  // Value for given index and parameter values (missing names are an InternalError).
  int64_t evaluate(const std::map<std::string, int64_t>& indices, const std::map<std::string, int64_t>& params) const;
  // "m + 2*k - 1", "H + 2", "floor((H - R)/2) + 1": deterministic, isl-compatible text.
  std::string to_string() const;
  bool operator==(const AffineExpr& o) const;
};

struct FloorDivTerm {
  int64_t coeff = 1;
  AffineExpr numerator;
  int64_t divisor = 2;  // >= 2
  bool operator==(const FloorDivTerm& o) const = default;
};

// Floor division and modulo of integers (round toward minus infinity; the remainder is in
// [0, d) for d > 0): the semantics of '/' and '%' in indices and range bounds.
int64_t floor_div(int64_t a, int64_t d);
int64_t floor_mod(int64_t a, int64_t d);

enum class TensorKind : uint8_t { Input, Output, Local };

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<AffineExpr> shape;  // each dimension affine in the size parameters only
  TensorKind kind = TensorKind::Input;
  SourceLoc loc;
};

// X(enumerator, spelling, arity)
#define TESSEL_EXPR_OPS(X) \
  X(Add, "+", 2)           \
  X(Sub, "-", 2)           \
  X(Mul, "*", 2)           \
  X(Div, "/", 2)           \
  X(Mod, "%", 2)           \
  X(Neg, "neg", 1)         \
  X(Lt, "<", 2)            \
  X(Le, "<=", 2)           \
  X(Gt, ">", 2)            \
  X(Ge, ">=", 2)           \
  X(Eq, "==", 2)           \
  X(Ne, "!=", 2)           \
  X(And, "&&", 2)          \
  X(Or, "||", 2)           \
  X(Not, "!", 1)           \
  X(Select, "select", 3)   \
  X(Min, "min", 2)         \
  X(Max, "max", 2)         \
  X(Abs, "abs", 1)         \
  X(Exp, "exp", 1)         \
  X(Log, "log", 1)         \
  X(Sqrt, "sqrt", 1)       \
  X(Rsqrt, "rsqrt", 1)     \
  X(Tanh, "tanh", 1)       \
  X(Erf, "erf", 1)         \
  X(Pow, "pow", 2)         \
  X(Floor, "floor", 1)     \
  X(Ceil, "ceil", 1)       \
  X(Round, "round", 1)     \
  X(Sign, "sign", 1)       \
  X(Sin, "sin", 1)         \
  X(Cos, "cos", 1)         \
  X(Tan, "tan", 1)         \
  X(Asin, "asin", 1)       \
  X(Acos, "acos", 1)       \
  X(Atan, "atan", 1)       \
  X(Sinh, "sinh", 1)       \
  X(Cosh, "cosh", 1)       \
  X(Asinh, "asinh", 1)     \
  X(Acosh, "acosh", 1)     \
  X(Atanh, "atanh", 1)     \
  X(Sigmoid, "sigmoid", 1) \
  X(Cast, "cast", 1)

enum class Op : uint8_t {
#define TESSEL_X(e, spelling, arity) e,
  TESSEL_EXPR_OPS(TESSEL_X)
#undef TESSEL_X
};
const char* op_spelling(Op op);
int op_arity(Op op);

enum class ExprKind : uint8_t {
  Constant,    // number literal: `value` (integers are exact in a double up to 2^53)
  SizeParam,   // a size parameter used as a value, e.g. f32(N): `name`
  IndexValue,  // an affine index expression used as a value, e.g. one-hot's `c`: `affine`
  Access,      // tensor read: `name`, `indices`
  Apply,       // operator or function: `op`, `args` (Cast: target type is `type`)
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  ExprKind kind = ExprKind::Constant;
  DType type = DType::F32;  // result type after the front end's promotion rules
  double value = 0;                  // Constant
  std::string name;                  // SizeParam, Access
  AffineExpr affine;                 // IndexValue
  std::vector<AffineExpr> indices;   // Access
  Op op = Op::Add;                   // Apply
  std::vector<ExprPtr> args;         // Apply
  SourceLoc loc;
};

// `+=!` is Sum with init, `+=` is Sum accumulating into the tensor's existing value; `*=!` / `*=`
// the same for Prod (identity 1).
enum class Reduction : uint8_t { None, Sum, Max, Min, Prod };

struct IndexVar {
  std::string name;
  AffineExpr lo;  // inclusive, affine in parameters only
  AffineExpr hi;  // exclusive, affine in parameters only
  bool is_reduction = false;  // appears only on the right-hand side
};

struct Statement {
  std::string name;                   // "S0", "S1", ... in program order
  std::string output;                 // tensor written
  std::vector<AffineExpr> out_indices;
  // Loop order of the reference semantics: the output indices in the order they appear on the
  // left, then the reduction indices in order of first appearance on the right.
  std::vector<IndexVar> domain;
  Reduction reduction = Reduction::None;
  bool init = true;  // Sum/Max/Min: true for `+=!`-style (start from the identity), false for `+=`
  ExprPtr rhs;
  DType acc_type = DType::F32;  // type the reduction accumulates in (the output tensor's dtype)
  SourceLoc loc;

  const IndexVar* find_index(const std::string& n) const;
};

// A size parameter that follows from the range of the index writing an output dimension: `P` of
// `Y(n, p) = ... where p in 0:(H - R) / 2 + 1` with Y declared [N, P]. `value` (hi - lo of the
// index) uses only parameters that are not inferred.
struct InferredSize {
  std::string param;
  AffineExpr value;
  std::string from;  // "the range of 'p' in S0 (dimension 1 of Y)"
  SourceLoc loc;     // the range (the where clause)
};

struct Function {
  std::string name;
  std::vector<std::string> params;   // size parameters in order of first appearance
  std::vector<InferredSize> inferred;  // parameters the user need not give (at most one entry each)
  std::vector<Tensor> tensors;       // inputs, then outputs, then locals, each in declaration order
  std::vector<Statement> statements; // program order
  SourceLoc loc;

  const Tensor* find_tensor(const std::string& n) const;
  std::vector<const Tensor*> inputs() const;
  std::vector<const Tensor*> outputs() const;
};

// The given sizes plus every inferred parameter of `f` whose inputs are given. A given value of an
// inferred parameter that disagrees with its inferred value, or an inferred value below 1, is a
// UserError naming the parameter, both values and the range it follows from; `given_by` says where
// the given values came from ("--shape", "suite 'small', entry 'x'"). Missing and unknown names
// are left to the caller's own check (so its message lists what is still needed).
std::map<std::string, int64_t> bind_sizes(const Function& f, const std::map<std::string, int64_t>& given,
                                          const std::string& given_by = "--shape");

// Where `f` first uses floor division or modulo in an index expression (written or read index,
// index used as a value), a range bound or a tensor shape: "S1 reads X(n, floor((h)/2))",
// "S0: range of p 0:floor((H - R)/2) + 1", "shape of Y"; empty when it uses none. Emitters that
// lower only affine forms reject a function with it (the message names the place).
std::string division_use(const Function& f);
// The same for index expressions only (shapes and range bounds are evaluated to constants before
// any emitter runs, so only indices reach the code it generates).
std::string index_division_use(const Function& f);

// The index name when `e` is exactly one index with coefficient 1 ("m"; not "m + 1", "2 m", "N").
std::optional<std::string> plain_index(const AffineExpr& e);

// `fn` on every tensor read (ExprKind::Access) in `e`, in pre-order.
void for_each_access(const Expr& e, const std::function<void(const Expr&)>& fn);

// A column reduction: a reduction statement whose every tensor read has, as its last (contiguous)
// index, an expression of the statement's output indices and none of its reduced ones (batch-norm
// statistics over N, H, W of an NHWC tensor: Sum(c) +=! X(n, h, w, c)). Neighbouring outputs then
// read neighbouring elements, so a GPU maps outputs to threads (each reducing its own column)
// instead of spreading one output's reduced elements over a warp's lanes. False when the
// statement reads no tensor.
bool is_column_reduction(const Statement& s);

// A product accumulated in f16 / bf16: it rounds at every step, so the interpreter's order is its
// value (no lanes, no split into partial products).
bool is_ordered_product(const Statement& s);

// The IR as text (`tessel check`): parameters, tensors, then each statement with its domain.
std::string to_string(const Function& f);
std::string to_string(const Expr& e);

}  // namespace tessel::ir
