// GridSample, RoiAlign, Unique and NonZero rewritten at import into plain tensor nodes (issue 34),
// like gather_rewrite.h's operators: the values that decide where each output element reads (the
// sampling grid, the regions of interest, the tensor whose unique elements or non-zero positions
// are sought) are known at import (a constant, an initializer, a `--value` input), so the output's
// shape is known and each output element is a fixed weighted sum of input elements:
//   GridSample(X, G)        (4-D; bilinear, nearest, bicubic; zeros, border, reflection;
//                           align_corners) each output element is sum_k w_k * X[n, c, h_k, w_k]
//                           over the taps of its grid point, PyTorch's grid_sampler_2d rule (which
//                           ONNX's spec and its test data follow: a tap outside X reads 0 under
//                           zeros padding; border / reflection move each coordinate inside first;
//                           nearest rounds half to even; bicubic A = -0.75)
//   RoiAlign(X, R, B)       (mode avg; half_pixel / output_half_pixel) each output element is the
//                           mean over its bin's sampling points of their bilinear taps
//                           (onnxruntime's RoiAlign, the spec's reference)
// Both become X flattened with one zero appended, a Gather of the taps' flat positions shaped
// [L, C, OH, OW, K] (-> the zero where a tap has none), a Mul by the taps' weights
// [L, 1, OH, OW, K] (a Constant of X's dtype) and a ReduceSum over the last axis.
//   Unique(X, axis, sorted) Y a Gather of the first occurrences (along axis, or of X flattened);
//                           indices, inverse_indices and counts Constants (int64). Sorted order:
//                           ascending, slices compared lexicographically (numpy.unique's).
//   NonZero(X)              a Constant (int64 [rank, count]) of X's non-zero positions.
// The positions are those of the values given at import: the program computes the right result for
// those values (a run with other values of a `--value` input is outside the contract, as for
// Compress). Refused through Context::unsupported: the deciding input not known at import ("the
// output's shape depends on its values"), an empty result, RoiAlign's max mode, a 5-D GridSample,
// a dtype other than f32 for the weighted sums. Coordinates out of range are malformed().
#pragma once

#include <set>
#include <string>
#include <vector>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {

bool is_sample_rewrite_op(const std::string& op_type);

// The nodes replacing c.node() (`taken` and `opset` as for rewrite_gather_op).
std::vector<onnx::NodeProto> rewrite_sample_op(Context& c, std::set<std::string>& taken, int opset);

}  // namespace tessel::onnx_import
