// Reductions over windows and axes: MaxPool / AveragePool (pads, auto_pad, strides, dilations,
// ceil_mode, count_include_pad), GlobalAveragePool / GlobalMaxPool, BatchNormalization (inference and training mode),
// LayerNormalization, InstanceNormalization, LRN (a channel window of squares), Softmax / LogSoftmax (the opset-13 single axis and the
// older flattening), and Reduce{Sum,Mean,Max,Min,L1,L2,SumSquare,LogSum,LogSumExp} (axes as attribute
// or input, keepdims). Each is a `+=!` / `max=!` / `min=!` statement into a local or the output,
// then an element-wise epilogue (division by a count, normalisation).
#include <cmath>
#include <limits>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

std::string str(int64_t v) { return std::to_string(v); }
std::string scaled(const std::string& i, int64_t k) { return k == 1 ? i : i + " * " + str(k); }

// The lowest value of a dtype (max-pool padding).
std::string lowest(DType t) {
  switch (t) {
    case DType::I8: return "i8(-128)";
    case DType::U8: return "u8(0)";
    case DType::I32: return "i32(-2147483648)";
    default: return std::string(dtype_name(t)) + "(-1.0 / 0.0)";
  }
}

// ---- pooling ------------------------------------------------------------------------------------

// MaxPool's Indices: the flat position in x (row-major over every dimension; storage_order 1: the
// spatial dimensions column-major) of the first window element, in window order, equal to the
// maximum `y` — a min=! over the window of that position where the element is the maximum and lies
// in the image (not padding), the element count elsewhere.
void pool_indices(Context& c, const Value& y, const std::string& element, const std::vector<int64_t>& strides,
                  const std::vector<int64_t>& dil, const std::vector<int64_t>& pads, const std::vector<IndexRange>& ranges) {
  const Value& x = c.input(0);
  const size_t sp = x.shape.size() - 2;
  const int64_t order = c.attr_int("storage_order", 0);
  if (order != 0 && order != 1) c.malformed("storage_order must be 0 or 1");
  Strings pos, inside;
  for (size_t j = 0; j < sp; ++j) {
    const std::string p = "(" + scaled(index(int(j + 2)), strides[j]) + " + " + scaled(reduction(int(j)), dil[j]) +
                          (pads[j] ? " - " + str(pads[j]) : "") + ")";
    pos.push_back(p);
    if (pads[j] > 0) inside.push_back(p + " >= 0");
    const int64_t last = (y.shape[j + 2] - 1) * strides[j] + (ranges[y.shape.size() + j].hi - 1) * dil[j] - pads[j];
    if (last >= x.shape[j + 2]) inside.push_back(p + " < " + str(x.shape[j + 2]));
  }
  // the spatial offset in the chosen order, then the image and channel: ((n C + c) S + offset)
  std::string offset;
  int64_t spatial = 1;
  for (size_t k = 0; k < sp; ++k) {
    const size_t j = order == 0 ? k : sp - 1 - k;
    offset = k == 0 ? pos[j] : "(" + offset + ") * " + str(x.shape[j + 2]) + " + " + pos[j];
    spatial *= x.shape[j + 2];
  }
  const std::string flat = "((" + index(0) + " * " + str(x.shape[1]) + " + " + index(1) + ") * " + str(spatial) + " + " + offset + ")";
  inside.push_back(element + " == " + c.read(y, indices(y.shape.size())));
  const std::string hit = join(inside, " && ");
  c.emit({c.output_name(1), indices(y.shape.size()), "min=!", "select(" + hit + ", " + flat + ", " + str(x.shape[0] * x.shape[1] * spatial) + ")",
          ranges});
}

