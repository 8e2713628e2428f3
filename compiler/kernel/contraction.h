// Kernel IR: the matched contraction of a kernel (Kernel::contraction), the typed record of the
// polyhedral core's one matcher (compiler/poly/contraction.h fills it; emitters only read it).
//
// A contraction is one anchor statement `C(out..) +=! cast(A(..)) * cast(B(..))` of the kernel's
// function, its index names split by role: batch (output, read by both operands), M (output, read
// by A only), N (output, read by B only), K (reductions, read by both). Each operand is described
// as the loads see it: the global tensor actually read (a padding producer `Xp = select(in
// image, X(..), 0)` inlined, so a convolution's operand is the im2col view of X), its affine
// indices over the anchor's indices, and its row-major element strides. Pointers refer to the
// kernel's tensor-IR function (Kernel::function), which outlives the kernel.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "isa/base/dtype.h"

namespace tessel::kernel {

struct ContractionDim {
  std::string var;  // index name in the anchor statement
  int64_t extent = 0;
};
// The number of points of `dims` (1 for none).
int64_t extent_product(const std::vector<ContractionDim>& dims);

// One operand as read by the loads: global tensor `tensor`, element address
// `base + sum(coeff[v] * v)` over anchor indices, present where `guard` holds (else 0).
struct ContractionOperand {
  std::string tensor;  // global tensor actually read
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
  int anchor = -1;                             // statement index
  std::vector<ContractionDim> m, n, k, batch;  // outer -> inner
  ContractionOperand a, b;                     // a holds the M dims, b the N dims
  bool swapped = false;                        // a is the product's right factor
  DType in_type = DType::F16, acc_type = DType::F32;
  std::vector<int> epilogue;  // statement indices, in order
  std::vector<int> inlined;   // producers folded into the loads
  // the anchor's output is a dense [batch..., m..., n] Output with no epilogue: fragments can be
  // stored straight to global memory
  bool plain_output = false;
  // the anchor's output as written: its indices in dimension order (batch, M and N vars) and its
  // row-major element strides (an epilogue writes its output at the same positions)
  std::vector<std::string> out_vars;
  std::map<std::string, int64_t> out_coeff;
  // the global tensors the kernel stores, in order: the anchor's output if it is an Output, then
  // each epilogue statement's that is (with their dtypes); and whether they are dense [batch...,
  // m..., n...] tensors in the dims' order (out_vars), so that a tile of M x N is a box of them
  std::vector<std::pair<std::string, DType>> stored_outputs;
  bool dense_output = false;
  std::map<std::string, int64_t> sizes;  // the kernel's parameter values
  int64_t size_m() const, size_n() const, size_k() const, size_batch() const;
};

// Composes `e` (over some indices) with `binding` (index -> affine expression), e.g. a padding
// producer's indices with ContractionOperand::producer_binding.
ir::AffineExpr substitute(const ir::AffineExpr& e, const std::map<std::string, ir::AffineExpr>& binding);

}  // namespace tessel::kernel
