// Reduction splitting (pass "split_reductions", after fold_padding; GPU targets): a reduction
// statement with fewer outputs than the machine has parallel units and a long reduced range (a
// column reduction, whose outputs go to threads: fewer than column_outputs_per_unit per unit)
//   T(o) op=! e(o, r)                                        r in lo:hi, L = hi - lo elements
// becomes a two-phase reduction through a local tensor of partial results (TVM's rfactor):
//   T_partial(o, c) op=! select(c*B + j < L, e(o, lo + c*B + j), identity)    c in 0:C, j in 0:B
//   T(o)            op=! T_partial(o, c)                                      c in 0:C
// (T_partial(c, o) for a column reduction with many outputs: SplitPolicy::chunk_major_outputs)
// Phase one has o x C independent outputs, so the polyhedral core finds the chunk loop c
// parallel and the GPU spreads it over blocks; phase two folds the C partials of each output in
// chunk order. Both phases and the order within a chunk are fixed, so the result is deterministic
// (no atomics); for f32 sums it is a reassociation of the reference's sequential sum, within
// emit_c::reassociated_sum_tolerance. For max and min the guard's else value is the element at
// r = lo (already in the set, so it changes nothing); for sums it is 0, for products 1 (the
// partials of a product are combined by phase two's product: no atomics are needed).
//
// A reduction over several short indices whose product is long (a batch norm's sum over N, H, W)
// splits its outermost index into chunks of whole slices instead.
//
// Only `op=!` statements (Sum, Prod, Max, Min starting from the identity) are split, but not a
// product of f16 / bf16 (it rounds at every step: the interpreter's order is its result); `+=` accumulations
// and user tile specs (which name the original indices) are left alone. The chunk length B is a
// multiple of `granule` (so vector loads of a chunk stay aligned), at most `max_chunk`, and C is
// about `chunks_per_unit` x parallel units / outputs (more where chunks would be longer).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

struct SplitPolicy {
  int64_t parallel_units = 0;      // e.g. the GPU's SM count; 0: never split
  int64_t chunks_per_unit = 4;     // phase one aims at this many chunks per unit
  int64_t min_length = 8192;       // fewer reduced elements per output stay in one phase
  int64_t granule = 1024;          // chunk length multiple
  int64_t max_chunk = 8192;        // longer chunks are cut (more chunks): a chunk's box stays small
  // a column reduction (ir::is_column_reduction) aims at this many outputs (threads) per unit
  int64_t column_outputs_per_unit = 256;
  // a column reduction's chunks are at least this long (and it is split only when it has two)
  int64_t column_min_chunk = 32;
  // a column reduction with at least this many outputs stores its partials chunk-major,
  // T_partial(c, o): both phases map a thread per output, so phase one's tile stores a chunk's
  // outputs side by side and phase two's warps read them coalesced; 0: never (the default:
  // measured on the H200 it pays only with a finalised phase two, CudaOptions::
  // finalise_split_reductions, and made a max over the middle axis slower, 5.95 -> 7.19 us)
  int64_t chunk_major_outputs = 0;
};

struct ReductionSplit {
  std::string statement;  // the original statement's name ("S0")
  std::string index;      // the reduced index that was split
  int64_t length = 0, chunks = 0, chunk = 0;  // L, C, B
  std::string partial;    // the local tensor of partial results
  std::string to_string() const;
};

// The rewritten function (statements renumbered S0, S1, ...) and what was split, or nullopt when
// no statement qualifies. `sizes` binds every size parameter.
std::optional<ir::Function> split_reductions(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                             const SplitPolicy& policy, std::vector<ReductionSplit>* splits);

}  // namespace tessel::poly
