// Data-movement operators: every output element reads one input element at a quasi-affine index
// (Transpose, Reshape/Flatten/Squeeze/Unsqueeze, Expand, Tile, Slice, Concat, Split, Pad,
// Gather with constant indices (data indices: ops_index.cc), DepthToSpace,
// SpaceToDepth), and the operators folded at import time (Constant, ConstantOfShape, Shape, Size,
// Range, and any of the above whose input is a constant).
#include <cmath>
#include <optional>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using TP = onnx::TensorProto;
using Strings = std::vector<std::string>;

std::string str(int64_t v) { return std::to_string(v); }

// "e + k" with the sign folded ("i0 - 2", "i0").
std::string plus(const std::string& e, int64_t k) {
  if (k == 0) return e;
  return e + (k > 0 ? " + " + str(k) : " - " + str(-k));
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) s[k - 1] = s[k] * shape[k];
  return s;
}

// The dimension groups of a row-major reshape from `in` to `out`: consecutive runs of equal
// products, each as the positions of its dimensions other than 1 on either side.
struct ReshapeGroup {
  std::vector<size_t> ins, outs;
};
std::vector<ReshapeGroup> reshape_groups(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<ReshapeGroup> groups;
  size_t ii = 0, oo = 0;
  auto skip = [&] {
    while (ii < in.size() && in[ii] == 1) ++ii;
    while (oo < out.size() && out[oo] == 1) ++oo;
  };
  for (skip(); ii < in.size() && oo < out.size(); skip()) {
    const size_t i0 = ii, o0 = oo;
    int64_t pin = in[ii], pout = out[oo];
    while (pin != pout) {
      if (pin < pout) pin *= in[++ii];
      else pout *= out[++oo];
    }
    ReshapeGroup g;
    for (size_t k = i0; k <= ii; ++k)
      if (in[k] != 1) g.ins.push_back(k);
    for (size_t k = o0; k <= oo; ++k)
      if (out[k] != 1) g.outs.push_back(k);
    groups.push_back(std::move(g));
    ++ii;
    ++oo;
  }
  return groups;
}

// Input indices of a row-major reshape from `in` to `out`, whose indices are index(k): dimensions
// are matched in groups of equal products, so each input index is a short quasi-affine form.
Strings reshape_indices(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  Strings idx(in.size(), "0");
  for (const ReshapeGroup& g : reshape_groups(in, out)) {
    std::string linear;
    int64_t stride = 1;
    for (size_t q = g.outs.size(); q-- > 0;) {
      std::string term = index(int(g.outs[q])) + (stride == 1 ? "" : " * " + str(stride));
      linear = linear.empty() ? term : term + " + " + linear;
      stride *= out[g.outs[q]];
    }
    const bool compound = g.outs.size() > 1;
    int64_t in_stride = 1;
    for (size_t q = g.ins.size(); q-- > 0;) {
      std::string e = compound ? "(" + linear + ")" : linear;
      if (in_stride != 1) e += " / " + str(in_stride);
      if (q != 0) e += " % " + str(in[g.ins[q]]);
      if (g.ins.size() == 1) e = linear;
      idx[g.ins[q]] = e;
      in_stride *= in[g.ins[q]];
    }
  }
  return idx;
}

// A group the reshape reads with at most one division constant per index: one input dimension
// (an affine read), or two merged into one output dimension (`j / n`, `j % n`).
bool one_divisor(const ReshapeGroup& g) { return g.ins.size() <= 1 || (g.ins.size() == 2 && g.outs.size() == 1); }

// The two adjacent input positions to merge first so that every group reads with one divisor
// (the last two of the first group that needs it: its last non-1 position and the one before);
// nullopt when none does.
std::optional<size_t> next_merge(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  for (const ReshapeGroup& g : reshape_groups(in, out))
    if (!one_divisor(g)) return g.ins.back() - 1;
  return std::nullopt;
}

