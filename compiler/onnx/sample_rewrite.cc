// GridSample, RoiAlign, Unique and NonZero as Gathers of positions known at import (contract in
// sample_rewrite.h).
#include "compiler/onnx/sample_rewrite.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "compiler/onnx/gather_rewrite.h"
#include "compiler/onnx/loop_unroll.h"

namespace tessel::onnx_import {
namespace {

using TP = onnx::TensorProto;

// One tap of a weighted sum: X[batch, c, h, w] * weight for every channel c.
struct Tap {
  int64_t batch = 0, h = 0, w = 0;
  double weight = 0;
};

const Value& shaped(const Context& c, int i) {
  const Value& v = c.input(i);
  if (!v.has_shape) c.unsupported("dynamic or unknown shape of '" + v.onnx + "'");
  return v;
}

// A Constant of f32 values shaped `dims`.
onnx::NodeProto float_constant(const std::string& out, const std::vector<int64_t>& dims, const std::vector<double>& values) {
  onnx::NodeProto n = constant_node(out, TP::INT64, dims, {});
  auto* t = n.mutable_attribute(0)->mutable_t();
  t->set_data_type(TP::FLOAT);
  for (double v : values) t->add_float_data(float(v));
  return n;
}

// Y[l, c, oh, ow] = sum_k taps[l][oh * OW + ow][k].weight * X[tap's batch, c, tap's h, tap's w]
// (X 4-D [N, C, H, W]): X flattened with a zero appended, a Gather of the taps' positions
// [L, C, OH, OW, K] (a missing tap reads the zero), a Mul by the weights [L, 1, OH, OW, K], a
// ReduceSum over the taps.
std::vector<onnx::NodeProto> weighted_taps(Context& c, const Value& x, const std::vector<std::vector<std::vector<Tap>>>& taps, int64_t oh,
                                           int64_t ow, std::set<std::string>& taken, int opset) {
  if (x.elem_type != TP::FLOAT) c.unsupported("an input of a dtype other than float32 (the taps' weights are f32)");
  const int64_t ch = x.shape[1], h = x.shape[2], w = x.shape[3], l = int64_t(taps.size());
  size_t k = 1;
  for (const auto& per : taps)
    for (const auto& t : per) k = std::max(k, t.size());
  std::vector<int64_t> positions;
  std::vector<double> weights;
  for (int64_t i = 0; i < l; ++i)
    for (int64_t cc = 0; cc < ch; ++cc)
      for (int64_t p = 0; p < oh * ow; ++p)
        for (size_t j = 0; j < k; ++j) {
          const auto& list = taps[size_t(i)][size_t(p)];
          positions.push_back(j < list.size() ? ((list[j].batch * ch + cc) * h + list[j].h) * w + list[j].w : -1);
        }
  for (int64_t i = 0; i < l; ++i)
    for (int64_t p = 0; p < oh * ow; ++p)
      for (size_t j = 0; j < k; ++j) {
        const auto& list = taps[size_t(i)][size_t(p)];
        weights.push_back(j < list.size() ? list[j].weight : 0.0);
      }
  const std::string y = c.node().output(0);
  std::vector<onnx::NodeProto> nodes;
  const std::string gathered = fresh_name(y + "_taps", taken), wt = fresh_name(y + "_tap_weights", taken),
                    weighed = fresh_name(y + "_weighed", taken);
  add_gather_positions(nodes, x, positions, {l, ch, oh, ow, int64_t(k)}, gathered, taken, opset);
  nodes.push_back(float_constant(wt, {l, 1, oh, ow, int64_t(k)}, weights));
  nodes.push_back(simple_node("Mul", {gathered, wt}, weighed));
  add_axes_node(nodes, "ReduceSum", weighed, y, {4}, opset, taken);
  auto* keep = nodes.back().add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  return nodes;
}

// PyTorch's reflect_coordinates: `v` reflected into [twice_low / 2, twice_high / 2].
double reflect(double v, double twice_low, double twice_high) {
  if (twice_low == twice_high) return 0;
  const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = std::fabs(v - lo);
  const double extra = std::fmod(v, span);
  const int64_t flips = int64_t(std::floor(v / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}

// A source coordinate moved inside [0, size - 1] by the padding mode (zeros: unchanged).
double pad_coordinate(double v, int64_t size, const std::string& padding, bool align) {
  if (padding == "border") return std::clamp(v, 0.0, double(size - 1));
  if (padding == "reflection") {
    v = align ? reflect(v, 0, 2.0 * double(size - 1)) : reflect(v, -1, 2.0 * double(size) - 1);
    return std::clamp(v, 0.0, double(size - 1));
  }
  return v;
}

std::vector<onnx::NodeProto> grid_sample(Context& c, std::set<std::string>& taken, int opset) {
  const Value &x = shaped(c, 0), &gv = shaped(c, 1);
  if (x.shape.size() != 4) c.unsupported("a GridSample of " + std::to_string(x.shape.size() - 2) + " spatial dimensions (2 are translated)");
  const std::vector<double> grid = c.constant(1, "GridSample's grid (where each output element reads)");
  // opset 20 renamed the modes (linear, cubic) and made N-D grids legal (refused above when not 2-D)
  std::string mode = c.attr_string("mode", opset >= 20 ? "linear" : "bilinear");
  const std::string padding = c.attr_string("padding_mode", "zeros");
  if (opset >= 20 && mode == "linear") mode = "bilinear";
  if (opset >= 20 && mode == "cubic") mode = "bicubic";
  const bool align = c.attr_int("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") c.malformed("mode '" + mode + "'");
  if (padding != "zeros" && padding != "border" && padding != "reflection") c.malformed("padding_mode '" + padding + "'");
  const int64_t n = x.shape[0], h = x.shape[2], w = x.shape[3];
  if (gv.shape.size() != 4 || gv.shape[0] != n || gv.shape[3] != 2) c.malformed("the grid is not [N, H_out, W_out, 2]");
  const int64_t oh = gv.shape[1], ow = gv.shape[2];
  const auto unnormalize = [&](double g, int64_t size) { return align ? (g + 1) / 2 * double(size - 1) : ((g + 1) * double(size) - 1) / 2; };
  const auto inside = [&](int64_t yy, int64_t xx) { return yy >= 0 && yy < h && xx >= 0 && xx < w; };
  std::vector<std::vector<std::vector<Tap>>> taps(size_t(n), std::vector<std::vector<Tap>>(size_t(oh * ow)));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < oh * ow; ++p) {
      const double gx = grid[size_t((b * oh * ow + p) * 2)], gy = grid[size_t((b * oh * ow + p) * 2 + 1)];
      auto& list = taps[size_t(b)][size_t(p)];
      const auto add = [&](int64_t yy, int64_t xx, double wt) {
        if (inside(yy, xx)) list.push_back({b, yy, xx, wt});
      };
      if (mode == "bicubic") {  // taps at floor - 1 .. floor + 2, each coordinate padded on its own
        const double ix = unnormalize(gx, w), iy = unnormalize(gy, h);
        const double fx = std::floor(ix), fy = std::floor(iy), tx = ix - fx, ty = iy - fy, a = -0.75;
        const auto cc1 = [a](double t) { return ((a + 2) * t - (a + 3)) * t * t + 1; };
        const auto cc2 = [a](double t) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; };
        const double wx[4] = {cc2(tx + 1), cc1(tx), cc1(1 - tx), cc2(2 - tx)}, wy[4] = {cc2(ty + 1), cc1(ty), cc1(1 - ty), cc2(2 - ty)};
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) {
            const double yy = pad_coordinate(fy - 1 + j, h, padding, align), xx = pad_coordinate(fx - 1 + i, w, padding, align);
            add(int64_t(yy), int64_t(xx), wx[i] * wy[j]);  // PyTorch truncates the padded coordinate
          }
        continue;
      }
      const double ix = pad_coordinate(unnormalize(gx, w), w, padding, align), iy = pad_coordinate(unnormalize(gy, h), h, padding, align);
      if (mode == "nearest") {
        add(int64_t(std::nearbyint(iy)), int64_t(std::nearbyint(ix)), 1.0);  // half to even
        continue;
      }
      const int64_t x0 = int64_t(std::floor(ix)), y0 = int64_t(std::floor(iy));
      const double lx = ix - double(x0), ly = iy - double(y0);
      add(y0, x0, (1 - lx) * (1 - ly));
      add(y0, x0 + 1, lx * (1 - ly));
      add(y0 + 1, x0, (1 - lx) * ly);
      add(y0 + 1, x0 + 1, lx * ly);
    }
  return weighted_taps(c, x, taps, oh, ow, taken, opset);
}

std::vector<onnx::NodeProto> roi_align(Context& c, std::set<std::string>& taken, int opset) {
  const Value& x = shaped(c, 0);
  if (x.shape.size() != 4) c.malformed("X is not 4-D [N, C, H, W]");
  const std::vector<double> rois = c.constant(1, "RoiAlign's rois (where each output element reads)");
  const std::vector<int64_t> batch = c.constant_ints(2, "RoiAlign's batch_indices");
  const std::string mode = c.attr_string("mode", "avg");
  if (mode != "avg") c.unsupported("RoiAlign mode '" + mode + "' (avg is translated)");
  const std::string ctm = c.attr_string("coordinate_transformation_mode", c.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel") c.malformed("coordinate_transformation_mode '" + ctm + "'");
  const int64_t oh = c.attr_int("output_height", 1), ow = c.attr_int("output_width", 1), ratio = c.attr_int("sampling_ratio", 0);
  const double scale = c.attr_float("spatial_scale", 1.0), offset = ctm == "half_pixel" ? 0.5 : 0.0;
  const int64_t n = x.shape[0], h = x.shape[2], w = x.shape[3], r = int64_t(batch.size());
  if (oh < 1 || ow < 1 || ratio < 0) c.malformed("output_height, output_width or sampling_ratio out of range");
  if (int64_t(rois.size()) != r * 4) c.malformed("rois is not [" + std::to_string(r) + ", 4]");
  std::vector<std::vector<std::vector<Tap>>> taps(size_t(r), std::vector<std::vector<Tap>>(size_t(oh * ow)));
  for (int64_t i = 0; i < r; ++i) {
    if (batch[size_t(i)] < 0 || batch[size_t(i)] >= n) c.malformed("batch index " + std::to_string(batch[size_t(i)]) + " outside 0.." + std::to_string(n - 1));
    const double x1 = rois[size_t(4 * i)] * scale - offset, y1 = rois[size_t(4 * i + 1)] * scale - offset;
    double rw = rois[size_t(4 * i + 2)] * scale - offset - x1, rh = rois[size_t(4 * i + 3)] * scale - offset - y1;
    if (ctm != "half_pixel") rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bh = rh / double(oh), bw = rw / double(ow);
    const int64_t gh = ratio > 0 ? ratio : int64_t(std::ceil(rh / double(oh))), gw = ratio > 0 ? ratio : int64_t(std::ceil(rw / double(ow)));
    const double count = double(std::max<int64_t>(gh * gw, 1));
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw) {
        auto& list = taps[size_t(i)][size_t(ph * ow + pw)];
        for (int64_t iy = 0; iy < gh; ++iy)
          for (int64_t ix = 0; ix < gw; ++ix) {  // onnxruntime's bilinear pre-calculation
            double yy = y1 + double(ph) * bh + (double(iy) + 0.5) * bh / double(gh);
            double xx = x1 + double(pw) * bw + (double(ix) + 0.5) * bw / double(gw);
            if (yy < -1.0 || yy > double(h) || xx < -1.0 || xx > double(w)) continue;
            yy = std::max(yy, 0.0), xx = std::max(xx, 0.0);
            int64_t ylo = int64_t(yy), xlo = int64_t(xx), yhi = ylo + 1, xhi = xlo + 1;
            if (ylo >= h - 1) yhi = ylo = h - 1, yy = double(ylo);
            if (xlo >= w - 1) xhi = xlo = w - 1, xx = double(xlo);
            const double ly = yy - double(ylo), lx = xx - double(xlo), hy = 1 - ly, hx = 1 - lx;
            const int64_t b = batch[size_t(i)];
            list.push_back({b, ylo, xlo, hy * hx / count});
            list.push_back({b, ylo, xhi, hy * lx / count});
            list.push_back({b, yhi, xlo, ly * hx / count});
            list.push_back({b, yhi, xhi, ly * lx / count});
          }
      }
  }
  return weighted_taps(c, x, taps, oh, ow, taken, opset);
}

// The int64 output i (when used) as a Constant.
void int_output(Context& c, std::vector<onnx::NodeProto>& nodes, int i, const std::vector<int64_t>& values) {
  if (c.has_output(i)) nodes.push_back(constant_node(c.node().output(i), TP::INT64, {int64_t(values.size())}, values));
}

// Slices in numpy.unique's order (ONNX's reference): lexicographic, NaN after every number and
// equal to NaN (equal_nan), so NaNs are one distinct value and never merge with a number.
struct SliceLess {
  static bool less(double a, double b) { return std::isnan(a) ? false : std::isnan(b) || a < b; }
  bool operator()(const std::vector<double>& a, const std::vector<double>& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), less);
  }
};

