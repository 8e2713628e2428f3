// tessel import of int64 data (held as i32) and of the index operators (compiler/onnx/ops_index.cc):
// ArgMax / ArgMin, GatherElements, Gather with data indices, OneHot, NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss. Each model is imported, parsed and evaluated by the reference interpreter;
// every output is compared element by element with values computed here by ONNX's definitions.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "compiler/onnx/tensor_proto.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

void check_ints(const NpyArray& got, const std::vector<int32_t>& want) {
  REQUIRE(got.dtype == DType::I32);
  REQUIRE(got.element_count() == int64_t(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(int_at(got, int64_t(i)) == want[i]);
  }
}
std::string refusal(const Graph& g) {
  try {
    import_model(g.m, "m.onnx");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- int64 as i32 -------------------------------------------------------------------------------

TEST_CASE("onnx int64: a TensorProto of int64 is read as i32, a value outside i32 is refused naming the tensor and the value") {
  onnx::TensorProto t;
  t.set_name("target");
  t.set_data_type(TP::INT64);
  t.add_dims(3);
  for (int64_t v : {int64_t(-5), int64_t(7), int64_t(2147483647)}) t.add_int64_data(v);
  const NpyArray a = to_npy(t, "t.pb");
  CHECK(a.shape == std::vector<int64_t>{3});
  check_ints(a, {-5, 7, 2147483647});
  t.set_int64_data(1, int64_t(1) << 40);
  CHECK_THROWS_WITH_AS(to_npy(t, "t.pb"), doctest::Contains("t.pb ('target'): unsupported: int64 value 1099511627776 (element 1) does not fit in i32"),
                       UserError);
  // raw_data as ONNX's test files store it
  onnx::TensorProto r;
  r.set_data_type(TP::INT64);
  r.add_dims(2);
  const int64_t raw[2] = {-3, std::numeric_limits<int64_t>::min()};
  r.set_raw_data(std::string(reinterpret_cast<const char*>(raw), sizeof raw));
  CHECK_THROWS_WITH_AS(to_npy(r, "r.pb"), doctest::Contains("int64 value -9223372036854775808 (element 1)"), UserError);
}

TEST_CASE("onnx int64: an int64 graph computes in i32 (Trilu and Sub), its output declared i32") {
  Graph g(14);
  g.input("x", {3, 3}, TP::INT64);
  g.initializer("b", {3}, {1, 2, 3}, TP::INT64);
  g.output("y", {3, 3}, TP::INT64);
  g.node("Trilu", {"x"}, {"t"});  // upper
  g.node("Sub", {"t", "b"}, {"y"});
  ImportResult r;
  const auto out = run(g, {{"x", i32({3, 3}, {1, -2, 3, 4, 5, 6, 7, 8, 9})}}, &r);
  CHECK(r.tsl.find("i32[3, 3] x") != std::string::npos);
  CHECK(r.outputs[0]["dtype"] == "i32");
  check_ints(out.at("y"), {0, -4, 0, -1, 3, 3, -1, -2, 6});
}

TEST_CASE("onnx int16 uint16 uint32 uint64: read as i32 exactly, a uint32 or uint64 value beyond i32 refused naming its type") {
  onnx::TensorProto s;
  s.set_data_type(TP::INT16);
  s.add_dims(3);
  const int16_t raw16[3] = {-32768, 5, 32767};
  s.set_raw_data(std::string(reinterpret_cast<const char*>(raw16), sizeof raw16));
  NpyArray a = to_npy(s, "s.pb");
  CHECK(a.dtype == DType::I32);
  check_ints(a, {-32768, 5, 32767});
  s.set_data_type(TP::UINT16);  // the same bytes as uint16
  check_ints(to_npy(s, "s.pb"), {32768, 5, 32767});
  onnx::TensorProto u;
  u.set_name("u");
  u.set_data_type(TP::UINT32);
  u.add_dims(2);
  u.add_uint64_data(7);
  u.add_uint64_data(2147483647);
  check_ints(to_npy(u, "u.pb"), {7, 2147483647});
  u.set_uint64_data(0, 2147483648u);
  CHECK_THROWS_WITH_AS(to_npy(u, "u.pb"), doctest::Contains("u.pb ('u'): unsupported: uint32 value 2147483648 (element 0) does not fit in i32"),
                       UserError);
  u.set_data_type(TP::UINT64);
  CHECK_THROWS_WITH_AS(to_npy(u, "u.pb"), doctest::Contains("uint64 value 2147483648"), UserError);
}

TEST_CASE("onnx uint16: a Max of two uint16 inputs computes in i32, its output declared i32") {
  Graph g(13);
  g.input("a", {4}, TP::UINT16);
  g.input("b", {4}, TP::UINT16);
  g.output("y", {4}, TP::UINT16);
  g.node("Max", {"a", "b"}, {"y"});
  ImportResult r;
  const auto out = run(g, {{"a", i32({4}, {1, 60000, 3, 0})}, {"b", i32({4}, {2, 5, 65535, 0})}}, &r);
  CHECK(r.tsl.find("i32[4] a") != std::string::npos);
  CHECK(r.outputs[0]["dtype"] == "i32");
  check_ints(out.at("y"), {2, 60000, 65535, 0});
}

TEST_CASE("onnx int64: Shape of a static input is a constant output") {
  Graph g(15);
  g.input("x", {2, 5, 7});
  g.output("s", {2}, TP::INT64);
  auto* n = g.node("Shape", {"x"}, {"s"});
  attr_int(n, "start", 1);
  const auto out = run(g, {{"x", f32({2, 5, 7}, ramp(70))}});
  check_ints(out.at("s"), {5, 7});
}

TEST_CASE("onnx int64: an int64 initializer read as data that does not fit in i32 is refused") {
  Graph g;
  g.input("x", {2}, TP::INT64);
  g.initializer("big", {2}, {1, 3e10}, TP::INT64);
  g.output("y", {2}, TP::INT64);
  g.node("Add", {"x", "big"}, {"y"}, "add");
  CHECK(refusal(g).find("m.onnx: 'big': unsupported: int64 value 30000000000 (element 1) does not fit in i32") != std::string::npos);
}

// ---- ArgMax / ArgMin ----------------------------------------------------------------------------

TEST_CASE("onnx ArgMax: the first largest element along axis 1 with keepdims, ArgMin: the last smallest without") {
  // ties: row 0 has its max twice (columns 1 and 3) and its min twice (columns 0 and 2)
  const std::vector<float> x = {0, 5, 0, 5, 2, 1, 3, -1, 7, 1, 4, 4};
  Graph g;
  g.input("x", {3, 4});
  g.output("amax", {3, 1}, TP::INT64);
  g.output("amin", {3}, TP::INT64);
  auto* a = g.node("ArgMax", {"x"}, {"amax"});
  attr_int(a, "axis", 1);
  auto* b = g.node("ArgMin", {"x"}, {"amin"});
  attr_int(b, "axis", -1);
  attr_int(b, "keepdims", 0);
  attr_int(b, "select_last_index", 1);
  const auto out = run(g, {{"x", f32({3, 4}, x)}});
  check_ints(out.at("amax"), {1, 2, 0});
  check_ints(out.at("amin"), {2, 3, 1});
  CHECK(out.at("amax").shape == std::vector<int64_t>{3, 1});
}

TEST_CASE("onnx ArgMax over axis 0 of a 3-d tensor, select_last_index") {
  Graph g;
  g.input("x", {2, 2, 3});
  g.output("y", {1, 2, 3}, TP::INT64);
  attr_int(g.node("ArgMax", {"x"}, {"y"}), "select_last_index", 1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 1, 0, 3, 9, 5, 2};
  const auto out = run(g, {{"x", f32({2, 2, 3}, x)}});
  check_ints(out.at("y"), {1, 0, 1, 1, 1, 0});
}

// ---- one-hot reads ------------------------------------------------------------------------------

TEST_CASE("onnx GatherElements with data indices (negative ones count from the end) along axis 1") {
  Graph g;
  g.input("x", {2, 3});
  g.input("i", {2, 2}, TP::INT64);
  g.output("y", {2, 2});
  attr_int(g.node("GatherElements", {"x", "i"}, {"y"}), "axis", 1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const auto out = run(g, {{"x", f32({2, 3}, x)}, {"i", i32({2, 2}, {2, 0, -1, 1})}});
  check_close(out.at("y"), {3, 1, 6, 5});
}

TEST_CASE("onnx Gather with data indices is a one-hot sum over the gathered axis") {
  Graph g;
  g.input("x", {4, 2});
  g.input("i", {3}, TP::INT64);
  g.output("y", {3, 2});
  g.node("Gather", {"x", "i"}, {"y"});
  const auto x = ramp(8);
  ImportResult r;
  const auto out = run(g, {{"x", f32({4, 2}, x)}, {"i", i32({3}, {3, -4, 1})}}, &r);
  check_close(out.at("y"), {x[6], x[7], x[0], x[1], x[2], x[3]});
  CHECK(r.tsl.find("+=! select(") != std::string::npos);
}

TEST_CASE("onnx OneHot with axis 0, float indices and a negative index") {
  Graph g(11);
  g.input("i", {3});
  g.initializer("depth", {}, {4});
  g.initializer("values", {2}, {-1, 5});
  g.output("y", {4, 3});
  attr_int(g.node("OneHot", {"i", "depth", "values"}, {"y"}), "axis", 0);
  const auto out = run(g, {{"i", f32({3}, {1.0f, -1.0f, 7.0f})}});
  // column j is one-hot at i[j] (-1 -> 3; 7 is out of range: all off)
  check_close(out.at("y"), {-1, -1, -1, 5, -1, -1, -1, -1, -1, -1, 5, -1});
}

// ---- scatters ------------------------------------------------------------------------------------

TEST_CASE("onnx ScatterElements along axis 1: none replaces (indices narrower than the data), add sums duplicates") {
  for (const char* red : {"none", "add"}) {
    INFO(std::string(red));
    Graph g(16);
    g.input("d", {3, 3});
    g.input("i", {2, 2}, TP::INT64);
    g.input("u", {2, 2});
    g.output("y", {3, 3});
    auto* n = g.node("ScatterElements", {"d", "i", "u"}, {"y"});
    attr_int(n, "axis", 1);
    auto* a = n->add_attribute();
    a->set_name("reduction");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(red);
    const std::vector<int32_t> i = std::string(red) == "add" ? std::vector<int32_t>{1, 1, 0, -1} : std::vector<int32_t>{2, 0, -3, 1};
    const auto out = run(g, {{"d", f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})}, {"i", i32({2, 2}, i)}, {"u", f32({2, 2}, {10, 20, 30, 40})}});
    if (std::string(red) == "add") check_close(out.at("y"), {1, 32, 3, 34, 5, 46, 7, 8, 9});
    else check_close(out.at("y"), {20, 2, 10, 30, 40, 6, 7, 8, 9});
  }
}

TEST_CASE("onnx ScatterND: whole rows replaced at index tuples of length 1, and multiply refused") {
  Graph g(16);
  g.input("d", {3, 2});
  g.input("i", {2, 1}, TP::INT64);
  g.input("u", {2, 2});
  g.output("y", {3, 2});
  g.node("ScatterND", {"d", "i", "u"}, {"y"}, "sc");
  const auto out = run(g, {{"d", f32({3, 2}, {1, 2, 3, 4, 5, 6})}, {"i", i32({2, 1}, {2, 0})}, {"u", f32({2, 2}, {10, 20, 30, 40})}});
  check_close(out.at("y"), {30, 40, 3, 4, 10, 20});
  auto* a = g.m.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("reduction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("mul");
  CHECK(refusal(g).find("m.onnx: node 'sc' (ScatterND): unsupported: scatter reduction 'mul'") == 0);
}

// ---- losses -------------------------------------------------------------------------------------

// ONNX's NegativeLogLikelihoodLoss on x [N, C, D] and t [N, D].
std::vector<float> nll(const std::vector<float>& x, const std::vector<int32_t>& t, const std::vector<float>& w, int64_t n, int64_t c,
                       int64_t d, const std::string& reduction, int64_t ignore) {
  std::vector<float> loss;
  double sum = 0, wsum = 0;
  for (int64_t a = 0; a < n; ++a)
    for (int64_t e = 0; e < d; ++e) {
      const int32_t k = t[size_t(a * d + e)];
      const double wk = k == ignore ? 0 : w.empty() ? 1 : w[size_t(k)];
      const double l = k == ignore ? 0 : -x[size_t((a * c + k) * d + e)] * wk;
      loss.push_back(float(l));
      sum += l;
      wsum += wk;
    }
  if (reduction == "none") return loss;
  if (reduction == "sum") return {float(sum)};
  return {float(sum / wsum)};
}

Graph nll_graph(const std::string& reduction, bool weighted, int64_t ignore, bool none_shape) {
  Graph g;
  g.input("x", {2, 3, 2});
  g.input("t", {2, 2}, TP::INT64);
  if (weighted) g.input("w", {3});
  g.output("loss", none_shape ? std::vector<int64_t>{2, 2} : std::vector<int64_t>{});
  auto* n = g.node("NegativeLogLikelihoodLoss", weighted ? std::vector<std::string>{"x", "t", "w"} : std::vector<std::string>{"x", "t"}, {"loss"}, "nll");
  auto* a = n->add_attribute();
  a->set_name("reduction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(reduction);
  if (ignore >= -100) attr_int(n, "ignore_index", ignore);
  return g;
}

TEST_CASE("onnx NegativeLogLikelihoodLoss: none, sum and weighted mean with an ignore_index, element by element") {
  const auto x = ramp(12, 0.5f, -3.0f);
  const std::vector<int32_t> t = {2, 0, 1, 2};
  const std::vector<float> w = {0.5f, 2.0f, 1.5f};
  std::map<std::string, NpyArray> in = {{"x", f32({2, 3, 2}, x)}, {"t", i32({2, 2}, t)}, {"w", f32({3}, w)}};
  check_close(run(nll_graph("none", false, -1000, true), in).at("loss"), nll(x, t, {}, 2, 3, 2, "none", -1000));
  check_close(run(nll_graph("sum", true, -1000, false), in).at("loss"), nll(x, t, w, 2, 3, 2, "sum", -1000));
  check_close(run(nll_graph("mean", true, 2, false), in).at("loss"), nll(x, t, w, 2, 3, 2, "mean", 2));
  check_close(run(nll_graph("mean", false, 0, false), in).at("loss"), nll(x, t, {}, 2, 3, 2, "mean", 0));
}

TEST_CASE("onnx NegativeLogLikelihoodLoss: an unknown reduction is malformed, naming the node") {
  CHECK(refusal(nll_graph("max", false, -1000, false)).find("m.onnx: node 'nll' (NegativeLogLikelihoodLoss): reduction 'max'") == 0);
}

TEST_CASE("onnx SoftmaxCrossEntropyLoss: mean with weights and its log_prob output") {
  Graph g;
  g.input("x", {3, 4});
  g.input("t", {3}, TP::INT64);
  g.input("w", {4});
  g.output("loss", {});
  g.output("logp", {3, 4});
  g.node("SoftmaxCrossEntropyLoss", {"x", "t", "w"}, {"loss", "logp"});
  const auto x = ramp(12, 0.75f, -2.0f);
  const std::vector<int32_t> t = {3, 0, 1};
  const std::vector<float> w = {1.0f, 0.25f, 2.0f, 0.5f};
  const auto out = run(g, {{"x", f32({3, 4}, x)}, {"t", i32({3}, t)}, {"w", f32({4}, w)}});
  std::vector<float> logp;
  for (int n = 0; n < 3; ++n) {
    double mx = -1e30, s = 0;
    for (int c = 0; c < 4; ++c) mx = std::max(mx, double(x[size_t(n * 4 + c)]));
    for (int c = 0; c < 4; ++c) s += std::exp(x[size_t(n * 4 + c)] - mx);
    for (int c = 0; c < 4; ++c) logp.push_back(float(x[size_t(n * 4 + c)] - mx - std::log(s)));
  }
  check_close(out.at("logp"), logp);
  check_close(out.at("loss"), nll(logp, t, w, 3, 4, 1, "mean", -1000));
}

// ---- ONNX's own node tests ----------------------------------------------------------------------

TEST_CASE("onnx node tests: ArgMax/ArgMin, GatherElements, OneHot, scatters, NLL and SCE (with log_prob) from libonnx-testdata") {
  for (const char* t : {"test_argmax_keepdims_random_select_last_index", "test_argmin_no_keepdims_example", "test_gather_elements_negative_indices",
                        "test_onehot_with_negative_axis", "test_nllloss_NCd1d2_with_weight_reduction_mean", "test_nllloss_NCd1_mean_weight_negative_ii",
                        "test_sce_mean_weight_ii_3d_log_prob", "test_shape_start_1_end_negative_1", "test_triu_neg",
                        "test_scatter_elements_with_duplicate_indices", "test_scatternd_add", "test_scatter_with_axis"})
    check_node_test(t, 1e-5);
}

}  // namespace
}  // namespace tessel::onnx_import
