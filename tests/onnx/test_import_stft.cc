// tessel import of STFT (compiler/onnx/ops_stft.cc: each frame's DFT one contraction with a basis
// table): a complex signal with a window, one-sided and two-sided, against the DFT summed here in
// double, element by element; then ONNX's test_stft and test_stft_with_window.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx STFT: a windowed complex signal, one- and two-sided, equals the DFT of each frame") {
  const int64_t len = 20, frame = 6, step = 4, frames = (len - frame) / step + 1;
  std::vector<float> x, w;
  for (int64_t e = 0; e < 2 * len; ++e) x.push_back(0.125f * float((e * 7) % 11) - 0.5f);
  for (int64_t n = 0; n < frame; ++n) w.push_back(0.5f + 0.1f * float(n));
  for (bool onesided : {true, false}) {
    CAPTURE(onesided);
    const int64_t bins = onesided ? frame / 2 + 1 : frame;
    Graph g(17);
    g.input("x", {1, len, 2});
    g.input("w", {frame});
    g.initializer("step", {}, {double(step)}, TP::INT64);
    g.output("y", {1, frames, bins, 2});
    attr_int(g.node("STFT", {"x", "step", "w"}, {"y"}), "onesided", onesided ? 1 : 0);
    const NpyArray y = run(g, {{"x", f32({1, len, 2}, x)}, {"w", f32({frame}, w)}}).at("y");
    std::vector<float> want;
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t k = 0; k < bins; ++k) {
        double re = 0, im = 0;
        for (int64_t n = 0; n < frame; ++n) {
          const double th = -2 * M_PI * double(k * n) / double(frame), a = x[size_t(2 * (f * step + n))] * w[size_t(n)],
                       b = x[size_t(2 * (f * step + n) + 1)] * w[size_t(n)];
          re += a * std::cos(th) - b * std::sin(th);
          im += a * std::sin(th) + b * std::cos(th);
        }
        want.push_back(float(re));
        want.push_back(float(im));
      }
    check_close(y, want, 1e-5);
  }
}

TEST_CASE("onnx node tests: test_stft and test_stft_with_window from libonnx-testdata") {
  check_node_test("test_stft", 1e-4);
  check_node_test("test_stft_with_window", 1e-4);
}

}  // namespace
}  // namespace tessel::onnx_import
