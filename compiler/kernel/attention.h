// Kernel IR: a softmax fused into the contraction that consumes it (Kernel::attention), the typed
// record of the polyhedral core's online-softmax rewrite (compiler/poly/online_softmax.h finds it;
// emitters only read it).
//
// The pattern, as a user writes attention (index names are the record's roles):
//   S(b.., i, j)  +=! Q(b.., i, d) * K(b.., j, d)          scores: a contraction over the head dim d
//   [T(b.., i, j) =  f(S(b.., i, j), i, j, ..)]             element-wise steps: scale, mask, bias
//   Mx(b.., i)    max=! g(T(b.., i, j))                      row maximum (g: an inline step, or a read)
//   E(b.., i, j)  =  exp(g(T(b.., i, j)) - Mx(b.., i))       (optionally rounded: f16(exp(..)))
//   Z(b.., i)     +=! E(b.., i, j)                           normaliser (casts allowed)
//   then either the context divided afterwards
//     O(b.., i, e) +=! E(b.., i, j) * V(b.., j, e)
//     [On(b.., i, e) = h(O(b.., i, e), Z(b.., i))]           epilogue, e.g. f16(O / Z)
//   or the probabilities normalised first (the softmax-then-matmul form)
//     P(b.., i, j) = E(b.., i, j) / Z(b.., i)               (optionally rounded)
//     O(b.., i, e) +=! P(b.., i, j) * V(b.., j, e)
//     [On(b.., i, e) = h(O(b.., i, e))]
// is computed in one pass over blocks of j: a running maximum m, a running sum l and the partial
// context acc are kept per row i; for each block, m' = max(m, max_j logit), the old state is
// rescaled by exp(m - m'), p_j = exp(logit_j - m') (rounded as E is), l = l * c + sum p_j,
// acc = acc * c + sum p_j * V(j, :); at the end O = acc, Z = l (divide-after form), or O = acc / l
// (normalise-first form), then the epilogue. No S x S value is ever stored.
//
// Rounding difference from the unfused definition: p_j is
// exp(logit - m') with the running maximum instead of the row's final one, rescaled later by
// exp(m' - m_final) in f32; where E is rounded to f16/bf16 the rounding happens at a different
// scale (relative error per term at most one unit in the last place of the rounded type, as in the
// unfused form), and in the normalise-first form P is not rounded before the context.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/kernel/contraction.h"
#include "isa/base/dtype.h"

namespace tessel::kernel {

// A global tensor read (or written) at an affine position of the attention's indices: element
// `base + sum(coeff[v] * v)` of the row-major tensor, v over the role index names below.
struct AttentionOperand {
  std::string tensor;
  DType dtype = DType::F16;
  std::map<std::string, int64_t> coeff;  // role index name -> element stride (0 entries omitted)
  int64_t base = 0;
  std::vector<int64_t> shape;
  int64_t stride(const std::string& var) const {
    auto it = coeff.find(var);
    return it == coeff.end() ? 0 : it->second;
  }
};

// An element-wise expression of the record, printed by the emitters with their expression
// printers: `expr` is an ir::Expr of the kernel's function; its index names map to role names by
// `rename` (e.g. the statement's "s" -> the record's "i"); a read of `input` stands for the
// running value (the score before this step, or O / Z in an epilogue: `inputs`); any other read
// is a global tensor of the kernel (a mask, a bias), indexed through `rename`.
struct AttentionExpr {
  const ir::Expr* expr = nullptr;
  std::map<std::string, std::string> rename;   // statement index name -> role name
  std::map<std::string, std::string> inputs;   // tensor read -> which running value: "score", "O", "Z"
  DType type = DType::F32;                     // the value is rounded to this dtype (its tensor's)
};

struct Attention {
  std::vector<int> statements;  // every statement the kernel replaces, program order
  std::string name;             // the pattern's short form for --explain ("S -> Mx, E, Z -> O -> On")
  // Index roles, outer -> inner. batch: shared by every tensor (b, h); query i; key j (the online
  // axis); head d (the score contraction's reduction); value e (the context's columns).
  std::vector<ContractionDim> batch;
  ContractionDim query, key;
  std::vector<ContractionDim> head, value;
  AttentionOperand q, k, v;     // Q(batch, i, d), K(batch, j, d), V(batch, j, e) as read
  // S's, Z's and O's accumulators: f32 (the matcher requires it: a def that sums in f16 rounds
  // every term, which no blocked order reproduces). Kept in the record for the emitters' checks.
  DType score_type = DType::F32;
  // logit(i, j) = steps applied in order to the score (each step's input is the previous value)
  std::vector<AttentionExpr> steps;
  DType prob_type = DType::F32;  // E's dtype: p_j is rounded to it before the sum and the context
  DType sum_type = DType::F32, context_type = DType::F32;
  bool normalise_first = false;  // P = E / Z before the context: O = acc / l
  // out(batch, i, e) = epilogue(O, Z) (divide-after form: reads "O" and "Z"; normalise-first: "O"),
  // or O itself when there is no epilogue statement (epilogue.expr null)
  AttentionExpr epilogue;
  AttentionOperand out;  // the tensor written, over batch, i, e
  // The steps mask j > i + causal_offset to -inf (a `select(j <= i + c, x, -inf)` step the matcher
  // recognised): kernels may skip key blocks wholly above the diagonal; the steps still compute
  // the mask on blocks that cross it.
  std::optional<int64_t> causal_offset;
  std::map<std::string, int64_t> sizes;
  int64_t size_batch() const;
  // 2 * batch * i * j * (d + e): the two contractions, unmasked
  double flops() const;
  // the same with the masked blocks' share removed (causal: about half)
  double effective_flops() const;
};

std::string to_string(const Attention& a);

}  // namespace tessel::kernel