void translate_pool(Context& c) {
  const bool is_max = c.node().op_type() == "MaxPool";
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  if (x.shape.size() < 3) c.malformed("the input has no spatial dimensions");
  const size_t sp = x.shape.size() - 2;
  const DType t = c.dtype(x);
  const std::vector<int64_t> kernel = c.attr_ints("kernel_shape", {});
  std::vector<int64_t> strides = c.attr_ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = c.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (kernel.size() != sp || strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp)
    c.malformed("kernel_shape, strides, dilations or pads do not match the spatial rank");
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  for (size_t j = 0; j < sp; ++j) {
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (y.shape[j + 2] - 1) * strides[j] + (kernel[j] - 1) * dil[j] + 1 - x.shape[j + 2]);
      pads[j] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[j + sp] = total - pads[j];
    } else if (auto_pad == "VALID") {
      pads[j] = pads[j + sp] = 0;
    }
  }
  const bool include_pad = c.attr_int("count_include_pad", 0) != 0;
  // the padded input: every window of the output lies inside it
  std::vector<int64_t> shape = x.shape;
  Strings idx = indices(x.shape.size()), conds, count_conds;
  for (size_t j = 0; j < sp; ++j) {
    const int64_t last = (y.shape[j + 2] - 1) * strides[j] + (kernel[j] - 1) * dil[j] + 1;
    const int64_t padded_extent = x.shape[j + 2] + pads[j] + pads[j + sp];
    shape[j + 2] = std::max(padded_extent, last);
    const std::string i = index(int(j + 2));
    if (pads[j] > 0) {
      conds.push_back(i + " >= " + str(pads[j]));
      idx[j + 2] = i + " - " + str(pads[j]);
    }
    if (pads[j] + x.shape[j + 2] < shape[j + 2]) conds.push_back(i + " < " + str(pads[j] + x.shape[j + 2]));
    // the positions a window counts (AveragePool)
    const std::string pos = scaled(index(int(j + 2)), strides[j]) + " + " + scaled(reduction(int(j)), dil[j]);
    if (include_pad) {
      if (last > padded_extent) count_conds.push_back(pos + " < " + str(padded_extent));
    } else {
      if (pads[j] > 0) count_conds.push_back(pos + " >= " + str(pads[j]));
      if (last > pads[j] + x.shape[j + 2]) count_conds.push_back(pos + " < " + str(pads[j] + x.shape[j + 2]));
    }
  }
  Value xp = x;
  if (!conds.empty()) {
    xp = local(c, x, shape, "pad");
    const std::string r = c.read(x, idx);
    c.emit({xp.tsl, indices(shape.size()), "=", "select(" + join(conds, " && ") + ", " + r + ", " + (is_max ? lowest(t) : "0") + ")",
            ranges_of(shape)});
  }
  Strings window = {index(0), index(1)};
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  int64_t window_size = 1;
  for (size_t j = 0; j < sp; ++j) {
    window.push_back(scaled(index(int(j + 2)), strides[j]) + " + " + scaled(reduction(int(j)), dil[j]));
    ranges.push_back({reduction(int(j)), 0, kernel[j]});
    window_size *= kernel[j];
  }
  const std::string r = c.read(xp, window);
  if (is_max) {
    c.emit({y.tsl, indices(y.shape.size()), "max=!", r, ranges});
    if (c.has_output(1)) pool_indices(c, y, r, strides, dil, pads, ranges);
    return;
  }
  const Value sum = local(c, y, y.shape, "sum");
  c.emit({sum.tsl, indices(y.shape.size()), "+=!", r, ranges});
  std::string divisor = literal(double(window_size), t);
  if (!count_conds.empty()) {  // windows cut by the border count fewer elements
    std::vector<int64_t> cshape(y.shape.begin() + 2, y.shape.end());
    Value cnt = local(c, y, cshape, "count");
    std::vector<IndexRange> cr;
    Strings lhs;
    for (size_t j = 0; j < sp; ++j) {
      lhs.push_back(index(int(j + 2)));
      cr.push_back({index(int(j + 2)), 0, cshape[j]});
    }
    for (size_t j = 0; j < sp; ++j) cr.push_back({reduction(int(j)), 0, kernel[j]});
    c.emit({cnt.tsl, lhs, "+=!", "select(" + join(count_conds, " && ") + ", " + literal(1, t) + ", " + literal(0, t) + ")", cr});
    divisor = c.read(cnt, lhs);
  }
  const std::string q = c.read(sum, indices(y.shape.size())) + " / " + divisor;
  c.emit({y.tsl, indices(y.shape.size()), "=", q, ranges_of(y.shape)});
}

