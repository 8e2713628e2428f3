// A graph input's value given at import time (`tessel import --value NAME=FILE.pb`), read as the
// type the model declares for that input: a TensorProto for a tensor_type input, a SequenceProto of
// tensors for a sequence_type input, an OptionalProto (holding a tensor, a sequence of tensors, or
// nothing) for an optional_type input. ONNX's backend tests store sequence and optional inputs and
// outputs so (test_data_set_0/input_K.pb); the files carry no tag saying which message they hold,
// so the declared type decides. scripts/onnx_tests.py splits such files by the same rule.
//
// Errors (UserError naming `what` and the path): an unreadable file, a message that does not parse
// as the declared type, a sequence of sequences or maps, an optional of a map (unsupported:).
#pragma once

#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace tessel::onnx_import {

struct GivenValue {
  bool present = true;    // false: an optional holding nothing
  bool sequence = false;  // `tensors` are a sequence's elements (else one tensor, or none when !present)
  bool optional = false;  // the declared type is an optional
  std::vector<onnx::TensorProto> tensors;
};

GivenValue read_value_file(const std::string& path, const onnx::TypeProto& declared, const std::string& what);

}  // namespace tessel::onnx_import
