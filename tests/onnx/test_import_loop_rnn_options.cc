// tessel import of Loop unrolled and If inlined at import (compiler/onnx/loop_unroll.cc) and of
// RNN / GRU / LSTM's options (compiler/onnx/ops_recurrent.cc): ONNX's loop11, if and expanded Range
// node tests element by element against their expected outputs, Loop's and If's refusals naming the node; every ONNX RNN
// activation function (with activation_alpha / beta) and clip against a reference cell computed
// here, for RNN, GRU and LSTM; sequence_lens by the identity that each batch row equals the same cell
// run over that row's sequence alone (Y 0 past its length, Y_h / Y_c its last state), forward,
// reverse and bidirectional.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "compiler/onnx/importer.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx node tests: loop11 and Range's expanded form (a Loop) unrolled, element by element") {
  check_node_test("test_loop11", 0);
  check_node_test("test_range_float_type_positive_delta_expanded", 0);
  check_node_test("test_range_int32_type_negative_delta_expanded", 0);
}

// y_out = y_in + x[iter] (a Slice of a constant at the iteration count), scan output y_out; the
// condition output `cond_op` (Identity of the condition input, or Less(iter, 2): computed).
Graph loop_graph(bool known_trips, const std::string& cond_op) {
  Graph g(13);
  g.input("y", {1});
  if (known_trips) g.initializer("m", {}, {4}, TP::INT64);
  else g.input("m", {}, TP::INT64);
  g.output("res_y", {1});
  g.output("res_scan", {4, 1});
  auto* loop = g.node("Loop", {"m", "", "y"}, {"res_y", "res_scan"}, "the_loop");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* b = a->mutable_g();
  b->set_name("body");
  Graph::set_type(b->add_input(), "it", {}, TP::INT64);
  Graph::set_type(b->add_input(), "c_in", {}, TP::BOOL);
  Graph::set_type(b->add_input(), "y_in", {1}, TP::FLOAT);
  auto add = [&](const std::string& op, const std::vector<std::string>& in, const std::string& out) {
    auto* n = b->add_node();
    n->set_op_type(op);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  auto constant = [&](const std::string& out, int et, const std::vector<double>& v, const std::vector<int64_t>& dims) {
    auto* n = add("Constant", {}, out);
    auto* t = n->add_attribute();
    t->set_name("value");
    t->set_type(onnx::AttributeProto::TENSOR);
    t->mutable_t()->set_data_type(et);
    for (int64_t d : dims) t->mutable_t()->add_dims(d);
    for (double x : v) et == TP::INT64 ? t->mutable_t()->add_int64_data(int64_t(x)) : t->mutable_t()->add_float_data(float(x));
  };
  constant("x", TP::FLOAT, {1, 2, 4, 8}, {4});
  constant("one", TP::INT64, {1}, {});
  constant("zero_axes", TP::INT64, {0}, {1});
  constant("two", TP::INT64, {2}, {});
  add("Add", {"it", "one"}, "end");
  add("Unsqueeze", {"it", "zero_axes"}, "s0");
  add("Unsqueeze", {"end", "zero_axes"}, "s1");
  add("Slice", {"x", "s0", "s1"}, "xs");
  add("Add", {"y_in", "xs"}, "y_out");
  if (cond_op == "Identity") add("Identity", {"c_in"}, "c_out");
  else add("Less", {"it", "two"}, "c_out");
  for (const char* o : {"c_out", "y_out", "y_out"}) b->add_output()->set_name(o);
  return g;
}

TEST_CASE("onnx Loop: a carried value and a scan output over 4 unrolled iterations") {
  const auto out = run(loop_graph(true, "Identity"), {{"y", f32({1}, {0.5f})}});
  check_close(out.at("res_y"), {15.5f}, 0);
  check_close(out.at("res_scan"), {1.5f, 3.5f, 7.5f, 15.5f}, 0);
}

TEST_CASE("onnx Loop: refused naming the node where the trip count is data or the body computes the condition") {
  CHECK_THROWS_WITH_AS(import_model(loop_graph(false, "Identity").m, "t.onnx"),
                       doctest::Contains("node 'the_loop' (Loop): unsupported: the trip count M ('m') is not a constant"), UserError);
  CHECK_THROWS_WITH_AS(import_model(loop_graph(true, "Less").m, "t.onnx"),
                       doctest::Contains("node 'the_loop' (Loop): unsupported: a condition the body computes"), UserError);
}

TEST_CASE("onnx If: the branch its known condition takes (ONNX's test_if), refused naming the node where the condition is data") {
  check_node_test("test_if", 0);
  Graph g(11);
  g.input("c", {}, TP::BOOL);
  g.output("res", {1});
  auto* n = g.node("If", {"c"}, {"res"}, "the_if");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->set_name(branch);
    auto* k = a->mutable_g()->add_node();
    k->set_op_type("Constant");
    k->add_output(std::string(branch) + "_out");
    auto* v = k->add_attribute();
    v->set_name("value");
    v->set_type(onnx::AttributeProto::TENSOR);
    v->mutable_t()->set_data_type(TP::FLOAT);
    v->mutable_t()->add_dims(1);
    v->mutable_t()->add_float_data(1);
    a->mutable_g()->add_output()->set_name(std::string(branch) + "_out");
  }
  CHECK_THROWS_WITH_AS(import_model(g.m, "t.onnx"), doctest::Contains("node 'the_if' (If): unsupported: the condition ('c') is not a constant"), UserError);
}

