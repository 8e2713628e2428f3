// Operators that produce or consume indices as data: ArgMax / ArgMin (a max=! / min=! reduction,
// then the first or last position holding it), and the data-dependent reads GatherElements, Gather
// with indices that are data, OneHot, ScatterElements / ScatterND (reduction none or add),
// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss. A read
// at a data index is a one-hot sum over the indexed axis: `Y(i..) +=! select(I(i..) == r0, X(.., r0, ..), 0)`,
// where exactly one term is not zero, so the sum is exact and every index stays affine.
// ONNX's int64 indices are held as i32 (tensor_proto.h).
#include <cmath>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

std::string str(int64_t v) { return std::to_string(v); }

// ---- ArgMax / ArgMin ----------------------------------------------------------------------------

// The largest (smallest) element along the axis, then the first (min=! of the position, D where the
// element is not the extreme) or, with select_last_index, the last (max=!, -1 elsewhere) position.
void translate_arg(Context& c) {
  const bool is_max = c.node().op_type() == "ArgMax";
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  c.dtype(x);
  const size_t rank = x.shape.size();
  if (rank == 0) c.malformed("the input is a scalar");
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), int64_t(rank));
  const bool keep = c.attr_int("keepdims", 1) != 0, last = c.attr_int("select_last_index", 0) != 0;
  if (y.shape.size() != (keep ? rank : rank - 1)) c.malformed("the output's rank does not match keepdims");
  const int64_t d = x.shape[size_t(axis)];
  Strings xi, lhs = indices(y.shape.size());
  for (size_t k = 0; k < rank; ++k)
    xi.push_back(int64_t(k) < axis ? index(int(k)) : int64_t(k) == axis ? reduction(0) : index(int(keep ? k : k - 1)));
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, d});
  const Value ext = local(c, x, y.shape, is_max ? "max" : "min");
  c.emit({ext.tsl, lhs, is_max ? "max=!" : "min=!", c.read(x, xi), ranges});
  const std::string hit = c.read(x, xi) + " == " + c.read(ext, lhs);
  c.emit({y.tsl, lhs, last ? "max=!" : "min=!", "select(" + hit + ", " + reduction(0) + ", " + (last ? "-1" : str(d)) + ")", ranges});
}

// ---- one-hot reads ------------------------------------------------------------------------------

// `I == r` for a data index I into a dimension of size d, negative indices counting from the end
// unless the indices are constants that are all non-negative.
std::string index_is(const Value& ind, const std::string& read, const std::string& r, int64_t d) {
  bool negative = true;
  if (ind.data) {
    negative = false;
    for (double v : *ind.data) negative |= v < 0;
  }
  const std::string i = dtype_of(ind.elem_type) && !dtype_is_float(*dtype_of(ind.elem_type)) ? read : "i32(" + read + ")";
  return negative ? "(" + i + " == " + r + " || " + i + " == " + r + " - " + str(d) + ")" : i + " == " + r;
}

// Constant indices must lie in [-d, d): ONNX leaves others undefined, tessel refuses them.
void check_constant_indices(Context& c, const Value& ind, int64_t d) {
  if (!ind.data) return;
  for (double v : *ind.data)
    if (v < -double(d) || v >= double(d)) c.malformed("index " + str(int64_t(v)) + " is out of range for a dimension of " + str(d));
}

// GatherElements: Y[i..] = X[i.. with the axis index replaced by I[i..]].
void translate_gather_elements(Context& c) {
  const Value& x = c.input(0);
  const Value& ind = c.input(1);
  const size_t rank = x.shape.size();
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), int64_t(rank));
  if (ind.shape.size() != rank) c.malformed("indices and data differ in rank");
  const int64_t d = x.shape[size_t(axis)];
  check_constant_indices(c, ind, d);
  const Value y = output_value(c, 0);
  c.dtype(x);
  c.dtype(ind);
  Strings xi = indices(rank);
  xi[size_t(axis)] = reduction(0);
  const std::string hit = index_is(ind, c.read(ind, indices(rank)), reduction(0), d);
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, d});
  c.emit({y.tsl, indices(rank), "+=!", "select(" + hit + ", " + c.read(x, xi) + ", 0)", ranges});
}

