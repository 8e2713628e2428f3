// The fused attention kernel on the NPU (Kernel::attention, compiler/kernel/attention.h; README
// "Fused attention"): the online softmax as one program, no S x T value in GM.
//
// Takes the record of the polyhedral core's online-softmax rewrite (roles, operand strides, steps,
// prob_type, epilogue, causal_offset); gives an npu::Program without syncs (the sync pass,
// compiler/npu_sync, runs after it, as for the GEMM).
//
// Work units (batch point, block of bq query rows) go round-robin over the cores. Per unit:
//   Q block GM -(MTE2 dma_in_nz)-> L1 -(MTE1 load2d)-> L0A, once;
//   per key block of bk keys (two slots of every buffer, so block kb + 1's loads and scores run
//   while the vector unit works on block kb):
//     K block -> L1 -> L0B (Kᵀ: loaded as stored), cube S = Q·Kᵀ into L0C -(V mov_l0c)-> UB (f32);
//     the steps on the score tile (VectorCode: scale and other element-wise operators; the causal
//     select compares a column-minus-row tile with the block's diagonal offset), keys past T to
//     -inf; row maxima (vmax over the 16-column blocks, vcmax of the masked first 16 lanes);
//     m' = max(m, rowmax), c = exp(m - m'), p = exp(s - m') (vbrcb of m' per row), rounded to
//     prob_type; l = l·c + rowsum(p); P (f16) UB -(MTE3)-> L1 -(MTE1)-> L0A;
//     V block -> L1 -> L0B, cube P·V into L0C -> UB, acc = acc·c + P·V;
//   then the epilogue (O = acc, Z = l; or O = acc / l when normalised first) per 16-column block,
//   stored to GM (valid rows and columns only).
// Causal (causal_offset c >= 0): key blocks wholly above the diagonal of the unit's last row are
// skipped (each block's instructions sit in a loop of 0 or 1 trips); the mask is computed on the
// others. Sizes not multiples of 16: query rows past S and key rows past T are read (from the next
// batch point or a zero guard after the tensor) and never written, or masked; the head dim D must
// be a multiple of 16 (a refusal otherwise: the scores would add the next row's values).
// Requires: f16 Q, K, V with unit stride along d (Q, K) and e (V, Out), f32 score/sum/context
// accumulators, steps and epilogue made of the score / O / Z, constants, sizes and the causal
// select (no other tensor or index read).
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/hierarchy.h"

namespace tessel::emit_npu {

// "" when emit_attention maps the kernel's Kernel::attention, else the UserError text it would
// throw (decided by a dry run of the emitter into a throwaway program); never throws for those.
std::string why_not_attention(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_attention(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
