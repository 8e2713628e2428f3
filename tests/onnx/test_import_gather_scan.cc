// tessel import of GatherND and Compress as a Reshape and a Gather of positions known at import
// (compiler/onnx/gather_rewrite.cc; also ReverseSequence and MaxUnpool as a Gather of each output
// element's source position), of Dropout in training mode with ratio 0 (the identity) and of Scan unrolled over its static length
// (compiler/onnx/loop_unroll.cc): ONNX's node tests element by element against their expected
// outputs; built graphs against values computed here (GatherND with batch_dims and negative
// components, Compress without an axis, a reversed Scan stacking along axis 1); the refusals naming
// the node. DFT (compiler/onnx/ops_stft.cc) and Det (ops_det.cc) against ONNX's node tests.
#include <doctest/doctest.h>

#include "compiler/onnx/importer.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx node tests: GatherND, Compress, ReverseSequence, MaxUnpool, Scan and training Dropout of ratio 0, element by element") {
  for (const char* name : {"test_gathernd_example_float32", "test_gathernd_example_int32", "test_gathernd_example_int32_batch_dim1",
                           "test_compress_0", "test_compress_1", "test_compress_default_axis", "test_compress_negative_axis",
                           "test_reversesequence_batch", "test_reversesequence_time", "test_maxunpool_export_with_output_shape",
                           "test_maxunpool_export_without_output_shape", "test_scan9_sum", "test_scan_sum",
                           "test_training_dropout_zero_ratio", "test_training_dropout_zero_ratio_mask"}) {
    CAPTURE(name);
    check_node_test(name, 1e-6);
  }
}

TEST_CASE("onnx node tests: DFT forward, along axis 2 and inverse, and Det of 2 x 2 matrices, element by element") {
  for (const char* name : {"test_dft", "test_dft_axis", "test_dft_inverse", "test_det_2d", "test_det_nd"}) {
    CAPTURE(name);
    check_node_test(name, 1e-4);  // sums of 10 f32 products of cos / sin
  }
}

TEST_CASE("onnx GatherND with batch_dims 1 and a negative component, against values computed here") {
  // data [2, 3, 2]; indices [2, 2, 1] with batch_dims 1: out[b, p, :] = data[b, I[b, p], :]
  Graph g(13);
  g.input("x", {2, 3, 2});
  g.initializer("ind", {2, 2, 1}, {2, 0, -1, 1}, TP::INT64);
  attr_int(g.node("GatherND", {"x", "ind"}, {"y"}, "gnd"), "batch_dims", 1);
  g.output("y", {2, 2, 2});
  const std::vector<float> x = ramp(12);
  const auto out = run(g, {{"x", f32({2, 3, 2}, x)}});
  const int rows[2][2] = {{2, 0}, {2, 1}};  // -1 is the last of 3
  std::vector<float> want;
  for (int b = 0; b < 2; ++b)
    for (int p = 0; p < 2; ++p)
      for (int c = 0; c < 2; ++c) want.push_back(x[size_t(b * 6 + rows[b][p] * 2 + c)]);
  check_close(out.at("y"), want, 0);
}

TEST_CASE("onnx Compress without an axis reads the flattened input's selected elements") {
  Graph g(11);
  g.input("x", {2, 3});
  g.initializer("c", {5}, {0, 1, 1, 0, 1}, TP::INT64);
  g.m.mutable_graph()->mutable_initializer(0)->set_data_type(TP::BOOL);
  g.m.mutable_graph()->mutable_initializer(0)->clear_int64_data();
  for (int v : {0, 1, 1, 0, 1}) g.m.mutable_graph()->mutable_initializer(0)->add_int32_data(v);
  g.node("Compress", {"x", "c"}, {"y"}, "pick");
  g.output("y", {3});
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  check_close(run(g, {{"x", f32({2, 3}, x)}}).at("y"), {2, 3, 5}, 0);
}

