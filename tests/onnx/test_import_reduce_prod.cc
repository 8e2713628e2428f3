// tessel import of ReduceProd (compiler/onnx/ops_pool_norm.cc): the language's product reduction
// `*=!` over the axes (an attribute before opset 18, an input from 18), keepdims, and
// noop_with_empty_axes; each model imported, parsed and evaluated by the reference interpreter,
// every output compared element by element with the product computed here.
#include <doctest/doctest.h>

#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

// x = 1, 2, ..., 12 as [2, 3, 2] (halved: 0.5 .. 6, products stay exact in f32)
std::vector<float> halves() {
  std::vector<float> v;
  for (int i = 1; i <= 12; ++i) v.push_back(0.5f * float(i));
  return v;
}

// the product of x over axis 1 of [2, 3, 2]: out[a][c] = prod_b x[a][b][c]
std::vector<float> product_over_axis1(const std::vector<float>& x) {
  std::vector<float> out;
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 2; ++c) {
      float p = 1;
      for (int b = 0; b < 3; ++b) p *= x[size_t(a * 6 + b * 2 + c)];
      out.push_back(p);
    }
  return out;
}

}  // namespace

TEST_CASE("onnx ReduceProd: axes as an attribute (opset 13), keepdims 1 and 0, a *=! statement") {
  for (int keep : {1, 0}) {
    CAPTURE(keep);
    Graph g(13);
    g.input("x", {2, 3, 2});
    g.output("y", keep ? std::vector<int64_t>{2, 1, 2} : std::vector<int64_t>{2, 2});
    auto* n = g.node("ReduceProd", {"x"}, {"y"});
    attr_ints(n, "axes", {-2});
    attr_int(n, "keepdims", keep);
    ImportResult r;
    const auto out = run(g, {{"x", f32({2, 3, 2}, halves())}}, &r);
    CHECK(r.tsl.find("*=!") != std::string::npos);
    check_close(out.at("y"), product_over_axis1(halves()), 0);
  }
}

TEST_CASE("onnx ReduceProd: axes as an input (opset 18), default axes reduce everything, noop_with_empty_axes copies") {
  Graph g(18);
  g.input("x", {2, 3, 2});
  g.output("y", {2, 1, 2});
  g.initializer("axes", {1}, {1}, TP::INT64);
  g.node("ReduceProd", {"x", "axes"}, {"y"});
  check_close(run(g, {{"x", f32({2, 3, 2}, halves())}}).at("y"), product_over_axis1(halves()), 0);

  Graph all(13);
  all.input("x", {2, 3, 2});
  all.output("y", {1, 1, 1});
  all.node("ReduceProd", {"x"}, {"y"});
  float p = 1;
  for (float v : halves()) p *= v;
  check_close(run(all, {{"x", f32({2, 3, 2}, halves())}}).at("y"), {p}, 0);

  Graph noop(18);
  noop.input("x", {2, 3, 2});
  noop.output("y", {2, 3, 2});
  attr_int(noop.node("ReduceProd", {"x"}, {"y"}), "noop_with_empty_axes", 1);
  check_close(run(noop, {{"x", f32({2, 3, 2}, halves())}}).at("y"), halves(), 0);
}

TEST_CASE("onnx node tests: test_reduce_prod_* from libonnx-testdata") {
  for (const char* t : {"test_reduce_prod_default_axes_keepdims_example", "test_reduce_prod_default_axes_keepdims_random",
                        "test_reduce_prod_do_not_keepdims_example", "test_reduce_prod_do_not_keepdims_random",
                        "test_reduce_prod_keepdims_example", "test_reduce_prod_keepdims_random",
                        "test_reduce_prod_negative_axes_keepdims_example", "test_reduce_prod_negative_axes_keepdims_random"})
    check_node_test(t, 1e-5);
}

}  // namespace tessel::onnx_import