// ---- RNN / GRU / LSTM options --------------------------------------------------------------------

struct CellSpec {
  std::string op = "RNN", dir = "forward";
  int64_t seq = 3, batch = 2;
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
  float clip = 0;
  std::vector<int64_t> lens;
};
constexpr int64_t kHidden = 3, kInput = 2;

int64_t gates_of(const std::string& op) { return op == "RNN" ? 1 : op == "GRU" ? 3 : 4; }
double wv(int64_t e) { return 0.3 * double((e * 5) % 7) - 0.8; }
double rv(int64_t e) { return 0.15 * double((e * 3) % 11) - 0.7; }
double bv(int64_t e) { return 0.1 * double(e % 9) - 0.35; }

Graph spec_graph(const CellSpec& s) {
  const int64_t g = gates_of(s.op), d = s.dir == "bidirectional" ? 2 : 1;
  Graph gr(14);
  gr.input("x", {s.seq, s.batch, kInput});
  std::vector<double> w, r, b;
  for (int64_t e = 0; e < d * g * kHidden * kInput; ++e) w.push_back(wv(e % (g * kHidden * kInput)));
  for (int64_t e = 0; e < d * g * kHidden * kHidden; ++e) r.push_back(rv(e % (g * kHidden * kHidden)));
  for (int64_t e = 0; e < d * 2 * g * kHidden; ++e) b.push_back(bv(e % (2 * g * kHidden)));
  gr.initializer("w", {d, g * kHidden, kInput}, w);
  gr.initializer("r", {d, g * kHidden, kHidden}, r);
  gr.initializer("b", {d, 2 * g * kHidden}, b);
  std::vector<std::string> in = {"x", "w", "r", "b"};
  if (!s.lens.empty()) {
    auto* t = gr.m.mutable_graph()->add_initializer();
    t->set_name("lens");
    t->set_data_type(TP::INT32);
    t->add_dims(s.batch);
    for (int64_t l : s.lens) t->add_int32_data(int32_t(l));
    in.push_back("lens");
  }
  gr.output("y", {s.seq, d, s.batch, kHidden});
  gr.output("y_h", {d, s.batch, kHidden});
  std::vector<std::string> outs = {"y", "y_h"};
  if (s.op == "LSTM") {
    gr.output("y_c", {d, s.batch, kHidden});
    outs.push_back("y_c");
  }
  auto* n = gr.node(s.op, in, outs, "cell");
  attr_int(n, "hidden_size", kHidden);
  auto str_attr = [&](const std::string& name, const std::vector<std::string>& v, bool list) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(list ? onnx::AttributeProto::STRINGS : onnx::AttributeProto::STRING);
    if (list) for (const auto& x : v) a->add_strings(x);
    else a->set_s(v[0]);
  };
  str_attr("direction", {s.dir}, false);
  if (!s.acts.empty()) str_attr("activations", s.acts, true);
  auto floats = [&](const std::string& name, const std::vector<float>& v) {
    if (v.empty()) return;
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOATS);
    for (float x : v) a->add_floats(x);
  };
  floats("activation_alpha", s.alphas);
  floats("activation_beta", s.betas);
  if (s.clip > 0) attr_float(n, "clip", s.clip);
  return gr;
}

