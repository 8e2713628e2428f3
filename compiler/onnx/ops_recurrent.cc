// RNN, GRU and LSTM unrolled over the static sequence length into the def: no loop in the language,
// so each time step is a few statements over (batch b = i0, hidden unit j = i1) reading the
// previous step's locals. Per direction d (forward; reverse walks t from the end; bidirectional is
// both, direction 1 reversed):
//   XW(t, b, q)  +=! X(t, b, r0) * W(d, q, r0)              the input projection, every step at once
//   A(b, q)      +=! H(b, r0) * R(d, q, r0)                 the recurrence (absent while H is 0)
//   pre(q)        =  XW(t, b, q) + A(b, q) + Wb(d, q) + Rb(d, q)      (read inline)
//   RNN   H'(b, j) = tanh(pre(j))
//   GRU   Z = sigmoid(pre(j)), Rg = sigmoid(pre(H + j)),
//         linear_before_reset = 0: RH(b, j) = Rg * H(b, j); A2(b, j) +=! RH(b, r0) * R(d, 2H + j, r0);
//                                  n = tanh(XW(t, b, 2H + j) + A2(b, j) + Wb + Rb)
//         linear_before_reset = 1: n = tanh(XW(t, b, 2H + j) + Rg * (A(b, 2H + j) + Rb) + Wb)
//         H'(b, j) = (1 - Z) * n + Z * H(b, j)
//   LSTM  (gates i, o, f, c at q = j, H + j, 2H + j, 3H + j; peepholes P = [Pi, Po, Pf])
//         C'(b, j) = sigmoid(pre(2H + j) + Pf C) * C + sigmoid(pre(j) + Pi C) * tanh(pre(3H + j))
//         H'(b, j) = sigmoid(pre(H + j) + Po C') * tanh(C')
// Y (every step's H, layout 0 [seq, D, batch, H] or 1 [batch, seq, D, H]), Y_h and Y_c (the last
// ones) are select chains over the step and direction, as Concat writes.
// Activations (sigmoid / tanh above are f, g, h's defaults): any of ONNX's list, Relu Tanh Sigmoid
// Affine LeakyRelu ThresholdedRelu ScaledTanh HardSigmoid Elu Softsign Softplus, with
// activation_alpha / activation_beta (parse_activations); clip bounds each gate's pre-activation to
// [-clip, clip] (as ONNX Runtime: not C in h(C)). sequence_lens (constants, 1..seq per batch row):
// from step s on, a row shorter than s + 1 holds its states (H' = select(row running, new, H)), so
// Y_h / Y_c are its last step's; Y is 0 past its length; reversed, a row of length L starts at time
// L - 1 (XW read per row through a select chain). Refused: LSTM's input_forget, sequence_lens not
// known at import time or 0.
#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

enum class Cell { Rnn, Gru, Lstm };

std::string plus(const std::string& e, int64_t k) { return k == 0 ? e : e + " + " + std::to_string(k); }

// One activation function of the attribute list with its alpha and beta.
struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
};

struct Recurrence {
  Context& c;
  Cell cell;
  int64_t seq = 0, batch = 0, hidden = 0, gates = 1, dirs = 1;
  bool layout1 = false, reset_after = false;
  DType t = DType::F32;
  std::vector<Activation> acts;  // per direction, the roles f, g (GRU, LSTM), h (LSTM)
  std::optional<double> clip;
  std::vector<int64_t> lens;  // sequence_lens where some row is shorter than the sequence, else empty

