// tessel import of ONNX's sequence operators, held at import as lists of tensors
// (compiler/onnx/sequence_rewrite.cc): ONNX's eight sequence models of the "simple" suite element by
// element against their expected outputs; a built graph using SplitToSequence (keepdims 0, a split
// of size 0), SequenceInsert at a negative position, SequenceErase, SequenceLength and
// ConcatFromSequence with new_axis, against values computed here; the refusals naming the node.
#include <doctest/doctest.h>

#include "compiler/onnx/importer.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx simple suite: the eight sequence models, element by element") {
  for (int k = 1; k <= 8; ++k) {
    CAPTURE(k);
    check_suite_test("simple", "test_sequence_model" + std::to_string(k), 0);
  }
}

// x [3, 2] split into rows (keepdims 0: three [2] tensors); b [2] inserted before the last;
// the second erased: [row0, b, row2] stacked on a new axis 1 -> [2, 3]; also the length (3) and
// SplitToSequence with sizes {2, 0, 1} along axis 0 concatenated back (x itself).
Graph sequence_graph(int64_t insert_at, bool sequence_output) {
  Graph g(13);
  g.input("x", {3, 2});
  g.input("b", {2});
  g.initializer("pos", {}, {double(insert_at)}, TP::INT64);
  g.initializer("erase_at", {}, {1}, TP::INT64);
  g.initializer("sizes", {3}, {2, 0, 1}, TP::INT64);
  attr_int(g.node("SplitToSequence", {"x"}, {"rows"}, "split_rows"), "keepdims", 0);
  g.node("SequenceInsert", {"rows", "b", "pos"}, {"s2"}, "insert");
  g.node("SequenceErase", {"s2", "erase_at"}, {"s3"}, "erase");
  g.node("SequenceLength", {"s3"}, {"len"});
  auto* cat = g.node("ConcatFromSequence", {"s3"}, {"stacked"}, "stack");
  attr_int(cat, "axis", 1);
  attr_int(cat, "new_axis", 1);
  attr_int(g.node("SplitToSequence", {"x", "sizes"}, {"parts"}, "split_sizes"), "axis", 0);
  attr_int(g.node("ConcatFromSequence", {"parts"}, {"back"}, "concat_back"), "axis", 0);
  g.output("stacked", {2, 3});
  g.output("len", {}, TP::INT64);
  g.output("back", {3, 2});
  if (sequence_output) {
    auto* o = g.m.mutable_graph()->add_output();
    o->set_name("s3");
    o->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(TP::FLOAT);
  }
  return g;
}

TEST_CASE("onnx sequences: split, insert at -1, erase, length and a stacking concatenation, against values computed here") {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, b = {-1, -2};
  const auto out = run(sequence_graph(-1, false), {{"x", f32({3, 2}, x)}, {"b", f32({2}, b)}});
  // [row0, row1, b, row2] after the insert; erasing position 1 leaves [row0, b, row2]
  check_close(out.at("stacked"), {1, -1, 5, 2, -2, 6}, 0);
  CHECK(int_at(out.at("len"), 0) == 3);
  check_close(out.at("back"), x, 0);
}

TEST_CASE("onnx sequences: an out-of-range position is refused naming the node, a sequence output is written element by element") {
  CHECK_THROWS_WITH_AS(import_model(sequence_graph(5, false).m, "t.onnx"),
                       doctest::Contains("node 'insert' (SequenceInsert): unsupported: position 5 outside the sequence of 3 tensors"), UserError);
  const ImportResult r = import_model(sequence_graph(-1, true).m, "t.onnx");
  REQUIRE(r.structured_outputs.size() == 1);
  CHECK(r.structured_outputs[0]["length"] == 3);
}

}  // namespace
}  // namespace tessel::onnx_import