void translate_global_pool(Context& c) {
  const bool is_max = c.node().op_type() == "GlobalMaxPool";
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  if (x.shape.size() < 3) c.malformed("the input has no spatial dimensions");
  Strings idx = {index(0), index(1)};
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  int64_t n = 1;
  for (size_t j = 2; j < x.shape.size(); ++j) {
    idx.push_back(reduction(int(j - 2)));
    ranges.push_back({reduction(int(j - 2)), 0, x.shape[j]});
    n *= x.shape[j];
  }
  const std::string r = c.read(x, idx);
  if (is_max) return c.emit({y.tsl, indices(y.shape.size()), "max=!", r, ranges});
  const Value sum = local(c, y, y.shape, "sum");
  c.emit({sum.tsl, indices(y.shape.size()), "+=!", r, ranges});
  const std::string q = c.read(sum, indices(y.shape.size())) + " / " + literal(double(n), c.dtype(y));
  c.emit({y.tsl, indices(y.shape.size()), "=", q, ranges_of(y.shape)});
}

// ---- normalisations -----------------------------------------------------------------------------

struct NormStats {
  Value sum, var;     // per outer point: the sum of x, the sum of (x - mean)^2
  std::string count;  // the number of points reduced, a literal
};

// y = (x - mean) / sqrt(var + eps) * scale + bias over the dimensions `inner` (a suffix of x's).
// Returns the statistics it computed: sum and sum of squared deviations per outer point, the count
// of reduced points as a literal.
NormStats normalise(Context& c, const std::vector<bool>& reduced, const std::function<std::string(Context&)>& scale_bias) {
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const DType t = c.dtype(x);
  const size_t rank = x.shape.size();
  std::vector<int64_t> outer_shape;
  int64_t n = 1;
  Strings reduce_idx = indices(rank), outer_idx;
  std::vector<IndexRange> ranges;
  int r = 0;
  for (size_t k = 0; k < rank; ++k) {
    if (!reduced[k]) {
      outer_idx.push_back(index(int(k)));
      outer_shape.push_back(x.shape[k]);
      ranges.push_back({index(int(k)), 0, x.shape[k]});
      continue;
    }
    reduce_idx[k] = reduction(r);
    ranges.push_back({reduction(r++), 0, x.shape[k]});
    n *= x.shape[k];
  }
  const std::string nn = literal(double(n), t);
  const Value sum = local(c, x, outer_shape, "sum");
  c.emit({sum.tsl, outer_idx, "+=!", c.read(x, reduce_idx), ranges});
  const Value centred = local(c, x, x.shape, "centred");
  const std::string cr = c.read(x, indices(rank)) + " - " + c.read(sum, outer_idx) + " / " + nn;
  c.emit({centred.tsl, indices(rank), "=", cr, ranges_of(x.shape)});
  const Value var = local(c, x, outer_shape, "var");
  const std::string d = c.read(centred, reduce_idx);
  c.emit({var.tsl, outer_idx, "+=!", d + " * " + d, ranges});
  const std::string eps = literal(c.attr_float("epsilon", c.node().op_type() == "MeanVarianceNormalization" ? 1e-9 : 1e-5), t);
  const std::string rhs = c.read(centred, indices(rank)) + " / sqrt(" + c.read(var, outer_idx) + " / " + nn + " + " + eps + ")" + scale_bias(c);
  c.emit({y.tsl, indices(rank), "=", rhs, ranges_of(y.shape)});
  // LayerNormalization's optional Mean and InvStdDev: the outer shape with 1s for the normalised dimensions
  for (int o = 1; o <= 2 && c.node().op_type() == "LayerNormalization"; ++o) {
    if (!c.has_output(o)) continue;
    const Value& s = c.output(o);
    if (s.shape.size() != rank) c.malformed("Mean/InvStdDev must keep the input's rank");
    const std::string stat = o == 1 ? c.read(sum, outer_idx) + " / " + nn : "1.0 / sqrt(" + c.read(var, outer_idx) + " / " + nn + " + " + eps + ")";
    c.emit({c.output_name(o), indices(rank), "=", stat, ranges_of(s.shape)});
  }
  return {sum, var, nn};
}

