// Resize / Upsample with static scales or sizes: nearest, linear and cubic, separably per dimension.
//
// Along a resized dimension (in -> out elements) ONNX maps output index i to the source coordinate
// x(i), an affine function of i whose coefficients come from the scale and the
// coordinate_transformation_mode (half_pixel, pytorch_half_pixel, align_corners, asymmetric,
// tf_half_pixel_for_nn). With the scale a rational p/q (sizes: out/in exactly; a float scale: its
// nearest fraction with a small denominator), x(i) = (a i + b) / den exactly, so
//   - nearest reads the input at floor((A i + B) / D) (each nearest_mode is such a floor): where
//     every resized dimension's floor is an index divided by a constant (an integer upsampling),
//     one statement reads the edge-padded input there, no arithmetic on data;
//   - otherwise (other nearest scales, linear's 2 taps, cubic's 4) each resized dimension is one
//     pass `next(.., i, ..) +=! M(i, r0) * cur(.., r0, ..)` over an interpolation matrix M[out, in]
//     computed here: tap t of output i reads floor(x(i)) - before + t clamped to the border (ONNX's
//     edge padding), weighed by the coefficient of the fraction ((a i + b) mod den) / den in f32
//     (exclude_outside: taps outside zeroed, the rest renormalised). The passes read each other
//     (separable, as the reference computes) at affine indices only: no floor division of an
//     index expression, which the NPU's vector lowering does not map.
// Each nearest index is checked against ONNX's reference arithmetic at import time for every
// output index; a scale that is no small fraction is refused.
#include <cmath>
#include <numeric>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

std::string str(int64_t v) { return std::to_string(v); }

int64_t floor_div(int64_t a, int64_t d) { return a / d - ((a % d != 0) && ((a < 0) != (d < 0))); }

// p/q (q <= 4096) within 1e-6 relative of s, by continued fractions; false when there is none.
bool small_fraction(double s, int64_t& p, int64_t& q) {
  int64_t p0 = 0, q0 = 1, p1 = 1, q1 = 0;
  double r = s;
  for (int k = 0; k < 40; ++k) {
    const double a = std::floor(r);
    if (a > 1e9) break;
    const int64_t ai = int64_t(a);
    const int64_t p2 = ai * p1 + p0, q2 = ai * q1 + q0;
    if (q2 > 4096) break;
    p0 = p1, q0 = q1, p1 = p2, q1 = q2;
    if (std::fabs(double(p1) / double(q1) - s) <= 1e-6 * std::fabs(s)) {
      p = p1, q = q1;
      return p > 0;
    }
    if (r - a < 1e-12) break;
    r = 1.0 / (r - a);
  }
  return false;
}

// floor((A i + B) / D) with D > 0, reduced by gcd(A, D).
struct FloorForm {
  int64_t A = 1, B = 0, D = 1;
  int64_t at(int64_t i) const { return floor_div(A * i + B, D); }
  FloorForm reduced() const {
    const int64_t g = std::gcd(A, D);
    if (g <= 1) return *this;
    return {A / g, floor_div(B, g), D / g};
  }
  bool identity() const { return A == 1 && D == 1 && B == 0; }
  // The index expression in i (floor semantics, as in every access), plus `shift`.
  std::string access(const std::string& i, int64_t shift) const {
    const FloorForm f = reduced();
    if (f.A == 0) return str(f.at(0) + shift);
    std::string num = f.A == 1 ? i : i + " * " + str(f.A);
    if (f.D == 1) {
      const int64_t k = f.B + shift;
      return k == 0 ? num : k > 0 ? num + " + " + str(k) : num + " - " + str(-k);
    }
    if (f.B != 0) num = "(" + num + (f.B > 0 ? " + " : " - ") + str(std::llabs(f.B)) + ")";
    std::string e = num + " / " + str(f.D);
    return shift == 0 ? e : shift > 0 ? e + " + " + str(shift) : e + " - " + str(-shift);
  }
};

struct Dim {
  int64_t in = 1, out = 1;
  double scale = 1;          // as ONNX's reference uses it
  int64_t p = 1, q = 1;      // scale = p / q
  FloorForm x;               // x(i) = (x.A i + x.B) / x.D, unreduced
  bool resized = false;
};

// The reference's source coordinate (onnx/backend/test/case/node/resize.py, ONNX 1.12).
double reference_x(const std::string& mode, const Dim& d, int64_t i) {
  const double ow = d.scale * double(d.in);
  if (mode == "align_corners") return ow == 1 ? 0.0 : double(i) * double(d.in - 1) / (ow - 1);
  if (mode == "asymmetric") return double(i) / d.scale;
  if (mode == "pytorch_half_pixel") return ow == 1 ? -0.5 : (double(i) + 0.5) / d.scale - 0.5;
  if (mode == "tf_half_pixel_for_nn") return (double(i) + 0.5) / d.scale;
  return (double(i) + 0.5) / d.scale - 0.5;  // half_pixel
}

