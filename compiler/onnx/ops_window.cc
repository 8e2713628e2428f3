// Window functions of the signal operators: HannWindow, HammingWindow, BlackmanWindow. The size is
// a constant (an initializer, a Constant or a `--value` input); the window is one statement over
// its index, Y(i0) = a0 - a1 cos(2 pi i0 / N) (+ a2 cos(4 pi i0 / N) for Blackman), with N the
// size (periodic, the default) or the size - 1 (periodic = 0), the coefficients ONNX's: Hann 0.5,
// 0.5; Hamming 25/46, 21/46; Blackman 0.42, 0.5, 0.08. Computed in f32, cast to output_datatype.
#include <cmath>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

struct Coefficients {
  double a0, a1, a2;
};

void translate_window(Context& c, const Coefficients& k) {
  if (!c.has_builtin("cos")) c.unsupported("the language has no 'cos' built-in yet");
  const std::vector<int64_t> size = c.constant_ints(0, "the window's size");
  if (size.size() != 1 || size[0] < 1) c.malformed("the window's size must be one positive value");
  const Value y = output_value(c, 0);
  if (y.shape.size() != 1 || y.shape[0] != size[0]) c.malformed("the window's output is not 1-d of its size");
  const bool periodic = c.attr_int("periodic", 1) != 0;
  const int64_t n = periodic ? size[0] : size[0] - 1;
  const double w = n > 0 ? 2 * M_PI / double(n) : 0.0;  // a symmetric window of one: cos(0)
  const std::string i = "f32(" + index(0) + ")";
  std::string rhs = literal(k.a0, DType::F32) + " - " + literal(k.a1, DType::F32) + " * cos(" + i + " * " + literal(w, DType::F32) + ")";
  if (k.a2 != 0) rhs += " + " + literal(k.a2, DType::F32) + " * cos(" + i + " * " + literal(2 * w, DType::F32) + ")";
  const DType t = c.dtype(y);
  if (t != DType::F32) rhs = std::string(dtype_name(t)) + "(" + rhs + ")";
  c.emit({y.tsl, {index(0)}, "=", rhs, ranges_of(y.shape)});
}

}  // namespace

void add_window_ops(std::map<std::string, Translator>& t) {
  t["HannWindow"] = [](Context& c) { translate_window(c, {0.5, 0.5, 0}); };
  t["HammingWindow"] = [](Context& c) { translate_window(c, {25.0 / 46.0, 21.0 / 46.0, 0}); };
  t["BlackmanWindow"] = [](Context& c) { translate_window(c, {0.42, 0.5, 0.08}); };
}

}  // namespace tessel::onnx_import