// Inference: y = (x - mean) / sqrt(var + eps) * scale + bias with the given statistics. Training
// (training_mode, or an opset < 14 node asking for the running statistics): the batch's own mean and
// (population) variance over every dimension but the channels normalise, and running_mean /
// running_var = input * momentum + batch statistic * (1 - momentum), as ONNX's reference.
void translate_batch_norm(Context& c) {
  const bool training = c.attr_int("training_mode", 0) != 0 || (c.opset() < 14 && c.has_output(1));
  for (int i = training ? 3 : 1; i < 5; ++i)
    if (c.has_output(i)) c.unsupported(i >= 3 ? "BatchNormalization's saved statistics outputs" : "BatchNormalization's running statistics outputs outside training");
  const Value& x = c.input(0);
  const DType t = c.dtype(x);
  const std::string ch = x.shape.size() > 1 ? index(1) : "0";
  if (training) {
    if (x.shape.size() < 2) c.malformed("training needs a channel dimension");
    std::vector<bool> reduced(x.shape.size(), true);
    reduced[1] = false;
    const NormStats st = normalise(c, reduced, [](Context& c) {
      return " * " + c.read(c.input(1), {index(1)}) + " + " + c.read(c.input(2), {index(1)});
    });
    const std::string m = literal(c.attr_float("momentum", 0.9), t), rest = literal(1 - c.attr_float("momentum", 0.9), t);
    for (int o = 1; o <= 2; ++o) {
      if (!c.has_output(o)) continue;
      const Value& stat = o == 1 ? st.sum : st.var;
      const std::string rhs = c.read(c.input(o == 1 ? 3 : 4), {index(0)}) + " * " + m + " + " + c.read(stat, {index(0)}) + " / " + st.count + " * " + rest;
      c.emit({c.output_name(o), {index(0)}, "=", rhs, ranges_of(c.output(o).shape)});
    }
    return;
  }
  const Value y = output_value(c, 0);
  const std::string xr = c.read(x, indices(x.shape.size()));
  const std::string mean = c.read(c.input(3), {ch}), var = c.read(c.input(4), {ch});
  const std::string scale = c.read(c.input(1), {ch}), bias = c.read(c.input(2), {ch});
  const std::string eps = literal(c.attr_float("epsilon", 1e-5), t);
  const std::string rhs = "(" + xr + " - " + mean + ") / sqrt(" + var + " + " + eps + ") * " + scale + " + " + bias;
  c.emit({y.tsl, indices(y.shape.size()), "=", rhs, ranges_of(y.shape)});
}

void translate_layer_norm(Context& c) {
  const Value& x = c.input(0);
  const int64_t axis = axis_of(c, c.attr_int("axis", -1), int64_t(x.shape.size()));
  std::vector<bool> reduced(x.shape.size());
  for (size_t k = 0; k < reduced.size(); ++k) reduced[k] = int64_t(k) >= axis;
  normalise(c, reduced, [](Context& c) {
    const Value& x = c.input(0);
    std::string s = " * " + c.read_broadcast(c.input(1), x.shape);
    if (c.has_input(2)) s += " + " + c.read_broadcast(c.input(2), x.shape);
    return s;
  });
}

void translate_instance_norm(Context& c) {
  if (c.input(0).shape.size() < 3) c.malformed("the input has no spatial dimensions");
  std::vector<bool> reduced(c.input(0).shape.size(), true);
  reduced[0] = reduced[1] = false;
  normalise(c, reduced, [](Context& c) { return " * " + c.read(c.input(1), {index(1)}) + " + " + c.read(c.input(2), {index(1)}); });
}