std::vector<float> x_data(int64_t n) {
  std::vector<float> x;
  for (int64_t e = 0; e < n; ++e) x.push_back(0.5f * float((e * 7) % 9) - 1.9713f);  // off the activations' thresholds
  return x;
}

using Fn = std::function<double(double)>;
Fn function_of(const std::string& name, double a, double b) {
  if (name == "Relu") return [](double x) { return std::max(x, 0.0); };
  if (name == "Tanh") return [](double x) { return std::tanh(x); };
  if (name == "Sigmoid") return [](double x) { return 1 / (1 + std::exp(-x)); };
  if (name == "Affine") return [=](double x) { return a * x + b; };
  if (name == "LeakyRelu") return [=](double x) { return x >= 0 ? x : a * x; };
  if (name == "ThresholdedRelu") return [=](double x) { return x >= a ? x : 0.0; };
  if (name == "ScaledTanh") return [=](double x) { return a * std::tanh(b * x); };
  if (name == "HardSigmoid") return [=](double x) { return std::min(std::max(a * x + b, 0.0), 1.0); };
  if (name == "Elu") return [=](double x) { return x >= 0 ? x : a * (std::exp(x) - 1); };
  if (name == "Softsign") return [](double x) { return x / (1 + std::fabs(x)); };
  return [](double x) { return std::log(1 + std::exp(x)); };  // Softplus
}

// The forward cell over every row (no sequence_lens, no initial state; GRU linear_before_reset 0),
// f, g, h as given: Y [seq, 1, batch, hidden] flattened.
std::vector<float> reference(const CellSpec& s, const std::vector<Fn>& fn) {
  const int64_t g = gates_of(s.op), H = kHidden;
  const std::vector<float> x = x_data(s.seq * s.batch * kInput);
  auto clip = [&](double v) { return s.clip > 0 ? std::min(std::max(v, -double(s.clip)), double(s.clip)) : v; };
  std::vector<float> y;
  std::vector<std::vector<double>> h(size_t(s.batch), std::vector<double>(size_t(H), 0.0)), c = h;
  for (int64_t t = 0; t < s.seq; ++t) {
    for (int64_t bi = 0; bi < s.batch; ++bi) {
      auto xw = [&](int64_t q) {
        double v = bv(q);
        for (int64_t k = 0; k < kInput; ++k) v += x[size_t((t * s.batch + bi) * kInput + k)] * wv(q * kInput + k);
        return v;
      };
      auto hr = [&](const std::vector<double>& hv, int64_t q) {
        double v = bv(g * H + q);
        for (int64_t k = 0; k < H; ++k) v += hv[size_t(k)] * rv(q * H + k);
        return v;
      };
      std::vector<double>& hp = h[size_t(bi)];
      std::vector<double> hn(static_cast<size_t>(H), 0.0), cn(static_cast<size_t>(H), 0.0);
      for (int64_t j = 0; j < H; ++j) {
        if (s.op == "RNN") {
          hn[size_t(j)] = fn[0](clip(xw(j) + hr(hp, j)));
        } else if (s.op == "LSTM") {
          const double i = fn[0](clip(xw(j) + hr(hp, j))), o = fn[0](clip(xw(H + j) + hr(hp, H + j)));
          const double f = fn[0](clip(xw(2 * H + j) + hr(hp, 2 * H + j))), cc = fn[1](clip(xw(3 * H + j) + hr(hp, 3 * H + j)));
          cn[size_t(j)] = f * c[size_t(bi)][size_t(j)] + i * cc;
          hn[size_t(j)] = o * fn[2](cn[size_t(j)]);
        } else {
          const double z = fn[0](clip(xw(j) + hr(hp, j))), r = fn[0](clip(xw(H + j) + hr(hp, H + j)));
          std::vector<double> rh(static_cast<size_t>(H), 0.0);
          for (int64_t k = 0; k < H; ++k) rh[size_t(k)] = fn[0](clip(xw(H + k) + hr(hp, H + k))) * hp[size_t(k)];
          (void)r;
          const double n = fn[1](clip(xw(2 * H + j) + hr(rh, 2 * H + j)));
          hn[size_t(j)] = (1 - z) * n + z * hp[size_t(j)];
        }
      }
      hp = hn;
      if (s.op == "LSTM") c[size_t(bi)] = cn;
      for (double v : hn) y.push_back(float(v));
    }
  }
  return y;
}

