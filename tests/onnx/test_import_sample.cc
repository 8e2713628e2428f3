// tessel import of GridSample, RoiAlign, Unique and NonZero as Gathers of positions known at import
// (compiler/onnx/sample_rewrite.cc): ONNX's node tests element by element against their expected
// outputs (every mode and padding of GridSample, both RoiAlign transformations, Unique sorted and
// not, with and without an axis, NonZero); built graphs against values computed here (bilinear
// GridSample with align_corners under border and zeros padding, an unsorted Unique of a 2-D
// input flattened); the refusals naming the node and the reason, random operators' among them.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "compiler/onnx/importer.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx node tests: GridSample, RoiAlign, Unique and NonZero, element by element") {
  for (const char* name : {"test_gridsample_bicubic", "test_roialign_aligned_false", "test_roialign_aligned_true"}) {
    CAPTURE(name);
    check_node_test(name, 1e-4);  // ONNX's expected values are written with 4 decimals
  }
  for (const char* name : {"test_gridsample", "test_gridsample_aligncorners_true", "test_gridsample_bilinear",
                           "test_gridsample_border_padding", "test_gridsample_nearest", "test_gridsample_reflection_padding",
                           "test_gridsample_zeros_padding", "test_unique_not_sorted_without_axis", "test_unique_sorted_with_axis", "test_unique_sorted_with_axis_3d",
                           "test_unique_sorted_with_negative_axis", "test_unique_sorted_without_axis", "test_nonzero_example"}) {
    CAPTURE(name);
    check_node_test(name, 1e-5);
  }
}

// X [1, 1, 2, 3] = [[0, 1, 2], [3, 4, 5]] sampled at three grid points with align_corners 1 (x -1..1 ->
// 0..2, y -1..1 -> 0..1)
Graph grid_graph(const std::string& padding) {
  Graph g(16);
  g.input("x", {1, 1, 2, 3});
  g.initializer("grid", {1, 1, 3, 2}, {0, 0, 2, -1, -0.5, 0.5});
  auto* n = g.node("GridSample", {"x", "grid"}, {"y"}, "gs");
  attr_int(n, "align_corners", 1);
  auto* a = n->add_attribute();
  a->set_name("padding_mode");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(padding);
  g.output("y", {1, 1, 1, 3});
  return g;
}

TEST_CASE("onnx GridSample bilinear with align_corners under border and zeros padding, against values computed here") {
  const NpyArray x = f32({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5});
  // (0, 0) -> x 1, y 0.5: (1 + 4) / 2; (2, -1) -> x 3, y 0: border clamps x to 2 (value 2), zeros
  // padding reads outside (0); (-0.5, 0.5) -> x 0.5, y 0.75: 0.25 * 0.5 + 0.75 * 3.5
  check_close(run(grid_graph("border"), {{"x", x}}).at("y"), {2.5f, 2.0f, 2.75f});
  check_close(run(grid_graph("zeros"), {{"x", x}}).at("y"), {2.5f, 0.0f, 2.75f});
}

TEST_CASE("onnx Unique not sorted of a 2-D input without an axis, against values computed here") {
  Graph g(11);
  g.initializer("xv", {2, 3}, {5, 1, 5, 2, 1, 7});  // known at import
  auto* n = g.node("Unique", {"xv"}, {"y", "indices", "inverse", "counts"}, "u");
  attr_int(n, "sorted", 0);
  g.output("y", {4});
  g.output("indices", {4}, TP::INT64);
  g.output("inverse", {6}, TP::INT64);
  g.output("counts", {4}, TP::INT64);
  const auto out = run(g, {});
  check_close(out.at("y"), {5, 1, 2, 7}, 0);
  const std::vector<int32_t> indices = {0, 1, 3, 5}, inverse = {0, 1, 0, 2, 1, 3}, counts = {2, 2, 1, 1};
  for (size_t i = 0; i < 4; ++i) CHECK(int_at(out.at("indices"), int64_t(i)) == indices[i]);
  for (size_t i = 0; i < 6; ++i) CHECK(int_at(out.at("inverse"), int64_t(i)) == inverse[i]);
  for (size_t i = 0; i < 4; ++i) CHECK(int_at(out.at("counts"), int64_t(i)) == counts[i]);
}

TEST_CASE("onnx GridSample of opset 20 names its modes linear and cubic: the same values as bilinear and bicubic") {
  const NpyArray x = f32({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5});
  for (const char* modes : {"linear bilinear", "cubic bicubic"}) {
    CAPTURE(modes);
    const std::string m20 = std::string(modes).substr(0, std::string(modes).find(' ')), m16 = std::string(modes).substr(m20.size() + 1);
    auto with_mode = [&](int opset, const std::string& mode) {
      Graph g = grid_graph("border");
      g.m.mutable_opset_import(0)->set_version(opset);
      auto* a = g.m.mutable_graph()->mutable_node(0)->add_attribute();
      a->set_name("mode");
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(mode);
      return g;
    };
    const NpyArray want = run(with_mode(16, m16), {{"x", x}}).at("y");
    check_close(run(with_mode(20, m20), {{"x", x}}).at("y"), {at(want, 0), at(want, 1), at(want, 2)});
    // before opset 20 the new names are not modes
    CHECK_THROWS_WITH_AS(import_model(with_mode(16, m20).m, "t.onnx"), doctest::Contains(("mode '" + m20 + "'").c_str()), UserError);
  }
  // opset 20's default mode is linear
  Graph g = grid_graph("border");
  g.m.mutable_opset_import(0)->set_version(20);
  check_close(run(g, {{"x", x}}).at("y"), {2.5f, 2.0f, 2.75f});
}