// Constant folding of an index mapping: out element e reads input element at `source(out_index)`.
void fold_gather(Context& c, const Value& x, const std::vector<int64_t>& out_shape,
                 const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& source) {
  const int64_t n = element_count(out_shape);
  const auto xs = strides_of(x.shape);
  std::vector<double> data(static_cast<size_t>(n));
  std::vector<int64_t> o(out_shape.size());
  for (int64_t e = 0; e < n; ++e) {
    int64_t r = e;
    for (size_t k = out_shape.size(); k-- > 0;) {
      o[k] = r % out_shape[k];
      r /= out_shape[k];
    }
    const auto s = source(o);
    int64_t off = 0;
    for (size_t k = 0; k < s.size(); ++k) off += s[k] * xs[k];
    data[size_t(e)] = (*x.data)[size_t(off)];
  }
  c.set_constant(0, std::move(data), out_shape, x.elem_type);
}

void emit_copy(Context& c, int out, const Value& x, const Strings& idx) {
  const Value& y = c.output(out);
  c.emit({c.output_name(out), indices(y.shape.size()), "=", c.read(x, idx), ranges_of(y.shape)});
}

// ---- reshape family -------------------------------------------------------------------------

std::vector<int64_t> reshape_target(Context& c, const Value& x) {
  const std::string op = c.node().op_type();
  std::vector<int64_t> shape;
  if (op == "Reshape") {
    shape = c.opset() < 5 ? c.attr_ints("shape", {}) : c.constant_ints(1, "Reshape's shape");
    const bool allowzero = c.attr_int("allowzero", 0) != 0;
    int64_t known = 1, infer = -1;
    for (size_t k = 0; k < shape.size(); ++k) {
      if (shape[k] == 0 && !allowzero) shape[k] = k < x.shape.size() ? x.shape[k] : 1;
      if (shape[k] == -1) infer = int64_t(k);
      else known *= shape[k];
    }
    if (infer >= 0) shape[size_t(infer)] = known ? element_count(x.shape) / known : 0;
  } else if (op == "Flatten") {
    const int64_t axis = c.attr_int("axis", 1);
    const int64_t a = axis < 0 ? axis + int64_t(x.shape.size()) : axis;
    int64_t lead = 1;
    for (int64_t k = 0; k < a && k < int64_t(x.shape.size()); ++k) lead *= x.shape[size_t(k)];
    shape = {lead, element_count(x.shape) / std::max<int64_t>(lead, 1)};
  } else if (op == "Squeeze") {
    std::vector<int64_t> axes = c.opset() >= 13 && c.has_input(1) ? c.constant_ints(1, "Squeeze's axes") : c.attr_ints("axes", {});
    for (auto& a : axes) a = axis_of(c, a, int64_t(x.shape.size()));
    for (size_t k = 0; k < x.shape.size(); ++k) {
      const bool listed = std::find(axes.begin(), axes.end(), int64_t(k)) != axes.end();
      if (axes.empty() ? x.shape[k] != 1 : !listed) shape.push_back(x.shape[k]);
    }
  } else {  // Unsqueeze
    std::vector<int64_t> axes = c.opset() >= 13 ? c.constant_ints(1, "Unsqueeze's axes") : c.attr_ints("axes", {});
    const int64_t rank = int64_t(x.shape.size() + axes.size());
    for (auto& a : axes) a = axis_of(c, a, rank);
    size_t next = 0;
    for (int64_t k = 0; k < rank; ++k)
      shape.push_back(std::find(axes.begin(), axes.end(), k) != axes.end() ? 1 : x.shape[next++]);
  }
  if (element_count(shape) != element_count(x.shape)) c.malformed("the new shape does not hold the input's elements");
  return shape;
}

// A reshape whose group merges three or more input dimensions (or two into several outputs) would
// read them at divisions by several constants (`i1 / 60`, `i1 / 20 % 3`, ...), which the NPU's
// vector lowering does not map; so adjacent input dimensions of such a group are first merged
// pairwise, one local per step that reads its source at one division and one modulo by the same
// constant, until the output reads every group with one divisor at most.
void translate_reshape(Context& c) {
  const Value& x = c.input(0);
  const std::vector<int64_t> shape = reshape_target(c, x);
  if (foldable(x)) return c.set_constant(0, *x.data, shape, x.elem_type);
  const std::vector<int64_t>& out = c.output(0).shape;
  Value cur = x;
  for (std::optional<size_t> p; (p = next_merge(cur.shape, out));) {
    std::vector<int64_t> merged = cur.shape;
    merged[*p] *= merged[*p + 1];
    merged.erase(merged.begin() + long(*p) + 1);
    Strings idx;
    for (size_t k = 0; k < cur.shape.size(); ++k) {
      if (k < *p) idx.push_back(index(int(k)));
      else if (k == *p) idx.push_back(cur.shape[k + 1] == 1 ? index(int(k)) : index(int(k)) + " / " + str(cur.shape[k + 1]));
      else if (k == *p + 1) idx.push_back(cur.shape[k - 1] == 1 ? index(int(k - 1)) : index(int(k - 1)) + " % " + str(cur.shape[k]));
      else idx.push_back(index(int(k - 1)));
    }
    Value next = local(c, x, merged, "merged");
    c.emit({next.tsl, indices(merged.size()), "=", c.read(cur, idx), ranges_of(merged)});
    cur = next;
  }
  emit_copy(c, 0, cur, reshape_indices(cur.shape, out));
}

