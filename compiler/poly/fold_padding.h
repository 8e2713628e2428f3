// Padding folding (pass "fold_padding", first pass of the polyhedral pipeline): a local tensor
// defined by a zero-padding statement
//   Xp(i0, .., ir) = select(<i_d - c_d inside X for every d>, X(i0 - c0, .., ir - cr), 0)
// is removed and its reads become shifted reads of X. The padding is then computed inside the
// consumer's tile: every copy into an on-chip buffer zero-fills the part of its box outside the
// tensor (kernel IR Copy semantics), exactly what the NPU's img2col padding and the GPU's
// bounds-checked implicit-GEMM loads do. The condition is checked with isl (it must equal X's
// bounds on the statement's domain), and no other statement may write the local (a later
// `Xp(i) += ...` makes it more than the copy); anything else is left alone.
// Takes and gives a tensor-IR Function (a rewritten copy; the input is not changed).
#pragma once

#include <isl/cpp.h>

#include <optional>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

// The rewritten function, or nullopt when no statement is a foldable padding.
std::optional<ir::Function> fold_padding(isl::ctx ctx, const ir::Function& f);

}  // namespace tessel::poly