// MeanVarianceNormalization: (x - mean) / sqrt(var + 1e-9) over `axes` (default N, H, W).
void translate_mvn(Context& c) {
  const Value& x = c.input(0);
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t a : c.attr_ints("axes", {0, 2, 3})) reduced[size_t(axis_of(c, a, int64_t(x.shape.size())))] = true;
  normalise(c, reduced, [](Context&) { return std::string(); });
}

// LRN: y = x / (bias + alpha / size * S)^beta, S the sum of squares over the channels
// c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2) that exist: the squares go into a local
// padded with zeros along the channels, so the window sum is one `+=!` of affine reads.
void translate_lrn(Context& c) {
  if (!c.has_builtin("pow")) c.unsupported("the language has no 'pow' built-in yet");
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const size_t rank = x.shape.size();
  const int64_t size = c.attr_int("size", 0);
  if (rank < 3 || size < 1) c.malformed("LRN needs an input with channels and a positive size");
  const int64_t lo = (size - 1) / 2, channels = x.shape[1];
  std::vector<int64_t> padded = x.shape;
  padded[1] = channels + size - 1;
  const Value sq = local(c, x, padded, "squares");
  std::vector<std::string> at = indices(rank);
  std::string cond = index(1) + " < " + str(lo + channels);
  if (lo > 0) {
    at[1] = index(1) + " - " + str(lo);
    cond = index(1) + " >= " + str(lo) + " && " + cond;
  }
  const std::string v = c.read(x, at);
  c.emit({sq.tsl, indices(rank), "=", "select(" + cond + ", " + v + " * " + v + ", 0.0)", ranges_of(padded)});
  const Value sum = local(c, x, x.shape, "square_sum");
  std::vector<std::string> window = indices(rank);
  window[1] = index(1) + " + " + reduction(0);
  std::vector<IndexRange> ranges = ranges_of(x.shape);
  ranges.push_back({reduction(0), 0, size});
  c.emit({sum.tsl, indices(rank), "+=!", c.read(sq, window), ranges});
  const std::string base = literal(c.attr_float("bias", 1.0), DType::F32) + " + " +
                           literal(c.attr_float("alpha", 1e-4) / double(size), DType::F32) + " * " + c.read(sum, indices(rank));
  c.emit({y.tsl, indices(rank), "=",
          c.read(x, indices(rank)) + " / pow(" + base + ", " + literal(c.attr_float("beta", 0.75), DType::F32) + ")",
          ranges_of(y.shape)});
}

// ---- softmax ------------------------------------------------------------------------------------

void translate_softmax(Context& c) {
  const bool log_form = c.node().op_type() == "LogSoftmax";
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const size_t rank = x.shape.size();
  const int64_t axis = axis_of(c, c.attr_int("axis", c.opset() < 13 ? 1 : -1), int64_t(rank));
  std::vector<bool> reduced(rank, false);
  for (size_t k = 0; k < rank; ++k) reduced[k] = c.opset() < 13 ? int64_t(k) >= axis : int64_t(k) == axis;
  Strings outer_idx, red_idx = indices(rank);
  std::vector<int64_t> outer_shape;
  std::vector<IndexRange> ranges;
  for (size_t k = 0; k < rank; ++k)
    if (!reduced[k]) {
      outer_idx.push_back(index(int(k)));
      outer_shape.push_back(x.shape[k]);
      ranges.push_back({index(int(k)), 0, x.shape[k]});
    }
  int r = 0;
  for (size_t k = 0; k < rank; ++k)
    if (reduced[k]) {
      red_idx[k] = reduction(r);
      ranges.push_back({reduction(r++), 0, x.shape[k]});
    }
  // the locals of the outer indices: written with the outer indices as their own dimensions
  Strings local_lhs;
  std::vector<IndexRange> local_ranges;
  // f16 / bf16 inputs: exponentials, sum and quotient in f32, the result rounded once (as runtimes
  // compute a half-precision softmax), not a rounding per term of the sum
  const bool half = x.elem_type == 10 || x.elem_type == 16;
  auto wide = [&](const std::string& read) { return half ? "f32(" + read + ")" : read; };
  const Value mx = local(c, x, outer_shape, "max");
  c.emit({mx.tsl, outer_idx, "max=!", c.read(x, red_idx), ranges});
  const Value e = local(c, x, x.shape, "exp");
  c.emit({e.tsl, indices(rank), "=", "exp(" + wide(c.read(x, indices(rank))) + " - " + wide(c.read(mx, outer_idx)) + ")",
          ranges_of(x.shape)});
  const Value s = local(c, x, outer_shape, "sum");
  c.emit({s.tsl, outer_idx, "+=!", c.read(e, red_idx), ranges});
  std::string rhs = log_form ? wide(c.read(x, indices(rank))) + " - " + wide(c.read(mx, outer_idx)) + " - log(" + c.read(s, outer_idx) + ")"
                             : c.read(e, indices(rank)) + " / " + c.read(s, outer_idx);
  if (half) rhs = std::string(x.elem_type == 10 ? "f16(" : "bf16(") + rhs + ")";
  c.emit({y.tsl, indices(rank), "=", rhs, ranges_of(y.shape)});
}

