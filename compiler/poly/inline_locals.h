// Pointwise locals inlined (pass "inline_locals", after collapse_indices and before
// split_reductions; GPU and c targets): a local that one statement writes elementwise and every
// reader reads at a point of its own, with no costly operation in it, is computed inside its
// readers instead of stored and read back:
//   D(n, h, w, c) = f32(X(n, h, w, c)) - Mean(c)
//   SqSum(c) +=! D(n, h, w, c) * D(n, h, w, c)
//   Y(n, h, w, c) = f16(D(n, h, w, c) * Inv(c) + beta(c))
// becomes
//   SqSum(c) +=! (f32(X(n, h, w, c)) - Mean(c)) * (f32(X(n, h, w, c)) - Mean(c))
//   Y(n, h, w, c) = f16((f32(X(n, h, w, c)) - Mean(c)) * Inv(c) + beta(c))
// Batch norm's D was a kernel of its own on the GPU that wrote 6.4 MB of f32 and two more kernels
// read it back, where recomputing it reads 3.2 MB of f16 twice.
//
// Exact: the inlined expression has the local's type, so a reader computes the value the local
// held. A local L is inlined where
//   - one statement writes it, without a reduction, each output index a distinct plain index
//     ranging over the whole of its dimension (0 to the shape), and its value has L's type;
//   - every read of L, in every statement, is at plain indices of the reader (L(n, h, w, c), not
//     L(h + 1, ..) or L(2 i, ..)): one recomputation per use, never a window of them;
//   - its value has no costly operation (a float division or float built-in: those stay stored)
//     and reads no tensor that a statement between the writer and a reader writes;
//   - it is read at most kMaxUses times in all (each read recomputes it).
// Anything else is stored as written. The writer's statement is removed, and the local's tensor
// with it; statements are renumbered S0, S1, ... in program order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

// One inlined local: "D (S2): inlined into S3, S4 (2 reads)".
struct InlinedLocal {
  std::string local, statement;
  std::vector<std::string> readers;
  int reads = 0;
  std::string to_string() const;
};

// The function with its pointwise locals inlined, or nothing where none is.
std::optional<ir::Function> inline_locals(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                          std::vector<InlinedLocal>* inlined = nullptr);

}  // namespace tessel::poly
