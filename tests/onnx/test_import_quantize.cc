// tessel import of the quantization operators (compiler/onnx/ops_quantize.cc), Einsum
// (ops_einsum.cc) and the window functions (ops_window.cc): each model imported, parsed and
// evaluated by the reference interpreter, every output compared element by element with the value
// computed here from ONNX's definition (round half to even, saturation, zero points, per-axis
// scales, diagonals, ellipsis broadcasting, periodic and symmetric windows); then ONNX's own node
// tests of these operators from libonnx-testdata, every output element reproduced exactly.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

NpyArray bytes(DType t, const std::vector<int64_t>& shape, const std::vector<int>& v) {
  NpyArray a;
  a.dtype = t;
  a.shape = shape;
  for (int x : v) a.data.push_back(static_cast<uint8_t>(x));
  return a;
}

int u8_at(const NpyArray& a, int64_t i) { return a.data.at(size_t(i)); }
int i8_at(const NpyArray& a, int64_t i) { return static_cast<int8_t>(a.data.at(size_t(i))); }

void initializer_u8(Graph& g, const std::string& name, const std::vector<int64_t>& shape, const std::vector<int>& v) {
  auto* t = g.m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(TP::UINT8);
  for (int64_t d : shape) t->add_dims(d);
  for (int x : v) t->add_int32_data(x);
}

int saturate(double q, int lo, int hi) { return int(std::max<double>(lo, std::min<double>(hi, q))); }

}  // namespace

TEST_CASE("onnx QuantizeLinear: round half to even, the zero point added, saturated to u8 and to i8") {
  const std::vector<float> x = {-3.0f, -0.5f, 0.25f, 0.5f, 0.75f, 1.25f, 100.0f, 300.0f};
  for (int et : {int(TP::UINT8), int(TP::INT8)}) {
    CAPTURE(et);
    Graph g(13);
    g.input("x", {8});
    g.output("y", {8}, et);
    g.initializer("s", {}, {0.5});
    auto* t = g.m.mutable_graph()->add_initializer();
    t->set_name("z");
    t->set_data_type(et);
    t->add_int32_data(et == TP::UINT8 ? 3 : -2);
    g.node("QuantizeLinear", {"x", "s", "z"}, {"y"});
    const NpyArray y = run(g, {{"x", f32({8}, x)}}).at("y");
    REQUIRE(y.element_count() == 8);
    for (int64_t i = 0; i < 8; ++i) {
      INFO("element " << i);
      const double q = std::nearbyint(x[size_t(i)] / 0.5) + (et == TP::UINT8 ? 3 : -2);  // ties to even
      if (et == TP::UINT8) CHECK(u8_at(y, i) == saturate(q, 0, 255));
      else CHECK(i8_at(y, i) == saturate(q, -128, 127));
    }
  }
}

TEST_CASE("onnx DequantizeLinear: one scale and zero point per element of axis 1") {
  Graph g(13);
  g.input("x", {2, 3}, TP::UINT8);
  g.output("y", {2, 3});
  g.initializer("s", {3}, {0.5, 2.0, 0.25});
  initializer_u8(g, "z", {3}, {10, 0, 200});
  g.node("DequantizeLinear", {"x", "s", "z"}, {"y"});
  const std::vector<int> x = {0, 7, 255, 10, 128, 200};
  const NpyArray y = run(g, {{"x", bytes(DType::U8, {2, 3}, x)}}).at("y");
  const double s[3] = {0.5, 2.0, 0.25};
  const int z[3] = {10, 0, 200};
  std::vector<float> want;
  for (int i = 0; i < 6; ++i) want.push_back(float((x[size_t(i)] - z[i % 3]) * s[i % 3]));
  check_close(y, want, 0);
}

TEST_CASE("onnx DynamicQuantizeLinear: scale and zero point from min(0, min x) and max(0, max x), then the quantized tensor") {
  Graph g(13);
  g.input("x", {2, 3});
  g.output("y", {2, 3}, TP::UINT8);
  g.output("y_scale", {});
  g.output("y_zero_point", {}, TP::UINT8);
  g.node("DynamicQuantizeLinear", {"x"}, {"y", "y_scale", "y_zero_point"});
  const std::vector<float> x = {-1.0f, 2.5f, 0.0f, 3.0f, -0.25f, 1.0f};
  const auto out = run(g, {{"x", f32({2, 3}, x)}});
  const float scale = (3.0f - -1.0f) / 255.0f;
  const int zero = saturate(std::nearbyint(0.0f - -1.0f / scale), 0, 255);
  check_close(out.at("y_scale"), {scale}, 1e-7);
  CHECK(u8_at(out.at("y_zero_point"), 0) == zero);
  for (int64_t i = 0; i < 6; ++i) {
    INFO("element " << i);
    CHECK(u8_at(out.at("y"), i) == saturate(std::nearbyint(x[size_t(i)] / scale) + zero, 0, 255));
  }
}