// ---- Hardmax -------------------------------------------------------------------------------------

// 1 at the first largest element along the axis: its maximum, then the smallest index holding it.
void translate_hardmax(Context& c) {
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const size_t rank = x.shape.size();
  const int64_t axis = axis_of(c, c.attr_int("axis", c.opset() < 13 ? 1 : -1), int64_t(rank));
  if (c.opset() < 13 && axis != int64_t(rank) - 1) c.unsupported("Hardmax over several flattened dimensions (opset < 13)");
  Strings outer_idx, red_idx = indices(rank);
  std::vector<int64_t> outer_shape;
  std::vector<IndexRange> ranges;
  for (size_t k = 0; k < rank; ++k)
    if (int64_t(k) != axis) {
      outer_idx.push_back(index(int(k)));
      outer_shape.push_back(x.shape[k]);
      ranges.push_back({index(int(k)), 0, x.shape[k]});
    }
  const int64_t d = x.shape[size_t(axis)];
  red_idx[size_t(axis)] = reduction(0);
  ranges.push_back({reduction(0), 0, d});
  const Value mx = local(c, x, outer_shape, "max");
  c.emit({mx.tsl, outer_idx, "max=!", c.read(x, red_idx), ranges});
  Value first = local(c, x, outer_shape, "first");
  first.elem_type = onnx::TensorProto::INT32;
  c.emit({first.tsl, outer_idx, "min=!", "select(" + c.read(x, red_idx) + " == " + c.read(mx, outer_idx) + ", " + reduction(0) + ", " + str(d) + ")", ranges});
  const DType t = c.dtype(y);
  c.emit({y.tsl, indices(rank), "=", "select(" + index(int(axis)) + " == " + c.read(first, outer_idx) + ", " + literal(1, t) + ", " + literal(0, t) + ")",
          ranges_of(y.shape)});
}

// ---- CumSum -------------------------------------------------------------------------------------

void translate_cumsum(Context& c) {
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const size_t rank = x.shape.size();
  const int64_t axis = axis_of(c, c.constant_ints(1, "CumSum's axis").at(0), int64_t(rank));
  const bool exclusive = c.attr_int("exclusive", 0) != 0, reverse = c.attr_int("reverse", 0) != 0;
  Strings idx = indices(rank);
  idx[size_t(axis)] = reduction(0);
  const std::string i = index(int(axis)), r = reduction(0);
  const std::string cond = r + (reverse ? (exclusive ? " > " : " >= ") : (exclusive ? " < " : " <= ")) + i;
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({r, 0, x.shape[size_t(axis)]});
  c.emit({y.tsl, indices(rank), "+=!", "select(" + cond + ", " + c.read(x, idx) + ", 0)", ranges});
}

// ---- Reduce* ------------------------------------------------------------------------------------

struct ReduceKind {
  const char* assign;
  std::function<std::string(const std::string&)> term;  // of the element read
  std::function<std::string(const std::string&, int64_t, DType)> finish;  // of the reduced value; null: none
};

