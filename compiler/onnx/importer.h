// ONNX import (issue 34): an ONNX model becomes one readable `.tsl` def.
//
// import_model parses the ModelProto, runs ONNX's own shape inference
// (onnx::shape_inference::InferShapes, with data propagation) for every intermediate shape, then
// translates node by node through the op-type table (translate.h, ops_table.cc): each node gives
// one or more statements under a `# node NAME (OpType)` comment, or is folded at import time when
// its inputs are constants (Shape, Constant, shape arithmetic, a Reshape's shape, Gather's indices).
// A Loop whose trip count, an If whose condition, is known at import is replaced by its body
// repeated / the branch taken (loop_unroll.h), and sequence operators by the tensor nodes reading
// a sequence's elements (sequence_rewrite.h), before those nodes are translated.
// Tensor names are the ONNX names made into TSL identifiers (never a reserved word or an index
// name); dimensions are the model's static sizes as literals. Graph inputs stay def inputs (unless
// given with `values` and only used where a constant is needed); initializers read as data become
// def inputs written as OUT_weights/NAME.npy.
//
// Errors (UserError, exit 1 in the CLI): a malformed file or graph names the model and what is
// wrong; anything the language cannot express is
// `MODEL.onnx: node 'NAME' (OpType): unsupported: REASON` (dynamic shapes, f64/i64 data, strings,
// operators without a translator).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "isa/base/npy.h"

namespace tessel::onnx_import {

struct ImportResult {
  std::string def_name;
  std::string tsl;                          // the program text
  nlohmann::json inputs, outputs;           // manifest entries: {"tsl","onnx","dtype","shape","file"?}
  // Sequence and optional graph outputs ({"onnx","output_index","kind","present","length"}): their
  // elements are `outputs` entries with "element" (a sequence's position) and "optional" (true).
  nlohmann::json structured_outputs = nlohmann::json::array();
  std::map<std::string, NpyArray> weights;  // def inputs backed by initializers, by TSL name
  int nodes = 0, statements = 0;
};

// `model_name` names the model in errors. `values`: graph inputs known at import time
// (`tessel import --value NAME=FILE.pb`); `value_files`: the same as files (NAME -> path), each read
// as the input's declared type (value_file.h: a tensor, a sequence of tensors or an optional; a
// sequence's elements become def inputs, "element" K in the manifest).
ImportResult import_model(onnx::ModelProto model, const std::string& model_name,
                          const std::map<std::string, onnx::TensorProto>& values = {},
                          const std::map<std::string, std::string>& value_files = {});
// Reads MODEL.onnx (UserError when unreadable or not an ONNX model) and imports it.
ImportResult import_file(const std::string& path, const std::map<std::string, onnx::TensorProto>& values = {},
                         const std::map<std::string, std::string>& value_files = {});

// Writes OUT.tsl, OUT.json (the manifest: {"def", "inputs", "outputs", "initializers_dir"}, paths
// relative to the manifest's folder) and OUT_weights/NAME.npy. UserError naming the path on failure.
void write_import(const ImportResult& r, const std::string& out_tsl, const std::string& source);

}  // namespace tessel::onnx_import
