// Reading a --value file as the graph input's declared type (contract in value_file.h).
#include "compiler/onnx/value_file.h"

#include <fstream>
#include <sstream>

#include <onnx/onnx-data.pb.h>

#include "isa/base/error.h"

namespace tessel::onnx_import {
namespace {

std::string file_bytes(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(what + ": " + path + ": cannot open the file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <class Message>
Message parse(const std::string& bytes, const std::string& path, const std::string& what, const char* message) {
  Message m;
  if (!m.ParseFromString(bytes)) throw UserError(what + ": " + path + ": not an ONNX " + message + " (the protobuf does not parse)");
  return m;
}

GivenValue from_sequence(const onnx::SequenceProto& s, const std::string& path, const std::string& what) {
  if (s.elem_type() != onnx::SequenceProto::TENSOR && s.elem_type() != onnx::SequenceProto::UNDEFINED)
    throw UserError(what + ": " + path + ": unsupported: a sequence of sequences, maps or optionals (tessel holds sequences of tensors)");
  GivenValue v;
  v.sequence = true;
  v.tensors.assign(s.tensor_values().begin(), s.tensor_values().end());
  return v;
}

}  // namespace

GivenValue read_value_file(const std::string& path, const onnx::TypeProto& declared, const std::string& what) {
  const std::string bytes = file_bytes(path, what);
  if (declared.has_sequence_type())
    return from_sequence(parse<onnx::SequenceProto>(bytes, path, what, "SequenceProto"), path, what);
  if (declared.has_optional_type()) {
    const auto o = parse<onnx::OptionalProto>(bytes, path, what, "OptionalProto");
    GivenValue v;
    if (o.has_sequence_value()) {
      v = from_sequence(o.sequence_value(), path, what);
    } else if (o.has_tensor_value()) {
      v.tensors.push_back(o.tensor_value());
    } else if (o.elem_type() == onnx::OptionalProto::UNDEFINED || o.elem_type() == onnx::OptionalProto::TENSOR ||
               o.elem_type() == onnx::OptionalProto::SEQUENCE) {
      v.present = false;
    } else {
      throw UserError(what + ": " + path + ": unsupported: an optional of a map or an optional (tessel holds tensors and sequences of tensors)");
    }
    v.optional = true;
    return v;
  }
  if (!declared.has_tensor_type() && declared.value_case() != onnx::TypeProto::VALUE_NOT_SET)
    throw UserError(what + ": " + path + ": unsupported: a value of a map or sparse type");
  GivenValue v;
  v.tensors.push_back(parse<onnx::TensorProto>(bytes, path, what, "TensorProto"));
  return v;
}

}  // namespace tessel::onnx_import