// a Scan over x [2, 3] along axis 1, reversed, summing into s [2]; the scan output stacked along axis 1
Graph scan_graph(bool nested_loop) {
  Graph g(11);
  g.input("s0", {2});
  g.input("x", {2, 3});
  auto* scan = g.node("Scan", {"s0", "x"}, {"s", "ys"}, "scan");
  attr_int(scan, "num_scan_inputs", 1);
  attr_ints(scan, "scan_input_axes", {1});
  attr_ints(scan, "scan_input_directions", {1});
  attr_ints(scan, "scan_output_axes", {1});
  auto* a = scan->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  Graph::set_type(body->add_input(), "acc", {2}, TP::FLOAT);
  Graph::set_type(body->add_input(), "col", {2}, TP::FLOAT);
  auto* add = body->add_node();
  add->set_op_type(nested_loop ? "Loop" : "Add");
  add->add_input("acc");
  add->add_input("col");
  add->add_output("next");
  if (nested_loop) {
    auto* sub = add->add_attribute();
    sub->set_name("body");
    sub->set_type(onnx::AttributeProto::GRAPH);
    sub->mutable_g()->set_name("inner");
  }
  Graph::set_type(body->add_output(), "next", {2}, TP::FLOAT);
  Graph::set_type(body->add_output(), "next", {2}, TP::FLOAT);
  g.output("s", {2});
  g.output("ys", {2, 3});
  return g;
}

TEST_CASE("onnx Scan reversed along axis 1 with its output stacked along axis 1, against running sums computed here") {
  const std::vector<float> s0 = {10, 20}, x = {1, 2, 3, 4, 5, 6};
  const auto out = run(scan_graph(false), {{"s0", f32({2}, s0)}, {"x", f32({2, 3}, x)}});
  // steps read columns 2, 1, 0: row 0 sums 13, 15, 16; row 1 26, 31, 35
  check_close(out.at("s"), {16, 35}, 0);
  check_close(out.at("ys"), {13, 15, 16, 26, 31, 35}, 0);
}

TEST_CASE("onnx GatherND, Dropout, Det and Scan: indices only known when run, a random Dropout, a 5 x 5 Det and a nested Loop are refused naming the node") {
  Graph g(13);
  g.input("x", {2, 2});
  g.input("ind", {1, 2}, TP::INT64);
  g.node("GatherND", {"x", "ind"}, {"y"}, "gnd");
  g.output("y", {1});
  CHECK_THROWS_WITH_AS(import_model(g.m, "t.onnx"),
                       doctest::Contains("node 'gnd' (GatherND): unsupported: GatherND's indices ('ind') is not a constant"), UserError);
  Graph d(13);
  d.input("x", {4});
  d.initializer("ratio", {}, {0.25});
  d.initializer("training", {}, {1}, TP::INT64);
  d.m.mutable_graph()->mutable_initializer(1)->set_data_type(TP::BOOL);
  d.m.mutable_graph()->mutable_initializer(1)->clear_int64_data();
  d.m.mutable_graph()->mutable_initializer(1)->add_int32_data(1);
  d.node("Dropout", {"x", "ratio", "training"}, {"y"}, "drop");
  d.output("y", {4});
  CHECK_THROWS_WITH_AS(import_model(d.m, "t.onnx"),
                       doctest::Contains("node 'drop' (Dropout): unsupported: Dropout in training mode with a ratio other than 0 (random)"),
                       UserError);
  Graph det(11);
  det.input("m", {5, 5});
  det.node("Det", {"m"}, {"d"}, "det");
  det.output("d", {});
  CHECK_THROWS_WITH_AS(import_model(det.m, "t.onnx"), doctest::Contains("node 'det' (Det): unsupported: Det of 5 x 5 matrices"), UserError);
  CHECK_THROWS_WITH_AS(import_model(scan_graph(true).m, "t.onnx"),
                       doctest::Contains("node 'scan' (Scan): unsupported: body node '' (Loop) holds a subgraph"), UserError);
}

}  // namespace
}  // namespace tessel::onnx_import
