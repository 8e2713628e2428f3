// A gather along a table's outer axis written as a one-hot sum (analysis; rewrites nothing):
//   Y(p.., q..) +=! select(I(p..) == r0 [|| I(p..) == r0 - D], X(r0, q..), 0),  r0 in 0:D
// the form tessel import gives ONNX Gather with data indices (compiler/onnx/ops_index.cc): row p of
// Y is row I(p) of X (with the second test, I(p) + D where I(p) < 0), zeros where no r0 matches.
// Input: a Kernel of one statement. Output: the tensors and sizes, or why the kernel is not that
// form. Read by the roofline (a gather's least work is moving the rows it selects, not the sum's
// N x D x row points) and by the NPU's gather mapping (compiler/emit_npu/gather.h).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::kernel {

struct GatherForm {
  const GlobalTensor* I = nullptr;  // the indices (i32), shape [p..]
  const GlobalTensor* X = nullptr;  // the table [D, q..] (f16, f32 or i32)
  const GlobalTensor* Y = nullptr;  // the gathered rows [p.., q..], X's dtype
  bool wraps = false;               // I(p) + D for -D <= I(p) < 0 (the `|| I == r0 - D` test)
  int64_t rows = 1;                 // rows of Y: the product of I's shape
  int64_t D = 0;                    // rows of X
  int64_t row_bytes = 0;            // bytes of one row (of X and of Y)
};

// "" when the kernel's one statement is that gather (literal index ranges over the whole tensors,
// Y's indices I's then X's after r0, each a distinct plain index), else why not; never throws.
std::string why_not_gather_form(const Kernel& kernel, GatherForm& form);

}  // namespace tessel::kernel
