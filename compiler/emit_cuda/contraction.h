// Matrix identification (seed 000, "TensorCore AutoCodeGen"): is the kernel's anchor statement a
// matrix multiply, and which tensor is matrix_a / matrix_b, in which majorness?
//
// Input: the tensor-IR function a Kernel refers to, at the kernel's sizes. The anchor is the one
// `+=!` statement whose right-hand side is a product of two (cast) accesses. Its output indices
// split into M (only in one operand), N (only in the other) and batch (in both); reduction indices
// are K. The N operand is the one holding the innermost output index, so stores run along N. An
// operand that is a local produced by a `select(cond, X(...), 0)` / `X(...)` statement (the
// conv padding Xp) is inlined: the load reads X with the producer's guard, which is the im2col
// view of a convolution. Statements after the anchor that are element-wise over its output are
// the epilogue. Nothing is matched when any of this fails; `why` then says what.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_cuda {

struct ContractionDim {
  std::string var;     // index name in the anchor statement
  int64_t extent = 0;
};

// One operand as read by the loads: global tensor `tensor`, element address
// `base + sum(coeff[v] * v)` over anchor indices, present where `guard` holds (else 0).
struct ContractionOperand {
  std::string tensor;               // global tensor actually read
  DType dtype = DType::F16;
  std::map<std::string, int64_t> coeff;  // anchor index -> element stride (0 entries omitted)
  int64_t base = 0;
  const ir::Statement* producer = nullptr;  // inlined padding producer, or null
  const ir::Expr* guard = nullptr;          // its select condition (over producer indices), or null
  std::map<std::string, ir::AffineExpr> producer_binding;  // producer index -> affine in anchor indices
  // per-dimension indices of `tensor` (affine in anchor indices and parameters) and its shape: an
  // element outside the shape reads as 0 (the kernel IR's zero-filled copies; folded padding)
  std::vector<ir::AffineExpr> indices;
  std::vector<int64_t> shape;
};

struct Contraction {
  int anchor = -1;                         // statement index
  std::vector<ContractionDim> m, n, k, batch;  // outer -> inner
  ContractionOperand a, b;                 // a holds the M dims, b the N dims
  bool swapped = false;                    // a is the product's right factor
  DType in_type = DType::F16, acc_type = DType::F32;
  std::vector<int> epilogue;               // statement indices, in order
  std::vector<int> inlined;                // producers folded into the loads
  // the anchor's output is a dense [batch..., m..., n] Output with no epilogue: fragments can be
  // stored straight to global memory
  bool plain_output = false;
  std::map<std::string, int64_t> sizes;  // the kernel's parameter values
  int64_t size_m() const, size_n() const, size_k() const, size_batch() const;
};

// nullopt with `why` set when the kernel's function is not one contraction (+ producers/epilogue).
std::optional<Contraction> identify_contraction(const kernel::Kernel& k, std::string* why);

// Why the contraction cannot use the TensorCores of `arch` (dtype; sizes below 16 or so far from
// multiples of 16 that padded fragments would waste over a third of the work), or "".
std::string tensor_core_obstacle(const Contraction& c, const std::string& arch);

// Composes `e` (over some indices) with `binding` (index -> affine expression).
ir::AffineExpr substitute(const ir::AffineExpr& e, const std::map<std::string, ir::AffineExpr>& binding);

}  // namespace tessel::emit_cuda