TEST_CASE("onnx MatMulInteger and ConvInteger: operands shifted by their zero points, accumulated in i32") {
  Graph g(13);
  g.input("a", {2, 3}, TP::UINT8);
  g.input("b", {3, 2}, TP::UINT8);
  g.output("y", {2, 2}, TP::INT32);
  initializer_u8(g, "az", {2}, {1, 200});  // one per row of A
  initializer_u8(g, "bz", {}, {5});
  g.node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"});
  const std::vector<int> a = {1, 2, 3, 250, 255, 0}, b = {5, 6, 7, 8, 9, 255};
  const NpyArray y = run(g, {{"a", bytes(DType::U8, {2, 3}, a)}, {"b", bytes(DType::U8, {3, 2}, b)}}).at("y");
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int s = 0;
      for (int k = 0; k < 3; ++k) s += (a[size_t(i * 3 + k)] - (i ? 200 : 1)) * (b[size_t(k * 2 + j)] - 5);
      CHECK(int_at(y, i * 2 + j) == s);
    }

  // a 3x3 input padded by 1: the padding reads the zero point's value, so it contributes nothing
  Graph c(13);
  c.input("x", {1, 1, 3, 3}, TP::UINT8);
  c.input("w", {1, 1, 2, 2}, TP::UINT8);
  c.output("y", {1, 1, 4, 4}, TP::INT32);
  initializer_u8(c, "xz", {}, {10});
  attr_ints(c.node("ConvInteger", {"x", "w", "xz"}, {"y"}), "pads", {1, 1, 1, 1});
  const std::vector<int> xv = {11, 12, 13, 14, 15, 16, 17, 18, 19}, wv = {1, 2, 3, 4};
  const NpyArray yc = run(c, {{"x", bytes(DType::U8, {1, 1, 3, 3}, xv)}, {"w", bytes(DType::U8, {1, 1, 2, 2}, wv)}}).at("y");
  for (int oy = 0; oy < 4; ++oy)
    for (int ox = 0; ox < 4; ++ox) {
      int s = 0;
      for (int ky = 0; ky < 2; ++ky)
        for (int kx = 0; kx < 2; ++kx) {
          const int iy = oy + ky - 1, ix = ox + kx - 1;
          if (iy >= 0 && iy < 3 && ix >= 0 && ix < 3) s += (xv[size_t(iy * 3 + ix)] - 10) * wv[size_t(ky * 2 + kx)];
        }
      INFO("y[" << oy << ", " << ox << "]");
      CHECK(int_at(yc, oy * 4 + ox) == s);
    }
}

TEST_CASE("onnx QLinearMatMul: the i32 accumulator requantized by a_scale * b_scale / y_scale, rounded and saturated") {
  Graph g(13);
  g.input("a", {2, 2}, TP::UINT8);
  g.input("b", {2, 2}, TP::UINT8);
  g.output("y", {2, 2}, TP::UINT8);
  g.initializer("as", {}, {0.5});
  initializer_u8(g, "az", {}, {100});
  g.initializer("bs", {}, {0.25});
  initializer_u8(g, "bz", {}, {0});
  g.initializer("ys", {}, {0.5});
  initializer_u8(g, "yz", {}, {128});
  g.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  const std::vector<int> a = {101, 99, 200, 0}, b = {1, 2, 255, 3};
  const NpyArray y = run(g, {{"a", bytes(DType::U8, {2, 2}, a)}, {"b", bytes(DType::U8, {2, 2}, b)}}).at("y");
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      int acc = 0;
      for (int k = 0; k < 2; ++k) acc += (a[size_t(i * 2 + k)] - 100) * b[size_t(k * 2 + j)];
      INFO("y[" << i << ", " << j << "] acc " << acc);
      CHECK(u8_at(y, i * 2 + j) == saturate(std::nearbyint(float(acc) * (0.5f * 0.25f / 0.5f)) + 128, 0, 255));
    }
}