// OneHot: Y[.., j (at axis), ..] = on where I[..] == j (or j - depth), else off.
void translate_one_hot(Context& c) {
  const Value& ind = c.input(0);
  const std::vector<double> depth = c.constant(1, "OneHot's depth");
  if (depth.size() != 1) c.malformed("depth must hold one value");
  const int64_t d = int64_t(depth[0]);
  const Value& vals = c.input(2);
  if (element_count(vals.shape) != 2) c.malformed("values must hold two elements (off, on)");
  const Value y = output_value(c, 0);
  const DType t = c.dtype(y);
  c.dtype(ind);
  const size_t rank = y.shape.size();
  const int64_t axis = axis_of(c, c.attr_int("axis", -1), int64_t(rank));
  if (y.shape[size_t(axis)] != d) c.malformed("the output's axis does not have depth elements");
  Strings ii;
  for (size_t k = 0; k < rank; ++k)
    if (int64_t(k) != axis) ii.push_back(index(int(k)));
  auto value = [&](int k) {
    if (foldable(vals)) return literal((*vals.data)[size_t(k)], t);
    return c.read(vals, Strings(vals.shape.size(), str(k)));
  };
  const std::string off = value(0), on = value(1);
  const std::string hit = index_is(ind, c.read(ind, ii), index(int(axis)), d);
  c.emit({y.tsl, indices(rank), "=", "select(" + hit + ", " + on + ", " + off + ")", ranges_of(y.shape)});
}

// ---- scatters ------------------------------------------------------------------------------------

// Y = data with the updates whose target is each element: `hit` (over the reductions `red`) says
// that update `upd` lands on Y(i..). reduction "none": the update where one lands (ONNX leaves
// duplicates undefined), else data; "add": data plus the sum of those landing. Two one-hot sums.
// `guard` (may be empty) keeps the reads of `hit` and `upd` inside the indices' and updates' extents.
void emit_scatter(Context& c, const std::string& guard, const std::string& hit, const std::string& upd, const std::vector<IndexRange>& red) {
  const Value& data = c.input(0);
  const Value y = output_value(c, 0);
  const std::string reduction_kind = c.attr_string("reduction", "none");
  if (reduction_kind != "none" && reduction_kind != "add") c.unsupported("scatter reduction '" + reduction_kind + "' (none and add are sums)");
  const size_t rank = y.shape.size();
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.insert(ranges.end(), red.begin(), red.end());
  const Value sum = local(c, y, y.shape, "updates");
  auto guarded = [&](const std::string& e) { return guard.empty() ? e : "select(" + guard + ", " + e + ", 0)"; };
  c.emit({sum.tsl, indices(rank), "+=!", guarded("select(" + hit + ", " + upd + ", 0)"), ranges});
  if (reduction_kind == "add") {
    const std::string d = c.read(data, indices(rank)), u = c.read(sum, indices(rank));
    return c.emit({y.tsl, indices(rank), "=", d + " + " + u, ranges_of(y.shape)});
  }
  Value count = local(c, y, y.shape, "count");
  count.elem_type = onnx::TensorProto::INT32;
  c.emit({count.tsl, indices(rank), "+=!", guarded("select(" + hit + ", 1, 0)"), ranges});
  const std::string d = c.read(data, indices(rank)), u = c.read(sum, indices(rank));
  c.emit({y.tsl, indices(rank), "=", "select(" + c.read(count, indices(rank)) + " > 0, " + u + ", " + d + ")", ranges_of(y.shape)});
}

// ScatterElements (and Scatter, its older name): update j lands on j with the axis index replaced by I[j].
void translate_scatter_elements(Context& c) {
  const Value& data = c.input(0);
  const Value& ind = c.input(1);
  const Value& upd = c.input(2);
  const size_t rank = data.shape.size();
  if (ind.shape.size() != rank || upd.shape != ind.shape) c.malformed("indices and updates must have the data's rank and one shape");
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), int64_t(rank));
  const int64_t d = data.shape[size_t(axis)];
  check_constant_indices(c, ind, d);
  c.dtype(data);
  c.dtype(ind);
  c.dtype(upd);
  Strings ji = indices(rank);
  ji[size_t(axis)] = reduction(0);
  const std::string hit = index_is(ind, c.read(ind, ji), index(int(axis)), d);
  Strings guard;
  for (size_t k = 0; k < rank; ++k)  // the other coordinates of an update are its target's
    if (int64_t(k) != axis && ind.shape[k] < data.shape[k]) guard.push_back(index(int(k)) + " < " + str(ind.shape[k]));
  emit_scatter(c, join(guard, " && "), hit, c.read(upd, ji), {{reduction(0), 0, ind.shape[size_t(axis)]}});
}

