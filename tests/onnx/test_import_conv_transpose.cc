// tessel import's ConvTranspose (compiler/onnx/ops_contraction.cc): with a stride above 1 the input
// is zero-inserted into a local whose spatial indices are read as `v / s - m` over whole quotients,
// and the transposed convolution is a stride-1 correlation over it (no division of `o - r`, the
// form the NPU's vector lowering refuses). Checked element by element against ONNX's expected
// outputs (strides, pads, output_padding, kernel_shape, auto_pad, dilations, 1-d and 3-d) and
// against a direct scatter loop computed here (groups with a stride).
#include <doctest/doctest.h>

#include <regex>

#include "compiler/onnx/importer.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

// True when some statement divides an expression holding a reduction index (`(i2 - r1) / 2`).
bool divides_by_reduction(const std::string& tsl) {
  static const std::regex quotient(R"(\([^()]*\br\d+[^()]*\) / \d)");
  return std::regex_search(tsl, quotient);
}

}  // namespace

TEST_CASE("onnx import: ConvTranspose with strides, pads, output_padding, output_shape and auto_pad matches ONNX's outputs") {
  for (const char* name : {"test_convtranspose", "test_convtranspose_pads", "test_convtranspose_pad", "test_convtranspose_kernel_shape",
                           "test_convtranspose_autopad_same", "test_convtranspose_with_kernel", "test_convtranspose_dilations",
                           "test_convtranspose_1d", "test_convtranspose_3d", "test_convtranspose_output_shape"}) {
    INFO(name);
    check_node_test(name, 1e-5);
  }
}

TEST_CASE("onnx import: a strided grouped ConvTranspose is a correlation over a zero-inserted input, equal to the scatter loop") {
  // x [1, 4, 3, 2], W [4, 1, 3, 2] (group 2: 2 input channels and 1 output channel per group),
  // strides (2, 3), pads (1, 0, 0, 1), output_padding (1, 0)
  const int64_t C = 4, H = 3, Wd = 2, KH = 3, KW = 2, G = 2, SH = 2, SW = 3;
  const int64_t PT = 1, PL = 0, PB = 0, PR = 1, OPH = 1;
  const int64_t HO = SH * (H - 1) + OPH + KH - PT - PB, WO = SW * (Wd - 1) + KW - PL - PR, M = G;
  Graph g;
  g.input("x", {1, C, H, Wd});
  g.input("w", {C, 1, KH, KW});
  g.output("y", {1, M, HO, WO});
  auto* n = g.node("ConvTranspose", {"x", "w"}, {"y"});
  attr_int(n, "group", G);
  attr_ints(n, "strides", {SH, SW});
  attr_ints(n, "pads", {PT, PL, PB, PR});
  attr_ints(n, "output_padding", {OPH, 0});
  const auto x = ramp(C * H * Wd), w = ramp(C * KH * KW, 0.5f, -2.0f);
  ImportResult r;
  const auto out = run(g, {{"x", f32({1, C, H, Wd}, x)}, {"w", f32({C, 1, KH, KW}, w)}}, &r);
  INFO(r.tsl);
  CHECK_FALSE(divides_by_reduction(r.tsl));
  CHECK(r.tsl.find("zero_inserted") != std::string::npos);
  std::vector<float> want(size_t(M * HO * WO), 0.0f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t v = 0; v < Wd; ++v)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t m = c / (C / G), oh = h * SH + kh - PT, ow = v * SW + kw - PL;
            if (oh < 0 || oh >= HO || ow < 0 || ow >= WO) continue;
            want[size_t((m * HO + oh) * WO + ow)] += x[size_t((c * H + h) * Wd + v)] * w[size_t((c * KH + kh) * KW + kw)];
          }
  check_close(out.at("y"), want);
}

}  // namespace tessel::onnx_import