TEST_CASE("onnx Einsum: batch matmul, a diagonal under an ellipsis, implicit output, a full sum") {
  const std::vector<float> a = ramp(2 * 3 * 4), b = ramp(2 * 4 * 2, 0.5f, -2.0f);
  {
    Graph g(13);
    g.input("a", {2, 3, 4});
    g.input("b", {2, 4, 2});
    g.output("y", {2, 3, 2});
    auto* n = g.node("Einsum", {"a", "b"}, {"y"});
    auto* at = n->add_attribute();
    at->set_name("equation");
    at->set_type(onnx::AttributeProto::STRING);
    at->set_s("bij, bjk -> bik");
    const NpyArray y = run(g, {{"a", f32({2, 3, 4}, a)}, {"b", f32({2, 4, 2}, b)}}).at("y");
    std::vector<float> want;
    for (int p = 0; p < 2; ++p)
      for (int i = 0; i < 3; ++i)
        for (int k = 0; k < 2; ++k) {
          float s = 0;
          for (int j = 0; j < 4; ++j) s += a[size_t(p * 12 + i * 4 + j)] * b[size_t(p * 8 + j * 2 + k)];
          want.push_back(s);
        }
    check_close(y, want);
  }
  auto single = [](const std::string& eq, const std::vector<int64_t>& in, const std::vector<int64_t>& out, const std::vector<float>& x) {
    Graph g(13);
    g.input("x", in);
    g.output("y", out);
    auto* at = g.node("Einsum", {"x"}, {"y"})->add_attribute();
    at->set_name("equation");
    at->set_type(onnx::AttributeProto::STRING);
    at->set_s(eq);
    ImportResult r;
    NpyArray y = run(g, {{"x", f32(in, x)}}, &r).at("y");
    return std::make_pair(y, r.tsl);
  };
  const std::vector<float> sq = ramp(2 * 3 * 3);
  const auto [diag, diag_tsl] = single("...ii ->...i", {2, 3, 3}, {2, 3}, sq);
  std::vector<float> want_diag;
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 3; ++i) want_diag.push_back(sq[size_t(p * 9 + i * 3 + i)]);
  check_close(diag, want_diag, 0);
  CHECK(diag_tsl.find("+=!") == std::string::npos);  // no letter summed: a plain copy of the diagonal
  const std::vector<float> m = ramp(3 * 4);
  std::vector<float> want_t;  // implicit output "ij" -> "ji" sorted: "ji" is the transpose
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) want_t.push_back(m[size_t(i * 4 + j)]);
  check_close(single("ji", {3, 4}, {4, 3}, m).first, want_t, 0);  // implicit: the letters sorted, i then j
  float total = 0;
  for (float v : m) total += v;
  check_close(single("ij->", {3, 4}, {}, m).first, {total});
}

TEST_CASE("onnx HannWindow, HammingWindow, BlackmanWindow: periodic and symmetric, cos of the index") {
  struct Case {
    const char* op;
    double a0, a1, a2;
  };
  for (const Case& k : {Case{"HannWindow", 0.5, 0.5, 0}, Case{"HammingWindow", 25.0 / 46, 21.0 / 46, 0},
                        Case{"BlackmanWindow", 0.42, 0.5, 0.08}})
    for (int periodic : {1, 0}) {
      CAPTURE(k.op);
      CAPTURE(periodic);
      Graph g(17);
      g.initializer("size", {}, {7}, TP::INT64);
      g.output("y", {7});
      attr_int(g.node(k.op, {"size"}, {"y"}), "periodic", periodic);
      const NpyArray y = run(g, {}).at("y");
      const double n = periodic ? 7 : 6;
      std::vector<float> want;
      for (int i = 0; i < 7; ++i)
        want.push_back(float(k.a0 - k.a1 * std::cos(2 * M_PI * i / n) + k.a2 * std::cos(4 * M_PI * i / n)));
      check_close(y, want, 1e-6);
    }
}

TEST_CASE("onnx node tests: quantization, Einsum and window tests from libonnx-testdata") {
  for (const char* t :
       {"test_quantizelinear", "test_quantizelinear_axis", "test_dequantizelinear", "test_dequantizelinear_axis",
        "test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted", "test_dynamicquantizelinear_min_adjusted",
        "test_dynamicquantizelinear_expanded", "test_matmulinteger", "test_basic_convinteger", "test_convinteger_with_padding",
        "test_convinteger_without_padding", "test_qlinearmatmul_2D", "test_qlinearmatmul_3D", "test_qlinearconv",
        "test_einsum_batch_diagonal", "test_einsum_batch_matmul", "test_einsum_inner_prod", "test_einsum_sum",
        "test_einsum_transpose"})
    check_node_test(t, 1e-5);
  // the window tests' data uses pi = 3.1415 (hannwindow.py): within 1e-4 of the exact window
  for (const char* t : {"test_hannwindow", "test_hannwindow_symmetric", "test_hammingwindow", "test_hammingwindow_symmetric",
                        "test_blackmanwindow", "test_blackmanwindow_symmetric"})
    check_node_test(t, 1e-4);
}

}  // namespace tessel::onnx_import
