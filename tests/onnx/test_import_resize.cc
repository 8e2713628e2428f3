// tessel import of Resize / Upsample (compiler/onnx/ops_resize.cc): nearest, linear and cubic with
// static scales or sizes. The expected values come from a direct implementation of ONNX's reference
// (onnx/backend/test/case/node/resize.py): per dimension a matrix of tap coefficients over the
// edge-clamped input, applied to each dimension in turn. Refusals name the node and the reason.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

// ONNX's reference along one dimension: row i of the [out][in] matrix holds output i's coefficients.
std::vector<std::vector<double>> reference_matrix(int64_t in, int64_t out, double scale, const std::string& mode, const std::string& coord,
                                                  double cubic_a = -0.75, bool exclude_outside = false) {
  std::vector<std::vector<double>> m(size_t(out), std::vector<double>(size_t(in), 0.0));
  for (int64_t i = 0; i < out; ++i) {
    const double ow = scale * double(in);
    double x = coord == "align_corners" ? (ow == 1 ? 0 : double(i) * double(in - 1) / (ow - 1))
             : coord == "asymmetric"    ? double(i) / scale
                                        : (double(i) + 0.5) / scale - 0.5;
    const double f = std::floor(x);
    const double r = x == f ? 1.0 : x - f;  // ONNX keeps the ratio in (0, 1]
    const int64_t left = x == f ? int64_t(f) - 1 : int64_t(f);  // the tap just left of x
    std::vector<double> c;
    int64_t first;
    if (mode == "nearest") {
      c = {r <= 0.5 ? 1.0 : 0.0, r <= 0.5 ? 0.0 : 1.0};  // round_prefer_floor
      if (x == f) c = {0, 1};
      first = left;
    } else if (mode == "linear") {
      c = {1 - r, r};
      first = left;
    } else {
      const double A = cubic_a;
      c = {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
           ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1, ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A};
      first = left - 1;
    }
    if (exclude_outside) {
      double s = 0;
      for (size_t t = 0; t < c.size(); ++t) {
        const int64_t src = first + int64_t(t);
        if (src < 0 || src >= in) c[t] = 0;
        s += c[t];
      }
      for (double& v : c) v /= s;
    }
    for (size_t t = 0; t < c.size(); ++t)
      m[size_t(i)][size_t(std::clamp<int64_t>(first + int64_t(t), 0, in - 1))] += c[t];
  }
  return m;
}

// y = Mh x Mw^T for one [H, W] plane.
std::vector<float> apply(const std::vector<float>& x, int64_t h, int64_t w, const std::vector<std::vector<double>>& mh,
                         const std::vector<std::vector<double>>& mw) {
  std::vector<float> y;
  for (size_t p = 0; p < mh.size(); ++p)
    for (size_t q = 0; q < mw.size(); ++q) {
      double s = 0;
      for (int64_t a = 0; a < h; ++a)
        for (int64_t b = 0; b < w; ++b) s += mh[p][size_t(a)] * x[size_t(a * w + b)] * mw[q][size_t(b)];
      y.push_back(float(s));
    }
  return y;
}

void attr_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// Resize of a [1, 1, H, W] input by scales (1, 1, sh, sw); extra attributes set by `attrs`.
std::vector<float> resize(int64_t h, int64_t w, double sh, double sw, int64_t oh, int64_t ow, const std::vector<float>& x,
                          const std::function<void(onnx::NodeProto*)>& attrs, ImportResult* r = nullptr) {
  Graph g(13);
  g.input("x", {1, 1, h, w});
  g.initializer("scales", {4}, {1, 1, sh, sw});
  g.output("y", {1, 1, oh, ow});
  attrs(g.node("Resize", {"x", "", "scales"}, {"y"}, "rs"));
  const auto out = run(g, {{"x", f32({1, 1, h, w}, x)}}, r);
  const NpyArray& y = out.at("y");
  std::vector<float> v;
  for (int64_t i = 0; i < y.element_count(); ++i) v.push_back(at(y, i));
  return v;
}

TEST_CASE("onnx Resize linear, half_pixel: 2x upsampling and 0.6 downsampling match ONNX's reference") {
  const auto x = ramp(16, 0.5f, -2.0f);
  ImportResult r;
  const auto up = resize(4, 4, 2.0, 2.0, 8, 8, x, [](onnx::NodeProto* n) { attr_string(n, "mode", "linear"); }, &r);
  const auto mu = reference_matrix(4, 8, 2.0, "linear", "half_pixel");
  check_close(f32({64}, up), apply(x, 4, 4, mu, mu));
  CHECK(r.tsl.find("+=!") != std::string::npos);  // one sum over the taps
  const auto down = resize(4, 4, 0.6, 0.6, 2, 2, x, [](onnx::NodeProto* n) { attr_string(n, "mode", "linear"); });
  const auto md = reference_matrix(4, 2, double(0.6f), "linear", "half_pixel");
  check_close(f32({4}, down), apply(x, 4, 4, md, md));
}

