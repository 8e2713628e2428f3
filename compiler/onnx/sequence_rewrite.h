// ONNX sequence operators resolved at import (issue 34): the language has tensors only, so a
// sequence is a list of tensor values known at import time, held by the importer (importer.cc) as
// their ONNX names, and each sequence operator is replaced by plain tensor nodes or by nothing:
//   SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase   the list changes, no node
//   SequenceAt(S, p)             Identity of element p
//   SequenceLength(S)            a Constant int64 scalar
//   ConcatFromSequence(S)        Concat(axis) of the elements (new_axis = 1: each Unsqueezed first)
//   SplitToSequence(X, split)    Split along axis (sizes 1 without `split` and then, keepdims = 0,
//                                each Squeezed; a scalar split: chunks of that size, the last
//                                shorter; a 1-d split: those sizes); the parts are the elements
// Positions (negative from the end) and split sizes must be known at import time (constants,
// initializers, --value inputs); a split part of size 0 is an element no node writes (counted,
// skipped by ConcatFromSequence, refused where read). Refused through Context::unsupported: a sequence read before any
// node made it (a graph input of sequence type), a position out of range, an empty sequence
// concatenated or read. The importer translates the returned nodes like any other.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {

using Sequences = std::map<std::string, std::vector<std::string>>;  // sequence value -> its elements' names

bool is_sequence_op(const std::string& op_type);

// The nodes replacing c.node() (a sequence operator); `sequences` gains its output sequence.
// `taken`: the graph's names (fresh ones avoid them and are added); `opset` for Split, Squeeze and
// Unsqueeze's forms (attributes before 13, inputs from 13).
std::vector<onnx::NodeProto> rewrite_sequence_op(Context& c, Sequences& sequences, std::set<std::string>& taken, int opset);

}  // namespace tessel::onnx_import