  // the rows whose sequence is longer than s steps, as a condition on b ("" when every row is)
  std::string rows_longer(int64_t s, const std::string& b) const {
    if (lens.empty()) return "";
    Strings rows;
    for (int64_t r = 0; r < batch; ++r)
      if (lens[size_t(r)] > s) rows.push_back(b + " == " + std::to_string(r));
    if (int64_t(rows.size()) == batch) return "";
    return rows.empty() ? b + " < 0" : "(" + join(rows, " || ") + ")";
  }
  // a state written at step s: the new value on rows still running, the previous one (held) on the others
  std::string held(int64_t s, const std::string& rhs, const std::optional<Value>& old) {
    const std::string on = rows_longer(s, index(0));
    if (on.empty()) return rhs;
    return "select(" + on + ", " + rhs + ", " + (old ? at(*old, index(1)) : literal(0, t)) + ")";
  }
  // XW at processing step s (time `step`) for row b = index(0): reversed, each row starts at its own last element
  std::string xw_at(const Value& xw, bool reverse, int64_t s, int64_t step, const std::string& q) {
    if (lens.empty() || !reverse) return c.read(xw, {std::to_string(step), index(0), q});
    std::string rhs;
    for (int64_t r = batch; r-- > 0;) {
      const std::string leaf = c.read(xw, {std::to_string(std::max<int64_t>(0, lens[size_t(r)] - 1 - s)), index(0), q});
      rhs = rhs.empty() ? leaf : "select(" + index(0) + " == " + std::to_string(r) + ", " + leaf + ", " + rhs + ")";
    }
    return rhs;
  }

  void parse_activations();
  std::string num(double x) const { return literal(x, t); }
  // activation `role` of direction d applied to x (clip bounding x first where `clipped`)
  std::string act(size_t role, int64_t d, const std::string& x, bool clipped = true) const;
  std::string activation(size_t role, int64_t d, const std::string& x, bool clipped) const;

  // an input read at (direction d, then `rest`), or "" where the input is absent
  std::string read(int i, int64_t d, const Strings& rest) {
    if (!c.has_input(i)) return "";
    Strings idx{std::to_string(d)};
    idx.insert(idx.end(), rest.begin(), rest.end());
    return c.read(c.input(i), idx);
  }
  // an initial state (input 5 initial_h, 6 initial_c) at (d, b, j) by the layout
  std::string initial(int i, int64_t d) {
    if (!c.has_input(i)) return "";
    const Strings idx = layout1 ? Strings{index(0), std::to_string(d), index(1)} : Strings{std::to_string(d), index(0), index(1)};
    return c.read(c.input(i), idx);
  }
  // Wb(d, q) + Rb(d, q) as " + ..." ("" without B); `which` 0 both, 1 Wb, 2 Rb
  std::string bias(int64_t d, const std::string& q, int which = 0) {
    if (!c.has_input(3)) return "";
    std::string s;
    if (which != 2) s += " + " + read(3, d, {q});
    if (which != 1) s += " + " + read(3, d, {plus(q, gates * hidden)});
    return s;
  }
  Value state(const std::string& name, const std::vector<int64_t>& shape) { return local(c, c.input(0), shape, name); }
  // a local written by `rhs` over (b, j in 0:n), with `reduce` adding r0 in 0:k
  Value emit(const std::string& name, int64_t n, const std::string& assign, const std::string& rhs, int64_t k = 0) {
    Value v = state(name, {batch, n});
    std::vector<IndexRange> ranges = ranges_of(v.shape);
    if (k) ranges.push_back({reduction(0), 0, k});
    c.emit({v.tsl, indices(2), assign, rhs, ranges});
    return v;
  }
  std::string at(const Value& v, const std::string& q) { return c.read(v, {index(0), q}); }
  // A(b, q) +=! H(b, r0) * R(d, q + from, r0) over q in 0:n; none while H is 0
  std::optional<Value> recur(const Value* h, int64_t d, int64_t n, int64_t from, const std::string& name) {
    if (!h) return std::nullopt;
    return emit(name, n, "+=!", c.read(*h, {index(0), reduction(0)}) + " * " + read(2, d, {plus(index(1), from), reduction(0)}), hidden);
  }
  // " + A(b, j)" or "": read only while the statement using it is built (read() records index uses for emit)
  std::string term(const std::optional<Value>& a) { return a ? " + " + at(*a, index(1)) : ""; }
  void run();
  void direction(int64_t d, std::vector<Value>& hs, std::vector<Value>& cs);
  std::string y_leaf(const std::vector<Value>& hs, int64_t d, int64_t t, const std::string& b, const std::string& j);
  void write_outputs(const std::vector<std::vector<Value>>& hs, const std::vector<Value>& last_h, const std::vector<Value>& last_c);
};

