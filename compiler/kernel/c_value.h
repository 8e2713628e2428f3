// C-family text of tensor-IR value expressions (a statement's right-hand side), shared by the C
// emitter (compiler/emit_c) and the CUDA emitter (compiler/emit_cuda/cuda_expr.h), with the
// reference interpreter's semantics (compiler/README.md): NaN-propagating min/max, saturating
// float->int casts, integer division and remainder by zero give 0. Both print the same tree; a
// CValueDialect says how a target spells what differs: the C emitter computes in the storage types
// (f16 is `_Float16`, so casting rounds), the CUDA emitter computes floats as `float` and rounds
// f16 results explicitly, and widens integers to `long long` for its helpers. The helpers
// (tessel_fmin, tessel_f2i, tessel_idiv, ...) are defined by each emitter's prelude.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compiler/ir/tensor_ir.h"

namespace tessel::kernel {

struct CValueDialect {
  // C type of a value of dtype t in generated code
  std::string (*value_type)(DType t);
  // a float computation `v` whose result has dtype t (C: cast to the storage type; CUDA: f16
  // rounded); `primary`: v is a call or cast expression that needs no parentheses
  std::string (*float_result)(DType t, const std::string& v, bool primary);
  const char* inf;       // spelling of +infinity, -infinity and NaN constants (NaN: null prints
  const char* neg_inf;   // printf's "nan")
  const char* nan;
  const char* to_float;        // conversion of an integer operand (size, index value, cast) to float
  const char* widen;           // on integer operands of arithmetic, negation and casts
  const char* helper_arg;      // on integer arguments of tessel_idiv / tessel_irem / tessel_imin ...
  const char* long_suffix;     // integer literal suffix of the tessel_f2i range
  const char* int_constant;    // cast on an integer constant's number before the value type
  const char* int_size_suffix; // suffix of a size parameter's value in an integer expression
  bool int_helpers;            // integer min/max/abs by tessel_imin/imax/iabs (else conditionals)
  bool float_negate;           // float negation computed in float and rounded (else as integers)
};

struct CValueContext {
  const CValueDialect& dialect;
  // affine index expression -> C expression of an integer type
  std::function<std::string(const ir::AffineExpr&)> affine;
  // access -> C expression of the element as a value (value_type of the access's dtype)
  std::function<std::string(const ir::Expr&)> access;
  const std::map<std::string, int64_t>* sizes;  // size parameter values
  // optional: a subtree whose value is already held in a local (e.g. evaluated once per column
  // outside an element loop) -> that local, as a value; nullopt: printed as usual
  std::function<std::optional<std::string>(const ir::Expr&)> replace = {};
};

std::string c_value(const ir::Expr& e, const CValueContext& ctx);

// `v` printed with 17 significant digits; infinities and NaN as the dialect spells them.
std::string c_number(double v, const CValueDialect& d);

}  // namespace tessel::kernel
