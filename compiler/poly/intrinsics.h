// Intrinsic matching (pass "intrinsics"), target-neutral: a statement
//   C[.., m, n] += cast(A[..]) * cast(B[..])
// whose last two output indices are axes m, n and whose last reduction axis is k is a matmul
// fragment when one input (A) has exactly one dimension indexed by m + (other axes) and one by
// k + (other axes), and the other input (B) likewise k and n, neither mentioning the third axis
// (the seed's "matrix identification": A is the input indexed by C's row axis). Each input is
// row-major when its k (for A) / n (for B) dimension comes after the other one. Every other axis
// (batch, image, filter position, input-channel block) must be tiled by 1 (tile_program checks
// this), so for each combination of them the fragment reads a two-dimensional *view* of its
// inputs: for a convolution `X(n, p + r, q + s, c)` that is the img2col view, rows q + s and
// columns c. The fragment shape comes from the hierarchy's matrix unit for the dtypes. The
// schedule built by tile_program keeps m, n, k as the three innermost axes of the anchor.
#pragma once

#include <string>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/kernel_ir.h"
#include "isa/hierarchy.h"

namespace tessel::poly {

struct MatmulMatch {
  bool matched = false;
  std::string why_not;  // when not matched
  std::string m, n, k;  // axis names
  std::string a, b, c;  // tensors
  kernel::Layout a_layout = kernel::Layout::RowMajor, b_layout = kernel::Layout::RowMajor;
  DType in_type = DType::F16, acc_type = DType::F32;
  int unit_m = 0, unit_n = 0, unit_k = 0;
  std::vector<ir::AffineExpr> a_access, b_access, c_access;  // tensor coordinates
  std::vector<std::string> other_axes;  // must be point-tiled (size 1)
  bool img2col = false;                 // an input dimension combines m or k with another axis
};

MatmulMatch match_matmul(const ir::Statement& s, const ir::Function& f, const isa::Hierarchy& h);

}  // namespace tessel::poly