struct ActCase {
  std::string name;
  std::vector<float> alpha, beta;
  double a, b;  // the values the reference uses (given or the default)
};

TEST_CASE("onnx RNN, GRU, LSTM: every ONNX activation function with its alpha and beta, against a reference cell") {
  const std::vector<ActCase> cases = {
      {"Relu", {}, {}, 0, 0},           {"Tanh", {}, {}, 0, 0},           {"Sigmoid", {}, {}, 0, 0},
      {"Affine", {0.5f}, {0.25f}, 0.5, 0.25}, {"Affine", {}, {}, 1, 0},     {"LeakyRelu", {0.2f}, {}, 0.2, 0},
      {"LeakyRelu", {}, {}, 0.01, 0},   {"ThresholdedRelu", {0.3f}, {}, 0.3, 0}, {"ThresholdedRelu", {}, {}, 1, 0},
      {"ScaledTanh", {1.5f}, {0.5f}, 1.5, 0.5}, {"HardSigmoid", {0.3f}, {0.4f}, 0.3, 0.4}, {"HardSigmoid", {}, {}, 0.2, 0.5},
      {"Elu", {0.7f}, {}, 0.7, 0},      {"Softsign", {}, {}, 0, 0},       {"Softplus", {}, {}, 0, 0}};
  for (const auto& ac : cases)
    for (const std::string op : {"RNN", "GRU", "LSTM"}) {
      CAPTURE(ac.name);
      CAPTURE(op);
      CellSpec s;
      s.op = op;
      // the case's function as f; GRU's g and LSTM's g, h stay Tanh (their alphas follow f's in the list)
      s.acts = {ac.name};
      if (op != "RNN") s.acts.push_back("Tanh");
      if (op == "LSTM") s.acts.push_back("Tanh");
      s.alphas = ac.alpha;
      s.betas = ac.beta;
      const Fn f = function_of(ac.name, double(float(ac.a)), double(float(ac.b))), tanh_fn = function_of("Tanh", 0, 0);
      const auto out = run(spec_graph(s), {{"x", f32({s.seq, s.batch, kInput}, x_data(s.seq * s.batch * kInput))}});
      check_close(out.at("y"), reference(s, {f, tanh_fn, tanh_fn}), 1e-5);
    }
}