void Recurrence::direction(int64_t d, std::vector<Value>& hs, std::vector<Value>& cs) {
  const int64_t gh = gates * hidden, input = c.input(0).shape[2];
  const Value xw = state("xw" + std::to_string(d), {seq, batch, gh});
  const Strings xi = layout1 ? Strings{index(1), index(0), reduction(0)} : Strings{index(0), index(1), reduction(0)};
  std::vector<IndexRange> ranges = ranges_of(xw.shape);
  ranges.push_back({reduction(0), 0, input});
  c.emit({xw.tsl, indices(3), "+=!", c.read(c.input(0), xi) + " * " + read(1, d, {index(2), reduction(0)}), ranges});
  const bool reverse = c.attr_string("direction", "forward") == "reverse" || d == 1;
  std::optional<Value> h, cell_state;
  if (c.has_input(5)) h = emit("h0_" + std::to_string(d), hidden, "=", initial(5, d));
  if (c.has_input(6)) cell_state = emit("c0_" + std::to_string(d), hidden, "=", initial(6, d));
  for (int64_t s = 0; s < seq; ++s) {
    const int64_t step = reverse ? seq - 1 - s : s;
    const std::string tag = std::to_string(d) + "_" + std::to_string(step);
    const Value* hp = h ? &*h : nullptr;
    auto pre = [&](const std::optional<Value>& a, int64_t off) {
      return xw_at(xw, reverse, s, step, plus(index(1), off)) + term(a) + bias(d, plus(index(1), off));
    };
    if (cell == Cell::Rnn) {
      const auto a = recur(hp, d, hidden, 0, "a" + tag);
      h = emit("h" + tag, hidden, "=", held(s, act(0, d, pre(a, 0)), h));
    } else if (cell == Cell::Lstm) {
      std::vector<std::optional<Value>> a;
      for (int64_t g = 0; g < 4; ++g) a.push_back(recur(hp, d, hidden, g * hidden, "a" + std::to_string(g) + "_" + tag));
      const std::string cp = cell_state ? at(*cell_state, index(1)) : "";
      auto peep = [&](int64_t p, const std::string& cv) { return c.has_input(7) && !cv.empty() ? " + " + read(7, d, {plus(index(1), p * hidden)}) + " * " + cv : ""; };
      const std::string in_gate = act(0, d, pre(a[0], 0) + peep(0, cp)), cand = act(1, d, pre(a[3], 3 * hidden));
      std::string rhs = in_gate + " * " + cand;
      if (!cp.empty()) rhs = act(0, d, pre(a[2], 2 * hidden) + peep(2, cp)) + " * " + cp + " + " + rhs;
      const std::optional<Value> c_old = cell_state;
      cell_state = emit("c" + tag, hidden, "=", held(s, rhs, c_old));
      const std::string cn = at(*cell_state, index(1));
      h = emit("h" + tag, hidden, "=", held(s, act(0, d, pre(a[1], hidden) + peep(1, cn)) + " * " + act(2, d, cn, false), h));
      cs.push_back(*cell_state);
    } else {
      const auto az = recur(hp, d, hidden, 0, "az" + tag), ar = recur(hp, d, hidden, hidden, "ar" + tag);
      const Value z = emit("z" + tag, hidden, "=", act(0, d, pre(az, 0)));
      const Value rg = emit("r" + tag, hidden, "=", act(0, d, pre(ar, hidden)));
      const std::string q = plus(index(1), 2 * hidden);
      std::string n;
      if (reset_after) {
        const auto an = recur(hp, d, hidden, 2 * hidden, "an" + tag);
        const std::string inner = term(an) + bias(d, q, 2);
        n = act(1, d, xw_at(xw, reverse, s, step, q) +
                          (inner.empty() ? "" : " + " + at(rg, index(1)) + " * (" + inner.substr(3) + ")") + bias(d, q, 1));
      } else {
        std::optional<Value> an;
        if (hp) {
          const Value rh = emit("rh" + tag, hidden, "=", at(rg, index(1)) + " * " + at(*hp, index(1)));
          an = recur(&rh, d, hidden, 2 * hidden, "an" + tag);
        }
        n = act(1, d, xw_at(xw, reverse, s, step, q) + term(an) + bias(d, q));
      }
      const Value nv = emit("n" + tag, hidden, "=", n);
      std::string rhs = "(" + literal(1, t) + " - " + at(z, index(1)) + ") * " + at(nv, index(1));
      if (hp) rhs += " + " + at(z, index(1)) + " * " + at(*hp, index(1));
      h = emit("h" + tag, hidden, "=", held(s, rhs, h));
    }
    hs.push_back(*h);
  }
  if (reverse) std::reverse(hs.begin(), hs.end());  // hs[t]: the state at time t
  if (cell == Cell::Lstm && reverse) std::reverse(cs.begin(), cs.end());
}

