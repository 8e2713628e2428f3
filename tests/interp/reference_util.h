// Helpers for tests that compare the interpreter with hand-written loop nests.
#pragma once

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "compiler/interp/compare.h"
#include "compiler/interp/scalar.h"
#include "isa/base/f16.h"
#include "isa/base/npy.h"

namespace tessel::test {

// Element access by multi-index, values as float (f16 widened exactly) or int64.
struct View {
  const NpyArray& a;
  int64_t offset(std::initializer_list<int64_t> idx) const {
    int64_t off = 0;
    size_t d = 0;
    for (int64_t i : idx) off = off * a.shape.at(d++) + i;
    return off;
  }
  float f(std::initializer_list<int64_t> idx) const {
    return static_cast<float>(interp::element_as_double(a, offset(idx)));
  }
  int64_t i(std::initializer_list<int64_t> idx) const {
    return static_cast<int64_t>(interp::element_as_double(a, offset(idx)));
  }
};

// A reference result in C order with the shape of the interpreter's output.
struct Expected {
  std::vector<int64_t> shape;
  std::vector<double> values;
  explicit Expected(std::vector<int64_t> s) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    values.assign(static_cast<size_t>(n), 0.0);
  }
  double& at(std::initializer_list<int64_t> idx) {
    int64_t off = 0;
    size_t d = 0;
    for (int64_t i : idx) off = off * shape.at(d++) + i;
    return values.at(static_cast<size_t>(off));
  }
};

// One unit in the last place of the f16 value nearest to x (subnormal spacing below 2^-14).
inline double f16_ulp(double x) {
  const double a = std::fabs(x);
  if (a < 6.103515625e-05) return 5.9604644775390625e-08;
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 10);
}

// "" when every element matches bitwise (same value, NaN with NaN), else the first difference.
inline std::string bitwise_difference(const Expected& e, const NpyArray& actual, const std::string& name) {
  if (e.shape != actual.shape) return name + ": shape differs: expected " + std::to_string(e.shape.size()) + "-d";
  for (size_t i = 0; i < e.values.size(); ++i) {
    const double a = interp::element_as_double(actual, static_cast<int64_t>(i));
    const double x = e.values[i];
    if (!(a == x || (std::isnan(a) && std::isnan(x))))
      return name + "[" + std::to_string(i) + "]: expected " + std::to_string(x) + ", got " + std::to_string(a);
  }
  return "";
}

// "" when every element is within `ulps` f16 ulps of the (double-precision) reference, or within
// abs_floor absolutely.
inline std::string f16_difference(const Expected& e, const NpyArray& actual, const std::string& name, double ulps,
                                  double abs_floor) {
  if (e.shape != actual.shape) return name + ": shape differs";
  for (size_t i = 0; i < e.values.size(); ++i) {
    const double a = interp::element_as_double(actual, static_cast<int64_t>(i));
    const double x = e.values[i];
    const double err = std::fabs(a - x);
    if (!(err <= ulps * f16_ulp(x) || err <= abs_floor))
      return name + "[" + std::to_string(i) + "]: expected " + std::to_string(x) + ", got " + std::to_string(a) +
             " (" + std::to_string(err / f16_ulp(x)) + " ulp)";
  }
  return "";
}

// Relative difference check for f32 results computed in another order or precision.
inline std::string relative_difference(const Expected& e, const NpyArray& actual, const std::string& name, double rel,
                                       double abs) {
  if (e.shape != actual.shape) return name + ": shape differs";
  for (size_t i = 0; i < e.values.size(); ++i) {
    const double a = interp::element_as_double(actual, static_cast<int64_t>(i));
    const double x = e.values[i];
    if (!(std::fabs(a - x) <= abs + rel * std::fabs(x)))
      return name + "[" + std::to_string(i) + "]: expected " + std::to_string(x) + ", got " + std::to_string(a);
  }
  return "";
}

inline float r16(float x) { return round_to_f16(x); }

}  // namespace tessel::test