// x(i) as an exact fraction for the rational scale p/q.
FloorForm rational_x(Context& c, const std::string& mode, const Dim& d) {
  const int64_t p = d.p, q = d.q;
  const bool unit_width = p * d.in == q;  // output_width == 1
  if (mode == "align_corners") {
    if (unit_width) return {0, 0, 1};
    if (p * d.in - q < 0) c.malformed("align_corners with an output narrower than one element");
    return {(d.in - 1) * q, 0, p * d.in - q};
  }
  if (mode == "asymmetric") return {q, 0, p};
  if (mode == "pytorch_half_pixel" && unit_width) return {0, -1, 2};
  if (mode == "tf_half_pixel_for_nn") return {2 * q, q, 2 * p};
  if (mode == "half_pixel" || mode == "pytorch_half_pixel") return {2 * q, q - p, 2 * p};
  c.unsupported("Resize with coordinate_transformation_mode '" + mode + "'");
  return {};
}

// The nearest element for `nearest_mode`, as a floor of x shifted.
FloorForm nearest_form(Context& c, const std::string& nearest, const FloorForm& x) {
  if (nearest == "floor") return x;
  if (nearest == "ceil") return {x.A, x.B + x.D - 1, x.D};
  if (nearest == "round_prefer_floor") return {2 * x.A, 2 * x.B + x.D - 1, 2 * x.D};
  if (nearest == "round_prefer_ceil") return {2 * x.A, 2 * x.B + x.D, 2 * x.D};
  c.unsupported("nearest_mode '" + nearest + "'");
  return {};
}

// The reference's nearest index: an integer x is itself; else floor or floor + 1 by the mode.
int64_t reference_nearest(const std::string& nearest, double x) {
  const double f = std::floor(x);
  if (x == f) return int64_t(f);
  const double r = x - f;
  bool right = false;
  if (nearest == "round_prefer_floor") right = r > 0.5;
  else if (nearest == "round_prefer_ceil") right = r >= 0.5;
  else if (nearest == "ceil") right = true;
  return int64_t(f) + right;
}

// Cubic convolution coefficient (ONNX's cubic_coeffs) of tap t for the fraction r, in f32.
float cubic_coefficient(int t, float r, float a) {
  auto far = [&](float d) { return ((a * d - 5.0f * a) * d + 8.0f * a) * d - 4.0f * a; };  // 1 < |d| < 2
  auto near = [&](float d) { return ((a + 2.0f) * d - (a + 3.0f)) * d * d + 1.0f; };       // |d| < 1
  switch (t) {
    case 0: return far(r + 1.0f);
    case 1: return near(r);
    case 2: return near(1.0f - r);
    default: return far(2.0f - r);
  }
}

// The scales (or sizes) of every dimension, as ONNX's reference derives them.
std::vector<Dim> dimensions(Context& c, const Value& x, const Value& y) {
  const std::string op = c.node().op_type();
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (op == "Upsample") {
    scales = c.opset() < 9 ? std::vector<double>() : c.constant(1, "Upsample's scales");
    if (c.opset() < 9)
      if (const auto* a = c.attr("scales")) scales.assign(a->floats().begin(), a->floats().end());
  } else if (c.opset() < 11) {
    scales = c.constant(1, "Resize's scales");
  } else if (c.has_input(3) && !c.constant(3, "Resize's sizes").empty()) {
    sizes = c.constant_ints(3, "Resize's sizes");
  } else if (c.has_input(2)) {
    scales = c.constant(2, "Resize's scales");
  }
  const size_t rank = x.shape.size();
  if (scales.empty() && sizes.empty()) c.malformed("neither scales nor sizes are given");
  if ((!scales.empty() && scales.size() != rank) || (!sizes.empty() && sizes.size() != rank))
    c.malformed("scales or sizes do not have one entry per dimension");
  std::vector<Dim> dims(rank);
  for (size_t k = 0; k < rank; ++k) {
    Dim& d = dims[k];
    d.in = x.shape[k];
    d.out = y.shape[k];
    if (!sizes.empty()) {
      if (sizes[k] != d.out) c.malformed("sizes disagree with the output's shape");
      d.scale = double(d.out) / double(d.in);
      const int64_t g = std::gcd(d.out, d.in);
      d.p = d.out / g, d.q = d.in / g;
    } else {
      d.scale = double(float(scales[k]));
      if (!(d.scale > 0)) c.malformed("scale " + std::to_string(scales[k]) + " is not positive");
      if (!small_fraction(d.scale, d.p, d.q)) c.unsupported("scale " + std::to_string(d.scale) + " is no fraction with a denominator up to 4096");
    }
    d.resized = d.p != d.q || d.in != d.out;
  }
  return dims;
}

