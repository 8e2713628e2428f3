// The persistent, warp-specialised wgmma kernel (TcConfig::tma_ws, `/ws`; sm_90a, issue 16),
// CUTLASS 3's "warp-specialised cooperative" design written for tessel's kernel IR.
//
// Input: a TcKernel (tc_kernel.h) whose configuration has tma_ws, with the TMA plans of both
// operands (tma_plan.h), after its signature (launch_builder.h). Output: the kernel body:
//   - shared memory: `stages` slots of both operand tiles in the 128-byte-swizzled wgmma layout,
//     one full and one empty mbarrier per slot;
//   - warpgroup 0, the producer: one thread walks the block's work units and, for each K tile,
//     waits for the slot to be empty, announces its bytes on the slot's full barrier and issues
//     the TMA copies (cp.async.bulk.tensor) of both operands into it; the warpgroup gives its
//     registers back (setmaxnreg.dec);
//   - warpgroups 1.., the consumers (setmaxnreg.inc): per K tile, wait for the slot's full barrier,
//     issue the wgmma instructions of their wm x bn slice, commit, wait until the previous K tile's
//     MMAs are done and release that slot (one arrival per warp on its empty barrier); after the
//     last K tile, the register epilogue: fused element-wise statements and the global stores
//     straight from the accumulators (m16n8 layout), no shared memory, so the producer is already
//     filling the slots with the next unit's tiles;
//   - work units (tile_scheduler.h: the order, the loops, the grid): output tiles in grouped
//     order (8 block rows share B tiles in L2), unit u on block u % grid, the grid one block per
//     SM (the machine's SM count) or fewer when there are fewer units; with stream-K (/sk) the
//     last tiles' K iterations cut into one range per block, a tile cut between blocks summed
//     from their partial tiles in global scratch by the last to finish (stream_k_fixup here).
// The ring's phase bits carry over from unit to unit; nothing but the full / empty barriers
// orders the two roles, so there is no block-wide barrier after the set-up.
#pragma once

#include "compiler/emit_cuda/tc_kernel.h"

namespace tessel::emit_cuda {

void emit_wgmma_ws_helpers(const TcKernel& t);  // tensor-map type, mbarrier, TMA and setmaxnreg helpers
void emit_wgmma_ws_body(const TcKernel& t);     // everything after the signature, closing brace included

// Registers per thread after setmaxnreg: the producer warpgroup's and each consumer's
inline constexpr int kProducerRegisters = 40;
inline constexpr int kConsumerRegisters = 232;

}  // namespace tessel::emit_cuda