// Y at time t of direction d, row b: hs[t] (b, j); with sequence_lens 0 past a row's length, and a
// reversed row of length L read at hs[seq - L + t] (its state after L - 1 - t steps).
std::string Recurrence::y_leaf(const std::vector<Value>& hs, int64_t d, int64_t t, const std::string& b, const std::string& j) {
  const std::string zero = literal(0, this->t);
  if (lens.empty()) return c.read(hs[size_t(t)], {b, j});
  const bool reverse = c.attr_string("direction", "forward") == "reverse" || d == 1;
  if (!reverse) {
    const std::string on = rows_longer(t, b);
    return on.empty() ? c.read(hs[size_t(t)], {b, j}) : "select(" + on + ", " + c.read(hs[size_t(t)], {b, j}) + ", " + zero + ")";
  }
  std::string rhs;
  for (int64_t r = batch; r-- > 0;) {
    const int64_t l = lens[size_t(r)];
    const std::string leaf = t < l ? c.read(hs[size_t(seq - l + t)], {b, j}) : zero;
    rhs = rhs.empty() ? leaf : "select(" + b + " == " + std::to_string(r) + ", " + leaf + ", " + rhs + ")";
  }
  return rhs;
}

// Y(t, d, b, j) / Y(b, t, d, j) = hs[d][t](b, j); Y_h, Y_c the last step's (time seq - 1 forward, 0 reverse).
void Recurrence::write_outputs(const std::vector<std::vector<Value>>& hs, const std::vector<Value>& last_h,
                               const std::vector<Value>& last_c) {
  const std::string ti = layout1 ? index(1) : index(0), di = layout1 ? index(2) : index(1);
  const std::string bi = layout1 ? index(0) : index(2), ji = index(3);
  auto chain = [&](int64_t n, const std::string& on, const std::function<std::string(int64_t)>& leaf) {
    std::string rhs = leaf(n - 1);
    for (int64_t k = n - 1; k-- > 0;) rhs = "select(" + on + " == " + std::to_string(k) + ", " + leaf(k) + ", " + rhs + ")";
    return rhs;
  };
  if (c.has_output(0)) {
    const Value y = output_value(c, 0);
    const std::vector<int64_t> want = layout1 ? std::vector<int64_t>{batch, seq, dirs, hidden} : std::vector<int64_t>{seq, dirs, batch, hidden};
    if (y.shape != want) c.malformed("Y's shape is not the sequence's");
    const std::string rhs = chain(dirs, di, [&](int64_t d) {
      return chain(seq, ti, [&](int64_t t) { return y_leaf(hs[size_t(d)], d, t, bi, ji); });
    });
    c.emit({y.tsl, indices(4), "=", rhs, ranges_of(y.shape)});
  }
  for (int out = 1; out < 3; ++out) {
    if (!c.has_output(out)) continue;
    const std::vector<Value>& last = out == 1 ? last_h : last_c;
    const Value y = output_value(c, out);
    const std::vector<int64_t> want = layout1 ? std::vector<int64_t>{batch, dirs, hidden} : std::vector<int64_t>{dirs, batch, hidden};
    if (y.shape != want) c.malformed("output " + std::to_string(out) + "'s shape is not [directions, batch, hidden] by the layout");
    const std::string d = layout1 ? index(1) : index(0), b = layout1 ? index(0) : index(1);
    c.emit({y.tsl, indices(3), "=", chain(dirs, d, [&](int64_t k) { return c.read(last[size_t(k)], {b, index(2)}); }), ranges_of(y.shape)});
  }
}

