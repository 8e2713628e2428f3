// STFT (opset 17): frame_step and frame_length constants, the window an input (data or constant)
// or absent (rectangular), onesided; real ([.., 1]) or complex ([.., 2]) signals. Each frame's DFT
// is one contraction with a basis table M[bins, 2, C, L] computed at import (weights input):
//   Y(b, f, k, o) +=! X(b, f * step + r0, r1) * w(r0) * M(k, o, r1, r0)
// with theta = 2 pi k n / L: (x_re + i x_im)(cos theta - i sin theta), so M(k, 0, 0, n) = cos,
// M(k, 0, 1, n) = sin, M(k, 1, 0, n) = -sin, M(k, 1, 1, n) = cos (in f32; the sum in f32).
#include <cmath>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

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
  std::vector<double> m;
  for (int64_t k = 0; k < bins; ++k)
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t r = 0; r < comps; ++r)
        for (int64_t n = 0; n < len; ++n) {
          const double th = 2 * M_PI * double((k * n) % len) / double(len);
          m.push_back(o == r ? std::cos(th) : o == 0 ? std::sin(th) : -std::sin(th));
        }
  const Value basis = c.table("dft", std::move(m), {bins, 2, comps, len}, onnx::TensorProto::FLOAT);
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

}  // namespace

void add_stft_ops(std::map<std::string, Translator>& t) { t["STFT"] = translate_stft; }

}  // namespace tessel::onnx_import
