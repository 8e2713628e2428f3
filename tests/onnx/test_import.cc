// tessel import (compiler/onnx/importer.h): small ONNX graphs built with the protobuf API, imported,
// parsed by the front end and evaluated by the reference interpreter; every output is compared
// element by element with values computed here. Error cases check the message and its contract.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include "compiler/interp/compare.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/poly/online_softmax.h"
#include "compiler/onnx/importer.h"
#include "compiler/onnx/tensor_proto.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx import: Add broadcasts a row vector over a matrix, element by element") {
  Graph g;
  g.input("x", {2, 3});
  g.input("y", {3});
  g.output("z", {2, 3});
  g.node("Add", {"x", "y"}, {"z"}, "add0");
  const auto x = ramp(6), y = std::vector<float>{10, 20, 30};
  ImportResult r;
  const auto out = run(g, {{"x", f32({2, 3}, x)}, {"y", f32({3}, y)}}, &r);
  std::vector<float> want;
  for (int i = 0; i < 6; ++i) want.push_back(x[size_t(i)] + y[size_t(i % 3)]);
  check_close(out.at("z"), want);
  CHECK(r.tsl.find("# node add0 (Add)") != std::string::npos);
  CHECK(r.tsl.find("f32[2, 3] x") != std::string::npos);
}