void translate_transpose(Context& c) {
  const Value& x = c.input(0);
  std::vector<int64_t> perm = c.attr_ints("perm", {});
  if (perm.empty())
    for (size_t k = x.shape.size(); k-- > 0;) perm.push_back(int64_t(k));
  if (perm.size() != x.shape.size()) c.malformed("perm has " + str(int64_t(perm.size())) + " entries for rank " + str(int64_t(x.shape.size())));
  Strings idx(x.shape.size());
  std::vector<int64_t> out;
  for (size_t k = 0; k < perm.size(); ++k) {
    idx[size_t(axis_of(c, perm[k], int64_t(x.shape.size())))] = index(int(k));
    out.push_back(x.shape[size_t(perm[k])]);
  }
  if (foldable(x))
    return fold_gather(c, x, out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> s(o.size());
      for (size_t k = 0; k < perm.size(); ++k) s[size_t(perm[k])] = o[k];
      return s;
    });
  emit_copy(c, 0, x, idx);
}

void translate_expand_real(Context& c) {
  const Value& x = c.input(0);
  c.constant_ints(1, "Expand's shape");
  const Value& y = c.output(0);
  const std::string r = c.read_broadcast(x, y.shape);
  c.emit({c.output_name(0), indices(y.shape.size()), "=", r, ranges_of(y.shape)});
}

void translate_tile(Context& c) {
  const Value& x = c.input(0);
  const auto reps = c.constant_ints(1, "Tile's repeats");
  if (reps.size() != x.shape.size()) c.malformed("repeats has the wrong length");
  Strings idx;
  for (size_t k = 0; k < x.shape.size(); ++k)
    idx.push_back(reps[k] == 1 || x.shape[k] == 1 ? (x.shape[k] == 1 ? "0" : index(int(k))) : index(int(k)) + " % " + str(x.shape[k]));
  emit_copy(c, 0, x, idx);
}

// ---- Slice / Split / Concat -------------------------------------------------------------------

void translate_slice(Context& c) {
  const Value& x = c.input(0);
  const int64_t rank = int64_t(x.shape.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts", {});
    ends = c.attr_ints("ends", {});
    axes = c.attr_ints("axes", {});
  } else {
    starts = c.constant_ints(1, "Slice's starts");
    ends = c.constant_ints(2, "Slice's ends");
    if (c.has_input(3)) axes = c.constant_ints(3, "Slice's axes");
    if (c.has_input(4)) steps = c.constant_ints(4, "Slice's steps");
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.malformed("starts, ends, axes and steps differ in length");
  std::vector<int64_t> first(size_t(rank), 0), step(size_t(rank), 1), out = x.shape;
  for (size_t q = 0; q < starts.size(); ++q) {
    const size_t a = size_t(axis_of(c, axes[q], rank));
    const int64_t d = x.shape[a], s = steps[q];
    if (s == 0) c.malformed("a step of 0");
    int64_t b = starts[q] < 0 ? starts[q] + d : starts[q];
    int64_t e = ends[q] < 0 ? ends[q] + d : ends[q];
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      out[a] = std::max<int64_t>(0, (e - b + s - 1) / s);
    } else {
      b = std::clamp<int64_t>(b, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      out[a] = std::max<int64_t>(0, (b - e + (-s) - 1) / (-s));
    }
    first[a] = b;
    step[a] = s;
  }
  if (foldable(x))  // shape arithmetic may slice a shape down to nothing
    return fold_gather(c, x, out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> s(o.size());
      for (size_t k = 0; k < o.size(); ++k) s[k] = first[k] + o[k] * step[k];
      return s;
    });
  if (element_count(out) == 0) c.unsupported("the slice is empty");
  Strings idx;
  for (int64_t k = 0; k < rank; ++k) {
    const std::string i = index(int(k));
    const int64_t s = step[size_t(k)];
    idx.push_back(x.shape[size_t(k)] == 1 ? "0" : plus(s == 1 ? i : i + " * " + (s < 0 ? "(" + str(s) + ")" : str(s)), first[size_t(k)]));
  }
  emit_copy(c, 0, x, idx);
}

