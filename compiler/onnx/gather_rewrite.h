// GatherND, Compress, ReverseSequence and MaxUnpool rewritten at import into plain tensor nodes (issue 34): with their indices
// / condition known at import time (a constant, an initializer, a `--value` input: the output's
// shape depends on the condition, and the language's reads are affine or one-hot sums over a
// data index), each becomes a Reshape and a Gather of constant indices that ops_shape.cc's Gather
// translates (an affine read, a select chain, or a one-hot sum):
//   GatherND(X, I, batch_dims b)   X reshaped to [B * M, rest..] (B the product of X's first b
//                                  dimensions, M of the k = I.shape[-1] indexed ones); Gather along
//                                  axis 0 of the linear positions (batch * M + sum_j I[.., j] *
//                                  stride_j, negative components from the end), shaped I.shape[:-1]
//   Compress(X, C, axis)           Gather(X, positions where C is true, axis); without axis X is
//                                  flattened first (Reshape to [-1])
//   ReverseSequence(X, L)          X flattened, Gather of each output element's source position
//                                  (time t < L[b] reads L[b] - 1 - t), shaped as X
//   MaxUnpool(X, I)                X flattened with one zero appended, Gather of each output
//                                  element's source (i where I[i] is its flat position, else the
//                                  zero), shaped as the output (output_shape or shape inference)
// Refused through Context::unsupported: indices or a condition not known at import, a selection
// that is empty (an empty tensor). An index out of range is malformed().
#pragma once

#include <set>
#include <string>
#include <vector>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {

// Also GridSample, RoiAlign, Unique and NonZero (sample_rewrite.h).
bool is_gather_rewrite_op(const std::string& op_type);

// The nodes replacing c.node(); `taken`: the graph's names (fresh ones avoid them and are added);
// `opset` for Reshape's form (an attribute before 5).
std::vector<onnx::NodeProto> rewrite_gather_op(Context& c, std::set<std::string>& taken, int opset);

// Node builders shared with sample_rewrite.cc, each appending to `nodes`:
// `x` reshaped to `shape` into a fresh name from `base` (returned);
std::string add_reshape(std::vector<onnx::NodeProto>& nodes, const std::string& x, const std::vector<int64_t>& shape, const std::string& base,
                        std::set<std::string>& taken, int opset);
// y = Gather(x, positions shaped `dims`, axis);
void add_gather(std::vector<onnx::NodeProto>& nodes, const std::string& x, const std::vector<int64_t>& positions,
                const std::vector<int64_t>& dims, int64_t axis, const std::string& y, std::set<std::string>& taken);
// y = x's flat element positions[e] at each element e (-1: zero), shaped `out_shape`: x reshaped to
// [N] (with one zero of x's dtype appended where a -1 is read), a Gather of the positions.
void add_gather_positions(std::vector<onnx::NodeProto>& nodes, const Value& x, std::vector<int64_t> positions,
                          const std::vector<int64_t>& out_shape, const std::string& y, std::set<std::string>& taken, int opset);

}  // namespace tessel::onnx_import
