// bf16 widening (pass "widen_bf16", after split_division_tails; NPU targets whose vector unit has
// no bf16 arithmetic but lists the conversions bf16 <-> f32, isa/targets/davinci-*.yaml): a
// statement that computes with bf16 values computes in f32 instead, its bf16 operands converted
// where they are read and each bf16 result rounded to bf16 (nearest even: to bf16 and back, two
// vconvs), as the reference interpreter rounds every bf16 operation:
//   Y(i) = X(i) * Z(i) + X(i)           (bf16 X, Z, Y)
// becomes
//   Y(i) = f32(bf16(f32(X(i)) * f32(Z(i)))) + f32(X(i))      (stored to bf16: the store rounds)
// A bf16 sum or product stays a bf16 reduction of an f32 term (rounded where computed); the vector
// lowering accumulates it in f32 and rounds the accumulator after every step, in the interpreter's
// order (compiler/emit_npu/nest.cc, body_compute). A bf16 read broadcast over some of the
// statement's indices (a contraction's operands) reads an f32 copy made first
// (X_f32(c0, ..) = f32(X(c0, ..)); an input's once). Every value is the interpreter's, bit for bit.
// Statements that only move bf16 values are left as written (the copies move bytes).
// A bf16 contraction accumulated in f32, C(..) +=! f32(A(..)) * f32(B(..)) with f32 C, is left as
// written where a contraction mapping takes it (WidenBf16Options): the cube, where the description
// lists a bf16 x bf16 -> f32 shape (its products are exact in f32), or the vector contraction, the
// function's only statement in its form, C(m, n) of A(m, k) or A(k, m) and B(k, n) with no batch
// (compiler/emit_npu/vector_gemm.h: its operands converted to f32 in UB).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

// Which mappings take a bf16 contraction accumulated in f32 as written (see above).
struct WidenBf16Options {
  bool cube = false;    // the cube has a bf16 x bf16 -> f32 shape
  bool vector = false;  // the vector contraction converts bf16 operands (the function's only statement)
  std::string no_cube;  // why the cube does not take one ("the cube of X has no bf16 shape"), for the lines
};

// The function with its bf16 arithmetic widened to f32, or nothing where no statement computes
// with bf16 (or every one is a contraction left as written). `widened` (optional) receives a line per
// statement changed or left ("S1: computed in f32, each bf16 result rounded"; "S0: reads A as an f32
// copy (A_f32)"; "S0: a bf16 contraction, on the cube as written").
std::optional<ir::Function> widen_bf16(const ir::Function& f, std::vector<std::string>* widened = nullptr,
                                       const WidenBf16Options& options = {});

// Whether statement `s` computes with bf16 values (an operation with a bf16 operand or result,
// or a reduction accumulating in bf16); a cast between bf16 and f32 alone is a conversion, not
// arithmetic, when `conversions_ok`.
bool computes_bf16(const ir::Statement& s, bool conversions_ok = false);

}  // namespace tessel::poly
