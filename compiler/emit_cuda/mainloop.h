// The main loops of a TensorCore kernel (CUTLASS 3's "collective mainloop"), one file each:
//   mainloop_wmma.cc      WMMA fragments (load_matrix_sync / mma_sync), every architecture
//   mainloop_mma_sync.cc  ldmatrix + mma.sync.m16n8k16 from the padded shared rows (sm_80+)
//   mainloop_wgmma.cc     warpgroup MMA on 128-byte-swizzled shared tiles (sm_90a), its own
//                         copy/MMA schedule (one MMA group in flight)
// and the shared pieces in mainloop.cc: the block's range of K tiles (split-K across blocks),
// programmatic dependent launch (prefetched prologue copies, griddepcontrol), and the cp.async
// multistage pipeline that the WMMA and mma.sync loops run inside.
//
// Input: a TcKernel (tc_kernel.h) whose preamble and operand loaders (load_a / load_b) are
// emitted. Output: CUDA text that declares the accumulators (acc_) and leaves them holding the
// block's (or warp slice's) partial tile, ready for the epilogue (epilogue.h).
#pragma once

#include <string>

#include "compiler/emit_cuda/tc_kernel.h"

namespace tessel::emit_cuda {

// Accumulators, K range, PDL entry and the K loop of the configuration's main loop.
void emit_mainloop(const TcKernel& t);

// mainloop.cc: the m16n8-layout accumulators acc_[rows][fn8][4] (mma.sync and wgmma) set to zero,
// and the compiler fence that keeps their reads after the MMAs' completion wait
void zero_accumulators(const TcKernel& t, int rows, const std::string& pad);
void fence_accumulators(const TcKernel& t, const std::string& pad);

// mainloop_wmma.cc
void wmma_accumulators(const TcKernel& t);
void wmma_k_tile(const TcKernel& t, int kslice);
// mainloop_mma_sync.cc
void mma_sync_accumulators(const TcKernel& t);
void mma_sync_k_tile(const TcKernel& t, int kslice);
// mainloop_wgmma.cc
void emit_wgmma_helpers(const TcKernel& t);  // descriptor, fence / commit / wait, the m64nNk16 instruction
void wgmma_accumulators(const TcKernel& t);
void wgmma_mainloop(const TcKernel& t, const std::string& prologue_loads);
// the MMAs of one K tile from slots as_ / bs_: fence, bk / 16 steps of fmx wgmma instructions, commit
void wgmma_k_tile(const TcKernel& t, const std::string& pad);

}  // namespace tessel::emit_cuda