// ScatterND: update j (the indices' leading dimensions) lands on the element (or slice) I[j, :].
void translate_scatter_nd(Context& c) {
  const Value& data = c.input(0);
  const Value& ind = c.input(1);
  const Value& upd = c.input(2);
  if (ind.shape.empty()) c.malformed("indices is a scalar");
  const size_t q = ind.shape.size() - 1, k = size_t(ind.shape.back());
  if (k > data.shape.size()) c.malformed("an index tuple is longer than the data's rank");
  c.dtype(data);
  c.dtype(ind);
  c.dtype(upd);
  Strings ji, ui;
  std::vector<IndexRange> red;
  for (size_t a = 0; a < q; ++a) {
    ji.push_back(reduction(int(a)));
    red.push_back({ji.back(), 0, ind.shape[a]});
  }
  ui = ji;
  for (size_t a = k; a < data.shape.size(); ++a) ui.push_back(index(int(a)));
  Strings hits;
  for (size_t a = 0; a < k; ++a) {
    Strings ii = ji;
    ii.push_back(str(int64_t(a)));
    hits.push_back(index_is(ind, c.read(ind, ii), index(int(a)), data.shape[a]));
  }
  emit_scatter(c, "", join(hits, " && "), c.read(upd, ui), red);
}

// ---- losses -------------------------------------------------------------------------------------

// NegativeLogLikelihoodLoss on log-probabilities `lp` [N, C, d..] and targets [N, d..]:
// loss[n, d..] = -w[t] * lp[n, t, d..] with t = target[n, d..], 0 where t is ignore_index; reduced
// by `reduction` (none, sum, or mean: divided by the sum of the weights taken) into output 0.
void emit_nll(Context& c, const Value& lp, int target_input, int weight_input) {
  const Value& tgt = c.input(target_input);
  const Value y = output_value(c, 0);
  if (lp.shape.size() < 2) c.malformed("the input must be [N, C, ...]");
  const size_t rank = lp.shape.size();
  if (tgt.shape.size() != rank - 1) c.malformed("the target must be [N, ...] (the input's shape without C)");
  c.dtype(tgt);
  const int64_t classes = lp.shape[1];
  const std::string reduction_kind = c.attr_string("reduction", "mean");
  if (reduction_kind != "none" && reduction_kind != "sum" && reduction_kind != "mean")
    c.malformed("reduction '" + reduction_kind + "' (none, sum or mean)");
  const bool weighted = weight_input >= 0 && c.has_input(weight_input);
  // indices of the loss [N, d..]: index(k); of lp: (i0, class, i1, ..)
  const std::string cls = reduction(0);
  auto lp_at = [&](const Strings& loss_idx) {
    Strings li = {loss_idx[0], cls};
    li.insert(li.end(), loss_idx.begin() + 1, loss_idx.end());
    return c.read(lp, li);
  };
  auto condition = [&](const Strings& loss_idx) {
    std::string hit = c.read(tgt, loss_idx) + " == " + cls;
    if (c.has_attr("ignore_index")) {
      const int64_t ig = c.attr_int("ignore_index", 0);
      if (ig >= 0 && ig < classes) hit += " && " + cls + " != " + str(ig);  // elsewhere no class equals it
    }
    return hit;
  };
  auto weight = [&]() { return weighted ? c.read(c.input(weight_input), {cls}) : std::string(); };
  const DType t = c.dtype(lp);
  std::vector<int64_t> loss_shape = tgt.shape;
  if (reduction_kind == "none") {
    const Strings li = indices(rank - 1);
    const std::string w = weight();
    const std::string term = "-" + lp_at(li) + (w.empty() ? "" : " * " + w);
    std::vector<IndexRange> ranges = ranges_of(loss_shape);
    ranges.push_back({cls, 0, classes});
    return c.emit({y.tsl, li, "+=!", "select(" + condition(li) + ", " + term + ", 0)", ranges});
  }
  // every loss index is a reduction: r1, r2, .. (r0 is the class)
  Strings ri;
  std::vector<IndexRange> ranges;
  for (size_t k = 0; k + 1 < rank; ++k) {
    ri.push_back(reduction(int(k + 1)));
    ranges.push_back({ri.back(), 0, loss_shape[k]});
  }
  ranges.push_back({cls, 0, classes});
  const std::string w = weight();
  const std::string term = "-" + lp_at(ri) + (w.empty() ? "" : " * " + w);
  const std::string cond = condition(ri);
  if (reduction_kind == "sum") return c.emit({y.tsl, {}, "+=!", "select(" + cond + ", " + term + ", 0)", ranges});
  const Value sum = local(c, y, {}, "sum");
  c.emit({sum.tsl, {}, "+=!", "select(" + cond + ", " + term + ", 0)", ranges});
  const Value total = local(c, y, {}, "weight");
  const std::string wcond = condition(ri);
  c.emit({total.tsl, {}, "+=!", "select(" + wcond + ", " + (w.empty() ? literal(1, t) : weight()) + ", 0)", ranges});
  c.emit({y.tsl, {}, "=", c.read(sum, {}) + " / " + c.read(total, {}), {}});
}