// Edge-pads `x` by lo[k] / hi[k] elements per dimension (one statement per padded dimension).
Value edge_pad(Context& c, const Value& x, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi) {
  Value cur = x;
  const size_t rank = x.shape.size();
  for (size_t k = 0; k < rank; ++k) {
    if (lo[k] == 0 && hi[k] == 0) continue;
    const int64_t d = x.shape[k];
    const std::string i = index(int(k));
    auto at = [&](const std::string& e) {
      Strings idx = indices(rank);
      idx[k] = e;
      return c.read(cur, idx);
    };
    std::string rhs = at(lo[k] ? i + " - " + str(lo[k]) : i);
    if (hi[k] > 0) rhs = "select(" + i + " >= " + str(lo[k] + d) + ", " + at(str(d - 1)) + ", " + rhs + ")";
    if (lo[k] > 0) rhs = "select(" + i + " < " + str(lo[k]) + ", " + at("0") + ", " + rhs + ")";
    std::vector<int64_t> shape = cur.shape;
    shape[k] = d + lo[k] + hi[k];
    Value next = local(c, cur, shape, "edge" + str(int64_t(k)));
    c.emit({next.tsl, indices(rank), "=", rhs, ranges_of(shape)});
    cur = next;
  }
  return cur;
}

// The interpolation matrix M[out, in] of dimension d (row-major): output i = sum over j of
// M(i, j) x(j). Nearest: one 1 per row; linear / cubic: tap t at first(i) + t clamped to the border,
// weighed by its coefficient of the fraction of x(i).
std::vector<double> interpolation_matrix(const Dim& d, const FloorForm& first, const std::string& mode, int taps, bool exclude, float a) {
  std::vector<double> m(size_t(d.out * d.in), 0.0);
  auto at = [&](int64_t i, int64_t j) -> double& { return m[size_t(i * d.in + std::min(std::max<int64_t>(j, 0), d.in - 1))]; };
  const FloorForm& fx = d.x;
  const int64_t shift = fx.B < 0 ? (-fx.B + fx.D - 1) / fx.D * fx.D : 0;  // a non-negative numerator
  for (int64_t i = 0; i < d.out; ++i) {
    if (mode == "nearest") {
      at(i, first.at(i)) = 1.0;
      continue;
    }
    const float f = float((fx.A * i + fx.B + shift) % fx.D) / float(fx.D);
    std::vector<float> w(static_cast<size_t>(taps));
    float total = 0;
    for (int t = 0; t < taps; ++t) {
      w[size_t(t)] = mode == "linear" ? (t == 0 ? 1.0f - f : f) : cubic_coefficient(t, f, a);
      const int64_t src = first.at(i) + t;
      if (exclude && (src < 0 || src >= d.in)) w[size_t(t)] = 0;
      total += w[size_t(t)];
    }
    for (int t = 0; t < taps; ++t) at(i, first.at(i) + t) += double(exclude ? w[size_t(t)] / total : w[size_t(t)]);
  }
  return m;
}

// Nearest along every resized dimension reads the input at an index divided by a constant.
bool divided_index_only(const std::vector<Dim>& dims, const std::vector<FloorForm>& first) {
  for (size_t k = 0; k < dims.size(); ++k) {
    if (!dims[k].resized) continue;
    const FloorForm f = first[k].reduced();
    if (f.A != 1 || f.B != 0) return false;
  }
  return true;
}

