// tessel import of sequences and optionals that cross the graph's boundary or a Loop / If body's:
// a sequence or optional graph input given with --value (value_file.h) held as its elements (def
// inputs), a sequence or optional graph output written as one def output per element
// (importer.cc's write_structured_outputs), SequenceMap as its body once per element, Optional /
// OptionalHasElement / OptionalGetElement held at import (sequence_rewrite.cc), a Loop body's If
// inlined per iteration (loop_unroll.cc). ONNX's 26 node tests of these element by element against
// their expected outputs (kind, presence and length first); a built SequenceMap graph against values
// computed here, with its manifest; the refusals naming the input, node or output.
#include <doctest/doctest.h>

#include <filesystem>
#include <tuple>

#include <onnx/onnx-data_pb.h>

#include "compiler/onnx/importer.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx node tests: sequence and optional graph inputs and outputs, SequenceMap, a Loop body's If, element by element") {
  for (const char* name :
       {"test_identity_opt", "test_identity_sequence", "test_if_opt", "test_if_seq", "test_loop13_seq", "test_loop16_seq_none",
        "test_optional_get_element", "test_optional_get_element_sequence", "test_optional_has_element",
        "test_optional_has_element_empty", "test_sequence_insert_at_back", "test_sequence_insert_at_front",
        "test_sequence_map_add_1_sequence_1_tensor", "test_sequence_map_add_1_sequence_1_tensor_expanded",
        "test_sequence_map_add_2_sequences", "test_sequence_map_add_2_sequences_expanded", "test_sequence_map_extract_shapes",
        "test_sequence_map_extract_shapes_expanded", "test_sequence_map_identity_1_sequence",
        "test_sequence_map_identity_1_sequence_expanded", "test_sequence_map_identity_1_sequence_1_tensor",
        "test_sequence_map_identity_1_sequence_1_tensor_expanded", "test_sequence_map_identity_2_sequences",
        "test_sequence_map_identity_2_sequences_expanded"}) {
    CAPTURE(name);
    check_node_test(name, 1e-6);
  }
}

void set_sequence_type(onnx::ValueInfoProto* v, const std::string& name) {
  v->set_name(name);
  v->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT);
}

std::string write_message(const google::protobuf::MessageLite& m, const std::string& file) {
  const std::string path = (std::filesystem::temp_directory_path() / ("tessel_sequence_io_" + file)).string();
  std::ofstream out(path, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&out));
  return path;
}

onnx::TensorProto tensor(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  onnx::TensorProto t;
  t.set_data_type(TP::FLOAT);
  for (int64_t d : shape) t.add_dims(d);
  for (float x : v) t.add_float_data(x);
  return t;
}

// ys = SequenceMap(xs, b) with body y = Mul(x, b) + x, and n = OptionalHasElement(Optional(b)).
Graph map_graph() {
  Graph g(17);
  set_sequence_type(g.m.mutable_graph()->add_input(), "xs");
  g.input("b", {3});
  auto* map = g.node("SequenceMap", {"xs", "b"}, {"ys"}, "map");
  auto* a = map->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  body->set_name("body");
  Graph::set_type(body->add_input(), "x", {3}, TP::FLOAT);
  Graph::set_type(body->add_input(), "bb", {3}, TP::FLOAT);
  for (const auto& [op, in, out] : std::vector<std::tuple<std::string, std::vector<std::string>, std::string>>{
           {"Mul", {"x", "bb"}, "p"}, {"Add", {"p", "x"}, "y"}}) {
    auto* n = body->add_node();
    n->set_op_type(op);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
  }
  Graph::set_type(body->add_output(), "y", {3}, TP::FLOAT);
  g.node("Optional", {"b"}, {"ob"}, "wrap");
  g.node("OptionalHasElement", {"ob"}, {"has"}, "has");
  set_sequence_type(g.m.mutable_graph()->add_output(), "ys");
  g.output("has", {}, TP::BOOL);
  return g;
}