TEST_CASE("onnx import: Gemm with transB, alpha, beta and a bias initializer") {
  Graph g;
  g.input("a", {2, 3});
  g.initializer("b", {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  g.initializer("c", {4}, {0.5, -1, 2, 0});
  g.output("y", {2, 4});
  auto* n = g.node("Gemm", {"a", "b", "c"}, {"y"});
  attr_int(n, "transB", 1);
  attr_float(n, "alpha", 0.5f);
  attr_float(n, "beta", 2.0f);
  const auto a = ramp(6);
  ImportResult r;
  const auto out = run(g, {{"a", f32({2, 3}, a)}}, &r);
  CHECK(r.weights.count("b") == 1);
  CHECK(r.weights.count("c") == 1);
  const float b[4][3] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}, c[4] = {0.5f, -1, 2, 0};
  std::vector<float> want;
  for (int m = 0; m < 2; ++m)
    for (int j = 0; j < 4; ++j) {
      float s = 0;
      for (int k = 0; k < 3; ++k) s += a[size_t(m * 3 + k)] * b[j][k];
      want.push_back(0.5f * s + 2.0f * c[j]);
    }
  check_close(out.at("y"), want);
}

TEST_CASE("onnx import: Conv with padding 1, stride 2 and a bias matches a direct loop") {
  Graph g(11);
  g.input("x", {1, 2, 5, 5});
  g.input("w", {3, 2, 3, 3});
  g.input("bias", {3});
  g.output("y", {1, 3, 3, 3});
  auto* n = g.node("Conv", {"x", "w", "bias"}, {"y"});
  attr_ints(n, "pads", {1, 1, 1, 1});
  attr_ints(n, "strides", {2, 2});
  attr_ints(n, "kernel_shape", {3, 3});
  const auto x = ramp(50), w = ramp(54, 0.125f, -0.5f), b = std::vector<float>{1, -1, 0.5f};
  const auto out = run(g, {{"x", f32({1, 2, 5, 5}, x)}, {"w", f32({3, 2, 3, 3}, w)}, {"bias", f32({3}, b)}});
  std::vector<float> want;
  for (int m = 0; m < 3; ++m)
    for (int p = 0; p < 3; ++p)
      for (int q = 0; q < 3; ++q) {
        float s = 0;
        for (int c = 0; c < 2; ++c)
          for (int r = 0; r < 3; ++r)
            for (int t = 0; t < 3; ++t) {
              const int h = p * 2 + r - 1, v = q * 2 + t - 1;
              if (h >= 0 && h < 5 && v >= 0 && v < 5) s += x[size_t(c * 25 + h * 5 + v)] * w[size_t(((m * 2 + c) * 3 + r) * 3 + t)];
            }
        want.push_back(s + b[size_t(m)]);
      }
  check_close(out.at("y"), want);
}

TEST_CASE("onnx import: Reshape by a constant shape is folded, Transpose permutes") {
  Graph g;
  g.input("x", {2, 6});
  g.initializer("shape", {3}, {3, -1, 2}, TP::INT64);
  g.output("y", {2, 3, 2});
  g.node("Reshape", {"x", "shape"}, {"r"});
  auto* t = g.node("Transpose", {"r"}, {"y"});
  attr_ints(t, "perm", {1, 0, 2});
  const auto x = ramp(12);
  ImportResult r;
  const auto out = run(g, {{"x", f32({2, 6}, x)}}, &r);
  CHECK(r.weights.empty());  // the shape is folded, not an input
  std::vector<float> want;
  for (int a = 0; a < 2; ++a)      // y[a, b, c] = r[b, a, c] = x flat (b*4 + a*2 + c)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 2; ++c) want.push_back(x[size_t(b * 4 + a * 2 + c)]);
  check_close(out.at("y"), want);
}

TEST_CASE("onnx import: Softmax over the last axis sums to one per row") {
  Graph g;
  g.input("x", {2, 4});
  g.output("y", {2, 4});
  g.node("Softmax", {"x"}, {"y"});
  const auto x = ramp(8);
  const auto out = run(g, {{"x", f32({2, 4}, x)}});
  std::vector<float> want;
  for (int m = 0; m < 2; ++m) {
    float mx = -1e30f, s = 0;
    for (int j = 0; j < 4; ++j) mx = std::max(mx, x[size_t(m * 4 + j)]);
    for (int j = 0; j < 4; ++j) s += std::exp(x[size_t(m * 4 + j)] - mx);
    for (int j = 0; j < 4; ++j) want.push_back(std::exp(x[size_t(m * 4 + j)] - mx) / s);
  }
  check_close(out.at("y"), want);
}

TEST_CASE("onnx import: a --value input is folded where a constant is needed and stays an input where read as data") {
  Graph g;
  g.input("x", {2, 3});
  g.input("shape", {2}, TP::INT64);
  g.input("bias", {3});
  g.output("y", {3, 2});
  g.node("Add", {"x", "bias"}, {"s"});
  g.node("Reshape", {"s", "shape"}, {"y"});
  onnx::TensorProto shape, bias;
  shape.set_data_type(TP::INT64);
  shape.add_dims(2);
  shape.add_int64_data(3);
  shape.add_int64_data(2);
  bias.set_data_type(TP::FLOAT);
  bias.add_dims(3);
  for (float v : {1.0f, 2.0f, 3.0f}) bias.add_float_data(v);
  const ImportResult r = import_model(g.m, "m.onnx", {{"shape", shape}, {"bias", bias}});
  REQUIRE(r.inputs.size() == 2);  // x and bias: the shape is folded, the bias is still an input
  CHECK(r.inputs[0]["onnx"] == "x");
  CHECK(r.inputs[1]["onnx"] == "bias");
  CHECK(r.inputs[1]["input_index"] == 2);
  CHECK(r.weights.empty());
  const frontend::Module mod = frontend::parse_module(r.tsl, "imported.tsl");
  const auto x = ramp(6);
  const auto out = interp::evaluate(mod.functions.at(0), {}, {{"x", f32({2, 3}, x)}, {"bias", f32({3}, {10, 20, 30})}});
  std::vector<float> want;
  for (int i = 0; i < 6; ++i) want.push_back(x[size_t(i)] + 10.0f * float(i % 3 + 1));
  check_close(out.at("y"), want);
}

TEST_CASE("onnx import: Concat, Slice with a negative step and constant Pad, element by element") {
  Graph g(13);
  g.input("a", {2, 2});
  g.input("b", {2, 3});
  g.initializer("starts", {1}, {4}, TP::INT64);
  g.initializer("ends", {1}, {-10}, TP::INT64);
  g.initializer("axes", {1}, {1}, TP::INT64);
  g.initializer("steps", {1}, {-2}, TP::INT64);
  g.initializer("pads", {4}, {1, 0, 0, 1}, TP::INT64);
  g.output("y", {3, 4});
  auto* cat = g.node("Concat", {"a", "b"}, {"c"});
  attr_int(cat, "axis", 1);                                       // c: [2, 5]
  g.node("Slice", {"c", "starts", "ends", "axes", "steps"}, {"s"});  // columns 4, 2, 0: [2, 3]
  g.node("Pad", {"s", "pads"}, {"y"});                            // one row above, one column right: [3, 4]
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8, 9, 10};
  const auto out = run(g, {{"a", f32({2, 2}, a)}, {"b", f32({2, 3}, b)}});
  // c = [[1, 2, 5, 6, 7], [3, 4, 8, 9, 10]]; s = [[7, 5, 1], [10, 8, 3]]
  check_close(out.at("y"), {0, 0, 0, 0, 7, 5, 1, 0, 10, 8, 3, 0});
}

