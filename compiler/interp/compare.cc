#include "compiler/interp/compare.h"

#include <cmath>
#include <sstream>

#include "compiler/interp/scalar.h"
#include "isa/base/error.h"

namespace tessel::interp {

double element_as_double(const NpyArray& a, int64_t i) {
  const uint8_t* p = a.data.data() + i * dtype_bytes(a.dtype);
  return dtype_is_float(a.dtype) ? load_float(a.dtype, p) : static_cast<double>(load_int(a.dtype, p));
}

namespace {

std::string position(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

std::string number(double v) {
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

}  // namespace

Comparison compare(const NpyArray& expected, const NpyArray& actual, double abs_tol, double rel_tol,
                   const std::string& name, const NpyArray* scale) {
  Comparison c;
  if (expected.shape != actual.shape) {
    c.ok = false;
    c.mismatches = std::max(expected.element_count(), actual.element_count());
    c.first_mismatch = name + ": expected shape " + expected.shape_string() + ", got " + actual.shape_string();
    return c;
  }
  const int64_t n = expected.element_count();
  if (scale && scale->shape != expected.shape)
    throw InternalError("compare: the term magnitudes of " + name + " have shape " + scale->shape_string() + ", not " +
                        expected.shape_string());
  for (int64_t i = 0; i < n; ++i) {
    const double e = element_as_double(expected, i), a = element_as_double(actual, i);
    const double s = scale ? element_as_double(*scale, i) : 0;
    bool match;
    double err = 0;
    if (std::isnan(e) || std::isnan(a)) {
      match = std::isnan(e) && std::isnan(a);
    } else if (std::isinf(e) || std::isinf(a)) {
      match = e == a;
    } else {
      err = std::fabs(e - a);
      match = err <= abs_tol + rel_tol * std::max(std::fabs(e), s);
    }
    if (!match) {
      c.max_abs_err = std::max(c.max_abs_err, std::isnan(err) ? INFINITY : (err == 0 ? INFINITY : err));
      if (c.mismatches++ == 0) {
        c.first_mismatch = name + position(expected.shape, i) + ": expected " + number(e) + ", got " + number(a);
        if (s > std::fabs(e))
          c.first_mismatch += " (beyond " + number(abs_tol + rel_tol * s) + ", its error scale " + number(s) +
                              ": the magnitudes of the terms of the sums it is computed from)";
      }
    } else {
      c.max_abs_err = std::max(c.max_abs_err, err);
    }
  }
  c.ok = c.mismatches == 0;
  return c;
}

}  // namespace tessel::interp
