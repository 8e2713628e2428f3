// Builders for small ONNX graphs (protobuf API) and the import-parse-evaluate helper the ONNX import
// tests share: tests/onnx/test_*.cc.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/onnx/importer.h"
#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/value_file.h"

namespace tessel::onnx_import::testing {

using TP = onnx::TensorProto;

struct Graph {
  onnx::ModelProto m;
  Graph(int opset = 13) {
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    m.mutable_graph()->set_name("g");
  }
  static void set_type(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& shape, int et) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(et);
    auto* s = tt->mutable_shape();
    for (int64_t d : shape) s->add_dim()->set_dim_value(d);
  }
  void input(const std::string& name, const std::vector<int64_t>& shape, int et = TP::FLOAT) {
    set_type(m.mutable_graph()->add_input(), name, shape, et);
  }
  void output(const std::string& name, const std::vector<int64_t>& shape, int et = TP::FLOAT) {
    set_type(m.mutable_graph()->add_output(), name, shape, et);
  }
  void initializer(const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& v, int et = TP::FLOAT) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(et);
    for (int64_t d : shape) t->add_dims(d);
    for (double x : v) {
      if (et == TP::INT64) t->add_int64_data(int64_t(x));
      else if (et == TP::DOUBLE) t->add_double_data(x);
      else t->add_float_data(float(x));
    }
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
                        const std::string& name = "") {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  }
};

inline void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void attr_float(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

inline NpyArray f32(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = shape;
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}
inline float at(const NpyArray& a, int64_t i) {
  float f;
  std::memcpy(&f, a.data.data() + i * 4, 4);
  return f;
}
inline std::vector<float> ramp(int64_t n, float scale = 0.25f, float offset = -1.0f) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(offset + scale * float((i * 7) % 13));
  return v;
}

// Imports, parses and evaluates the model with `inputs` (by ONNX name) plus the weights.
inline interp::Tensors run(const Graph& g, const std::map<std::string, NpyArray>& inputs, ImportResult* out = nullptr) {
  const ImportResult r = import_model(g.m, "test.onnx");
  if (out) *out = r;
  const frontend::Module mod = frontend::parse_module(r.tsl, "imported.tsl");
  interp::Tensors in = r.weights;
  for (const auto& e : r.inputs) {
    const std::string onnx = e["onnx"], tsl = e["tsl"];
    if (inputs.count(onnx)) in[tsl] = inputs.at(onnx);
  }
  return interp::evaluate(mod.functions.at(0), {}, in);
}

inline void check_close(const NpyArray& got, const std::vector<float>& want, double tol = 1e-5) {
  REQUIRE(got.element_count() == int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(at(got, int64_t(i)) - want[i]) <= tol * (1 + std::fabs(want[i])));
  }
}

inline NpyArray i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& v) {
  NpyArray a;
  a.dtype = DType::I32;
  a.shape = shape;
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}
inline int32_t int_at(const NpyArray& a, int64_t i) {
  int32_t v;
  std::memcpy(&v, a.data.data() + i * 4, 4);
  return v;
}
// The tensor a manifest entry names in an ONNX test file: the file itself, or (an entry with
// "element" / "optional") that element of the SequenceProto / OptionalProto the declared type reads.
inline NpyArray entry_tensor(const nlohmann::json& e, const std::string& path, const onnx::TypeProto& declared) {
  if (!e.contains("element") && !e.contains("optional")) return read_tensor_file(path);
  const GivenValue v = read_value_file(path, declared, path);
  return to_npy(v.tensors.at(size_t(e.value("element", 0))), path);
}

// Every output_K.pb of the test of `suite` (node, simple, ...) reproduced from its input_K.pb
// (skipped without libonnx-testdata): every input given at import by its file, as
// scripts/onnx_tests.py does (a sequence or optional read as declared), a sequence or optional
// output's kind, presence and length checked, then each element.
inline void check_suite_test(const std::string& suite, const std::string& name, double tol) {
  const std::string dir = "/usr/share/libonnx-testdata/data/" + suite + "/" + name, data = dir + "/test_data_set_0/";
  if (!std::ifstream("/usr/share/libonnx-testdata/data/node/test_abs/model.onnx")) return;  // libonnx-testdata not installed
  REQUIRE_MESSAGE(std::ifstream(dir + "/model.onnx"), dir);
  onnx::ModelProto model;
  {
    std::ifstream f(dir + "/model.onnx", std::ios::binary);
    REQUIRE(model.ParseFromIstream(&f));
  }
  std::set<std::string> initializers;
  for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
  std::vector<const onnx::ValueInfoProto*> inputs;  // graph inputs that are not initializers: input_K.pb
  for (const auto& in : model.graph().input())
    if (!initializers.count(in.name())) inputs.push_back(&in);
  std::map<std::string, std::string> files;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (std::ifstream(data + "input_" + std::to_string(k) + ".pb")) files[inputs[k]->name()] = data + "input_" + std::to_string(k) + ".pb";
  const ImportResult r = import_file(dir + "/model.onnx", {}, files);
  const frontend::Module mod = frontend::parse_module(r.tsl, name + ".tsl");
  interp::Tensors in = r.weights;
  for (const auto& e : r.inputs)
    if (e.contains("input_index")) {
      const int k = e["input_index"].get<int>();
      in[e["tsl"]] = entry_tensor(e, data + "input_" + std::to_string(k) + ".pb", inputs.at(size_t(k))->type());
    }
  const auto out = interp::evaluate(mod.functions.at(0), {}, in);
  for (const auto& s : r.structured_outputs) {
    const int k = s["output_index"].get<int>();
    const GivenValue want = read_value_file(data + "output_" + std::to_string(k) + ".pb", model.graph().output(k).type(), name);
    INFO(name << " output " << s["onnx"].get<std::string>());
    CHECK(want.present == s["present"].get<bool>());
    CHECK(want.tensors.size() == s["length"].get<size_t>());
  }
  for (const auto& e : r.outputs) {
    const int k = e["output_index"].get<int>();
    const NpyArray want = entry_tensor(e, data + "output_" + std::to_string(k) + ".pb", model.graph().output(k).type());
    const NpyArray& got = out.at(e["tsl"]);
    REQUIRE(got.shape == want.shape);
    REQUIRE(got.dtype == want.dtype);
    for (int64_t i = 0; i < want.element_count(); ++i) {
      INFO(name << " output " << e["tsl"] << " element " << i);
      if (want.dtype == DType::I32) CHECK(int_at(got, i) == int_at(want, i));
      else if (want.dtype == DType::U8 || want.dtype == DType::I8) CHECK(got.data.at(size_t(i)) == want.data.at(size_t(i)));
      else CHECK(std::fabs(at(got, i) - at(want, i)) <= tol * (1 + std::fabs(at(want, i))));
    }
  }
}

inline void check_node_test(const std::string& name, double tol) { check_suite_test("node", name, tol); }

}  // namespace tessel::onnx_import::testing