TEST_CASE("onnx import: tensor names become identifiers that are never reserved words or index names") {
  Graph g;
  g.input("exp", {2});
  g.input("i0", {2});
  g.output("out.0", {2});
  g.node("Mul", {"exp", "i0"}, {"out.0"});
  ImportResult r;
  const auto out = run(g, {{"exp", f32({2}, {2, 3})}, {"i0", f32({2}, {4, 5})}}, &r);
  CHECK(r.inputs[0]["tsl"] == "t_exp");
  CHECK(r.inputs[1]["tsl"] == "t_i0");
  CHECK(r.outputs[0]["tsl"] == "out_0");
  check_close(out.at("out_0"), {8, 15});
}

TEST_CASE("onnx import: an operator without a translation names the node, the op type and 'unsupported:'") {
  Graph g;
  g.input("x", {4});
  g.output("y", {4});
  g.node("NonZero", {"x"}, {"y"}, "hm");
  try {
    import_model(g.m, "m.onnx");
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("m.onnx: node 'hm' (NonZero): unsupported: ") == 0);
  }
}

TEST_CASE("onnx import: a dynamic dimension and complex data are refused as unsupported") {
  Graph g;
  g.input("x", {4});
  g.m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("N");
  g.output("y", {4});
  g.node("Relu", {"x"}, {"y"});
  CHECK_THROWS_WITH_AS(import_model(g.m, "m.onnx"), doctest::Contains("input 'x': unsupported: dynamic"), UserError);
  Graph h;
  h.input("x", {4}, TP::COMPLEX64);
  h.output("y", {4}, TP::COMPLEX64);
  h.node("Relu", {"x"}, {"y"});
  CHECK_THROWS_WITH_AS(import_model(h.m, "m.onnx"), doctest::Contains("unsupported: tensor 'x' is complex64 data"), UserError);
}

TEST_CASE("onnx import: double data is held as f32, each value rounded, a finite value beyond f32 refused") {
  Graph g;
  g.input("x", {3}, TP::DOUBLE);
  g.initializer("b", {3}, {0.1, -2.5, 1e-3}, TP::DOUBLE);
  g.output("y", {3}, TP::DOUBLE);
  g.node("Add", {"x", "b"}, {"y"});
  ImportResult r;
  const auto out = run(g, {{"x", f32({3}, {1.0f, 2.0f, -3.0f})}}, &r);
  CHECK(r.tsl.find("f32[3] x") != std::string::npos);
  CHECK(r.weights.at("b").dtype == DType::F32);
  check_close(out.at("y"), {1.1f, -0.5f, -2.999f});
  onnx::TensorProto t;
  t.set_name("big");
  t.set_data_type(TP::DOUBLE);
  t.add_dims(2);
  t.add_double_data(0.25);
  t.add_double_data(1e300);
  CHECK_THROWS_WITH_AS(to_npy(t, "big.pb"), doctest::Contains("double value 1e+300 (element 1) is beyond f32"), UserError);
  t.set_double_data(1, -7.5);
  const NpyArray a = to_npy(t, "big.pb");
  CHECK(a.dtype == DType::F32);
  CHECK(at(a, 0) == 0.25f);
  CHECK(at(a, 1) == -7.5f);
}

TEST_CASE("onnx import: an empty constant output is refused, never a crash") {
  Graph g;
  g.initializer("shape", {1}, {0}, TP::INT64);
  g.output("y", {0});
  g.node("ConstantOfShape", {"shape"}, {"y"});
  CHECK_THROWS_WITH_AS(import_model(g.m, "m.onnx"), doctest::Contains("output 'y': unsupported: an empty tensor"), UserError);
}

