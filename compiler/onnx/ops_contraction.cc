// Contractions: MatMul (numpy batching and broadcasting, 1-d operands), Gemm (transA/transB,
// alpha, beta, C broadcast), Conv (1-3 spatial dimensions, pads / auto_pad, strides, dilations,
// groups, bias) and ConvTranspose (a correlation over the input, zero-inserted by the stride into a
// local when a stride exceeds 1). Each is a `+=!` statement over
// reduction indices r0.. (channel first, then the kernel window), plus an epilogue statement for a
// bias or scaling. Padding is a local `NAME_pad` written with a select, the form the polyhedral core
// folds into its copies.
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

std::string str(int64_t v) { return std::to_string(v); }

std::string scaled(const std::string& i, int64_t k) { return k == 1 ? i : i + " * " + str(k); }

// "i0 * 2 + r1 * 3 - 1" with unit factors and a zero offset left out.
std::string window(const std::string& o, int64_t stride, const std::string& r, int64_t dilation, int64_t offset) {
  std::string e = scaled(o, stride) + " + " + scaled(r, dilation);
  if (offset > 0) e += " + " + str(offset);
  if (offset < 0) e += " - " + str(-offset);
  return e;
}

}  // namespace

void emit_matmul(Context& c, const Value& a, const Value& b, const Value& y) {
  const size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra == 0 || rb == 0) c.malformed("MatMul of a scalar");
  const int64_t k = a.shape[ra - 1];
  if (b.shape[rb >= 2 ? rb - 2 : 0] != k) c.malformed("inner dimensions differ");
  const size_t nb = y.shape.size() - (ra > 1) - (rb > 1);
  const std::string m = index(int(nb)), n = index(int(nb + (ra > 1)));
  auto batch = [&](const Value& v, size_t r) {
    Strings idx;
    for (size_t j = 0; r >= 2 && j < r - 2; ++j) {
      const size_t pos = nb - (r - 2) + j;
      idx.push_back(v.shape[j] == 1 && y.shape[pos] != 1 ? "0" : index(int(pos)));
    }
    return idx;
  };
  Strings ia = batch(a, ra), ib = batch(b, rb);
  if (ra > 1) ia.push_back(m);
  ia.push_back(reduction(0));
  ib.push_back(reduction(0));
  if (rb > 1) ib.push_back(n);
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, k});
  // f16 / bf16 operands: products summed in f32 and rounded once, as runtimes' GEMMs do (ONNX
  // Runtime, PyTorch: f32 accumulation), not a rounding per term
  const bool half = y.elem_type == 10 || y.elem_type == 16;
  if (!half) {
    c.emit({y.tsl, indices(y.shape.size()), "+=!", c.read(a, ia) + " * " + c.read(b, ib), ranges});
    return;
  }
  const std::string acc = c.temp("acc");
  c.emit({acc, indices(y.shape.size()), "+=!", "f32(" + c.read(a, ia) + ") * f32(" + c.read(b, ib) + ")", ranges});
  c.emit({y.tsl, indices(y.shape.size()), "=", std::string(y.elem_type == 10 ? "f16(" : "bf16(") + acc + "(" +
          [&] {
            std::string s;
            for (const auto& i : indices(y.shape.size())) s += (s.empty() ? "" : ", ") + i;
            return s;
          }() + "))", ranges_of(y.shape)});
}

