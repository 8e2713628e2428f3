// The training domain's optimizer updates (ai.onnx.preview.training, version 1): Adagrad, Adam and
// Momentum (standard and nesterov), one group or several (R, T, then X1..Xn, G1..Gn, and the
// state tensors of each). Each is element-wise: per group a local for the regularized gradient
//   Gr(i..) = norm_coefficient * X(i..) + G(i..)
// then one statement per output, R and T read as scalars (data: T's value is not needed at import):
//   Adagrad   H' = H + Gr^2;  X' = X - R / (1 + T decay_factor) * Gr / (sqrt(H') + epsilon)
//   Adam      V' = alpha V + (1 - alpha) Gr;  H' = beta H + (1 - beta) Gr^2;
//             R' = select(T > 0, R sqrt(1 - beta^T) / (1 - alpha^T), R);
//             X' = (1 - norm_coefficient_post) (X - R' V' / (sqrt(H') + epsilon))
//   Momentum  V' = alpha V + select(T > 0, beta, 1) Gr;  X' = X - R V' (nesterov: X - R (Gr + alpha V'))
// as ONNX's reference implementations (onnx/backend/test/case/node/{adagrad,adam,momentum}.py), in f32.
// Gradient (the same domain) needs the graph's derivative and stays refused.
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

enum class Optimizer { adagrad, adam, momentum };

std::string f(double x) { return literal(x, DType::F32); }

void translate_optimizer(Context& c, Optimizer kind) {
  const int states = kind == Optimizer::adam ? 2 : 1;  // H; V, H; V
  const int inputs = c.node().input_size();
  if (inputs < 3 || (inputs - 2) % (2 + states) != 0) c.malformed("the inputs are not R, T and groups of X, G and the state tensors");
  const int n = (inputs - 2) / (2 + states);
  for (int i = 0; i < inputs; ++i)
    if (c.dtype(c.input(i)) != (i == 1 ? DType::I32 : DType::F32)) c.unsupported("an optimizer over data other than float (T int64)");
  if (!c.input(0).shape.empty() || !c.input(1).shape.empty()) c.malformed("R and T are not scalars");
  if (kind == Optimizer::adam && !c.has_builtin("pow")) c.unsupported("the language has no 'pow' built-in yet");
  const double norm = c.attr_float("norm_coefficient", 0), eps = c.attr_float("epsilon", kind == Optimizer::adam ? 1e-6 : 0);
  const std::string r = c.read(c.input(0), {}), t = "f32(" + c.read(c.input(1), {}) + ")", t_positive = c.read(c.input(1), {}) + " > 0";
  for (int g = 0; g < n; ++g) {
    const Value &x = c.input(2 + g), &grad = c.input(2 + n + g);
    if (grad.shape != x.shape) c.malformed("X and G of group " + std::to_string(g) + " differ in shape");
    const auto idx = indices(x.shape.size());
    const auto ranges = ranges_of(x.shape);
    const Value gr = local(c, x, x.shape, "regularized");
    c.emit({gr.tsl, idx, "=", f(norm) + " * " + c.read(x, idx) + " + " + c.read(grad, idx), ranges});
    const std::string G = c.read(gr, idx), X = c.read(x, idx);
    auto state = [&](int s) { return c.read(c.input(2 + (2 + s) * n + g), idx); };  // s = 0: H (Adagrad) / V; s = 1: H (Adam)
    auto out = [&](int o) { return output_value(c, o * n + g).tsl; };
    if (kind == Optimizer::adagrad) {
      const std::string h = state(0) + " + " + G + " * " + G;
      c.emit({out(1), idx, "=", h, ranges});
      c.emit({out(0), idx, "=",
              X + " - " + r + " / (" + f(1) + " + " + t + " * " + f(c.attr_float("decay_factor", 0)) + ") * " + G + " / (sqrt(" + h + ") + " + f(eps) + ")",
              ranges});
    } else if (kind == Optimizer::adam) {
      const double alpha = c.attr_float("alpha", 0.9), beta = c.attr_float("beta", 0.999);
      const std::string v = f(alpha) + " * " + state(0) + " + " + f(1 - alpha) + " * " + G;
      const std::string h = f(beta) + " * " + state(1) + " + " + f(1 - beta) + " * " + G + " * " + G;
      const std::string rate = "select(" + t_positive + ", " + r + " * sqrt(" + f(1) + " - pow(" + f(beta) + ", " + t + ")) / (" + f(1) + " - pow(" +
                               f(alpha) + ", " + t + ")), " + r + ")";
      c.emit({out(1), idx, "=", v, ranges});
      c.emit({out(2), idx, "=", h, ranges});
      c.emit({out(0), idx, "=",
              f(1 - c.attr_float("norm_coefficient_post", 0)) + " * (" + X + " - " + rate + " * (" + v + ") / (sqrt(" + h + ") + " + f(eps) + "))",
              ranges});
    } else {
      const std::string mode = c.attr_string("mode", "standard");
      if (mode != "standard" && mode != "nesterov") c.malformed("mode must be \"standard\" or \"nesterov\", not \"" + mode + "\"");
      const double alpha = c.attr_float("alpha", 0);
      const std::string v = f(alpha) + " * " + state(0) + " + select(" + t_positive + ", " + f(c.attr_float("beta", 0)) + ", " + f(1) + ") * " + G;
      c.emit({out(1), idx, "=", v, ranges});
      c.emit({out(0), idx, "=", X + " - " + r + " * " + (mode == "standard" ? "(" + v + ")" : "(" + G + " + " + f(alpha) + " * (" + v + "))"), ranges});
    }
  }
}

}  // namespace

void add_optimizer_ops(std::map<std::string, Translator>& t) {
  t["ai.onnx.preview.training.Adagrad"] = [](Context& c) { translate_optimizer(c, Optimizer::adagrad); };
  t["ai.onnx.preview.training.Adam"] = [](Context& c) { translate_optimizer(c, Optimizer::adam); };
  t["ai.onnx.preview.training.Momentum"] = [](Context& c) { translate_optimizer(c, Optimizer::momentum); };
}

}  // namespace tessel::onnx_import