TEST_CASE("onnx import: a file that is not an ONNX model is a clear error") {
  const std::string path = std::string(TESSEL_BINARY_DIR) + "/not_a_model.onnx";
  std::ofstream(path) << "this is not a protobuf \x01\x02\x03\xff";
  CHECK_THROWS_WITH_AS(import_file(path), doctest::Contains("not an ONNX model"), UserError);
  CHECK_THROWS_WITH_AS(import_file("/nonexistent/m.onnx"), doctest::Contains("cannot open"), UserError);
}

TEST_CASE("onnx import: a node reading a value nothing produces is malformed, not a crash") {
  Graph g;
  g.input("x", {4});
  g.output("y", {4});
  g.node("Add", {"x", "ghost"}, {"y"}, "a");
  CHECK_THROWS_WITH_AS(import_model(g.m, "m.onnx"), doctest::Contains("node 'a' (Add): input 'ghost' is not produced"), UserError);
}

TEST_CASE("onnx import: ONNX node tests test_maxpool_2d_pads, test_averagepool_2d_pads and test_globalaveragepool") {
  check_node_test("test_maxpool_2d_pads", 1e-6);
  check_node_test("test_averagepool_2d_pads", 1e-5);
  check_node_test("test_globalaveragepool", 1e-5);
}

TEST_CASE("onnx import: f16 attention (Transpose, MatMul, Softmax, MatMul) sums in f32 and is one online-softmax match") {
  Graph g(17);
  for (const char* n : {"q", "k", "v"}) g.input(n, {1, 2, 6, 4}, TP::FLOAT16);
  g.output("o", {1, 2, 6, 4}, TP::FLOAT16);
  auto* t = g.node("Transpose", {"k"}, {"kt"});
  attr_ints(t, "perm", {0, 1, 3, 2});
  g.node("MatMul", {"q", "kt"}, {"s"});
  attr_int(g.node("Softmax", {"s"}, {"p"}), "axis", -1);
  g.node("MatMul", {"p", "v"}, {"o"});
  const ImportResult r = import_model(g.m, "attention.onnx");
  const frontend::Module mod = frontend::parse_module(r.tsl, "imported.tsl");
  const ir::Function& f = mod.functions.at(0);
  // the products are summed in f32 and rounded once; the softmax's sum is an f32 sum
  int f32_sums = 0;
  for (const auto& s : f.statements)
    if (s.reduction == ir::Reduction::Sum) {
      CHECK(s.acc_type == DType::F32);
      ++f32_sums;
    }
  CHECK(f32_sums == 3);
  std::string why;
  const auto m = poly::whole_function_match(f, &why);
  REQUIRE_MESSAGE(m, why);
  CHECK(m->statements.size() == f.statements.size());  // the transpose is read through
  const kernel::Attention a = poly::build_attention(f, *m, {});
  CHECK(a.normalise_first);
  // K read through the transpose: k[b, h, j, d] has strides h 24, j 4, d 1
  CHECK(a.k.tensor == r.inputs.at(1)["tsl"].get<std::string>());
  CHECK(a.k.coeff.at(a.key.var) == 4);
  CHECK(a.k.coeff.at(a.head.at(0).var) == 1);
}