TEST_CASE("onnx SequenceMap over a sequence input given with --value: an output per element, against values computed here") {
  onnx::SequenceProto xs;
  xs.set_elem_type(onnx::SequenceProto::TENSOR);
  const std::vector<std::vector<float>> elements = {{1, 2, 3}, {-4, 0.5f, 6}};
  for (const auto& e : elements) *xs.add_tensor_values() = tensor({3}, e);
  const std::vector<float> b = {2, -1, 0.25f};
  const std::map<std::string, std::string> files = {{"xs", write_message(xs, "xs.pb")},
                                                    {"b", write_message(tensor({3}, b), "b.pb")}};
  const ImportResult r = import_model(map_graph().m, "map.onnx", {}, files);
  // the manifest: xs's elements are inputs 0 (element 0, 1), b input 1; ys two outputs at index 0
  int elements_in = 0;
  for (const auto& e : r.inputs)
    if (e.contains("element")) {
      CHECK(e["input_index"] == 0);
      ++elements_in;
    }
  CHECK(elements_in == 2);
  REQUIRE(r.structured_outputs.size() == 1);
  CHECK(r.structured_outputs[0]["length"] == 2);
  CHECK(r.structured_outputs[0]["kind"] == "sequence");
  const frontend::Module mod = frontend::parse_module(r.tsl, "map.tsl");
  interp::Tensors in;
  for (const auto& e : r.inputs) {
    if (e.contains("element")) in[e["tsl"]] = f32({3}, elements.at(e["element"].get<size_t>()));
    else if (e["onnx"] == "b") in[e["tsl"]] = f32({3}, b);
  }
  const auto out = interp::evaluate(mod.functions.at(0), {}, in);
  int seen = 0;
  for (const auto& e : r.outputs) {
    if (!e.contains("element")) {
      CHECK(e["onnx"] == "has");
      CHECK(out.at(e["tsl"]).data.at(0) == 1);
      continue;
    }
    CHECK(e["output_index"] == 0);
    const auto& x = elements.at(e["element"].get<size_t>());
    check_close(out.at(e["tsl"]), {x[0] * b[0] + x[0], x[1] * b[1] + x[1], x[2] * b[2] + x[2]}, 0);
    ++seen;
  }
  CHECK(seen == 2);
}

TEST_CASE("onnx sequences and optionals: what cannot be held is refused naming the input, node or output") {
  // a sequence graph input without its value: its length is data
  CHECK_THROWS_WITH_AS(import_model(map_graph().m, "map.onnx"),
                       doctest::Contains("input 'xs': unsupported: a sequence graph input without its value"), UserError);
  // sequences of different lengths mapped together
  {
    Graph g = map_graph();
    auto* in = g.m.mutable_graph()->mutable_input(1);
    set_sequence_type(in, "b");
    onnx::SequenceProto two, one;
    *two.add_tensor_values() = tensor({3}, {1, 2, 3});
    *two.add_tensor_values() = tensor({3}, {1, 2, 3});
    *one.add_tensor_values() = tensor({3}, {1, 2, 3});
    g.m.mutable_graph()->mutable_node()->RemoveLast();  // OptionalHasElement
    g.m.mutable_graph()->mutable_node()->RemoveLast();  // Optional
    g.m.mutable_graph()->mutable_output()->RemoveLast();
    CHECK_THROWS_WITH_AS(import_model(g.m, "map.onnx", {}, {{"xs", write_message(two, "two.pb")}, {"b", write_message(one, "one.pb")}}),
                         doctest::Contains("node 'map' (SequenceMap): unsupported: sequences of 2 and 1 tensors mapped together"), UserError);
  }
  // reading an optional that holds nothing
  {
    Graph g(15);
    auto* in = g.m.mutable_graph()->add_input();
    in->set_name("o");
    in->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT);
    g.node("OptionalGetElement", {"o"}, {"y"}, "get");
    g.output("y", {2});
    onnx::OptionalProto none;
    none.set_name("o");
    CHECK_THROWS_WITH_AS(import_model(g.m, "opt.onnx", {}, {{"o", write_message(none, "none.pb")}}),
                         doctest::Contains("node 'get' (OptionalGetElement): unsupported: reading an optional that holds nothing ('o')"),
                         UserError);
  }
  // a --value naming no input
  CHECK_THROWS_WITH_AS(import_model(map_graph().m, "map.onnx", {}, {{"nope", "/dev/null"}}),
                       doctest::Contains("--value: 'nope' is not an input of map.onnx"), UserError);
}

}  // namespace
}  // namespace tessel::onnx_import