std::vector<onnx::NodeProto> unique(Context& c, std::set<std::string>& taken, int opset) {
  const Value& x = shaped(c, 0);
  const std::vector<double> data = c.constant(0, "Unique's input (the outputs' shapes depend on its values)");
  const bool flatten = !c.has_attr("axis"), sorted = c.attr_int("sorted", 1) != 0;
  const int64_t rank = int64_t(x.shape.size());
  const int64_t axis = flatten ? 0 : axis_of(c, c.attr_int("axis", 0), rank);
  const std::vector<int64_t> shape = flatten ? std::vector<int64_t>{element_count(x.shape)} : x.shape;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape[size_t(axis)];
  if (len == 0) c.unsupported("an empty input (an empty tensor)");
  // slice s: its elements in C order over the other dimensions
  std::vector<std::vector<double>> slices(static_cast<size_t>(len));
  for (int64_t s = 0; s < len; ++s)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t e = 0; e < inner; ++e) slices[size_t(s)].push_back(data[size_t((o * len + s) * inner + e)]);
  std::vector<int64_t> first;            // each distinct slice's first position, in order of appearance
  std::vector<int64_t> of(static_cast<size_t>(len));  // each slice's distinct slice (in `first`'s order)
  std::map<std::vector<double>, int64_t, SliceLess> seen;
  for (int64_t s = 0; s < len; ++s) {
    const auto [it, fresh] = seen.emplace(slices[size_t(s)], int64_t(first.size()));
    if (fresh) first.push_back(s);
    of[size_t(s)] = it->second;
  }
  std::vector<int64_t> order(first.size());  // output position -> distinct slice
  for (size_t k = 0; k < order.size(); ++k) order[k] = int64_t(k);
  if (sorted)
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return SliceLess{}(slices[size_t(first[size_t(a)])], slices[size_t(first[size_t(b)])]); });
  std::vector<int64_t> rank_of(order.size()), indices, inverse, counts(order.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) rank_of[size_t(order[k])] = int64_t(k);
  for (int64_t k : order) indices.push_back(first[size_t(k)]);
  for (int64_t s = 0; s < len; ++s) {
    inverse.push_back(rank_of[size_t(of[size_t(s)])]);
    ++counts[size_t(rank_of[size_t(of[size_t(s)])])];
  }
  std::vector<onnx::NodeProto> nodes;
  if (c.has_output(0)) {
    const std::string y = c.node().output(0);
    const std::string src = flatten && rank != 1 ? add_reshape(nodes, x.onnx, shape, y, taken, opset) : x.onnx;
    add_gather(nodes, src, indices, {int64_t(indices.size())}, axis, y, taken);
  }
  int_output(c, nodes, 1, indices);
  int_output(c, nodes, 2, inverse);
  int_output(c, nodes, 3, counts);
  return nodes;
}

