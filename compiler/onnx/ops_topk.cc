// TopK (k a constant: the input K from opset 10, the attribute before; axis, largest, sorted) as a
// composition, no sort in the language: each element's rank along the axis is a count,
//   R(i..) +=! select(X(.., r0, ..) > X(i..) || (X(.., r0, ..) == X(i..) && r0 < i_axis), 1, 0)
// (`<` for largest = 0), so equal values rank by index as ONNX orders them; the outputs then read
// the element of rank p at output position p with a one-hot sum (one term is not zero: exact),
//   Values(.., p, ..)  +=! select(R(.., r0, ..) == p, X(.., r0, ..), 0)
//   Indices(.., p, ..) +=! select(R(.., r0, ..) == p, r0, 0)
// n^2 compares for an axis of n. The output is sorted also for sorted = 0 (ONNX leaves that order
// unspecified). NaN data ranks as no value compares (ONNX puts NaN first): unspecified here.
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

void translate_topk(Context& c) {
  const Value& x = c.input(0);
  const size_t rank = x.shape.size();
  if (rank == 0) c.malformed("the input is a scalar");
  const int64_t axis = axis_of(c, c.attr_int("axis", -1), int64_t(rank));
  const std::vector<int64_t> ks = c.opset() >= 10 ? c.constant_ints(1, "TopK's K") : std::vector<int64_t>{c.attr_int("k", -1)};
  const int64_t n = x.shape[size_t(axis)];
  if (ks.size() != 1 || ks[0] < 0 || ks[0] > n)
    c.malformed("K must be one value in 0.." + std::to_string(n) + " (the axis' size)");
  if (ks[0] == 0) c.unsupported("K = 0 (empty outputs)");
  const bool largest = c.attr_int("largest", 1) != 0;
  const DType t = c.dtype(x);
  std::vector<std::string> at_r;  // X's indices with the axis replaced by r0
  for (size_t k = 0; k < rank; ++k) at_r.push_back(int64_t(k) == axis ? reduction(0) : index(int(k)));
  std::vector<IndexRange> x_ranges = ranges_of(x.shape);
  x_ranges.push_back({reduction(0), 0, n});
  Value pos = local(c, x, x.shape, "rank");
  pos.elem_type = onnx::TensorProto::INT32;
  const std::string other = c.read(x, at_r), self = c.read(x, indices(rank));
  const std::string before = "(" + other + (largest ? " > " : " < ") + self + " || (" + other + " == " + self + " && " + reduction(0) +
                             " < " + index(int(axis)) + "))";
  c.emit({pos.tsl, indices(rank), "+=!", "select(" + before + ", i32(1), i32(0))", x_ranges});
  const std::string hit = c.read(pos, at_r) + " == " + index(int(axis));
  for (int out = 0; out < 2; ++out) {
    if (!c.has_output(out)) continue;
    const Value y = output_value(c, out);
    std::vector<int64_t> want = x.shape;
    want[size_t(axis)] = ks[0];
    if (y.shape != want) c.malformed("output " + std::to_string(out) + "'s shape is not the input's with K along the axis");
    std::vector<IndexRange> ranges = ranges_of(y.shape);
    ranges.push_back({reduction(0), 0, n});
    const std::string picked = out == 0 ? c.read(x, at_r) : reduction(0);
    const std::string zero = out == 0 ? literal(0, t) : "0";
    c.emit({y.tsl, indices(rank), "+=!", "select(" + hit + ", " + picked + ", " + zero + ")", ranges});
  }
}

}  // namespace

void add_topk_ops(std::map<std::string, Translator>& t) { t["TopK"] = translate_topk; }

}  // namespace tessel::onnx_import