TEST_CASE("onnx RNN, GRU, LSTM: clip bounds each gate's pre-activation, g and h non-default, against a reference cell") {
  for (const std::string op : {"RNN", "GRU", "LSTM"}) {
    CAPTURE(op);
    CellSpec s;
    s.op = op;
    s.clip = 0.6f;
    s.acts = op == "RNN" ? std::vector<std::string>{"Relu"} : op == "GRU" ? std::vector<std::string>{"HardSigmoid", "Softsign"}
                                                                          : std::vector<std::string>{"Sigmoid", "Elu", "ScaledTanh"};
    if (op == "LSTM") s.alphas = {0.5f, 2.0f}, s.betas = {0.75f};  // Elu's alpha, then ScaledTanh's alpha and beta
    std::vector<Fn> fn = {function_of(s.acts[0], 0.2, 0.5)};
    if (op == "GRU") fn.push_back(function_of("Softsign", 0, 0));
    if (op == "LSTM") fn = {function_of("Sigmoid", 0, 0), function_of("Elu", 0.5, 0), function_of("ScaledTanh", 2.0, 0.75)};
    const auto out = run(spec_graph(s), {{"x", f32({s.seq, s.batch, kInput}, x_data(s.seq * s.batch * kInput))}});
    const std::vector<float> want = reference(s, fn);
    check_close(out.at("y"), want, 1e-5);
    s.clip = 0;
    CHECK(reference(s, fn) != want);  // the clip bites
  }
}

TEST_CASE("onnx RNN, GRU, LSTM: sequence_lens, each row equals the cell over its own sequence (forward, reverse, bidirectional)") {
  const std::vector<int64_t> lens = {3, 1, 2};
  const std::vector<float> x = x_data(3 * 3 * kInput);
  for (const std::string op : {"RNN", "GRU", "LSTM"})
    for (const std::string dir : {"forward", "reverse", "bidirectional"}) {
      CAPTURE(op);
      CAPTURE(dir);
      const int64_t d = dir == "bidirectional" ? 2 : 1;
      CellSpec s;
      s.op = op, s.dir = dir, s.seq = 3, s.batch = 3, s.lens = lens;
      const auto all = run(spec_graph(s), {{"x", f32({3, 3, kInput}, x)}});
      for (int64_t b = 0; b < 3; ++b) {
        CAPTURE(b);
        const int64_t l = lens[size_t(b)];
        CellSpec one = s;
        one.seq = l, one.batch = 1, one.lens.clear();
        std::vector<float> xb;
        for (int64_t t = 0; t < l; ++t)
          for (int64_t k = 0; k < kInput; ++k) xb.push_back(x[size_t((t * 3 + b) * kInput + k)]);
        const auto row = run(spec_graph(one), {{"x", f32({l, 1, kInput}, xb)}});
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t dd = 0; dd < d; ++dd)
            for (int64_t j = 0; j < kHidden; ++j) {
              const float got = at(all.at("y"), ((t * d + dd) * 3 + b) * kHidden + j);
              CHECK(got == doctest::Approx(t < l ? at(row.at("y"), (t * d + dd) * kHidden + j) : 0.0f).epsilon(1e-6));
            }
        for (const char* out : {"y_h", "y_c"}) {
          if (!all.count(out)) continue;
          for (int64_t dd = 0; dd < d; ++dd)
            for (int64_t j = 0; j < kHidden; ++j)
              CHECK(at(all.at(out), (dd * 3 + b) * kHidden + j) == doctest::Approx(at(row.at(out), dd * kHidden + j)).epsilon(1e-6));
        }
      }
    }
}

TEST_CASE("onnx RNN: an unknown activation, ScaledTanh without its values and a sequence length 0 are refused naming the node") {
  CellSpec s;
  s.acts = {"Gelu"};
  CHECK_THROWS_WITH_AS(import_model(spec_graph(s).m, "t.onnx"), doctest::Contains("node 'cell' (RNN): unsupported: activation 'Gelu'"), UserError);
  s.acts = {"ScaledTanh"};
  CHECK_THROWS_WITH_AS(import_model(spec_graph(s).m, "t.onnx"),
                       doctest::Contains("(RNN): unsupported: activation 'ScaledTanh' without its activation_alpha"), UserError);
  s.acts.clear();
  s.lens = {3, 0};
  CHECK_THROWS_WITH_AS(import_model(spec_graph(s).m, "t.onnx"), doctest::Contains("(RNN): unsupported: sequence_lens 0 outside 1..3"), UserError);
}

}  // namespace
}  // namespace tessel::onnx_import
