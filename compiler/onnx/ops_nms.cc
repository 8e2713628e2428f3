// NonMaxSuppression with max_output_boxes_per_class, iou_threshold and score_threshold constants
// (initializers or --value inputs) and the output's row count the model's static shape (the
// number of selected boxes is data-dependent: rows past the selected ones are 0, and selections past
// the rows are dropped). ONNX Runtime's greedy order, unrolled over the N boxes of a class
// (batch b = i0, class c = i1, sorted position p = i2, q = i3):
//   corners  ymin/xmin/ymax/xmax(b, n) (center_point_box: centre -/+ half the size), area(b, n)
//   rank     R(b, c, n) +=! select(S(b, c, r0) > S(b, c, n) || (== && r0 < n), 1, 0)  (ties by index)
//   sorted   the box index, score and corners at rank p: one-hot sums over R == p
//   suppress Sup(b, c, p, q) = intersection > 0, both areas and the union > 0, inter / union > iou
//   greedy   K_p(b, c) = select(score_p > score_threshold && K_0 + .. + K_{p-1} < max &&
//                               K_0 * Sup(.., 0, p) + .. + K_{p-1} * Sup(.., p-1, p) == 0, 1, 0)
//   output   row = kept boxes of earlier (b, c) + kept before p;
//            Y(s, col) +=! select(K(r0, r1, r2) == 1 && row == s, [r0, r1, box index][col], 0)
// At most 64 boxes per class (each adds a statement).
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;
constexpr int64_t kMaxBoxes = 64;

std::string n_(int64_t k) { return std::to_string(k); }

struct Nms {
  Context& c;
  int64_t batches = 0, classes = 0, boxes = 0;

  Value emit(const std::string& name, const std::vector<int64_t>& shape, const std::string& assign, const std::string& rhs,
             const std::vector<int64_t>& reductions = {}) {
    Value v = local(c, c.input(0), shape, name);
    std::vector<IndexRange> ranges = ranges_of(shape);
    for (size_t k = 0; k < reductions.size(); ++k) ranges.push_back({reduction(int(k)), 0, reductions[k]});
    c.emit({v.tsl, indices(shape.size()), assign, rhs, ranges});
    return v;
  }
  std::string box(int64_t k, const std::string& n) { return c.read(c.input(0), {index(0), n, n_(k)}); }
  void run();
};