// One `+=!` pass per resized dimension over its interpolation matrix, each reading the previous
// pass; a last cast back for data other than f32.
void emit_passes(Context& c, const Value& x, const Value& y, const std::vector<Dim>& dims, const std::vector<FloorForm>& first,
                 const std::string& mode, int taps, bool exclude) {
  const size_t rank = x.shape.size();
  const DType t = c.dtype(x);
  const float a = float(c.attr_float("cubic_coeff_a", -0.75));
  std::vector<size_t> passes;
  for (size_t k = 0; k < rank; ++k)
    if (dims[k].resized || dims[k].in != dims[k].out) passes.push_back(k);
  if (passes.empty()) return c.emit({y.tsl, indices(rank), "=", c.read(x, indices(rank)), ranges_of(y.shape)});
  Value cur = x;
  for (size_t n = 0; n < passes.size(); ++n) {
    const size_t k = passes[n];
    const Dim& d = dims[k];
    // a dimension of 1 broadcast without a coordinate mapping: every output reads element 0
    const FloorForm one_source = FloorForm{0, 0, 1};
    const Value m = c.table("resize_matrix" + str(int64_t(k)),
                            interpolation_matrix(d, d.resized ? first[k] : one_source, d.resized ? mode : "nearest", taps, exclude, a),
                            {d.out, d.in}, onnx::TensorProto::FLOAT);
    Strings xi = indices(rank);
    xi[k] = reduction(0);
    std::vector<int64_t> shape = cur.shape;
    shape[k] = d.out;
    const bool last = n + 1 == passes.size();
    Value next = last && t == DType::F32 ? y : local(c, y, shape, last ? "acc" : "pass" + str(int64_t(k)));
    next.elem_type = onnx::TensorProto::FLOAT;
    const std::string read = c.read(cur, xi);
    std::vector<IndexRange> ranges = ranges_of(shape);
    ranges.push_back({reduction(0), 0, d.in});
    const std::string product = c.read(m, {index(int(k)), reduction(0)}) + " * " + (c.dtype(cur) == DType::F32 ? read : "f32(" + read + ")");
    c.emit({next.tsl, indices(rank), "+=!", product, ranges});
    cur = next;
  }
  if (t != DType::F32)
    c.emit({y.tsl, indices(rank), "=", std::string(dtype_name(t)) + "(" + c.read(cur, indices(rank)) + ")", ranges_of(y.shape)});
}

void translate_resize(Context& c) {
  const Value& x = c.input(0);
  const Value y = output_value(c, 0);
  const size_t rank = x.shape.size();
  if (y.shape.size() != rank) c.malformed("the rank changes");
  const bool old = c.node().op_type() == "Upsample" || c.opset() < 11;
  std::string mode = c.attr_string("mode", "nearest");
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";
  if (mode != "nearest" && mode != "linear" && mode != "cubic") c.malformed("mode '" + mode + "'");
  const std::string coord = old ? "asymmetric" : c.attr_string("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = old ? "floor" : c.attr_string("nearest_mode", "round_prefer_floor");
  if (c.attr_int("antialias", 0) != 0) c.unsupported("Resize with antialias");
  if (c.has_attr("axes")) c.unsupported("Resize with axes");
  if (c.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch") c.unsupported("keep_aspect_ratio_policy other than stretch");
  if (coord == "tf_crop_and_resize") c.unsupported("Resize with coordinate_transformation_mode 'tf_crop_and_resize'");
  if (coord == "tf_half_pixel_for_nn" && mode != "nearest") c.malformed("tf_half_pixel_for_nn is for nearest only");
  std::vector<Dim> dims = dimensions(c, x, y);
  const int taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  const int64_t before = mode == "cubic" ? 1 : 0;  // taps start at floor(x) - before
  const bool exclude = c.attr_int("exclude_outside", 0) != 0 && mode != "nearest";
  // each dimension's first source index as a floor form, and the padding its taps need
  std::vector<FloorForm> first(rank);
  std::vector<int64_t> lo(rank, 0), hi(rank, 0);
  for (size_t k = 0; k < rank; ++k) {
    Dim& d = dims[k];
    if (!d.resized) continue;
    d.x = rational_x(c, coord, d);
    if (d.x.A == d.x.D && d.x.B == 0) {  // x(i) = i
      d.resized = false;
      continue;
    }
    first[k] = mode == "nearest" ? nearest_form(c, nearest, d.x) : FloorForm{d.x.A, d.x.B - before * d.x.D, d.x.D};
    if (mode == "nearest")
      for (int64_t i = 0; i < d.out; ++i)
        if (first[k].at(i) != reference_nearest(nearest, reference_x(coord, d, i)))
          c.unsupported("nearest Resize at scale " + std::to_string(d.scale) + ": output " + str(i) + " of dimension " +
                        str(int64_t(k)) + " is not the exact fraction's nearest element");
    const int64_t lowest = first[k].at(0), highest = first[k].at(d.out - 1) + taps - 1;
    lo[k] = std::max<int64_t>(0, -lowest);
    hi[k] = std::max<int64_t>(0, highest - (d.in - 1));
  }
  if (mode == "nearest" && divided_index_only(dims, first)) {
    const Value xe = edge_pad(c, x, lo, hi);
    Strings xi = indices(rank);
    for (size_t k = 0; k < rank; ++k)
      xi[k] = dims[k].resized ? first[k].access(index(int(k)), lo[k]) : dims[k].in == 1 && dims[k].out != 1 ? "0" : index(int(k));
    return c.emit({y.tsl, indices(rank), "=", c.read(xe, xi), ranges_of(y.shape)});
  }
  emit_passes(c, x, y, dims, first, mode, taps, exclude);
}

}  // namespace

void add_resize_ops(std::map<std::string, Translator>& t) {
  t["Resize"] = translate_resize;
  t["Upsample"] = translate_resize;
}

}  // namespace tessel::onnx_import