std::vector<onnx::NodeProto> non_zero(Context& c) {
  const Value& x = shaped(c, 0);
  const std::vector<double> data = c.constant(0, "NonZero's input (the output's shape is the count of its non-zero elements)");
  const size_t rank = std::max<size_t>(x.shape.size(), 1);
  std::vector<std::vector<int64_t>> coords(rank);
  for (size_t e = 0; e < data.size(); ++e) {
    if (data[e] == 0) continue;
    int64_t rest = int64_t(e);
    for (size_t d = x.shape.size(); d-- > 0;) {
      coords[d].push_back(rest % x.shape[d]);
      rest /= x.shape[d];
    }
    if (x.shape.empty()) coords[0].push_back(0);
  }
  const int64_t count = int64_t(coords[0].size());
  if (count == 0) c.unsupported("no element is non-zero (an empty tensor)");
  std::vector<int64_t> values;
  for (const auto& row : coords) values.insert(values.end(), row.begin(), row.end());
  return {constant_node(c.node().output(0), TP::INT64, {int64_t(rank), count}, values)};
}

}  // namespace

bool is_sample_rewrite_op(const std::string& op_type) {
  return op_type == "GridSample" || op_type == "RoiAlign" || op_type == "Unique" || op_type == "NonZero";
}

std::vector<onnx::NodeProto> rewrite_sample_op(Context& c, std::set<std::string>& taken, int opset) {
  const std::string& op = c.node().op_type();
  if (op == "Unique") return unique(c, taken, opset);
  if (!c.has_output(0)) return {};
  if (op == "GridSample") return grid_sample(c, taken, opset);
  if (op == "RoiAlign") return roi_align(c, taken, opset);
  return non_zero(c);
}

}  // namespace tessel::onnx_import