TEST_CASE("onnx BatchNormalization in training mode: the batch's mean and population variance normalise, running statistics blend with momentum") {
  Graph g(15);
  g.input("x", {2, 2, 3});
  g.initializer("scale", {2}, {1.0, 2.0});
  g.initializer("b", {2}, {0.0, 0.5});
  g.initializer("mean", {2}, {0.0, 1.0});
  g.initializer("var", {2}, {1.0, 4.0});
  g.output("y", {2, 2, 3});
  g.output("running_mean", {2});
  g.output("running_var", {2});
  auto* n = g.node("BatchNormalization", {"x", "scale", "b", "mean", "var"}, {"y", "running_mean", "running_var"});
  attr_int(n, "training_mode", 1);
  attr_float(n, "momentum", 0.75f);
  attr_float(n, "epsilon", 0.0f);
  // channel 0 holds 1, 2, 3 and 4, 5, 6 (mean 3.5, variance 35/12); channel 1 holds 2x those
  const std::vector<float> x = {1, 2, 3, 2, 4, 6, 4, 5, 6, 8, 10, 12};
  const auto out = run(g, {{"x", f32({2, 2, 3}, x)}});
  const double m0 = 3.5, v0 = 35.0 / 12, m1 = 7, v1 = 4 * v0;
  std::vector<float> y;
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < 3; ++k) {
        const double v = x[size_t(b * 6 + c * 3 + k)];
        y.push_back(float(c == 0 ? (v - m0) / std::sqrt(v0) : (v - m1) / std::sqrt(v1) * 2 + 0.5));
      }
  check_close(out.at("y"), y, 1e-5);
  check_close(out.at("running_mean"), {float(0.75 * 0 + 0.25 * m0), float(0.75 * 1 + 0.25 * m1)}, 1e-5);
  check_close(out.at("running_var"), {float(0.75 * 1 + 0.25 * v0), float(0.75 * 4 + 0.25 * v1)}, 1e-5);
}

TEST_CASE("onnx MaxPool's Indices: the flat position of each window's first maximum, padding skipped, row- or column-major") {
  // x 1x2x3x4 with ties (a repeated maximum takes its first position in window order)
  const std::vector<float> x = {5, 1, 5, 2, 0, 7, 7, 3, 1, 1, 9, 4, 2, 8, 8, 0, 6, 6, 1, 3, 2, 9, 0, 9};
  for (int order : {0, 1}) {
    CAPTURE(order);
    Graph g(12);
    g.input("x", {1, 2, 3, 4});
    g.output("y", {1, 2, 3, 4});
    g.output("i", {1, 2, 3, 4}, TP::INT64);
    auto* n = g.node("MaxPool", {"x"}, {"y", "i"});
    attr_ints(n, "kernel_shape", {2, 2});
    attr_ints(n, "pads", {1, 1, 0, 0});
    attr_int(n, "storage_order", order);
    const auto out = run(g, {{"x", f32({1, 2, 3, 4}, x)}});
    std::vector<float> want_y;
    std::vector<int32_t> want_i;
    for (int c = 0; c < 2; ++c)
      for (int h = 0; h < 3; ++h)
        for (int w = 0; w < 4; ++w) {
          float best = -INFINITY;
          int at = -1;
          for (int dh = 0; dh < 2; ++dh)
            for (int dw = 0; dw < 2; ++dw) {
              const int ih = h + dh - 1, iw = w + dw - 1;
              if (ih < 0 || iw < 0) continue;
              const float v = x[size_t(c * 12 + ih * 4 + iw)];
              if (v > best) {
                best = v;
                at = c * 12 + (order == 0 ? ih * 4 + iw : iw * 3 + ih);
              }
            }
          want_y.push_back(best);
          want_i.push_back(at);
        }
    check_close(out.at("y"), want_y, 0);
    REQUIRE(out.at("i").dtype == DType::I32);
    for (size_t k = 0; k < want_i.size(); ++k) {
      CAPTURE(k);
      CHECK(int_at(out.at("i"), int64_t(k)) == want_i[k]);
    }
  }
}

TEST_CASE("onnx import: a graph input no statement reads (CastLike's target_type) is no def input") {
  Graph g(15);
  g.input("x", {3});
  g.input("like", {1}, TP::FLOAT16);
  g.output("y", {3}, TP::FLOAT16);
  g.node("CastLike", {"x", "like"}, {"y"});
  ImportResult r;
  const auto out = run(g, {{"x", f32({3}, {1.0f, 0.5f, -2.0f})}}, &r);
  CHECK(r.tsl.find("like") == std::string::npos);
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0]["onnx"] == "x");
  REQUIRE(out.at("y").dtype == DType::F16);
  CHECK(interp::element_as_double(out.at("y"), 0) == 1.0);
  CHECK(interp::element_as_double(out.at("y"), 2) == -2.0);
}

}  // namespace
}  // namespace tessel::onnx_import
