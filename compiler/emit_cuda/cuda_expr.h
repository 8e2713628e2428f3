// Tensor-IR expressions and kernel-IR integer expressions as CUDA C, with the reference
// interpreter's semantics (compiler/README.md): every f16 result rounded to f16, NaN-propagating
// min/max, saturating float->int casts, integer division by zero gives 0. Float values travel as
// `float` (f16 values already rounded), integers as their C type. Used by both code shapes.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_cuda {

// Storage type of a dtype in generated code ("__half", "__nv_bfloat16", "float", "signed char", ...).
std::string storage_type(DType t);
// Register type of a value of a dtype ("float" for f16, bf16 and f32).
std::string value_type(DType t);
// A stored element (C expression of storage_type(t)) as a value.
std::string load_value(DType t, const std::string& stored);
// A value as the storage type (f16, bf16: round-to-nearest-even conversion).
std::string store_value(DType t, const std::string& value);

// Kernel-IR integer expression (long long arithmetic).
std::string int_expr(const kernel::Expr& e);

struct ValueContext {
  // Affine index expression -> C expression of type long long.
  std::function<std::string(const ir::AffineExpr&)> affine;
  // Access -> C expression of the element as stored (storage_type of the access's dtype).
  std::function<std::string(const ir::Expr&)> access;
  const std::map<std::string, int64_t>* sizes = nullptr;
  // optional: a subtree already held in a local -> that local, as a value (CValueContext::replace)
  std::function<std::optional<std::string>(const ir::Expr&)> replace = {};
};

std::string value_expr(const ir::Expr& e, const ValueContext& ctx);
// The reduction identity of `r` in dtype `t`, as a value.
std::string reduction_identity(ir::Reduction r, DType t);
// `cur` combined with `v` (both values of dtype t) by reduction `r`.
std::string reduce_values(ir::Reduction r, DType t, const std::string& cur, const std::string& v);

// Helpers every generated translation unit starts with.
std::string cuda_prelude();

}  // namespace tessel::emit_cuda
