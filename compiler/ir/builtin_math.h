// The reference meaning of the language's float built-in functions (compiler/README.md, "Interpreter
// semantics"): each computes in f32 (f64 values: in f64) with the host's C library and is rounded once to the result
// dtype by its caller. One definition, used by the reference interpreter, by the NPU emitter's
// constant folding and by the tests that check every target against std:: functions.
//
// Choices that are not simply "the C function":
//   round(x)   halves to even (ONNX Round; C's rint in the default rounding mode), not C's round();
//   sign(x)    -1, 0 or 1; sign(-0) = -0, sign(NaN) = NaN (the value itself where it is neither);
//   sigmoid(x) 1 / (1 + exp(-x)), each step in f32 (0 for x below about -88, where exp overflows).
#pragma once

#include <cmath>

#include "compiler/ir/tensor_ir.h"

namespace tessel::ir {

// F is the computation type: float for f32 and narrower dtypes, double for f64.
template <Op OP, class F>
inline F unary_math(F x) {
  if constexpr (OP == Op::Exp) return std::exp(x);
  else if constexpr (OP == Op::Log) return std::log(x);
  else if constexpr (OP == Op::Sqrt) return std::sqrt(x);
  else if constexpr (OP == Op::Rsqrt) return F(1) / std::sqrt(x);
  else if constexpr (OP == Op::Tanh) return std::tanh(x);
  else if constexpr (OP == Op::Erf) return std::erf(x);
  else if constexpr (OP == Op::Floor) return std::floor(x);
  else if constexpr (OP == Op::Ceil) return std::ceil(x);
  else if constexpr (OP == Op::Round) return std::rint(x);
  else if constexpr (OP == Op::Sign) return x > 0 ? F(1) : x < 0 ? F(-1) : x;
  else if constexpr (OP == Op::Sin) return std::sin(x);
  else if constexpr (OP == Op::Cos) return std::cos(x);
  else if constexpr (OP == Op::Tan) return std::tan(x);
  else if constexpr (OP == Op::Asin) return std::asin(x);
  else if constexpr (OP == Op::Acos) return std::acos(x);
  else if constexpr (OP == Op::Atan) return std::atan(x);
  else if constexpr (OP == Op::Sinh) return std::sinh(x);
  else if constexpr (OP == Op::Cosh) return std::cosh(x);
  else if constexpr (OP == Op::Asinh) return std::asinh(x);
  else if constexpr (OP == Op::Acosh) return std::acosh(x);
  else if constexpr (OP == Op::Atanh) return std::atanh(x);
  else if constexpr (OP == Op::Sigmoid) return F(1) / (F(1) + std::exp(-x));
  else static_assert(OP == Op::Exp, "unary_math: not a unary float built-in");
}

template <Op OP>
inline float unary_math_f32(float x) { return unary_math<OP, float>(x); }

inline float pow_f32(float x, float y) { return std::pow(x, y); }

// The float built-ins above (and pow) by runtime op; false for any other op.
inline bool is_float_math(Op op) {
  switch (op) {
    case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Rsqrt: case Op::Tanh: case Op::Erf: case Op::Pow: case Op::Floor:
    case Op::Ceil: case Op::Round: case Op::Sign: case Op::Sin: case Op::Cos: case Op::Tan: case Op::Asin: case Op::Acos:
    case Op::Atan: case Op::Sinh: case Op::Cosh: case Op::Asinh: case Op::Acosh: case Op::Atanh: case Op::Sigmoid:
      return true;
    default: return false;
  }
}

// f32 value of a float built-in at x (and y for pow); op must satisfy is_float_math.
inline float math_f32(Op op, float x, float y = 0) {
  switch (op) {
#define TESSEL_MATH_CASE(E) \
  case Op::E: return unary_math_f32<Op::E>(x);
    TESSEL_MATH_CASE(Exp) TESSEL_MATH_CASE(Log) TESSEL_MATH_CASE(Sqrt) TESSEL_MATH_CASE(Rsqrt) TESSEL_MATH_CASE(Tanh)
    TESSEL_MATH_CASE(Erf) TESSEL_MATH_CASE(Floor) TESSEL_MATH_CASE(Ceil) TESSEL_MATH_CASE(Round) TESSEL_MATH_CASE(Sign)
    TESSEL_MATH_CASE(Sin) TESSEL_MATH_CASE(Cos) TESSEL_MATH_CASE(Tan) TESSEL_MATH_CASE(Asin) TESSEL_MATH_CASE(Acos)
    TESSEL_MATH_CASE(Atan) TESSEL_MATH_CASE(Sinh) TESSEL_MATH_CASE(Cosh) TESSEL_MATH_CASE(Asinh) TESSEL_MATH_CASE(Acosh)
    TESSEL_MATH_CASE(Atanh) TESSEL_MATH_CASE(Sigmoid)
#undef TESSEL_MATH_CASE
    case Op::Pow: return pow_f32(x, y);
    default: return std::nanf("");
  }
}

}  // namespace tessel::ir
