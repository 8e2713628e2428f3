// The fused attention kernel on the NPU (Kernel::attention, compiler/kernel/attention.h; README
// "Fused attention"): the online softmax as one program, no S x T value in GM.
//
// Takes the record of the polyhedral core's online-softmax rewrite (roles, operand strides, steps,
// prob_type, epilogue, causal_offset); gives an npu::Program without syncs (the sync pass,
// compiler/npu_sync, runs after it, as for the GEMM).
//
// Work units (batch point, block of bq query rows) go round-robin over the cores (one loop over
// the units; causal, where every core has a batch point: one loop over the batch points per query
// block instead, so that each block's key-block count is static). The blocks, L1 slots and UB
// regions are the plan's (attention_plan.h). Per unit:
//   Q block GM -(MTE2 dma_in_nz)-> L1 -(MTE1 load2d)-> L0A, once; where the first step multiplies
//   the score by a constant c (0 < |c| <= 1, no select: find_scale), Q's block is staged in UB
//   once, converted to f32, multiplied by c and rounded to f16 once, so the steps read the scores
//   as the cube leaves them;
//   per key block of bk keys, or per group of two key blocks (units of >= 4 blocks, >= 2 units a
//   core, where L1 and UB allow: 2 x group L1 slots, one row maximum and one context rescale per
//   group, the group's P.V accumulated in one L0C region); the next block's (group's) K and V
//   loads and scores are emitted before this one's vector work, so the cube and the copies run
//   while the vector unit works. L0B holds K and V side by side in two slots or one, or one region
//   they take in turn; at d128 that region is two halves filled piece by piece (pk = bk / 2, an
//   mmad per piece), so MTE1 fills one half while the cube reads the other:
//     K block -> L1 -> L0B (Kᵀ: loaded as stored), cube S = Q·Kᵀ into L0C -(V mov_l0c)-> UB (f32);
//     the steps on the score tile (VectorCode, in place: element-wise operators; the causal select
//     compares a column-minus-row tile with the block's diagonal offset; a tensor a step reads (an
//     additive mask) comes by one dma_in per 16-column block), keys past T to -inf; row maxima
//     (vmax over the 16-column blocks, vcmax of the masked first 16 lanes);
//     m' = max(m, rowmax), c = exp(m - m'); x = s - m' (vbrcb of m' per row) in f32, rounded to
//     f16, and p = exp(x) on f16 lanes, written over its own score tile: that is P for the cube;
//     P (f16) UB -(MTE3)-> L1 -(MTE1)-> L0A; V block -> L1 -> L0B with a block of ones after its
//     columns, so the cube's P·V (into L0C -> UB) also gives each row's sum of p in its last
//     16-column block; acc = acc·c + P·V (its last block is l);
//   then the epilogue (O = acc, Z = l; or O = acc / l when normalised first) per 16-column block,
//   stored to GM (valid rows and columns only: the row count in a register).
// Rounding: with a folded scale each score is sum_d f16(c q_d) k_d (each term within one f16 unit
// in the last place of c q_d k_d; c = 2^-k is exact); x is rounded to f16 before the exponential,
// whose f16 result is P (its added error, at most e^-1 2^-11, is below P's own f16 rounding, which
// the cube needs anyway); the sum l adds the rounded values (exactly as the context does); scores,
// maxima, the rescale factors, l and the context are f32.
// Causal (causal_offset): with the per-query-block sections, the key blocks above the block's
// diagonal are skipped and the mask is computed only on blocks that cross it; otherwise every block
// is computed (and masked where row 0 does not see its last key). No loop that may run no trip is
// emitted: the sync pass's pruning (every loop modelled as running twice) would rely on syncs
// inside it. Sizes not multiples of 16: query rows past S and key rows past T are read (from the
// next batch point or a zero guard after the tensor) and never written, or masked; head and value
// dimensions are padded to the fractal (Q's padding zeroed through UB).
// Requires: f16 Q, K, V with unit stride along d (Q, K) and e (V, Out), f32 score/sum/context
// accumulators, steps made of the score, constants, sizes, the causal select and tensors read
// along the keys with unit stride (rows at least 16 elements apart); an epilogue of O and Z.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/hierarchy.h"

namespace tessel::emit_npu {

// "" when emit_attention maps the kernel's Kernel::attention, else the reason it would refuse it
// with (a UserError there), decided by analysis before any emitting: the record's form, the plan's
// blocks and buffers, each step's and the epilogue's operator forms and UB regions.
std::string why_not_attention(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_attention(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
