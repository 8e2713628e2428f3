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
//   SequenceMap(S, ...)          its body once per element (inputs: element j of each sequence input,
//                                a tensor input as it is; names the body defines suffixed _mapJ),
//                                each body output's values the elements of an output sequence
// Optionals are held the same way (Optionals: present or not, a tensor's name or a sequence):
//   Optional(x)                  holds x (a sequence: its elements); without x, nothing
//   OptionalHasElement(x)        a Constant bool (a plain tensor or sequence: true)
//   OptionalGetElement(x)        Identity of the tensor held / the sequence held; refused when empty
// Positions (negative from the end) and split sizes must be known at import time (constants,
// initializers, --value inputs); a split part of size 0 is an element no node writes (counted,
// skipped by ConcatFromSequence, refused where read). A sequence or optional graph input given at
// import (value_file.h) is held as the names of its elements, def inputs. Refused through
// Context::unsupported: a sequence read before any node made it (a graph input given no value), a
// position out of range, an empty sequence concatenated or read, an empty optional read, a
// SequenceMap body holding a subgraph or sequences of different lengths. The importer translates the returned nodes like any other.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {

using Sequences = std::map<std::string, std::vector<std::string>>;  // sequence value -> its elements' names

struct HeldOptional {
  bool present = false;
  bool sequence = false;  // what it holds is Sequences[its name]
  std::string tensor;     // else the tensor's name
};
using Optionals = std::map<std::string, HeldOptional>;

// An element of size 0 (SplitToSequence's empty part): counted, skipped by a concatenation, refused where read.
inline const std::string kEmptyElement = "<empty>";

bool is_sequence_op(const std::string& op_type);
bool is_optional_op(const std::string& op_type);

// The nodes replacing c.node() (a sequence operator); `sequences` gains its output sequence.
// `taken`: the graph's names (fresh ones avoid them and are added); `opset` for Split, Squeeze and
// Unsqueeze's forms (attributes before 13, inputs from 13).
std::vector<onnx::NodeProto> rewrite_sequence_op(Context& c, Sequences& sequences, std::set<std::string>& taken, int opset);
// The same for Optional, OptionalHasElement, OptionalGetElement; `optionals` gains the output's holding.
std::vector<onnx::NodeProto> rewrite_optional_op(Context& c, Sequences& sequences, Optionals& optionals);

}  // namespace tessel::onnx_import
