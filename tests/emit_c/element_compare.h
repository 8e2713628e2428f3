// Helpers of the C target's tests that compare outputs element by element: a tensor of a float dtype
// from values (each stored as the interpreter stores it), and how many elements of two tensors
// differ (NaN matching NaN).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "compiler/pipeline.h"
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

// `src`'s first def run by the interpreter and, compiled for the C target, on `in`: each output of
// the interpreter's is among the C run's, of the same dtype.
struct CAndInterpreter {
  interp::Tensors expected, outputs;
};
inline CAndInterpreter run_c_and_interpreter(const std::string& src, const std::string& file,
                                             const std::map<std::string, int64_t>& sizes, const interp::Tensors& in) {
  const frontend::Module m = frontend::parse_module(src, file);
  CompileOptions o;
  o.sizes = sizes;
  auto c = compile(m.functions.at(0), o);
  CAndInterpreter r{interp::evaluate(m.functions.at(0), o.sizes, in), {}};
  const auto runs = emit_c::run_c_batch({&c->kernel}, {in});
  REQUIRE(runs.size() == 1);
  r.outputs = runs[0].outputs;
  for (const auto& [name, e] : r.expected) {
    CAPTURE(name);
    REQUIRE(r.outputs.count(name) == 1);
    CHECK(r.outputs.at(name).dtype == e.dtype);
  }
  return r;
}

}  // namespace tessel::emit_c_test