void translate_split(Context& c) {
  const Value& x = c.input(0);
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), int64_t(x.shape.size()));
  int64_t off = 0;
  for (int o = 0; o < c.node().output_size(); ++o) {
    if (!c.has_output(o)) continue;
    const Value& y = c.output(o);
    int64_t start = 0;
    {  // the offset of output o: sum of the earlier outputs' extents
      start = 0;
      for (int p = 0; p < o; ++p) start += c.has_output(p) ? c.output(p).shape[size_t(axis)] : 0;
    }
    Strings idx = indices(x.shape.size());
    idx[size_t(axis)] = plus(index(int(axis)), start);
    const std::string r = c.read(x, idx);
    c.emit({c.output_name(o), indices(y.shape.size()), "=", r, ranges_of(y.shape)});
    off += y.shape[size_t(axis)];
  }
  if (off > x.shape[size_t(axis)]) c.malformed("the parts are larger than the input");
}

void translate_concat(Context& c) {
  std::vector<int> ins;
  for (int i = 0; i < c.node().input_size(); ++i)
    if (c.has_input(i) && element_count(c.input(i).shape) > 0) ins.push_back(i);
  if (ins.empty()) c.unsupported("every input is empty");
  const int64_t rank = int64_t(c.input(ins[0]).shape.size());
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), rank);
  bool constant = true;
  for (int i : ins) constant &= foldable(c.input(i));
  std::vector<int64_t> out = c.input(ins[0]).shape;
  out[size_t(axis)] = 0;
  std::vector<int64_t> offsets;
  for (int i : ins) {
    offsets.push_back(out[size_t(axis)]);
    out[size_t(axis)] += c.input(i).shape[size_t(axis)];
  }
  if (constant) {
    const int64_t n = element_count(out);
    std::vector<double> data;
    data.reserve(size_t(n));
    int64_t outer = 1;
    for (int64_t k = 0; k < axis; ++k) outer *= out[size_t(k)];
    for (int64_t o = 0; o < outer; ++o)
      for (int i : ins) {
        const Value& v = c.input(i);
        const int64_t chunk = element_count(v.shape) / outer;
        data.insert(data.end(), v.data->begin() + o * chunk, v.data->begin() + (o + 1) * chunk);
      }
    return c.set_constant(0, std::move(data), out, c.input(ins[0]).elem_type);
  }
  const Value& y = c.output(0);
  const std::string ia = index(int(axis));
  std::string rhs;
  for (size_t q = ins.size(); q-- > 0;) {
    Strings idx = indices(size_t(rank));
    idx[size_t(axis)] = plus(ia, -offsets[q]);
    const std::string r = c.read(c.input(ins[q]), idx);
    rhs = rhs.empty() ? r : "select(" + ia + " < " + str(offsets[q + 1]) + ", " + r + ", " + rhs + ")";
  }
  c.emit({c.output_name(0), indices(size_t(rank)), "=", rhs, ranges_of(y.shape)});
}

// ---- Pad ----------------------------------------------------------------------------------------

