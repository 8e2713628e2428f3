// Tensor IR: what the front end produces from a .tsl `def`, what the reference interpreter
// evaluates and what the polyhedral core turns into a scop.
//
// A Function is an ordered list of Statements over named tensors. Each statement has an iteration
// domain (named indices, each with a half-open affine range in the size parameters), one output
// access, an expression tree whose tensor accesses are affine in the indices and parameters, a
// reduction kind and dtypes. Every index expression is an AffineExpr, so the polyhedral core can
// turn domains and accesses into isl sets and maps without re-parsing anything.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

// sum(coeff * index) + sum(coeff * param) + constant. Index and parameter names never collide
// (the front end rejects an index named like a size parameter).
struct AffineExpr {
  std::map<std::string, int64_t> index_coeffs;  // index name -> coefficient (no zero entries)
  std::map<std::string, int64_t> param_coeffs;  // size parameter -> coefficient (no zero entries)
  int64_t constant = 0;

  static AffineExpr constant_of(int64_t c);
  static AffineExpr index(const std::string& name, int64_t coeff = 1);
  static AffineExpr param(const std::string& name, int64_t coeff = 1);
  AffineExpr operator+(const AffineExpr& o) const;
  AffineExpr operator-(const AffineExpr& o) const;
  AffineExpr scaled(int64_t k) const;
  bool is_constant() const { return index_coeffs.empty() && param_coeffs.empty(); }
  bool uses_indices() const { return !index_coeffs.empty(); }
  // Value for given index and parameter values (missing names are an InternalError).
  int64_t evaluate(const std::map<std::string, int64_t>& indices, const std::map<std::string, int64_t>& params) const;
  // "m + 2*k - 1", "H + 2": deterministic, isl-compatible text.
  std::string to_string() const;
  bool operator==(const AffineExpr& o) const = default;
};

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

// `+=!` is Sum with init, `+=` is Sum accumulating into the tensor's existing value.
enum class Reduction : uint8_t { None, Sum, Max, Min };

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

struct Function {
  std::string name;
  std::vector<std::string> params;   // size parameters in order of first appearance
  std::vector<Tensor> tensors;       // inputs, then outputs, then locals, each in declaration order
  std::vector<Statement> statements; // program order
  SourceLoc loc;

  const Tensor* find_tensor(const std::string& n) const;
  std::vector<const Tensor*> inputs() const;
  std::vector<const Tensor*> outputs() const;
};

// The IR as text (`tessel check`): parameters, tensors, then each statement with its domain.
std::string to_string(const Function& f);
std::string to_string(const Expr& e);

}  // namespace tessel::ir
