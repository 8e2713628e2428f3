// Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer / quantized
// contractions MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, all in the language's own
// terms (no new built-in):
//   quantize     Y(i..) = u8(max(min(round(X(i..) / S(..)) + f32(Z(..)), 255.0), 0.0))
//                (i8: -128..127; round is half to even, as ONNX's rint; S and Z one value or one per
//                element of `axis`)
//   dequantize   Y(i..) = (f32(X(i..)) - f32(Z(..))) * S(..)
//   dynamic      the range min(0, min X) .. max(0, max X) by `min=!` / `max=!` into scalars, then the
//                scale (range / 255), the zero point and the quantized tensor as above
//   integer      each operand shifted by its zero point into an i32 local (A(..) - Z(..)), then the
//                MatMul / Conv translation of ops_contraction.cc accumulating in i32 (a pad then
//                contributes 0, as ONNX's reference subtracts the zero point before padding)
//   qlinear      that i32 accumulator (QLinearConv: plus its i32 bias) requantized: round(f32(acc) *
//                (Sa * Sb / Sy)) + Zy saturated to Y's type, the multiplier in f32 as ONNX's reference
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using TP = onnx::TensorProto;
using Strings = std::vector<std::string>;

// The saturation range of an integer output type.
std::pair<double, double> int_range(const Context& c, const Value& y) {
  if (y.elem_type == TP::UINT8) return {0, 255};
  if (y.elem_type != TP::INT8) c.unsupported("quantized output of type other than uint8 or int8");
  return {-128, 127};
}

// Reads the scale or zero point `v` (one value, or one per element along `axis` of a tensor of
// rank `rank`) at the output indices i0...
std::string per_axis(Context& c, const Value& v, size_t rank, int64_t axis) {
  const int64_t n = element_count(v.shape);
  if (n == 1) return c.read(v, Strings(v.shape.size(), "0"));
  if (v.shape.size() != 1) c.malformed("a scale or zero point must be a scalar or 1-d");
  const int64_t a = axis_of(c, axis, int64_t(rank));
  return c.read(v, {index(int(a))});
}

// "T(max(min(round(q) + zero, hi), lo))" with q the f32 quotient.
std::string saturate(Context& c, const Value& y, const std::string& q, const std::string& zero) {
  const auto [lo, hi] = int_range(c, y);
  const std::string t = c.dtype_name(y);
  const std::string r = "round(" + q + ")" + (zero.empty() ? "" : " + f32(" + zero + ")");
  return t + "(max(min(" + r + ", " + literal(hi, DType::F32) + "), " + literal(lo, DType::F32) + "))";
}

void need_round(const Context& c) {
  if (!c.has_builtin("round")) c.unsupported("the language has no 'round' built-in yet");
}

void translate_quantize(Context& c) {
  need_round(c);
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const int64_t axis = c.attr_int("axis", 1);
  const size_t rank = y.shape.size();
  const std::string s = per_axis(c, c.input(1), rank, axis);
  const std::string z = c.has_input(2) ? per_axis(c, c.input(2), rank, axis) : "";
  const std::string xv = c.read(x, indices(rank));
  const std::string q = (c.dtype(x) == DType::F32 ? xv : "f32(" + xv + ")") + " / " + s;
  c.emit({y.tsl, indices(rank), "=", saturate(c, y, q, z), ranges_of(y.shape)});
}

void translate_dequantize(Context& c) {
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const int64_t axis = c.attr_int("axis", 1);
  const size_t rank = y.shape.size();
  c.dtype(x);
  const std::string s = per_axis(c, c.input(1), rank, axis);
  std::string v = "f32(" + c.read(x, indices(rank)) + ")";
  if (c.has_input(2)) v = "(" + v + " - f32(" + per_axis(c, c.input(2), rank, axis) + "))";
  c.emit({y.tsl, indices(rank), "=", v + " * " + s, ranges_of(y.shape)});
}

// A scalar local of `like`'s type written by `assign` (max=! min=!) over every element of x.
Value reduce_all(Context& c, const Value& x, const std::string& assign, const std::string& suffix) {
  Value m = local(c, x, {}, suffix);
  Strings rs;
  std::vector<IndexRange> ranges;
  for (size_t k = 0; k < x.shape.size(); ++k) {
    rs.push_back(reduction(int(k)));
    ranges.push_back({reduction(int(k)), 0, x.shape[k]});
  }
  c.emit({m.tsl, {}, assign, c.read(x, rs), ranges});
  return m;
}

void translate_dynamic_quantize(Context& c) {
  need_round(c);
  const Value& x = c.input(0);
  if (c.dtype(x) != DType::F32) c.unsupported("DynamicQuantizeLinear of a non-float input");
  const Value y = output_value(c, 0);
  const Value hi = reduce_all(c, x, "max=!", "max"), lo = reduce_all(c, x, "min=!", "min");
  const std::string lo0 = "min(" + c.read(lo, {}) + ", 0.0)";
  // the scale and the zero point are outputs 1 and 2; a local where the graph does not use them
  Value scale = c.has_output(1) ? output_value(c, 1) : local(c, x, {}, "scale");
  c.emit({scale.tsl, {}, "=", "(max(" + c.read(hi, {}) + ", 0.0) - " + lo0 + ") / 255.0", {}});
  Value zero = c.has_output(2) ? output_value(c, 2) : local(c, y, {}, "zero_point");
  c.emit({zero.tsl, {}, "=", saturate(c, y, "0.0 - " + lo0 + " / " + c.read(scale, {}), ""), {}});
  const size_t rank = y.shape.size();
  const std::string q = c.read(x, indices(rank)) + " / " + c.read(scale, {});
  c.emit({y.tsl, indices(rank), "=", saturate(c, y, q, c.read(zero, {})), ranges_of(y.shape)});
}

