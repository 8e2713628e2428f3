// Contraction matching (pass "contraction"): the polyhedral core's one matcher of
//   C(out..) +=! cast(A(..)) * cast(B(..))
// and the recognition primitives every other user of that form shares (the tile pass's fragment
// matcher, compiler/poly/intrinsics.h; the NPU convolution mapping).
//
// Input: a built Kernel (pass "kernel" has run: its global tensors and sizes are final) and the
// tensor-IR function it refers to. Output: Kernel::contraction (compiler/kernel/contraction.h),
// or nullopt with Kernel::no_contraction saying what failed. Emitters read that record and never
// call the matcher.
//
// The rules (seed 000's "matrix identification", generalised):
//   - no index of the function uses floor division or modulo (ir::index_division_use);
//   - the anchor is the one `+=!` statement whose right-hand side is a product of two (cast) tensor
//     reads (product_of_accesses); a second such statement is no match;
//   - the anchor's output indices are plain indices starting at 0; each is batch (read by both
//     operands), M (only by one) or N (only by the other), classified by classify_index; an output
//     index read by neither operand (a broadcast) is no match, nor is a product without M or N
//     (matrix-vector);
//   - the N operand (B) is the one reading the innermost output index, so stores run along N;
//   - every reduction index is K and must be read by both operands; K dims are ordered by A's
//     strides, outer to inner;
//   - an operand that is a local produced before the anchor by `select(cond, X(..), 0)` or
//     `X(..)` from an input X of the same dtype is inlined (the im2col view of a convolution);
//   - every other statement runs after the anchor and is element-wise over its output, at its
//     indices, reading only inputs and earlier element-wise results (the epilogue; lower-rank
//     inputs such as a bias over N are inputs read at other indices and allowed).
#pragma once

#include <optional>
#include <string>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/kernel_ir.h"

namespace tessel::poly {

// `e` without its casts: f32(f16(x)) -> x.
const ir::Expr* strip_cast(const ir::Expr* e);

using ir::plain_index;  // the index name when `e` is exactly one index with coefficient 1

// The two tensor reads of a `+=` / `+=!` statement whose right-hand side is their product, each
// seen through its casts. nullopt with `why` set (when given) otherwise.
struct Product {
  const ir::Expr* left = nullptr;   // accesses (ExprKind::Access)
  const ir::Expr* right = nullptr;
};
std::optional<Product> product_of_accesses(const ir::Statement& s, std::string* why = nullptr);

// Does any index expression of `access` mention `index` (with any coefficient)?
bool reads_index(const ir::Expr& access, const std::string& index);

// The role of an index in a product of two reads: M when only `a` reads it, N when only `b` does,
// Shared when both do (a batch index if it is an output index, K if it is a reduction index),
// Broadcast when neither does.
enum class IndexRole : uint8_t { M, N, Shared, Broadcast };
IndexRole classify_index(const ir::Expr& a, const ir::Expr& b, const std::string& index);

// The matcher (rules above); nullopt with `why` set when the kernel's function is not one
// contraction with padding producers and an element-wise epilogue.
std::optional<kernel::Contraction> identify_contraction(const kernel::Kernel& k, std::string* why);

// Pass "contraction": runs identify_contraction once and records the result in the kernel.
void record_contraction(kernel::Kernel& k);

// Text of the recorded result (`--dump-after=contraction`): the anchor, its dims by role with
// extents, the operands (tensor read, strides, inlined producer), the epilogue; or why not.
std::string contraction_to_string(const kernel::Kernel& k);

}  // namespace tessel::poly
