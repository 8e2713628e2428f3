// The fused attention kernel without TensorCores (one code shape of attention_kernel.h): any
// dtypes, any strides, any number of head and value indices, any architecture.
//
// One warp per query row (grid-stride over batch x rows x key splits), keys in blocks of 32, one
// a lane: each lane computes its key's score (the head dims flattened, f32 products and sum),
// applies the record's steps, the warp takes the block maximum and the sum of the probabilities
// (__shfl_xor_sync), and the context row is spread over the lanes (value element e at lane e % 32),
// each probability broadcast to all lanes (__shfl_sync) for acc += p V(j, e). O(T) work and no
// memory beyond registers per row; correct, not fast (Q and K rows are re-read from L1 / L2).
// Causal records stop each row at its last key block. With key splits, the partial (m, l, acc)
// go to scratch (attention_pieces.h) for the combine launch.
#pragma once

#include <sstream>
#include <string>

#include "compiler/emit_cuda/attention_kernel.h"

namespace tessel::emit_cuda {

inline constexpr int kAttentionSimtWarps = 4;  // warps (query rows in flight) a block

// Appends the kernel (named `name`) to `os`; returns its launch (one block per kAttentionSimtWarps
// rows and splits, at most `max_blocks`).
Launch emit_attention_simt(const kernel::Kernel& k, const kernel::Attention& a, const AttentionPlan& plan, const std::string& name,
                           int64_t max_blocks, std::ostringstream& os);

}  // namespace tessel::emit_cuda