// An i32 local holding v - zero (zero: input `zero_input` where present, one value or one per
// element along `axis` of v; absent: v as i32).
Value shifted(Context& c, const Value& v, int zero_input, int64_t axis, const std::string& suffix) {
  c.dtype(v);
  Value s = local(c, v, v.shape, suffix);
  s.elem_type = TP::INT32;
  const size_t rank = v.shape.size();
  std::string rhs = "i32(" + c.read(v, indices(rank)) + ")";
  if (c.has_input(zero_input)) {
    const Value& z = c.input(zero_input);
    std::string zr;
    if (element_count(z.shape) == 1) {
      zr = c.read(z, Strings(z.shape.size(), "0"));
    } else {
      if (z.shape.size() != 1 || axis < 0 || axis >= int64_t(rank) || z.shape[0] != v.shape[size_t(axis)])
        c.unsupported("a zero point of shape other than a scalar or one per row / column / output channel");
      zr = c.read(z, {index(int(axis))});
    }
    rhs += " - i32(" + zr + ")";
  }
  c.emit({s.tsl, indices(rank), "=", rhs, ranges_of(v.shape)});
  return s;
}

// An i32 local shaped like the output, for the accumulator of a QLinear* node.
Value accumulator(Context& c, const Value& y) {
  Value acc = local(c, y, y.shape, "acc");
  acc.elem_type = TP::INT32;
  return acc;
}

void translate_matmul_integer(Context& c) {
  const Value& a = c.input(0);
  const Value& b = c.input(1);
  // a_zero_point: one value or one per row of A (its second last axis); b's one per column (last)
  const Value ai = shifted(c, a, 2, int64_t(a.shape.size()) - 2, "a");
  const Value bi = shifted(c, b, 3, int64_t(b.shape.size()) - 1, "b");
  emit_matmul(c, ai, bi, output_value(c, 0));
}

void translate_conv_integer(Context& c) {
  const Value xi = shifted(c, c.input(0), 2, -1, "x");
  const Value wi = shifted(c, c.input(1), 3, 0, "w");  // w_zero_point: one per output channel
  emit_conv(c, xi, wi, output_value(c, 0), -1);
}

// Y = saturate(round(f32(acc) * (Sa * Sb(..) / Sy)) + Zy); Sb may be one per output channel (axis 1).
void requantize(Context& c, const Value& acc, int sa, int sb, int sy, int zy) {
  need_round(c);
  const Value y = output_value(c, 0);
  const size_t rank = y.shape.size();
  const std::string m = "(" + per_axis(c, c.input(sa), rank, 0) + " * " + per_axis(c, c.input(sb), rank, 1) + " / " +
                        per_axis(c, c.input(sy), rank, 0) + ")";
  const std::string q = "f32(" + c.read(acc, indices(rank)) + ") * " + m;
  c.emit({y.tsl, indices(rank), "=", saturate(c, y, q, c.has_input(zy) ? per_axis(c, c.input(zy), rank, 0) : ""),
          ranges_of(y.shape)});
}

void translate_qlinear_matmul(Context& c) {
  const Value& a = c.input(0);
  const Value& b = c.input(3);
  if (element_count(c.input(1).shape) != 1 || element_count(c.input(4).shape) != 1)
    c.unsupported("QLinearMatMul with a scale per row or column");
  const Value ai = shifted(c, a, 2, -1, "a"), bi = shifted(c, b, 5, -1, "b");
  const Value acc = accumulator(c, c.output(0));
  emit_matmul(c, ai, bi, acc);
  requantize(c, acc, 1, 4, 6, 7);
}

void translate_qlinear_conv(Context& c) {
  const Value xi = shifted(c, c.input(0), 2, -1, "x");
  const Value wi = shifted(c, c.input(3), 5, 0, "w");
  const Value acc = accumulator(c, c.output(0));
  emit_conv(c, xi, wi, acc, 8);  // the optional i32 bias B is input 8
  requantize(c, acc, 1, 4, 6, 7);
}

}  // namespace

void add_quantize_ops(std::map<std::string, Translator>& t) {
  t["QuantizeLinear"] = translate_quantize;
  t["DequantizeLinear"] = translate_dequantize;
  t["DynamicQuantizeLinear"] = translate_dynamic_quantize;
  t["MatMulInteger"] = translate_matmul_integer;
  t["ConvInteger"] = translate_conv_integer;
  t["QLinearMatMul"] = translate_qlinear_matmul;
  t["QLinearConv"] = translate_qlinear_conv;
}

}  // namespace tessel::onnx_import