void translate_pad(Context& c) {
  const Value& x = c.input(0);
  const size_t rank = x.shape.size();
  const std::string mode = c.attr_string("mode", "constant");
  std::vector<int64_t> pads = c.opset() < 11 ? c.attr_ints(c.opset() < 2 ? "paddings" : "pads", {}) : c.constant_ints(1, "Pad's pads");
  std::vector<int64_t> axes;
  if (c.has_input(3)) axes = c.constant_ints(3, "Pad's axes");
  else
    for (size_t k = 0; k < rank; ++k) axes.push_back(int64_t(k));
  if (pads.size() != 2 * axes.size()) c.malformed("pads has the wrong length");
  std::vector<int64_t> lo(rank, 0), hi(rank, 0);
  for (size_t q = 0; q < axes.size(); ++q) {
    const size_t a = size_t(axis_of(c, axes[q], int64_t(rank)));
    lo[a] = pads[q];
    hi[a] = pads[q + axes.size()];
  }
  const Value& y = c.output(0);
  if (mode == "constant") {
    std::string value = "0";
    if (c.opset() < 11) value = literal(c.attr_float("value", 0), c.dtype(x));
    else if (c.has_input(2)) value = c.read(c.input(2), Strings(c.input(2).shape.size(), "0"));
    Strings idx;
    std::vector<std::string> conds;
    for (size_t k = 0; k < rank; ++k) {
      const std::string i = index(int(k));
      idx.push_back(x.shape[k] == 1 && lo[k] <= 0 && hi[k] <= 0 ? "0" : plus(i, -lo[k]));
      if (lo[k] > 0) conds.push_back(i + " >= " + str(lo[k]));
      if (lo[k] + x.shape[k] < y.shape[k]) conds.push_back(i + " < " + str(lo[k] + x.shape[k]));
    }
    const std::string r = c.read(x, idx);
    const std::string rhs = conds.empty() ? r : "select(" + join(conds, " && ") + ", " + r + ", " + value + ")";
    c.emit({c.output_name(0), indices(rank), "=", rhs, ranges_of(y.shape)});
    return;
  }
  if (mode != "reflect" && mode != "edge") c.unsupported("Pad mode '" + mode + "'");
  // one statement per padded dimension, each reading the previous one
  Value cur = x;
  std::vector<size_t> padded;
  for (size_t k = 0; k < rank; ++k)
    if (lo[k] != 0 || hi[k] != 0) padded.push_back(k);
  if (padded.empty()) return emit_copy(c, 0, x, indices(rank));
  for (size_t q = 0; q < padded.size(); ++q) {
    const size_t k = padded[q];
    if (lo[k] < 0 || hi[k] < 0) c.unsupported("negative pads in " + mode + " mode");
    if (mode == "reflect" && (lo[k] >= x.shape[k] || hi[k] >= x.shape[k])) c.unsupported("reflect pads as large as the dimension");
    const int64_t d = x.shape[k];
    const std::string i = index(int(k));
    auto at = [&](const std::string& e) {
      Strings idx = indices(rank);
      idx[k] = e;
      return c.read(cur, idx);
    };
    const std::string low = mode == "reflect" ? at(plus(str(lo[k]) + " - " + i, 0)) : at("0");
    const std::string high = mode == "reflect" ? at(str(2 * d - 2 + lo[k]) + " - " + i) : at(str(d - 1));
    const std::string mid = at(plus(i, -lo[k]));
    std::vector<int64_t> shape = cur.shape;
    shape[k] = d + lo[k] + hi[k];
    std::string rhs = mid;
    if (hi[k] > 0) rhs = "select(" + i + " >= " + str(lo[k] + d) + ", " + high + ", " + rhs + ")";
    if (lo[k] > 0) rhs = "select(" + i + " < " + str(lo[k]) + ", " + low + ", " + rhs + ")";
    const bool last = q + 1 == padded.size();
    Value next = cur;
    next.shape = shape;
    next.data.reset();
    next.tsl = last ? c.output_name(0) : c.temp("pad" + str(int64_t(k)));
    next.onnx = next.tsl;
    c.emit({next.tsl, indices(rank), "=", rhs, ranges_of(shape)});
    cur = next;
  }
}

// ---- Gather -------------------------------------------------------------------------------------

