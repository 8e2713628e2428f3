// tessel import of LRN (compiler/onnx/ops_pool_norm.cc): the sum of squares over the channel
// window c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2) clipped to the channels, through a
// zero-padded local of squares; each model imported, parsed and evaluated by the reference
// interpreter, every element compared with the formula computed here (odd and even sizes, the
// attributes' defaults), then ONNX's test_lrn and test_lrn_default from libonnx-testdata.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {

using namespace testing;

TEST_CASE("onnx LRN: a channel window of squares, odd and even sizes, clipped at the first and last channel") {
  const int64_t n = 2, ch = 5, h = 2, w = 3;
  const std::vector<float> x = ramp(n * ch * h * w, 0.5f, -2.0f);
  for (int64_t size : {3, 4, 1}) {
    CAPTURE(size);
    Graph g(13);
    g.input("x", {n, ch, h, w});
    g.output("y", {n, ch, h, w});
    auto* node = g.node("LRN", {"x"}, {"y"});
    attr_int(node, "size", size);
    attr_float(node, "alpha", 0.5f);
    attr_float(node, "beta", 0.75f);
    attr_float(node, "bias", 2.0f);
    const NpyArray y = run(g, {{"x", f32({n, ch, h, w}, x)}}).at("y");
    const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    std::vector<float> want;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < ch; ++c)
        for (int64_t p = 0; p < h * w; ++p) {
          double s = 0;
          for (int64_t k = std::max<int64_t>(0, c - lo); k <= std::min(ch - 1, c + hi); ++k) {
            const double v = x[size_t((b * ch + k) * h * w + p)];
            s += v * v;
          }
          const double v = x[size_t((b * ch + c) * h * w + p)];
          want.push_back(float(v / std::pow(2.0 + 0.5 / double(size) * s, 0.75)));
        }
    check_close(y, want, 1e-5);
  }
}

TEST_CASE("onnx node tests: test_lrn and test_lrn_default from libonnx-testdata") {
  check_node_test("test_lrn", 1e-5);
  check_node_test("test_lrn_default", 1e-5);
}

}  // namespace tessel::onnx_import