namespace {

void translate_matmul(Context& c) { emit_matmul(c, c.input(0), c.input(1), output_value(c, 0)); }

void translate_gemm(Context& c) {
  const Value& a = c.input(0);
  const Value& b = c.input(1);
  const Value& y = c.output(0);
  if (a.shape.size() != 2 || b.shape.size() != 2) c.malformed("Gemm operands must be 2-d");
  const bool ta = c.attr_int("transA", 0) != 0, tb = c.attr_int("transB", 0) != 0;
  const double alpha = c.attr_float("alpha", 1.0), beta = c.attr_float("beta", 1.0);
  const int64_t k = ta ? a.shape[0] : a.shape[1];
  const DType t = c.dtype(y);
  const bool bias = c.has_input(2) && beta != 0;
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, k});
  const Strings ia = ta ? Strings{reduction(0), index(0)} : Strings{index(0), reduction(0)};
  const Strings ib = tb ? Strings{index(1), reduction(0)} : Strings{reduction(0), index(1)};
  const std::string prod = c.read(a, ia) + " * " + c.read(b, ib);
  if (alpha == 1 && !bias) return c.emit({c.output_name(0), indices(2), "+=!", prod, ranges});
  Value acc = y;
  acc.tsl = c.temp("mm");
  acc.onnx = acc.tsl;
  acc.data.reset();
  c.emit({acc.tsl, indices(2), "+=!", prod, ranges});
  std::string rhs = c.read(acc, indices(2));
  if (alpha != 1) rhs = literal(alpha, t) + " * " + rhs;
  if (bias) {
    const std::string cr = c.read_broadcast(c.input(2), y.shape);
    rhs += " + " + (beta == 1 ? cr : literal(beta, t) + " * " + cr);
  }
  c.emit({c.output_name(0), indices(2), "=", rhs, ranges_of(y.shape)});
}

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};

// Kernel, strides, dilations and the padding of each spatial dimension (auto_pad resolved against
// the output's size from shape inference).
Window window_of(const Context& c, const Value& x, const Value& y, const std::vector<int64_t>& kernel) {
  const size_t sp = x.shape.size() - 2;
  Window w;
  w.kernel = kernel;
  w.strides = c.attr_ints("strides", std::vector<int64_t>(sp, 1));
  w.dilations = c.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (w.kernel.size() != sp || w.strides.size() != sp || w.dilations.size() != sp || pads.size() != 2 * sp)
    c.malformed("kernel_shape, strides, dilations or pads do not match the spatial rank");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  for (size_t j = 0; j < sp; ++j) {
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (y.shape[j + 2] - 1) * w.strides[j] + (w.kernel[j] - 1) * w.dilations[j] + 1 - x.shape[j + 2]);
      pads[j] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[j + sp] = total - pads[j];
    } else if (auto_pad == "VALID") {
      pads[j] = pads[j + sp] = 0;
    }
    if (pads[j] < 0 || pads[j + sp] < 0) c.unsupported("negative pads");
    w.pad_begin.push_back(pads[j]);
    w.pad_end.push_back(pads[j + sp]);
  }
  return w;
}

// X itself, or a local X padded by `w` with `fill` (extent covering every window of y).
Value padded(Context& c, const Value& x, const Value& y, const Window& w, const std::string& fill) {
  const size_t sp = x.shape.size() - 2;
  std::vector<int64_t> shape = x.shape;
  bool any = false;
  Strings idx = indices(x.shape.size()), conds;
  for (size_t j = 0; j < sp; ++j) {
    const int64_t need = (y.shape[j + 2] - 1) * w.strides[j] + (w.kernel[j] - 1) * w.dilations[j] + 1;
    shape[j + 2] = std::max(x.shape[j + 2] + w.pad_begin[j] + w.pad_end[j], need);
    if (w.pad_begin[j] == 0 && shape[j + 2] == x.shape[j + 2]) continue;
    any = true;
    const std::string i = index(int(j + 2));
    if (w.pad_begin[j] > 0) {
      conds.push_back(i + " >= " + str(w.pad_begin[j]));
      idx[j + 2] = i + " - " + str(w.pad_begin[j]);
    }
    if (w.pad_begin[j] + x.shape[j + 2] < shape[j + 2]) conds.push_back(i + " < " + str(w.pad_begin[j] + x.shape[j + 2]));
  }
  if (!any) return x;
  Value p = x;
  p.data.reset();
  p.shape = shape;
  p.tsl = c.temp("pad");
  p.onnx = p.tsl;
  const std::string r = c.read(x, idx);
  c.emit({p.tsl, indices(shape.size()), "=", "select(" + join(conds, " && ") + ", " + r + ", " + fill + ")", ranges_of(shape)});
  return p;
}

