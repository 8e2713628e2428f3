// Helpers of the C target's tests that compare outputs element by element: a tensor of a float dtype
// from values (each stored as the interpreter stores it), and how many elements of two tensors
// differ (NaN matching NaN).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "compiler/interp/compare.h"
#include "compiler/interp/scalar.h"
#include "isa/base/npy.h"

namespace tessel::emit_c_test {

inline NpyArray array(DType t, const std::vector<int64_t>& shape, const std::vector<double>& v) {
  NpyArray a;
  a.dtype = t;
  a.shape = shape;
  a.data.assign(v.size() * dtype_bytes(t), 0);
  for (size_t i = 0; i < v.size(); ++i) interp::store_float(t, a.data.data() + i * dtype_bytes(t), v[i]);
  return a;
}

// Elements that differ (NaN matching NaN).
inline int64_t differences(const NpyArray& e, const NpyArray& a) {
  REQUIRE(e.element_count() == a.element_count());
  int64_t d = 0;
  for (int64_t i = 0; i < e.element_count(); ++i) {
    const double x = interp::element_as_double(e, i), y = interp::element_as_double(a, i);
    d += !(x == y || (std::isnan(x) && std::isnan(y)));
  }
  return d;
}

}  // namespace tessel::emit_c_test
