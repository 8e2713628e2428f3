// The .tsl front end: text -> tensor IR (compiler/ir/tensor_ir.h).
//
// parse_module lexes and parses every `def` of a file, resolves names, infers index ranges,
// checks types with the promotion rules of compiler/README.md and lowers each def to an
// ir::Function whose domains and accesses are quasi-affine ('/' and '%' by positive integer
// constants become floor-division terms) and whose inferable output sizes are recorded
// (ir::Function::inferred). Every error is a UserError of the form
// "file:line:col: message\n  <source line>\n  ^". Nothing runs before it: this is the first pass.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::frontend {

struct Module {
  std::vector<ir::Function> functions;  // in file order
};

// Throws UserError naming file:line:col, the source line and a caret.
Module parse_module(const std::string& text, const std::string& file_name);
// Reads `path` (UserError if unreadable) and parses it.
Module load_module(const std::string& path);
// The def called `name`; with an empty name, the only def of the module (UserError listing the
// defs when there are several, or naming the missing one).
const ir::Function& select_function(const Module& m, const std::string& name);

// Deepest expression nesting the parser accepts (deeper input is a UserError, never a crash).
inline constexpr int kMaxExpressionDepth = 256;

}  // namespace tessel::frontend