void Recurrence::run() {
  const Value& x = c.input(0);
  t = c.dtype(x);
  if (x.shape.size() != 3) c.malformed("X is not 3-d");
  layout1 = c.attr_int("layout", 0) != 0;
  seq = x.shape[layout1 ? 1 : 0];
  batch = x.shape[layout1 ? 0 : 1];
  hidden = c.attr_int("hidden_size", 0);
  gates = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  const std::string dir = c.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") c.malformed("direction '" + dir + "'");
  dirs = dir == "bidirectional" ? 2 : 1;
  if (hidden <= 0 || c.input(1).shape != std::vector<int64_t>{dirs, gates * hidden, x.shape[2]})
    c.malformed("W is not [directions, " + std::to_string(gates) + " * hidden_size, input_size]");
  reset_after = c.attr_int("linear_before_reset", 0) != 0;
  parse_activations();
  if (c.has_attr("clip")) {
    clip = c.attr_float("clip", 0);
    if (!(*clip > 0)) c.malformed("clip " + std::to_string(*clip) + " is not positive");
  }
  if (c.attr_int("input_forget", 0) != 0) c.unsupported("input_forget");
  if (c.has_input(4)) {
    lens = c.constant_ints(4, "sequence_lens");
    if (int64_t(lens.size()) != batch) c.malformed("sequence_lens has " + std::to_string(lens.size()) + " values for batch " + std::to_string(batch));
    for (int64_t n : lens)
      if (n < 1 || n > seq) c.unsupported("sequence_lens " + std::to_string(n) + " outside 1.." + std::to_string(seq) + " (the sequence's length)");
    if (std::all_of(lens.begin(), lens.end(), [&](int64_t n) { return n == seq; })) lens.clear();
  }
  std::vector<std::vector<Value>> hs(static_cast<size_t>(dirs));
  std::vector<Value> last_h, last_c;
  for (int64_t d = 0; d < dirs; ++d) {
    std::vector<Value> cs;
    direction(d, hs[size_t(d)], cs);
    const bool reverse = dir == "reverse" || d == 1;
    last_h.push_back(reverse ? hs[size_t(d)].front() : hs[size_t(d)].back());
    if (!cs.empty()) last_c.push_back(reverse ? cs.front() : cs.back());
  }
  write_outputs(hs, last_h, last_c);
}