void translate_reduce(Context& c, const ReduceKind& kind) {
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const size_t rank = x.shape.size();
  std::vector<int64_t> axes;
  if (c.has_input(1)) axes = c.constant_ints(1, c.node().op_type() + "'s axes");
  else axes = c.attr_ints("axes", {});
  const bool keep = c.attr_int("keepdims", 1) != 0;
  if (axes.empty() && c.attr_int("noop_with_empty_axes", 0) != 0) {
    const std::string r = c.read(x, indices(rank));
    return c.emit({y.tsl, indices(rank), "=", r, ranges_of(y.shape)});
  }
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) reduced[size_t(axis_of(c, a, int64_t(rank)))] = true;
  Strings read_idx, lhs = indices(y.shape.size());
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  int64_t n = 1;
  int r = 0, o = 0;
  for (size_t k = 0; k < rank; ++k) {
    if (reduced[k]) {
      read_idx.push_back(x.shape[k] == 1 ? "0" : reduction(r));
      if (x.shape[k] != 1) ranges.push_back({reduction(r), 0, x.shape[k]});
      ++r;
      n *= x.shape[k];
      if (keep) ++o;
    } else {
      read_idx.push_back(index(o++));
    }
  }
  if (size_t(o) != y.shape.size()) c.malformed("the output's rank does not match keepdims");
  const std::string term = kind.term(c.read(x, read_idx));
  if (!kind.finish) return c.emit({y.tsl, lhs, kind.assign, term, ranges});
  const Value acc = local(c, y, y.shape, "acc");
  c.emit({acc.tsl, lhs, kind.assign, term, ranges});
  c.emit({y.tsl, lhs, "=", kind.finish(c.read(acc, lhs), n, c.dtype(y)), ranges_of(y.shape)});
}

void add_reduce(std::map<std::string, Translator>& t, const char* op, const ReduceKind& k) {
  t[op] = [k](Context& c) { translate_reduce(c, k); };
}

std::string same(const std::string& e) { return e; }

}  // namespace

void add_pool_norm_ops(std::map<std::string, Translator>& t) {
  t["MaxPool"] = translate_pool;
  t["AveragePool"] = translate_pool;
  t["GlobalAveragePool"] = translate_global_pool;
  t["GlobalMaxPool"] = translate_global_pool;
  t["BatchNormalization"] = translate_batch_norm;
  t["LayerNormalization"] = translate_layer_norm;
  t["InstanceNormalization"] = translate_instance_norm;
  t["Softmax"] = translate_softmax;
  t["CumSum"] = translate_cumsum;
  t["MeanVarianceNormalization"] = translate_mvn;
  t["LRN"] = translate_lrn;
  t["Hardmax"] = translate_hardmax;
  t["LogSoftmax"] = translate_softmax;
  add_reduce(t, "ReduceSum", {"+=!", same, nullptr});
  add_reduce(t, "ReduceMax", {"max=!", same, nullptr});
  add_reduce(t, "ReduceMin", {"min=!", same, nullptr});
  add_reduce(t, "ReduceProd", {"*=!", same, nullptr});
  add_reduce(t, "ReduceSumSquare", {"+=!", [](const std::string& e) { return e + " * " + e; }, nullptr});
  add_reduce(t, "ReduceL1", {"+=!", [](const std::string& e) { return "abs(" + e + ")"; }, nullptr});
  add_reduce(t, "ReduceL2", {"+=!", [](const std::string& e) { return e + " * " + e; },
                             [](const std::string& a, int64_t, DType) { return "sqrt(" + a + ")"; }});
  add_reduce(t, "ReduceLogSum", {"+=!", same, [](const std::string& a, int64_t, DType) { return "log(" + a + ")"; }});
  add_reduce(t, "ReduceLogSumExp", {"+=!", [](const std::string& e) { return "exp(" + e + ")"; },
                                    [](const std::string& a, int64_t, DType) { return "log(" + a + ")"; }});
  add_reduce(t, "ReduceMean", {"+=!", same, [](const std::string& a, int64_t n, DType t) { return a + " / " + literal(double(n), t); }});
}

}  // namespace tessel::onnx_import
