// tessel import of NonMaxSuppression (compiler/onnx/ops_nms.cc: ranks, a suppression matrix and the
// greedy selection unrolled over the boxes): two batches, two classes, eight boxes with ties,
// overlaps, a degenerate box and a score threshold, in both box formats, against ONNX Runtime's
// greedy loop written here, element by element; the same program on davinci-910 and davinci-310
// (simulator vs interpreter); then ONNX's nonmaxsuppression node tests from libonnx-testdata.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "compiler/onnx/importer.h"
#include "tests/emit_npu/npu_case.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

constexpr int64_t kB = 2, kC = 2, kN = 8, kMax = 3;
constexpr double kIou = 0.3, kScore = 0.2;

std::vector<float> boxes() {  // corners [y1, x1, y2, x2], some flipped; box 5 has no area
  std::vector<float> v;
  for (int64_t e = 0; e < kB * kN; ++e) {
    const float y = 0.25f * float((e * 3) % 5), x = 0.25f * float((e * 7) % 4), s = 0.5f + 0.25f * float(e % 3);
    if (e % kN == 5) v.insert(v.end(), {y, x, y, x + s});
    else if (e % 2) v.insert(v.end(), {y + s, x + s, y, x});
    else v.insert(v.end(), {y, x, y + s, x + s});
  }
  return v;
}

std::vector<float> scores() {
  std::vector<float> v;
  for (int64_t e = 0; e < kB * kC * kN; ++e) v.push_back(0.125f * float((e * 5) % 8));  // ties and values <= 0.2
  return v;
}

// ONNX Runtime's NonMaxSuppression: per (batch, class) boxes by score (ties by index) above the
// threshold, each kept unless a kept box overlaps it by IoU > kIou, at most kMax.
std::vector<std::array<int64_t, 3>> reference(const std::vector<float>& bx, const std::vector<float>& sc, bool center) {
  auto corners = [&](int64_t b, int64_t n) {
    const float* p = &bx[size_t((b * kN + n) * 4)];
    if (center) return std::array<float, 4>{p[1] - p[3] / 2, p[0] - p[2] / 2, p[1] + p[3] / 2, p[0] + p[2] / 2};
    return std::array<float, 4>{std::min(p[0], p[2]), std::min(p[1], p[3]), std::max(p[0], p[2]), std::max(p[1], p[3])};
  };
  auto suppress = [&](int64_t b, int64_t i, int64_t j) {
    const auto u = corners(b, i), v = corners(b, j);
    const float inter = std::max(0.0f, std::min(u[2], v[2]) - std::max(u[0], v[0])) * std::max(0.0f, std::min(u[3], v[3]) - std::max(u[1], v[1]));
    const float au = (u[2] - u[0]) * (u[3] - u[1]), av = (v[2] - v[0]) * (v[3] - v[1]), uni = au + av - inter;
    return inter > 0 && au > 0 && av > 0 && uni > 0 && inter / uni > float(kIou);
  };
  std::vector<std::array<int64_t, 3>> out;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t c = 0; c < kC; ++c) {
      std::vector<int64_t> order(kN), kept;
      std::iota(order.begin(), order.end(), 0);
      const float* s = &sc[size_t((b * kC + c) * kN)];
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      for (int64_t i : order) {
        if (s[i] <= float(kScore) || int64_t(kept.size()) >= kMax) continue;
        bool ok = true;
        for (int64_t k : kept) ok &= !suppress(b, k, i);
        if (ok) kept.push_back(i);
      }
      for (int64_t k : kept) out.push_back({b, c, k});
    }
  return out;
}

Graph nms_graph(int64_t rows, bool center) {
  Graph g(11);
  g.input("boxes", {kB, kN, 4});
  g.input("scores", {kB, kC, kN});
  g.initializer("max", {1}, {double(kMax)}, TP::INT64);
  g.initializer("iou", {1}, {kIou});
  g.initializer("score", {1}, {kScore});
  g.output("selected", {rows, 3}, TP::INT64);
  attr_int(g.node("NonMaxSuppression", {"boxes", "scores", "max", "iou", "score"}, {"selected"}), "center_point_box", center ? 1 : 0);
  return g;
}

TEST_CASE("onnx NonMaxSuppression: two batches and classes, corner and centre boxes, equal ONNX Runtime's greedy selection") {
  const std::vector<float> bx = boxes(), sc = scores();
  for (bool center : {false, true}) {
    CAPTURE(center);
    const auto want = reference(bx, sc, center);
    REQUIRE(want.size() > 4);
    const NpyArray y = run(nms_graph(int64_t(want.size()), center), {{"boxes", f32({kB, kN, 4}, bx)}, {"scores", f32({kB, kC, kN}, sc)}}).at("selected");
    REQUIRE(y.element_count() == int64_t(want.size() * 3));
    for (size_t r = 0; r < want.size(); ++r)
      for (size_t k = 0; k < 3; ++k) {
        INFO("row " << r << " column " << k);
        CHECK(int_at(y, int64_t(r * 3 + k)) == want[r][k]);
      }
  }
}

TEST_CASE("onnx NonMaxSuppression: the imported program runs on davinci-910 and davinci-310 as the interpreter computes it") {
  for (const std::string& target : {npu_test::kTarget, npu_test::kTarget310}) {
    CAPTURE(target);
    const ImportResult r = import_model(nms_graph(6, false).m, "n.onnx");
    auto c = npu_test::source_case(r.tsl, target);
    const ir::Function& f = c->module.functions.at(0);
    c->inputs = r.weights;
    c->inputs["boxes"] = f32({kB, kN, 4}, boxes());
    c->inputs["scores"] = f32({kB, kC, kN}, scores());
    c->expected = interp::evaluate(f, {}, c->inputs);
    npu_test::verified_cycles(*c, true);
  }
}

TEST_CASE("onnx node tests: the nonmaxsuppression tests from libonnx-testdata") {
  for (const char* t : {"test_nonmaxsuppression_center_point_box_format", "test_nonmaxsuppression_flipped_coordinates",
                        "test_nonmaxsuppression_identical_boxes", "test_nonmaxsuppression_limit_output_size", "test_nonmaxsuppression_single_box",
                        "test_nonmaxsuppression_suppress_by_IOU", "test_nonmaxsuppression_suppress_by_IOU_and_scores",
                        "test_nonmaxsuppression_two_batches", "test_nonmaxsuppression_two_classes"})
    check_node_test(t, 0);
}

}  // namespace
}  // namespace tessel::onnx_import
