// The importer's state: one Importer per model, the Context (translate.h) every translator writes
// through. Private to compiler/onnx: importer.cc runs it (values, statements, the manifest), importer_rewrites.cc
// holds the node replacements (Loop / Scan unrolled, If inlined, sequence / optional / GatherND rewrites spliced
// into the graph) and the sequence / optional graph inputs and outputs. Callers use importer.h.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/onnx/importer.h"
#include "compiler/onnx/sequence_rewrite.h"
#include "compiler/onnx/translate.h"
#include "compiler/onnx/value_file.h"
#include "isa/base/error.h"

namespace tessel::onnx_import {

// The TSL identifier of an ONNX name: letters, digits and _, never a reserved word or an index name.
std::string identifier(const std::string& onnx_name);

class Importer final : public Context {
 public:
  Importer(onnx::ModelProto& model, std::string model_name, const std::map<std::string, onnx::TensorProto>& values,
           const std::map<std::string, std::string>& value_files)
      : model_(model), model_name_(std::move(model_name)), given_(values), value_files_(value_files) {}

  ImportResult run();

  // Context
  const onnx::NodeProto& node() const override { return *node_; }
  int opset() const override { return opset_; }
  bool has_input(int i) const override { return i < node_->input_size() && !node_->input(i).empty(); }
  const Value& input(int i) const override;
  std::vector<double> constant(int i, const std::string& what) const override;
  bool has_output(int i) const override { return i < node_->output_size() && !node_->output(i).empty(); }
  const Value& output(int i) override;
  std::string output_name(int i) override;
  int output_type(int i) const override;
  bool alias(int i, const Value& v) override;
  void set_constant(int i, std::vector<double> data, std::vector<int64_t> shape, int elem_type) override;
  std::string read(const Value& v, const std::vector<std::string>& idx) override;
  std::string temp(const std::string& suffix) override;
  Value table(const std::string& suffix, std::vector<double> data, std::vector<int64_t> shape, int elem_type) override;
  void emit(const Statement& s) override;
  [[noreturn]] void unsupported(const std::string& reason) const override { throw UserError(where() + "unsupported: " + reason); }
  [[noreturn]] void malformed(const std::string& reason) const override { throw UserError(where() + reason); }
  bool has_builtin(const std::string& name) const override;

 private:
  std::string where() const {
    if (!node_) return model_name_ + ": ";
    const std::string name = !node_->name().empty() ? node_->name() : node_->output_size() ? node_->output(0) : "";
    return model_name_ + ": node '" + name + "' (" + node_->op_type() + "): ";
  }
  std::string unique(const std::string& base);
  void prepare();
  void read_value_files();
  void collect_values();
  void record_type(const onnx::ValueInfoProto& vi);
  void declare_graph_io();
  void translate_node(const onnx::NodeProto& n);
  void unroll(int k);
  void rewrite_sequence(int k);
  void rewrite_optional(int k);
  void rewrite_gather(int k);
  void unroll_scan_node(int k);
  void hold_structured_inputs();
  void write_structured_outputs();
  void inline_if(int k);
  std::set<std::string> graph_names() const;
  void splice(int k, std::vector<onnx::NodeProto> nodes);
  std::optional<std::vector<double>> evaluate(const std::string& name, int depth);
  void reinfer();
  void finish_outputs();
  std::string materialize(Value& v);
  std::string signature_entry(const Value& v) const;
  nlohmann::json manifest_entry(const Value& v, bool with_file) const;
  std::string program_text() const;

  onnx::ModelProto& model_;
  std::string model_name_;
  std::map<std::string, onnx::TensorProto> given_;
  const std::map<std::string, std::string>& value_files_;
  std::map<std::string, GivenValue> structured_;                // sequence / optional graph inputs given
  struct ElementOf {
    std::string parent;  // the graph input or output
    int element = -1;    // its position in a sequence (-1: an optional's tensor)
    bool optional = false;
  };
  std::map<std::string, ElementOf> element_of_;                 // ONNX name of an element -> what it is part of
  std::vector<std::string> structured_outputs_;                  // graph outputs of sequence / optional type
  Optionals optionals_;                                          // optional values (sequence_rewrite.h)
  const onnx::NodeProto* node_ = nullptr;
  int opset_ = 1;
  std::map<std::string, Value> values_;
  std::set<std::string> names_;       // TSL names taken
  std::set<std::string> written_;     // TSL tensors written by a statement
  std::set<std::string> aliases_;     // ONNX values standing for an earlier tensor
  std::vector<std::string> def_inputs_;  // ONNX names, in signature order
  std::vector<std::string> def_outputs_;
  std::map<std::string, std::vector<int64_t>> uses_;  // plain index uses of the statement being built
  std::vector<std::string> body_;
  bool read_in_body(const std::string& tsl) const;
  ImportResult result_;
  mutable std::map<std::string, bool> builtins_;
  const onnx::NodeProto* reinferred_at_ = nullptr;
  std::map<std::string, const onnx::NodeProto*> producer_;     // ONNX value -> the node writing it
  std::map<std::string, std::vector<double>> evaluated_;        // evaluate()'s results
  Sequences sequences_;                                          // sequence values (sequence_rewrite.h)
};

}  // namespace tessel::onnx_import
