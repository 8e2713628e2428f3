// The fused attention kernel on mma.sync TensorCores (sm_80+; one code shape of attention_kernel.h),
// in the form of FlashAttention-2.
//
// A block takes `query_block` query rows of one batch point (16 rows a warp: 4 or 8 warps). Q's
// rows are copied once into shared memory (16-byte cp.async, rows padded by 16 bytes so that the 8
// row addresses of an ldmatrix fall in distinct bank groups) and read as A fragments by ldmatrix.
// K and V blocks of `key_block` keys are double-buffered: the copies of block n + 1 are in flight
// while block n computes (one barrier a block). Per key block, per warp:
//   S = Q Kᵀ by mma.sync.m16n8k16 (K rows are the "col" B operand: ldmatrix, not transposed);
//   the record's steps on each score (scale, masks, biases), keys j >= T and rows i >= S masked
//   to -inf; the online softmax in registers: the row maximum across the 4 lanes of a quad
//   (__shfl_xor_sync 1, 2), the old state rescaled by exp(m - m'), p = exp(logit - m') (0 used for
//   m' where a row is still all -inf), rounded to the record's probability dtype before the sum
//   and the product;
//   O += P V: the accumulators of two n8 score tiles are the A fragment of one k16 step once
//   packed to f16x2 / bf16x2 (FA2's register reuse), V through ldmatrix.trans.
// Decode shapes (at most 16 query rows, AttentionPlan::key_warps): the warps share one m16 tile of
// query rows and split each key block between them (16 keys a warp), each keeping its own running
// (m, l, acc); after the loop they meet in shared memory and are merged like key splits, so a
// block streams as many keys per step as it has warps.
// Causal records: key blocks above the diagonal of the whole query block are never loaded; query
// blocks are taken heaviest first. The epilogue sums each row's l across its quad and stores
// tessel_store (attention_pieces.h) per element; with key splits, the partial (m, l, acc) go to
// scratch instead (the combine launch of attention_kernel.cc finishes them).
#pragma once

#include <sstream>
#include <string>

#include "compiler/emit_cuda/attention_kernel.h"

namespace tessel::emit_cuda {

// "" when the mma.sync kernel lowers `a` on `m`, else why not.
std::string attention_mma_obstacle(const kernel::Attention& a, const isa::GpuMachine& m);
// Its tiles for `a` on `m` (key_splits left 1); requires an empty obstacle.
AttentionPlan attention_mma_plan(const kernel::Attention& a, const isa::GpuMachine& m);
// Dynamic shared memory of the plan.
int64_t attention_mma_shared_bytes(const kernel::Attention& a, const AttentionPlan& plan);
// Appends the kernel (named `name`) to `os`; returns its launch.
Launch emit_attention_mma(const kernel::Kernel& k, const kernel::Attention& a, const AttentionPlan& plan, const std::string& name,
                          std::ostringstream& os);

}  // namespace tessel::emit_cuda