void translate_nll(Context& c) {
  const Value& x = c.input(0);
  c.dtype(x);
  emit_nll(c, x, 1, 2);
}

// SoftmaxCrossEntropyLoss: the log-softmax over the class axis (the optional log_prob output, else a
// local), then NegativeLogLikelihoodLoss on it.
void translate_sce(Context& c) {
  const Value& x = c.input(0);
  c.dtype(x);
  const size_t rank = x.shape.size();
  if (rank < 2) c.malformed("scores must be [N, C, ...]");
  Strings outer = indices(rank), xi = indices(rank);
  outer.erase(outer.begin() + 1);
  xi[1] = reduction(0);
  std::vector<int64_t> outer_shape = x.shape;
  outer_shape.erase(outer_shape.begin() + 1);
  std::vector<IndexRange> ranges;
  for (size_t k = 0; k < rank; ++k)
    if (k != 1) ranges.push_back({index(int(k)), 0, x.shape[k]});
  ranges.push_back({reduction(0), 0, x.shape[1]});
  const Value mx = local(c, x, outer_shape, "max");
  c.emit({mx.tsl, outer, "max=!", c.read(x, xi), ranges});
  const Value sum = local(c, x, outer_shape, "expsum");
  c.emit({sum.tsl, outer, "+=!", "exp(" + c.read(x, xi) + " - " + c.read(mx, outer) + ")", ranges});
  Value lp = c.has_output(1) ? output_value(c, 1) : local(c, x, x.shape, "logp");
  const std::string rhs = c.read(x, indices(rank)) + " - " + c.read(mx, outer) + " - log(" + c.read(sum, outer) + ")";
  c.emit({lp.tsl, indices(rank), "=", rhs, ranges_of(x.shape)});
  emit_nll(c, lp, 1, 2);
}

}  // namespace

// Gather with data indices: Y[a.., q.., b..] = X[a.., I[q..], b..] as a one-hot sum over X's axis.
void translate_gather_one_hot(Context& c) {
  const Value& x = c.input(0);
  const Value& ind = c.input(1);
  const size_t rank = x.shape.size();
  const int64_t axis = axis_of(c, c.attr_int("axis", 0), int64_t(rank));
  const int64_t d = x.shape[size_t(axis)];
  const Value y = output_value(c, 0);
  c.dtype(x);
  c.dtype(ind);
  const size_t q = ind.shape.size();
  Strings xi, ii;
  for (int64_t k = 0; k < axis; ++k) xi.push_back(index(int(k)));
  xi.push_back(reduction(0));
  for (size_t k = size_t(axis) + 1; k < rank; ++k) xi.push_back(index(int(k + q - 1)));
  for (size_t k = 0; k < q; ++k) ii.push_back(index(int(size_t(axis) + k)));
  const std::string hit = index_is(ind, c.read(ind, ii), reduction(0), d);
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, d});
  c.emit({y.tsl, indices(y.shape.size()), "+=!", "select(" + hit + ", " + c.read(x, xi) + ", 0)", ranges});
}

void add_index_ops(std::map<std::string, Translator>& t) {
  t["ArgMax"] = translate_arg;
  t["ArgMin"] = translate_arg;
  t["GatherElements"] = translate_gather_elements;
  t["OneHot"] = translate_one_hot;
  t["ScatterElements"] = translate_scatter_elements;
  t["Scatter"] = translate_scatter_elements;
  t["ScatterND"] = translate_scatter_nd;
  t["NegativeLogLikelihoodLoss"] = translate_nll;
  t["SoftmaxCrossEntropyLoss"] = translate_sce;
}

}  // namespace tessel::onnx_import