// Writes y (y.tsl) = acc (+ bias(i1)): the reduction goes straight into y without a bias.
void emit_with_bias(Context& c, const Value& y, const std::string& rhs, std::vector<IndexRange> ranges, int bias_input) {
  if (bias_input < 0 || !c.has_input(bias_input)) return c.emit({y.tsl, indices(y.shape.size()), "+=!", rhs, ranges});
  Value acc = y;
  acc.data.reset();
  acc.tsl = c.temp("acc");
  acc.onnx = acc.tsl;
  c.emit({acc.tsl, indices(y.shape.size()), "+=!", rhs, ranges});
  const std::string sum = c.read(acc, indices(y.shape.size())) + " + " + c.read(c.input(bias_input), {index(1)});
  c.emit({y.tsl, indices(y.shape.size()), "=", sum, ranges_of(y.shape)});
}

}  // namespace

void emit_conv(Context& c, const Value& x, const Value& wt, const Value& y, int bias_input) {
  if (x.shape.size() < 3) c.malformed("Conv input must have spatial dimensions");
  const size_t sp = x.shape.size() - 2;
  const std::vector<int64_t> kernel(wt.shape.begin() + 2, wt.shape.end());
  const Window w = window_of(c, x, y, c.attr_ints("kernel_shape", kernel));
  const int64_t g = c.attr_int("group", 1);
  const int64_t cg = wt.shape[1], mg = wt.shape[0] / std::max<int64_t>(g, 1);
  if (g < 1 || cg * g != x.shape[1] || mg * g != wt.shape[0]) c.malformed("group does not divide the channels");
  const Value xp = padded(c, x, y, w, "0");
  std::string cin = cg == 1 ? "0" : reduction(0);
  if (g > 1) cin = scaled(index(1) + " / " + str(mg), cg) + (cg == 1 ? "" : " + " + reduction(0));
  if (g > 1 && cg == 1 && mg == 1) cin = index(1);
  Strings ix = {index(0), cin}, iw = {index(1), cg == 1 ? "0" : reduction(0)};
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  if (cg != 1) ranges.push_back({reduction(0), 0, cg});
  for (size_t j = 0; j < sp; ++j) {
    const std::string r = reduction(int(j + 1));
    ix.push_back(window(index(int(j + 2)), w.strides[j], r, w.dilations[j], 0));
    iw.push_back(w.kernel[j] == 1 ? "0" : r);
    if (w.kernel[j] != 1) ranges.push_back({r, 0, w.kernel[j]});
    else ix.back() = scaled(index(int(j + 2)), w.strides[j]);
  }
  const std::string rhs = c.read(xp, ix) + " * " + c.read(wt, iw);
  emit_with_bias(c, y, rhs, ranges, bias_input);
}