void translate_gather(Context& c) {
  const Value& x = c.input(0);
  const int64_t rank = int64_t(x.shape.size());
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), rank);
  const Value& iv = c.input(1);
  if (!iv.data) return translate_gather_one_hot(c);
  std::vector<int64_t> ind = c.constant_ints(1, "Gather's indices");
  const int64_t d = x.shape[size_t(axis)];
  for (auto& v : ind) {
    if (v < 0) v += d;
    if (v < 0 || v >= d) c.malformed("index " + str(v) + " is out of range for dimension " + str(d));
  }
  const size_t q = iv.shape.size();
  std::vector<int64_t> out;
  for (int64_t k = 0; k < axis; ++k) out.push_back(x.shape[size_t(k)]);
  for (int64_t s : iv.shape) out.push_back(s);
  for (int64_t k = axis + 1; k < rank; ++k) out.push_back(x.shape[size_t(k)]);
  if (foldable(x))
    return fold_gather(c, x, out, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> s;
      int64_t flat = 0;
      for (size_t k = 0; k < q; ++k) flat = flat * iv.shape[k] + o[size_t(axis) + k];
      for (int64_t k = 0; k < axis; ++k) s.push_back(o[size_t(k)]);
      s.push_back(ind[size_t(flat)]);
      for (int64_t k = axis + 1; k < rank; ++k) s.push_back(o[size_t(k) + q - 1]);
      return s;
    });
  // the flat position of the index tensor, in the output's indices axis .. axis+q-1
  std::string linear;
  int64_t stride = 1;
  for (size_t k = q; k-- > 0;) {
    if (iv.shape[k] != 1) {
      const std::string term = index(int(size_t(axis) + k)) + (stride == 1 ? "" : " * " + str(stride));
      linear = linear.empty() ? term : term + " + " + linear;
    }
    stride *= iv.shape[k];
  }
  const int64_t step = ind.size() > 1 ? ind[1] - ind[0] : 0;
  bool affine = true;
  for (size_t f = 0; f < ind.size(); ++f) affine &= ind[f] == ind[0] + int64_t(f) * step;
  auto read_at = [&](const std::string& e) {
    Strings idx;
    for (int64_t k = 0; k < axis; ++k) idx.push_back(index(int(k)));
    idx.push_back(e);
    for (int64_t k = axis + 1; k < rank; ++k) idx.push_back(index(int(k + int64_t(q) - 1)));
    return c.read(x, idx);
  };
  std::string rhs;
  if (affine) {
    std::string e = linear.empty() || step == 0 ? str(ind[0]) : plus((linear.find('+') != std::string::npos ? "(" + linear + ")" : linear) + (step == 1 ? "" : " * " + (step < 0 ? "(" + str(step) + ")" : str(step))), ind[0]);
    rhs = read_at(e);
  } else {
    if (ind.size() > 64) return translate_gather_one_hot(c);  // a select chain would be longer than the one-hot sum
    rhs = read_at(str(ind.back()));
    for (size_t f = ind.size() - 1; f-- > 0;) rhs = "select(" + linear + " == " + str(int64_t(f)) + ", " + read_at(str(ind[f])) + ", " + rhs + ")";
  }
  const Value& y = c.output(0);
  c.emit({c.output_name(0), indices(y.shape.size()), "=", rhs, ranges_of(y.shape)});
}

// ---- DepthToSpace / SpaceToDepth ----------------------------------------------------------------

void translate_depth_to_space(Context& c) {
  const Value& x = c.input(0);
  if (x.shape.size() != 4) c.malformed("the input is not 4-d");
  const int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0) c.malformed("blocksize must be positive");
  const int64_t co = x.shape[1] / (b * b);
  const std::string hb = "i2 % " + str(b), wb = "i3 % " + str(b);
  const std::string ch = c.attr_string("mode", "DCR") == "CRD" ? "i1 * " + str(b * b) + " + (" + hb + ") * " + str(b) + " + " + wb
                                                               : "(" + hb + ") * " + str(b * co) + " + (" + wb + ") * " + str(co) + " + i1";
  emit_copy(c, 0, x, {"i0", ch, "i2 / " + str(b), "i3 / " + str(b)});
}

void translate_space_to_depth(Context& c) {
  const Value& x = c.input(0);
  if (x.shape.size() != 4) c.malformed("the input is not 4-d");
  const int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0) c.malformed("blocksize must be positive");
  const int64_t ci = x.shape[1];
  if (x.shape[2] % b || x.shape[3] % b) c.malformed("the height and width must be multiples of blocksize");
  // through blocks[n, q, c, h, w] = x[n, c, h b + q / b, w b + q % b] (q = the block offset dh b + dw),
  // so that no statement divides one index by two constants (the NPU's general lowering splits one)
  const std::vector<int64_t> shape = {x.shape[0], b * b, ci, x.shape[2] / b, x.shape[3] / b};
  const Value blocks = local(c, x, shape, "blocks");
  c.emit({blocks.tsl, indices(5), "=", c.read(x, {"i0", "i2", "i3 * " + str(b) + " + i1 / " + str(b), "i4 * " + str(b) + " + i1 % " + str(b)}),
          ranges_of(shape)});
  emit_copy(c, 0, blocks, {"i0", "i1 / " + str(ci), "i1 % " + str(ci), "i2", "i3"});
}