// ONNX's activation list: per direction f (RNN), f g (GRU), f g h (LSTM), the defaults Tanh /
// Sigmoid Tanh / Sigmoid Tanh Tanh; bidirectional lists both directions' (or one list for both).
// alpha and beta are consumed in list order by the functions that take them (as ONNX Runtime's
// rnn_helpers does), each missing one its operator's default: LeakyRelu 0.01, ThresholdedRelu 1,
// Elu 1, HardSigmoid 0.2 0.5, Affine 1 0; ScaledTanh has none and needs both given.
void Recurrence::parse_activations() {
  const Strings defaults = cell == Cell::Rnn ? Strings{"Tanh"} : cell == Cell::Gru ? Strings{"Sigmoid", "Tanh"} : Strings{"Sigmoid", "Tanh", "Tanh"};
  Strings names = defaults;
  if (const auto* a = c.attr("activations")) {
    names.clear();
    for (int k = 0; k < a->strings_size(); ++k) names.push_back(a->strings(k));
    if (names.size() != defaults.size() && names.size() != defaults.size() * size_t(dirs))
      c.malformed(std::to_string(names.size()) + " activations for " + std::to_string(defaults.size()) + " per direction");
  }
  std::vector<double> alphas, betas;
  if (const auto* a = c.attr("activation_alpha")) alphas.assign(a->floats().begin(), a->floats().end());
  if (const auto* a = c.attr("activation_beta")) betas.assign(a->floats().begin(), a->floats().end());
  size_t na = 0, nb = 0;
  // name -> (alpha default, beta default); NaN: taken, no default; absent: not taken
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::map<std::string, std::pair<std::optional<double>, std::optional<double>>> params = {
      {"Relu", {}}, {"Tanh", {}}, {"Sigmoid", {}}, {"Softsign", {}}, {"Softplus", {}},
      {"Affine", {1.0, 0.0}}, {"LeakyRelu", {0.01, std::nullopt}}, {"ThresholdedRelu", {1.0, std::nullopt}},
      {"ScaledTanh", {nan, nan}}, {"HardSigmoid", {0.2, 0.5}}, {"Elu", {1.0, std::nullopt}}};
  for (const auto& n : names) {
    const auto p = params.find(n);
    if (p == params.end()) c.unsupported("activation '" + n + "' (not one of ONNX's RNN activation functions)");
    Activation a{n};
    auto take = [&](const std::optional<double>& dflt, const std::vector<double>& given, size_t& k, const char* what) {
      if (!dflt) return 0.0;
      if (k < given.size()) return given[k++];
      if (std::isnan(*dflt)) c.unsupported("activation '" + n + "' without its " + what + " (no default)");
      return *dflt;
    };
    a.alpha = take(p->second.first, alphas, na, "activation_alpha");
    a.beta = take(p->second.second, betas, nb, "activation_beta");
    acts.push_back(a);
  }
  if (acts.size() == defaults.size() && dirs == 2) {
    const std::vector<Activation> one = acts;  // one list for both directions
    acts.insert(acts.end(), one.begin(), one.end());
  }
}

std::string Recurrence::act(size_t role, int64_t d, const std::string& in, bool clipped) const {
  return "(" + activation(role, d, in, clipped) + ")";
}

std::string Recurrence::activation(size_t role, int64_t d, const std::string& in, bool clipped) const {
  const size_t per = acts.size() / size_t(dirs);
  const Activation& a = acts.at(size_t(d) * per + role);
  const std::string x = "(" + (clipped && clip ? "min(max(" + in + ", " + num(-*clip) + "), " + num(*clip) + ")" : in) + ")";
  const std::string zero = num(0), one = num(1);
  if (a.name == "Tanh") return "tanh" + x;
  if (a.name == "Sigmoid") return "sigmoid" + x;
  if (a.name == "Relu") return "max(" + x + ", " + zero + ")";
  if (a.name == "Affine") return num(a.alpha) + " * " + x + " + " + num(a.beta);
  if (a.name == "LeakyRelu") return "select(" + x + " >= " + zero + ", " + x + ", " + num(a.alpha) + " * " + x + ")";
  if (a.name == "ThresholdedRelu") return "select(" + x + " >= " + num(a.alpha) + ", " + x + ", " + zero + ")";
  if (a.name == "ScaledTanh") return num(a.alpha) + " * tanh(" + num(a.beta) + " * " + x + ")";
  if (a.name == "HardSigmoid") return "max(min(" + num(a.alpha) + " * " + x + " + " + num(a.beta) + ", " + one + "), " + zero + ")";
  if (a.name == "Elu") return "select(" + x + " >= " + zero + ", " + x + ", " + num(a.alpha) + " * (exp" + x + " - " + one + "))";
  if (a.name == "Softsign") return x + " / (" + one + " + abs" + x + ")";
  return "log(" + one + " + exp" + x + ")";  // Softplus
}

void translate(Context& c, Cell cell) {
  Recurrence r{c, cell};
  r.run();
}

}  // namespace

void add_recurrent_ops(std::map<std::string, Translator>& t) {
  t["RNN"] = [](Context& c) { translate(c, Cell::Rnn); };
  t["GRU"] = [](Context& c) { translate(c, Cell::Gru); };
  t["LSTM"] = [](Context& c) { translate(c, Cell::Lstm); };
}

}  // namespace tessel::onnx_import