// numpy.unique's order, which ONNX's reference uses: NaN after every number, NaNs one value
TEST_CASE("onnx Unique keeps NaN apart from the numbers and counts the NaNs as one value") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int sorted : {0, 1}) {
    CAPTURE(sorted);
    Graph g(11);
    g.initializer("xv", {5}, {1, nan, 2, nan, 1});
    auto* n = g.node("Unique", {"xv"}, {"y", "indices", "inverse", "counts"}, "u");
    attr_int(n, "sorted", sorted);
    g.output("y", {3});
    g.output("indices", {3}, TP::INT64);
    g.output("inverse", {5}, TP::INT64);
    g.output("counts", {3}, TP::INT64);
    const auto out = run(g, {});
    // first appearance: 1, NaN, 2; sorted: 1, 2, NaN
    const std::vector<int32_t> indices = sorted ? std::vector<int32_t>{0, 2, 1} : std::vector<int32_t>{0, 1, 2};
    const std::vector<int32_t> inverse = sorted ? std::vector<int32_t>{0, 2, 1, 2, 0} : std::vector<int32_t>{0, 1, 2, 1, 0};
    const std::vector<int32_t> counts = sorted ? std::vector<int32_t>{2, 1, 2} : std::vector<int32_t>{2, 2, 1};
    for (size_t i = 0; i < 3; ++i) {
      CHECK(int_at(out.at("indices"), int64_t(i)) == indices[i]);
      CHECK(int_at(out.at("counts"), int64_t(i)) == counts[i]);
      const float want = std::vector<float>{1, nan, 2}[size_t(indices[i])];
      if (std::isnan(want)) CHECK(std::isnan(at(out.at("y"), int64_t(i))));
      else CHECK(at(out.at("y"), int64_t(i)) == want);
    }
    for (size_t i = 0; i < 5; ++i) CHECK(int_at(out.at("inverse"), int64_t(i)) == inverse[i]);
  }
}

TEST_CASE("onnx GridSample, Unique, NonZero and RoiAlign: values not known at import, an empty result and the max mode are refused naming the node") {
  Graph g = grid_graph("zeros");
  g.m.mutable_graph()->clear_initializer();
  g.input("grid", {1, 1, 3, 2});
  CHECK_THROWS_WITH_AS(import_model(g.m, "t.onnx"),
                       doctest::Contains("node 'gs' (GridSample): unsupported: GridSample's grid (where each output element reads) ('grid') is not a constant"),
                       UserError);
  Graph u(11);
  u.input("x", {4});
  u.node("Unique", {"x"}, {"y"}, "u");
  u.output("y", {4});
  CHECK_THROWS_WITH_AS(import_model(u.m, "t.onnx"),
                       doctest::Contains("node 'u' (Unique): unsupported: Unique's input (the outputs' shapes depend on its values) ('x') is not a constant"),
                       UserError);
  Graph z(13);
  z.initializer("x", {2, 2}, {0, 0, 0, 0});
  z.node("NonZero", {"x"}, {"y"}, "nz");
  z.output("y", {2, 0}, TP::INT64);
  CHECK_THROWS_WITH_AS(import_model(z.m, "t.onnx"), doctest::Contains("node 'nz' (NonZero): unsupported: no element is non-zero (an empty tensor)"),
                       UserError);
  Graph r(16);
  r.input("x", {1, 1, 4, 4});
  r.initializer("rois", {1, 4}, {0, 0, 2, 2});
  r.initializer("b", {1}, {0}, TP::INT64);
  auto* n = r.node("RoiAlign", {"x", "rois", "b"}, {"y"}, "roi");
  auto* a = n->add_attribute();
  a->set_name("mode");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("max");
  r.output("y", {1, 1, 1, 1});
  CHECK_THROWS_WITH_AS(import_model(r.m, "t.onnx"), doctest::Contains("node 'roi' (RoiAlign): unsupported: RoiAlign mode 'max' (avg is translated)"),
                       UserError);
}

TEST_CASE("onnx random operators are refused naming the node and why: their values cannot match ONNX's data") {
  for (const char* op : {"Bernoulli", "RandomUniformLike", "RandomNormalLike"}) {
    CAPTURE(op);
    Graph g(15);
    g.input("x", {4});
    g.node(op, {"x"}, {"y"}, "draw");
    g.output("y", {4});
    const std::string want =
        std::string("node 'draw' (") + op + "): unsupported: random values: " + op + " draws from a generator; ONNX's expected data came from numpy's";
    CHECK_THROWS_WITH_AS(import_model(g.m, "t.onnx"), doctest::Contains(want.c_str()), UserError);
  }
}

}  // namespace
}  // namespace tessel::onnx_import
