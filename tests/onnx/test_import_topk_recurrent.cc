// tessel import of TopK (compiler/onnx/ops_topk.cc: ranks by counting, outputs by one-hot sums) and
// of RNN, GRU and LSTM unrolled over the sequence (compiler/onnx/ops_recurrent.cc): TopK against a
// stable sort computed here (ties by index, largest and smallest, both axes), element by element,
// and on davinci-910 / davinci-310 (simulator vs interpreter); the recurrences by the identities
// reverse(X) = forward(X reversed in time) and bidirectional = [forward, reverse] (every cell, every
// element), then ONNX's top_k, rnn, gru and lstm node tests from libonnx-testdata.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "compiler/onnx/importer.h"
#include "tests/emit_npu/npu_case.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

Graph topk_graph(int64_t axis, int64_t k, bool largest) {
  Graph g(11);
  g.input("x", {4, 6});
  g.initializer("k", {1}, {double(k)}, TP::INT64);
  std::vector<int64_t> out = {4, 6};
  out[size_t(axis)] = k;
  g.output("values", out);
  g.output("indices", out, TP::INT64);
  auto* n = g.node("TopK", {"x", "k"}, {"values", "indices"});
  attr_int(n, "axis", axis);
  attr_int(n, "largest", largest ? 1 : 0);
  return g;
}

TEST_CASE("onnx TopK: values and indices equal a stable sort, ties by the lower index, largest and smallest, axis 0 and 1") {
  std::vector<float> x;
  for (int e = 0; e < 24; ++e) x.push_back(float((e * 7) % 5) - 2.0f);  // many ties
  for (int64_t axis : {0, 1})
    for (bool largest : {true, false}) {
      const int64_t n = axis == 0 ? 4 : 6, k = axis == 0 ? 3 : 4, other = axis == 0 ? 6 : 4;
      CAPTURE(axis);
      CAPTURE(largest);
      const auto out = run(topk_graph(axis, k, largest), {{"x", f32({4, 6}, x)}});
      for (int64_t o = 0; o < other; ++o) {
        auto flat = [&](int64_t i) { return axis == 0 ? i * 6 + o : o * 6 + i; };
        std::vector<int64_t> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? x[size_t(flat(a))] > x[size_t(flat(b))] : x[size_t(flat(a))] < x[size_t(flat(b))];
        });
        for (int64_t p = 0; p < k; ++p) {
          const int64_t at_out = axis == 0 ? p * 6 + o : o * k + p;
          CHECK(int_at(out.at("indices"), at_out) == order[size_t(p)]);
          CHECK(at(out.at("values"), at_out) == x[size_t(flat(order[size_t(p)]))]);
        }
      }
    }
}

TEST_CASE("onnx TopK: K beyond the axis is refused naming the node") {
  Graph g = topk_graph(1, 7, true);
  CHECK_THROWS_WITH_AS(import_model(g.m, "t.onnx"), doctest::Contains("(TopK): K must be one value in 0..6"), UserError);
}

TEST_CASE("onnx TopK: the imported program runs on davinci-910 and davinci-310 as the interpreter computes it") {
  for (const std::string& target : {npu_test::kTarget, npu_test::kTarget310}) {
    CAPTURE(target);
    const ImportResult r = import_model(topk_graph(1, 4, true).m, "t.onnx");
    auto c = npu_test::source_case(r.tsl, target);
    const ir::Function& f = c->module.functions.at(0);
    c->inputs = interp::random_inputs(f, {}, 5);
    for (const auto& [name, a] : r.weights) c->inputs[name] = a;
    c->expected = interp::evaluate(f, {}, c->inputs);
    npu_test::verified_cycles(*c, true);
  }
}

// A cell of hidden size 3 over X [seq 3, batch 2, input 2], weights from ramps; `dir` its direction.
Graph cell_graph(const std::string& op, const std::string& dir, bool time_reversed_input) {
  const int64_t gates = op == "RNN" ? 1 : op == "GRU" ? 3 : 4, d = dir == "bidirectional" ? 2 : 1, h = 3;
  Graph g(14);
  g.input("x", {3, 2, 2});
  std::vector<double> w, r, b;
  for (int64_t k = 0; k < d; ++k) {  // both directions of a bidirectional cell weighed as the one-way cells
    for (int64_t e = 0; e < gates * h * 2; ++e) w.push_back(0.1 * double((e * 5) % 7) - 0.3);
    for (int64_t e = 0; e < gates * h * h; ++e) r.push_back(0.05 * double((e * 3) % 11) - 0.25);
    for (int64_t e = 0; e < 2 * gates * h; ++e) b.push_back(0.02 * double(e % 9) - 0.08);
  }
  g.initializer("w", {d, gates * h, 2}, w);
  g.initializer("r", {d, gates * h, h}, r);
  g.initializer("b", {d, 2 * gates * h}, b);
  g.output("y", {3, d, 2, h});
  std::string in = "x";
  if (time_reversed_input) {
    g.initializer("rev", {3}, {2, 1, 0}, TP::INT64);
    g.node("Gather", {"x", "rev"}, {"xr"});
    in = "xr";
  }
  auto* n = g.node(op, {in, "w", "r", "b"}, {"y"});
  attr_int(n, "hidden_size", h);
  auto* a = n->add_attribute();
  a->set_name("direction");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(dir);
  if (op == "GRU") attr_int(n, "linear_before_reset", 1);
  return g;
}

TEST_CASE("onnx RNN, GRU, LSTM: reverse is forward over the time-reversed input, bidirectional is both, element by element") {
  std::vector<float> x;
  for (int e = 0; e < 12; ++e) x.push_back(0.25f * float((e * 7) % 9) - 1.0f);
  for (const std::string op : {"RNN", "GRU", "LSTM"}) {
    CAPTURE(op);
    const NpyArray fwd = run(cell_graph(op, "forward", false), {{"x", f32({3, 2, 2}, x)}}).at("y");
    const NpyArray rev = run(cell_graph(op, "reverse", false), {{"x", f32({3, 2, 2}, x)}}).at("y");
    const NpyArray fwd_of_reversed = run(cell_graph(op, "forward", true), {{"x", f32({3, 2, 2}, x)}}).at("y");
    const NpyArray both = run(cell_graph(op, "bidirectional", false), {{"x", f32({3, 2, 2}, x)}}).at("y");
    REQUIRE(both.element_count() == 36);
    bool varies = false;
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t e = 0; e < 6; ++e) {
        CHECK(at(rev, t * 6 + e) == doctest::Approx(at(fwd_of_reversed, (2 - t) * 6 + e)).epsilon(1e-6));
        CHECK(at(both, t * 12 + e) == at(fwd, t * 6 + e));
        CHECK(at(both, t * 12 + 6 + e) == at(rev, t * 6 + e));
        varies |= at(fwd, t * 6 + e) != at(rev, t * 6 + e);
      }
    CHECK(varies);
  }
}

TEST_CASE("onnx node tests: top_k, rnn, gru and lstm from libonnx-testdata") {
  for (const char* t : {"test_top_k", "test_top_k_negative_axis", "test_top_k_smallest"}) check_node_test(t, 0);
  for (const char* t : {"test_rnn_seq_length", "test_simple_rnn_batchwise", "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias",
                        "test_gru_batchwise", "test_gru_defaults", "test_gru_seq_length", "test_gru_with_initial_bias", "test_lstm_batchwise",
                        "test_lstm_defaults", "test_lstm_with_initial_bias", "test_lstm_with_peepholes"})
    check_node_test(t, 1e-5);
}

}  // namespace
}  // namespace tessel::onnx_import