TEST_CASE("onnx Resize linear, align_corners and asymmetric, at different scales per dimension") {
  const auto x = ramp(12, 0.25f, 1.0f);
  for (const char* coord : {"align_corners", "asymmetric"}) {
    INFO(coord);
    const auto y = resize(3, 4, 2.0, 1.5, 6, 6, x, [&](onnx::NodeProto* n) {
      attr_string(n, "mode", "linear");
      attr_string(n, "coordinate_transformation_mode", coord);
    });
    check_close(f32({36}, y), apply(x, 3, 4, reference_matrix(3, 6, 2.0, "linear", coord), reference_matrix(4, 6, 1.5, "linear", coord)));
  }
}

TEST_CASE("onnx Resize cubic: A = -0.5 with exclude_outside, and the default A downsampling by 0.8") {
  const auto x = ramp(16, 0.5f, -2.0f);
  const auto up = resize(4, 4, 2.0, 2.0, 8, 8, x, [](onnx::NodeProto* n) {
    attr_string(n, "mode", "cubic");
    attr_float(n, "cubic_coeff_a", -0.5f);
    attr_int(n, "exclude_outside", 1);
  });
  const auto mu = reference_matrix(4, 8, 2.0, "cubic", "half_pixel", -0.5, true);
  check_close(f32({64}, up), apply(x, 4, 4, mu, mu));
  const auto down = resize(4, 4, 0.8, 0.8, 3, 3, x, [](onnx::NodeProto* n) { attr_string(n, "mode", "cubic"); });
  const auto md = reference_matrix(4, 3, double(0.8f), "cubic", "half_pixel");
  check_close(f32({9}, down), apply(x, 4, 4, md, md));
}

TEST_CASE("onnx Resize nearest at a non-integer scale (3/2, half_pixel, round_prefer_floor) is a one-hot matrix pass per dimension") {
  const auto x = ramp(16);
  ImportResult r;
  const auto y = resize(4, 4, 1.5, 1.5, 6, 6, x, [](onnx::NodeProto*) {}, &r);
  const auto m = reference_matrix(4, 6, 1.5, "nearest", "half_pixel");
  check_close(f32({36}, y), apply(x, 4, 4, m, m));
  // affine reads only (no floor division of an index expression, which the NPU does not map):
  // each resized dimension sums over its interpolation matrix, a weights input
  CHECK(r.tsl.find(" / ") == std::string::npos);
  CHECK(r.weights.size() == 2);
}

TEST_CASE("onnx Resize nearest by an integer factor (asymmetric, floor) stays one copy at an index divided by the factor") {
  const auto x = ramp(16);
  ImportResult r;
  const auto y = resize(4, 4, 2.0, 3.0, 8, 12, x, [](onnx::NodeProto* n) {
    attr_string(n, "coordinate_transformation_mode", "asymmetric");
    attr_string(n, "nearest_mode", "floor");
  }, &r);
  std::vector<float> want;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 12; ++j) want.push_back(x[size_t((i / 2) * 4 + j / 3)]);
  check_close(f32({96}, y), want);
  CHECK(r.tsl.find("+=!") == std::string::npos);  // a copy, no arithmetic on the data
  CHECK(r.weights.empty());
}

TEST_CASE("onnx Resize refusals name the node and the reason") {
  const auto x = ramp(4);
  auto refusal = [&](double s, const std::function<void(onnx::NodeProto*)>& attrs) -> std::string {
    try {
      resize(2, 2, 1.0, s, 2, int64_t(2 * s), x, attrs);
    } catch (const UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(refusal(2.0, [](onnx::NodeProto* n) { attr_string(n, "coordinate_transformation_mode", "tf_crop_and_resize"); })
            .find("test.onnx: node 'rs' (Resize): unsupported: Resize with coordinate_transformation_mode 'tf_crop_and_resize'") != std::string::npos);
  CHECK(refusal(2.0, [](onnx::NodeProto* n) { attr_int(n, "antialias", 1); }).find("node 'rs' (Resize): unsupported: Resize with antialias") !=
        std::string::npos);
  CHECK(refusal(2.0, [](onnx::NodeProto* n) { attr_string(n, "nearest_mode", "middle"); })
            .find("node 'rs' (Resize): unsupported: nearest_mode 'middle'") != std::string::npos);
}

TEST_CASE("onnx node tests: Resize linear, cubic and nearest (sizes, ceil half_pixel) from libonnx-testdata") {
  for (const char* t : {"test_resize_upsample_scales_linear", "test_resize_downsample_scales_linear", "test_resize_downsample_sizes_cubic",
                        "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside", "test_resize_upsample_sizes_nearest",
                        "test_resize_upsample_sizes_nearest_ceil_half_pixel", "test_resize_downsample_sizes_linear_pytorch_half_pixel"})
    check_node_test(t, 1e-5);
}

}  // namespace
}  // namespace tessel::onnx_import
