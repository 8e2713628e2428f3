// Lowering of one parsed `def` to tensor IR: name resolution, range inference, type checking.
//
// Takes an ast::Def (parser.h) and gives an ir::Function (compiler/ir/tensor_ir.h) whose domains
// and accesses are affine. Rules (compiler/README.md): size parameters are the names in the
// signature's dimensions; an index's range comes from the tensor dimensions it indexes directly
// (or a `where` clause, which wins); two different inferred ranges are an error; types follow the
// promotion rules (no implicit mixing of dtypes; literals, size parameters and index values adapt).
#pragma once

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"

namespace tessel::frontend {

ir::Function lower_def(const Source& src, const ast::Def& def);

}  // namespace tessel::frontend