namespace {

void translate_conv(Context& c) { emit_conv(c, c.input(0), c.input(1), output_value(c, 0), 2); }

// ConvTranspose with a stride: the input with stride - 1 zeros inserted between its elements and a
// left margin of at least (kernel - 1) * dilation zeros, rounded up to a multiple of the stride so
// each spatial index is read as `v / s - m` with the quotient starting at the range's start (the
// form the NPU's vector lowering maps; a division of `o - r` by the stride is not). The
// transposed convolution is then a stride-1 correlation over it with no bounds condition.
int64_t left_margin(int64_t kernel, int64_t stride, int64_t dilation) {
  return ((kernel - 1) * dilation + stride - 1) / stride * stride;
}

Value zero_inserted(Context& c, const Value& x, const Value& y, const std::vector<int64_t>& kernel,
                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dil, const std::vector<int64_t>& begin) {
  const size_t sp = x.shape.size() - 2;
  std::vector<int64_t> shape = x.shape;
  Strings idx = indices(x.shape.size()), conds;
  for (size_t j = 0; j < sp; ++j) {
    const int64_t s = strides[j], m = left_margin(kernel[j], s, dil[j]);
    shape[j + 2] = (y.shape[j + 2] + begin[j] + m + s - 1) / s * s;  // whole quotients (NPU)
    const std::string v = index(int(j + 2));
    const std::string q = s == 1 ? v : v + " / " + str(s);
    const std::string at = m / s == 0 ? q : q + " - " + str(m / s);
    if (s > 1) conds.push_back(v + " % " + str(s) + " == 0");
    if (m > 0) conds.push_back(v + " >= " + str(m));
    conds.push_back(at + " < " + str(x.shape[j + 2]));
    idx[j + 2] = at;
  }
  Value u = local(c, x, shape, "zero_inserted");
  c.emit({u.tsl, indices(shape.size()), "=", "select(" + join(conds, " && ") + ", " + c.read(x, idx) + ", 0)", ranges_of(shape)});
  return u;
}

void translate_conv_transpose(Context& c) {
  const Value& x = c.input(0);
  const Value& wt = c.input(1);
  const Value& y = c.output(0);
  if (x.shape.size() < 3) c.malformed("ConvTranspose input must have spatial dimensions");
  const size_t sp = x.shape.size() - 2;
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape", std::vector<int64_t>(wt.shape.begin() + 2, wt.shape.end()));
  const std::vector<int64_t> strides = c.attr_ints("strides", std::vector<int64_t>(sp, 1));
  const std::vector<int64_t> dil = c.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::vector<int64_t> out_pad = c.attr_ints("output_padding", std::vector<int64_t>(sp, 0));
  if (kernel.size() != sp || strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || out_pad.size() != sp)
    c.malformed("kernel_shape, strides, dilations, pads or output_padding do not match the spatial rank");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  const bool explicit_shape = c.has_attr("output_shape");
  std::vector<int64_t> begin(sp);
  for (size_t j = 0; j < sp; ++j) {
    const int64_t full = strides[j] * (x.shape[j + 2] - 1) + out_pad[j] + (kernel[j] - 1) * dil[j] + 1;
    const int64_t total = full - y.shape[j + 2];
    // ONNX's total_padding / 2 is Python's floor division: an output_shape larger than the full
    // result (total < 0) pads at the end (the rows past the full result are zero)
    const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
    if (explicit_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
      begin[j] = auto_pad == "SAME_UPPER" ? half : total - half;
    else
      begin[j] = auto_pad == "VALID" ? 0 : pads[j];
    if (begin[j] < 0) c.unsupported("negative pads");
  }
  const int64_t g = c.attr_int("group", 1);
  const int64_t ci = x.shape[1], mg = wt.shape[1];
  if (g < 1 || ci % g != 0) c.malformed("group does not divide the channels");
  const int64_t cg = ci / g;
  bool strided = false;
  for (int64_t st : strides) strided = strided || st > 1;
  const Value src = strided ? zero_inserted(c, x, y, kernel, strides, dil, begin) : x;
  const std::string cin = g == 1 ? reduction(0) : scaled(index(1) + " / " + str(mg), cg) + (cg == 1 ? "" : " + " + reduction(0));
  Strings ix = {index(0), cin}, iw = {cin, g == 1 ? index(1) : index(1) + " % " + str(mg)}, conds;
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  if (cg != 1 || g == 1) ranges.push_back({reduction(0), 0, cg});
  for (size_t j = 0; j < sp; ++j) {
    const std::string r = reduction(int(j + 1)), o = index(int(j + 2));
    // position in src: the zero-inserted input is shifted by its left margin and already zero
    // outside x, so no condition; x itself is read where the offset lies inside it
    const int64_t shift = strided ? begin[j] + left_margin(kernel[j], strides[j], dil[j]) : begin[j];
    std::string e = o;
    if (shift) e += " + " + str(shift);
    e += " - " + scaled(r, dil[j]);
    if (!strided) {
      conds.push_back(e + " >= 0");
      conds.push_back(e + " < " + str(x.shape[j + 2]));
    }
    ix.push_back(e);
    iw.push_back(r);
    ranges.push_back({r, 0, kernel[j]});
  }
  const std::string product = c.read(src, ix) + " * " + c.read(wt, iw);
  const std::string rhs = conds.empty() ? product : "select(" + join(conds, " && ") + ", " + product + ", 0)";
  emit_with_bias(c, output_value(c, 0), rhs, ranges, 2);
}

}  // namespace

void add_contraction_ops(std::map<std::string, Translator>& t) {
  t["MatMul"] = translate_matmul;
  t["Gemm"] = translate_gemm;
  t["Conv"] = translate_conv;
  t["ConvTranspose"] = translate_conv_transpose;
}

}  // namespace tessel::onnx_import
