// Element-wise comparison of a result with the reference interpreter's.
#pragma once

#include <cstdint>
#include <string>

#include "isa/base/npy.h"

namespace tessel::interp {

struct Comparison {
  bool ok = true;
  double max_abs_err = 0;
  int64_t mismatches = 0;
  std::string first_mismatch;  // "C[3, 7]: expected 1.5, got 1.25" (or a shape/dtype difference)
};

// An element matches when |expected - actual| <= abs_tol + rel_tol * |expected|; NaN matches NaN,
// an infinity matches the same infinity. Shapes must be equal; dtypes may differ (values are
// compared). `name` prefixes the element position in first_mismatch. With `scale` (an array of
// expected's shape: a sum's term magnitudes, interp::evaluate), the relative part is
// rel_tol * max(|expected|, scale) per element, and a mismatch where the scale counted names it.
Comparison compare(const NpyArray& expected, const NpyArray& actual, double abs_tol, double rel_tol,
                   const std::string& name = "", const NpyArray* scale = nullptr);

// Value of element `i` (C order) as a double, whatever the dtype.
double element_as_double(const NpyArray& a, int64_t i);

}  // namespace tessel::interp