void Nms::run() {
  const Value &bx = c.input(0), &sc = c.input(1);
  if (bx.shape.size() != 3 || bx.shape[2] != 4 || sc.shape.size() != 3 || sc.shape[0] != bx.shape[0] || sc.shape[2] != bx.shape[1])
    c.malformed("boxes are not [batch, boxes, 4] or scores not [batch, classes, boxes]");
  if (c.dtype(bx) != DType::F32 || c.dtype(sc) != DType::F32) c.unsupported("boxes or scores that are not f32");
  batches = bx.shape[0], classes = sc.shape[1], boxes = bx.shape[1];
  if (boxes > kMaxBoxes) c.unsupported(n_(boxes) + " boxes per class (the greedy selection is unrolled: at most " + n_(kMaxBoxes) + ")");
  const int64_t max_out = c.has_input(2) ? c.constant_ints(2, "max_output_boxes_per_class").at(0) : 0;
  const double iou = c.has_input(3) ? c.constant(3, "iou_threshold").at(0) : 0.0;
  if (max_out <= 0) c.unsupported("max_output_boxes_per_class 0: no box is selected (an empty output)");
  const Value y = output_value(c, 0);
  if (y.shape.size() != 2 || y.shape[1] != 3) c.malformed("selected_indices is not [selected, 3]");
  const bool center = c.attr_int("center_point_box", 0) != 0;
  const std::vector<int64_t> bn = {batches, boxes};
  const std::string n = index(1);
  std::vector<Value> g;  // ymin, xmin, ymax, xmax
  for (int k = 0; k < 4; ++k) {
    const int lo = k % 2;  // 0: y, 1: x
    const std::string rhs = center ? box(1 - lo, n) + (k < 2 ? " - " : " + ") + box(3 - lo, n) + " / f32(2.0)"
                                   : std::string(k < 2 ? "min(" : "max(") + box(lo, n) + ", " + box(lo + 2, n) + ")";
    g.push_back(emit(Strings{"ymin", "xmin", "ymax", "xmax"}[size_t(k)], bn, "=", rhs));
  }
  g.push_back(emit("area", bn, "=", "(" + c.read(g[2], indices(2)) + " - " + c.read(g[0], indices(2)) + ") * (" + c.read(g[3], indices(2)) + " - " +
                                        c.read(g[1], indices(2)) + ")"));
  const std::vector<int64_t> bcn = {batches, classes, boxes};
  const Strings at_r = {index(0), index(1), reduction(0)};
  const std::string other = c.read(sc, at_r), self = c.read(sc, indices(3));
  const Value rank = emit("rank", bcn, "+=!", "select(" + other + " > " + self + " || (" + other + " == " + self + " && " + reduction(0) + " < " +
                                           index(2) + "), i32(1), i32(0))", {boxes});
  auto sorted = [&](const std::string& name, const std::string& value) {
    return emit(name, bcn, "+=!", "select(" + c.read(rank, at_r) + " == " + index(2) + ", " + value + ", " + (value == reduction(0) ? "0" : "f32(0.0)") + ")",
                {boxes});
  };
  const Value orig = sorted("order", reduction(0));
  const Value score = sorted("score", c.read(sc, at_r));
  std::vector<Value> sg;
  for (size_t k = 0; k < g.size(); ++k) sg.push_back(sorted("sorted" + n_(int64_t(k)), c.read(g[k], {index(0), reduction(0)})));
  const std::vector<int64_t> bcnn = {batches, classes, boxes, boxes};
  const Strings p = {index(0), index(1), index(2)}, q = {index(0), index(1), index(3)};
  auto side = [&](int lo, int hi) {
    return "max(f32(0.0), min(" + c.read(sg[size_t(hi)], p) + ", " + c.read(sg[size_t(hi)], q) + ") - max(" + c.read(sg[size_t(lo)], p) + ", " +
           c.read(sg[size_t(lo)], q) + "))";
  };
  const Value inter = emit("inter", bcnn, "=", side(0, 2) + " * " + side(1, 3));
  const std::string in = c.read(inter, indices(4)), ap = c.read(sg[4], p), aq = c.read(sg[4], q);
  const std::string uni = "(" + ap + " + " + aq + " - " + in + ")";
  const Value sup = emit("suppress", bcnn, "=", "select(" + in + " > f32(0.0) && " + ap + " > f32(0.0) && " + aq + " > f32(0.0) && " + uni +
                                                    " > f32(0.0) && " + in + " / " + uni + " > " + literal(iou, DType::F32) + ", i32(1), i32(0))");
  std::vector<Value> kept;
  for (int64_t k = 0; k < boxes; ++k) {
    Strings count, hits;
    for (int64_t j = 0; j < k; ++j) {
      count.push_back(c.read(kept[size_t(j)], indices(2)));
      hits.push_back(c.read(kept[size_t(j)], indices(2)) + " * " + c.read(sup, {index(0), index(1), n_(j), n_(k)}));
    }
    std::string cond = count.empty() ? "" : join(count, " + ") + " < " + n_(max_out) + " && " + join(hits, " + ") + " == 0";
    if (c.has_input(4)) {
      const std::string above = c.read(score, {index(0), index(1), n_(k)}) + " > " + literal(c.constant(4, "score_threshold").at(0), DType::F32);
      cond = cond.empty() ? above : above + " && " + cond;
    }
    kept.push_back(emit("kept" + n_(k), {batches, classes}, "=", cond.empty() ? "i32(1)" : "select(" + cond + ", i32(1), i32(0))"));
  }
  std::string all = c.read(kept.back(), indices(2));
  for (int64_t k = boxes - 1; k-- > 0;) all = "select(" + index(2) + " == " + n_(k) + ", " + c.read(kept[size_t(k)], indices(2)) + ", " + all + ")";
  const Value k_all = emit("keep", bcn, "=", all);
  const Value before = emit("before", bcn, "+=!", "select(" + reduction(0) + " < " + index(2) + ", " + c.read(k_all, at_r) + ", 0)", {boxes});
  const Value total = emit("total", {batches, classes}, "+=!", c.read(k_all, at_r), {boxes});
  const Value offset = emit("offset", {batches, classes}, "+=!",
                            "select(" + reduction(0) + " * " + n_(classes) + " + " + reduction(1) + " < " + index(0) + " * " + n_(classes) + " + " +
                                index(1) + ", " + c.read(total, {reduction(0), reduction(1)}) + ", 0)",
                            {batches, classes});
  const Strings r3 = {reduction(0), reduction(1), reduction(2)};
  const std::string row = c.read(offset, {reduction(0), reduction(1)}) + " + " + c.read(before, r3);
  const std::string value = "select(" + index(1) + " == 0, " + reduction(0) + ", select(" + index(1) + " == 1, " + reduction(1) + ", " +
                            c.read(orig, r3) + "))";
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  for (int64_t k : {batches, classes, boxes}) ranges.push_back({reduction(int(ranges.size()) - 2), 0, k});
  c.emit({y.tsl, indices(2), "+=!", "select(" + c.read(k_all, r3) + " == 1 && " + row + " == " + index(0) + ", " + value + ", 0)", ranges});
}

}  // namespace

void add_nms_ops(std::map<std::string, Translator>& t) {
  t["NonMaxSuppression"] = [](Context& c) {
    Nms n{c};
    n.run();
  };
}

}  // namespace tessel::onnx_import