// ---- folded operators --------------------------------------------------------------------------

void translate_constant(Context& c) {
  const auto* a = c.attr("value");
  const std::string where = "Constant '" + c.node().output(0) + "'";
  if (a && a->has_t()) return c.set_constant(0, values(a->t(), where), dims(a->t()), a->t().data_type());
  if (const auto* f = c.attr("value_float")) return c.set_constant(0, {f->f()}, {}, TP::FLOAT);
  if (const auto* i = c.attr("value_int")) return c.set_constant(0, {double(i->i())}, {}, TP::INT64);
  if (const auto* fs = c.attr("value_floats")) return c.set_constant(0, {fs->floats().begin(), fs->floats().end()}, {fs->floats_size()}, TP::FLOAT);
  if (const auto* is = c.attr("value_ints")) {
    std::vector<double> v;
    for (int64_t x : is->ints()) v.push_back(double(x));
    return c.set_constant(0, v, {int64_t(v.size())}, TP::INT64);
  }
  c.unsupported("a Constant that is not a dense numeric tensor");
}

void translate_constant_of_shape(Context& c) {
  const auto shape = c.constant_ints(0, "ConstantOfShape's shape");
  double v = 0;
  int et = TP::FLOAT;
  if (const auto* a = c.attr("value"); a && a->has_t()) {
    const auto vals = values(a->t(), "ConstantOfShape's value");
    if (vals.size() != 1) c.malformed("value must hold one element");
    v = vals[0];
    et = a->t().data_type();
  }
  const int64_t n = element_count(shape);
  if (n > (int64_t(1) << 26)) c.unsupported("a constant of " + str(n) + " elements");
  c.set_constant(0, std::vector<double>(size_t(n), v), shape, et);
}

void translate_shape(Context& c) {
  const Value& x = c.input(0);
  if (!x.has_shape) c.unsupported("the input's shape is not static");
  const int64_t rank = int64_t(x.shape.size());
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<double> v;
  for (int64_t k = start; k < end; ++k) v.push_back(double(x.shape[size_t(k)]));
  c.set_constant(0, v, {int64_t(v.size())}, TP::INT64);
}

void translate_size(Context& c) {
  const Value& x = c.input(0);
  if (!x.has_shape) c.unsupported("the input's shape is not static");
  c.set_constant(0, {double(element_count(x.shape))}, {}, TP::INT64);
}

void translate_range(Context& c) {
  const double s = c.constant(0, "Range's start")[0], l = c.constant(1, "Range's limit")[0], d = c.constant(2, "Range's delta")[0];
  if (d == 0) c.malformed("delta is 0");
  const int64_t n = std::max<int64_t>(0, int64_t(std::ceil((l - s) / d)));
  if (n == 0) c.unsupported("an empty range");
  std::vector<double> v;
  for (int64_t k = 0; k < n; ++k) v.push_back(s + double(k) * d);
  c.set_constant(0, v, {n}, c.input(0).elem_type);
}

}  // namespace

void add_shape_ops(std::map<std::string, Translator>& t) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) t[op] = translate_reshape;
  t["Transpose"] = translate_transpose;
  t["Expand"] = translate_expand_real;
  t["Tile"] = translate_tile;
  t["Slice"] = translate_slice;
  t["Split"] = translate_split;
  t["Concat"] = translate_concat;
  t["Pad"] = translate_pad;
  t["Gather"] = translate_gather;
  t["DepthToSpace"] = translate_depth_to_space;
  t["SpaceToDepth"] = translate_space_to_depth;
  t["Constant"] = translate_constant;
  t["ConstantOfShape"] = translate_constant_of_shape;
  t["Shape"] = translate_shape;
  t["Size"] = translate_size;
  t["Range"] = translate_range;
}

}  // namespace tessel::onnx_import
