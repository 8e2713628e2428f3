// STFT (opset 17): frame_step and frame_length constants, the window an input (data or constant)
// or absent (rectangular), onesided; real ([.., 1]) or complex ([.., 2]) signals. Each frame's DFT
// is one contraction with a basis table M[bins, 2, C, L] computed at import (weights input):
//   Y(b, f, k, o) +=! X(b, f * step + r0, r1) * w(r0) * M(k, o, r1, r0)
// with theta = 2 pi k n / L: (x_re + i x_im)(cos theta - i sin theta), so M(k, 0, 0, n) = cos,
// M(k, 0, 1, n) = sin, M(k, 1, 0, n) = -sin, M(k, 1, 1, n) = cos (in f32; the sum in f32).
// DFT (opset 17) is the same contraction along its axis over the whole signal, without frames:
//   Y(.., k, .., o) +=! X(.., r0, .., r1) * M(k, o, r1, r0)
// inverse: theta's sign flipped (M(k, 0, 1) = -sin, M(k, 1, 0) = sin) and M divided by the length;
// onesided: bins 0..n/2. A dft_length other than the axis' length (padding or truncation) is refused.
#include <cmath>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

// M[bins, 2, comps, n] (C order): theta = 2 pi k j / n, M(k, o, r, j) = cos where o == r, else
// sin (o = 0) / -sin (o = 1); the inverse flips sin's sign and divides every entry by n.
std::vector<double> dft_basis(int64_t bins, int64_t comps, int64_t n, bool inverse) {
  const double sign = inverse ? -1 : 1, scale = inverse ? 1.0 / double(n) : 1.0;
  std::vector<double> m;
  for (int64_t k = 0; k < bins; ++k)
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t r = 0; r < comps; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const double th = 2 * M_PI * double((k * j) % n) / double(n);
          m.push_back(scale * (o == r ? std::cos(th) : o == 0 ? sign * std::sin(th) : -sign * std::sin(th)));
        }
  return m;
}

void translate_stft(Context& c) {
  const Value& x = c.input(0);
  if (x.shape.size() != 3 || (x.shape[2] != 1 && x.shape[2] != 2)) c.malformed("the signal is not [batch, length, 1 or 2]");
  const DType t = c.dtype(x);
  if (!dtype_is_float(t)) c.malformed("the signal is not floating-point");
  const std::vector<int64_t> steps = c.constant_ints(1, "STFT's frame_step");
  if (steps.size() != 1 || steps[0] < 1) c.malformed("frame_step must be one positive value");
  int64_t len = -1;
  if (c.has_input(2)) {
    if (c.input(2).shape.size() != 1) c.malformed("the window is not 1-d");
    len = c.input(2).shape[0];
  }
  if (c.has_input(3)) {
    const std::vector<int64_t> fl = c.constant_ints(3, "STFT's frame_length");
    if (fl.size() != 1 || fl[0] < 1 || (len >= 0 && fl[0] != len)) c.malformed("frame_length must be one positive value, the window's length");
    len = fl[0];
  }
  if (len < 1) c.malformed("neither a window nor a frame_length gives the frame's length");
  const bool onesided = c.attr_int("onesided", 1) != 0;
  const int64_t bins = onesided ? len / 2 + 1 : len, comps = x.shape[2];
  const int64_t frames = x.shape[1] < len ? 0 : (x.shape[1] - len) / steps[0] + 1;
  const Value y = output_value(c, 0);
  if (y.shape != std::vector<int64_t>{x.shape[0], frames, bins, 2}) c.malformed("the output is not [batch, frames, bins, 2]");
  const Value basis = c.table("dft", dft_basis(bins, comps, len, false), {bins, 2, comps, len}, onnx::TensorProto::FLOAT);
  const std::string comp = comps == 1 ? "0" : reduction(1);
  std::string rhs = c.read(x, {index(0), index(1) + " * " + std::to_string(steps[0]) + " + " + reduction(0), comp});
  if (t != DType::F32) rhs = "f32(" + rhs + ")";
  if (c.has_input(2)) rhs += " * " + (c.dtype(c.input(2)) == DType::F32 ? c.read(c.input(2), {reduction(0)}) : "f32(" + c.read(c.input(2), {reduction(0)}) + ")");
  rhs += " * " + c.read(basis, {index(2), index(3), comp, reduction(0)});
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, len});
  if (comps == 2) ranges.push_back({reduction(1), 0, 2});
  if (t != DType::F32) {
    const Value acc = local(c, y, y.shape, "acc");
    c.emit({acc.tsl, indices(4), "+=!", rhs, ranges});
    c.emit({y.tsl, indices(4), "=", std::string(dtype_name(t)) + "(" + c.read(acc, indices(4)) + ")", ranges_of(y.shape)});
    return;
  }
  c.emit({y.tsl, indices(4), "+=!", rhs, ranges});
}

void translate_dft(Context& c) {
  const Value& x = c.input(0);
  const int64_t rank = int64_t(x.shape.size());
  if (rank < 3 || (x.shape.back() != 1 && x.shape.back() != 2)) c.malformed("the signal is not [batch, .., length, .., 1 or 2]");
  if (c.dtype(x) != DType::F32) c.unsupported("DFT of " + std::string(dtype_name(c.dtype(x))) + " data (f32 is translated)");
  const int64_t axis = c.attr_int("axis", 1) < 0 ? c.attr_int("axis", 1) + rank : c.attr_int("axis", 1);
  if (axis < 1 || axis > rank - 2) c.malformed("axis " + std::to_string(c.attr_int("axis", 1)) + " is not a signal dimension");
  const int64_t n = x.shape[size_t(axis)], comps = x.shape.back();
  if (c.has_input(1)) {
    const std::vector<int64_t> l = c.constant_ints(1, "DFT's dft_length");
    if (l.size() != 1 || l[0] != n) c.unsupported("a dft_length other than the axis' " + std::to_string(n) + " (padding or truncation)");
  }
  const bool inverse = c.attr_int("inverse", 0) != 0, onesided = c.attr_int("onesided", 0) != 0;
  if (onesided && (inverse || comps != 1)) c.malformed("onesided is for a forward DFT of a real signal");
  const int64_t bins = onesided ? n / 2 + 1 : n;
  const Value y = output_value(c, 0);
  std::vector<int64_t> want = x.shape;
  want[size_t(axis)] = bins;
  want.back() = 2;
  if (y.shape != want) c.malformed("the output's shape is not the signal's with " + std::to_string(bins) + " bins and 2 components");
  const Value basis = c.table("dft", dft_basis(bins, comps, n, inverse), {bins, 2, comps, n}, onnx::TensorProto::FLOAT);
  std::vector<std::string> xi = indices(size_t(rank));
  xi[size_t(axis)] = reduction(0);
  xi.back() = comps == 1 ? "0" : reduction(1);
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  ranges.push_back({reduction(0), 0, n});
  if (comps == 2) ranges.push_back({reduction(1), 0, 2});
  c.emit({y.tsl, indices(size_t(rank)), "+=!",
          c.read(x, xi) + " * " + c.read(basis, {index(int(axis)), index(int(rank - 1)), xi.back(), reduction(0)}), ranges});
}

}  // namespace

void add_stft_ops(std::map<std::string, Translator>& t) {
  t["STFT"] = translate_stft;
  t["DFT"] = translate_dft;
}

}  // namespace tessel::onnx_import
