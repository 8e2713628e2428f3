// Syntax tree of a .tsl file, as written (names unresolved, no types): the parser's output and
// the input of lowering (lower.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::frontend::ast {

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

enum class ExprKind : uint8_t {
  Int,     // integer literal: int_value
  Real,    // real literal: real_value
  Name,    // bare identifier: name
  Call,    // name(args): a tensor access, a cast, or a built-in function
  Unary,   // op ("-" or "!") args[0]
  Binary,  // args[0] op args[1]
};

struct Expr {
  ExprKind kind = ExprKind::Int;
  int64_t int_value = 0;
  double real_value = 0;
  std::string name;  // Name, Call
  std::string op;    // Unary, Binary
  std::vector<ExprPtr> args;
  ir::SourceLoc loc;       // first character (the operator for Unary/Binary)
  ir::SourceLoc name_loc;  // Call: the callee name
  int depth = 1;           // height of the tree (the parser bounds it)
};

struct TensorDecl {
  std::string dtype;
  ir::SourceLoc dtype_loc;
  std::vector<ExprPtr> dims;
  std::string name;
  ir::SourceLoc loc;
};

struct Range {
  std::string index;
  ir::SourceLoc loc;
  ExprPtr lo, hi;
};

struct LhsIndex {
  std::string name;
  ir::SourceLoc loc;
};

struct Statement {
  std::string tensor;
  ir::SourceLoc loc;
  std::vector<LhsIndex> lhs;
  std::string op;  // "=", "+=", "+=!", "*=", "*=!", "max=", "max=!", "min=", "min=!"
  ir::SourceLoc op_loc;
  ExprPtr rhs;
  std::vector<Range> where;
};

struct Def {
  std::string name;
  ir::SourceLoc loc;
  std::vector<TensorDecl> inputs, outputs;
  std::vector<Statement> statements;
};

struct File {
  std::vector<Def> defs;
};

}  // namespace tessel::frontend::ast
