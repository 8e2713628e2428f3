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
// ones) are select chains over the step and direction, as Concat writes. Refused: activations other
// than the defaults, clip, LSTM's input_forget, sequence_lens that are not constants equal to the
// sequence length.
#include <algorithm>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

enum class Cell { Rnn, Gru, Lstm };

std::string plus(const std::string& e, int64_t k) { return k == 0 ? e : e + " + " + std::to_string(k); }

struct Recurrence {
  Context& c;
  Cell cell;
  int64_t seq = 0, batch = 0, hidden = 0, gates = 1, dirs = 1;
  bool layout1 = false, reset_after = false;
  DType t = DType::F32;

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
      return c.read(xw, {std::to_string(step), index(0), plus(index(1), off)}) + term(a) + bias(d, plus(index(1), off));
    };
    if (cell == Cell::Rnn) {
      const auto a = recur(hp, d, hidden, 0, "a" + tag);
      h = emit("h" + tag, hidden, "=", "tanh(" + pre(a, 0) + ")");
    } else if (cell == Cell::Lstm) {
      std::vector<std::optional<Value>> a;
      for (int64_t g = 0; g < 4; ++g) a.push_back(recur(hp, d, hidden, g * hidden, "a" + std::to_string(g) + "_" + tag));
      const std::string cp = cell_state ? at(*cell_state, index(1)) : "";
      auto peep = [&](int64_t p, const std::string& cv) { return c.has_input(7) && !cv.empty() ? " + " + read(7, d, {plus(index(1), p * hidden)}) + " * " + cv : ""; };
      const std::string in_gate = "sigmoid(" + pre(a[0], 0) + peep(0, cp) + ")", cand = "tanh(" + pre(a[3], 3 * hidden) + ")";
      std::string rhs = in_gate + " * " + cand;
      if (!cp.empty()) rhs = "sigmoid(" + pre(a[2], 2 * hidden) + peep(2, cp) + ") * " + cp + " + " + rhs;
      cell_state = emit("c" + tag, hidden, "=", rhs);
      const std::string cn = at(*cell_state, index(1));
      h = emit("h" + tag, hidden, "=", "sigmoid(" + pre(a[1], hidden) + peep(1, cn) + ") * tanh(" + cn + ")");
      cs.push_back(*cell_state);
    } else {
      const auto az = recur(hp, d, hidden, 0, "az" + tag), ar = recur(hp, d, hidden, hidden, "ar" + tag);
      const Value z = emit("z" + tag, hidden, "=", "sigmoid(" + pre(az, 0) + ")");
      const Value rg = emit("r" + tag, hidden, "=", "sigmoid(" + pre(ar, hidden) + ")");
      const std::string q = plus(index(1), 2 * hidden);
      std::string n;
      if (reset_after) {
        const auto an = recur(hp, d, hidden, 2 * hidden, "an" + tag);
        const std::string inner = term(an) + bias(d, q, 2);
        n = "tanh(" + c.read(xw, {std::to_string(step), index(0), q}) +
            (inner.empty() ? "" : " + " + at(rg, index(1)) + " * (" + inner.substr(3) + ")") + bias(d, q, 1) + ")";
      } else {
        std::optional<Value> an;
        if (hp) {
          const Value rh = emit("rh" + tag, hidden, "=", at(rg, index(1)) + " * " + at(*hp, index(1)));
          an = recur(&rh, d, hidden, 2 * hidden, "an" + tag);
        }
        n = "tanh(" + c.read(xw, {std::to_string(step), index(0), q}) + term(an) + bias(d, q) + ")";
      }
      const Value nv = emit("n" + tag, hidden, "=", n);
      std::string rhs = "(" + literal(1, t) + " - " + at(z, index(1)) + ") * " + at(nv, index(1));
      if (hp) rhs += " + " + at(z, index(1)) + " * " + at(*hp, index(1));
      h = emit("h" + tag, hidden, "=", rhs);
    }
    hs.push_back(*h);
  }
  if (reverse) std::reverse(hs.begin(), hs.end());  // hs[t]: the state at time t
  if (cell == Cell::Lstm && reverse) std::reverse(cs.begin(), cs.end());
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
      return chain(seq, ti, [&](int64_t t) { return c.read(hs[size_t(d)][size_t(t)], {bi, ji}); });
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
  const Strings defaults = cell == Cell::Rnn ? Strings{"Tanh"} : cell == Cell::Gru ? Strings{"Sigmoid", "Tanh"} : Strings{"Sigmoid", "Tanh", "Tanh"};
  if (const auto* a = c.attr("activations")) {
    for (int k = 0; k < a->strings_size(); ++k)
      if (a->strings(k) != defaults[size_t(k) % defaults.size()]) c.unsupported("activation '" + a->strings(k) + "' (the defaults only)");
  }
  if (c.has_attr("clip")) c.unsupported("clip");
  if (c.attr_int("input_forget", 0) != 0) c.unsupported("input_forget");
  if (c.has_input(4))
    for (int64_t n : c.constant_ints(4, "sequence_lens"))
      if (n != seq) c.unsupported("sequence_lens " + std::to_string(n) + " shorter than the sequence (" + std::to_string(seq) + ")");
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
