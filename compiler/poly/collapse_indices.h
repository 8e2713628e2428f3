// Index collapsing (pass "collapse_indices", after fold_padding, before the scop): two indices of
// a statement that always travel together — next to each other, in the same order, as whole
// dimensions of every tensor they index — become one index over the product of their ranges, and
// the pair of dimensions of each such tensor becomes one dimension. It is a reshape of row-major
// tensors, so no byte moves: the kernel reads the user's buffers as they are.
//
//   C(b, m, n) +=! A(b, m, k) * W(k, n)      (batched GEMM with a shared weight)
//   ->  C(b_m, n) +=! A(b_m, k) * W(k, n)    C, A viewed as [B*M, N], [B*M, K]: one GEMM
//
//   Y(n, h, w, k) +=! X(n, h, w, c) * W(c, k)   (1x1 convolution, NHWC)  ->  one GEMM over n_h_w
//   S(n, c) +=! X(n, h, w, c)                    (global pooling)          ->  one reduced index h_w
//
// So a contraction with several M, N, K or batch indices that are adjacent in its tensors reaches
// the one-index templates (the NPU cube's GEMM, the GPU's tensor-core GEMM) on every core, and
// element-wise or row programs over N-D tensors get long contiguous rows.
//
// Conditions (all must hold, or the pair is left alone). A pair (i, j) of statement s collapses
// together with every tensor dimension pair (T, d, d+1) it occupies; such pairs and dimension pairs
// form one component (a tensor's dimension pair links every statement that accesses T, a
// statement's pair every tensor it indexes with it), and a component collapses only as a whole:
//   - every access to T (writes included, in every statement) has plain indices at d and d+1
//     (`i`, `j`: coefficient 1, no constant, parameter or division), two different indices;
//   - every occurrence of i in s is such a position d followed by j at d+1, and every occurrence
//     of j is at such a d+1 after i; neither is used as a value (ExprKind::IndexValue);
//   - both ranges start at 0 and cover their dimensions exactly (extents equal under `sizes`),
//     and i and j are both reduced or both not;
//   - no tensor contributes two overlapping dimension pairs to one component.
// Components are collapsed one at a time until none qualifies (a chain b, m, n of three adjacent
// indices becomes one index in two steps). Shapes and ranges of collapsed dimensions are constants
// (the product under `sizes`); other shapes keep their parameter expressions.
//
// Names: the collapsed index is named i_j (a fresh name where that is taken in the statement or
// is a size parameter). Statement order, reductions, dtypes and source locations are kept.
// Takes and gives a tensor-IR Function (a rewritten copy; the input is not changed). A caller that
// has a user tile spec naming an index that collapsing removes keeps the function as written.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

struct IndexCollapse {
  std::vector<std::string> statements;          // where the pair collapsed ("S0: b, m -> b_m")
  std::vector<std::string> tensors;             // the tensor dimensions merged ("A[0:2]")
  std::string to_string() const;
};

struct CollapsedFunction {
  ir::Function function;
  std::vector<IndexCollapse> steps;             // in the order applied
  // The shape each tensor of the input function had under `sizes`, for tensors whose rank changed
  // (the outputs are reshaped back to these before the caller compares them with the reference).
  std::map<std::string, std::vector<int64_t>> original_shapes;
  std::map<std::string, std::vector<int64_t>> collapsed_shapes;  // the same tensors' shapes now
  // Indices of the input function that no longer exist (per statement name).
  std::map<std::string, std::vector<std::string>> removed_indices;
};

// The rewritten function, or nullopt when no pair of indices collapses. `sizes` binds every size
// parameter.
std::optional<CollapsedFunction> collapse_indices(const ir::Function& f, const std::map<std::string, int64_t>& sizes);

}  // namespace tessel::poly
