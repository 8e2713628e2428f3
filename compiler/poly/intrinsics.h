// Intrinsic matching (pass "intrinsics"), target-neutral: a statement
//   C[.., m, n] += cast(A[..]) * cast(B[..])
// with one reduction axis k, A indexed by exactly {m, k} and B by {k, n} (pure indices), is a
// matmul fragment. A is the input indexed by C's row axis m; each input is row-major when its
// last index is its contiguous axis in the (m,k) / (k,n) reading (the seed's "matrix
// identification"). The fragment shape comes from the hierarchy's matrix unit for the dtypes.
// The schedule built by tile_program keeps m, n, k as the three innermost axes of the anchor.
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
};

MatmulMatch match_matmul(const ir::Statement& s, const ir::Function& f, const isa::Hierarchy& h);

}  // namespace tessel::poly
