// The GPU tile policy (issue 13): which TensorCore tile configurations (TcConfig, emit_cuda.h) a
// contraction may use on a machine, and which are worth measuring, best guess first.
//
// Input: an identified contraction (contraction.h) and the GPU machine model (isa/gpu_machine.h:
// SM count, shared-memory budgets, matrix shapes, features). Output:
//   - config_obstacle: why a configuration cannot be used ("" when it can): tile divisibility by
//     the fragment shape, the features a variant needs, the shared memory it takes vs the budget;
//   - tc_candidates: the legal configurations worth measuring, ranked (weights from H200
//     measurements, emit_cuda/README.md); the emitter's default is the first, `tessel compile
//     --explain` lists them, the benches and tests measure them;
//   - the geometry the kernel pieces share with the policy (K tiles, output tiles, scratch bytes).
// Nothing here emits code; the policy never reads the kernel IR beyond the contraction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// Why `cfg` cannot be used for `c` on `m` ("" when it can).
std::string config_obstacle(const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m);

// Configurations worth measuring for `c` on `m`, best guess first. Problems with at most half as
// many output tiles as the machine has SMs also get split-K across blocks candidates (ranked
// last), unless `split_k_across_blocks` is false.
std::vector<TcConfig> tc_candidates(const Contraction& c, const isa::GpuMachine& m, bool split_k_across_blocks = true);

// The plans worth timing when only a few are (`tessel bench gpu` without --exhaustive, a quick
// sweep): the first `head` of the ranked list, then the best-ranked plan of every other family
// (block tile, warp tile, K split, main loop kind, ping-pong, split-K across blocks) in rank
// order, until `n`. The ranking orders variants within a family well (TMA stores first, H100 and
// H200 measurements) but not families against each other (wave quantisation: 128x192 or the
// ping-pong 128x128 win the BERT GEMMs, 128x64 the 1024^3 GEMM), so every family's best variant is
// timed rather than the top n of one family. On the session-27 H100 and H200 candidate timings
// (docs/results/bench_gpu_gemm_tma_store_h{100,200}.json) n = 10 keeps the fastest of 40 on every GEMM row.
std::vector<TcConfig> tc_shortlist(const std::vector<TcConfig>& ranked, size_t n = 10, size_t head = 2);

// The same for callers that know only an architecture name (the stock description of `arch`,
// isa/gpu_machine.h). `sm_count` replaces the description's SM count for split-K across blocks;
// 0 leaves K unsplit across blocks.
std::string config_obstacle(const Contraction& c, const TcConfig& cfg, const std::string& arch);
std::vector<TcConfig> tc_candidates(const Contraction& c, const std::string& arch, int sm_count = 0);

// Global scratch bytes a configuration needs (split-K and stream-K counters and partial tiles,
// then the operand copies of /rp; 0 without). Stream-K needs the machine's SM count (the
// persistent grid). The copies start at repack_scratch_offset.
uint64_t tc_scratch_bytes(const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m);
uint64_t repack_scratch_offset(const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m);

// The persistent kernel's epilogue staging (TcConfig::tma_ws, outputs that are not stored straight
// from the accumulators): per consumer warpgroup a wm x 64 f32 chunk of its accumulators, rows
// padded by 4 (0 for a plain output); with TMA stores two unpadded wm x 32 chunks.
inline constexpr int kStagedChunkColumns = 64;
// TcConfig::tma_store: chunks of 32 f32 columns (one 128-byte swizzle row), two buffers per consumer
// warpgroup
inline constexpr int kTmaStoreChunkColumns = 32;
// unrolling of the staged epilogue's element loop (independent elements in flight per thread)
inline constexpr int kStagedElementUnroll = 4;
int64_t ws_epilogue_bytes(const Contraction& c, const TcConfig& g);
// TMA stores (/ts) of the fused statements' result: one dense f16 / bf16 / f32 output, N a multiple of 4
// (the staged epilogue's 4-column groups), staged per chunk in a 128-byte-swizzled buffer
bool tma_store_fused(const Contraction& c);

// Geometry shared by the policy and the kernel pieces.
bool direct_store(const Contraction& c, const TcConfig& g);  // accumulators straight to a plain output
int64_t k_tiles(const Contraction& c, const TcConfig& g);
int64_t k_tiles_per_block(const Contraction& c, const TcConfig& g);  // split-K: the last block may get fewer, never none
int64_t output_tiles(const Contraction& c, const TcConfig& g);
// The persistent kernel's M tiles do not cross segments of this many rows (a blocked-layout
// convolution's output rows, tma_plan.h BlockedWindow); 0: M is tiled as one range.
int64_t m_segment(const Contraction& c, const TcConfig& g);
int64_t m_tiles(const Contraction& c, const TcConfig& g);  // M tiles per batch index (segments included)
inline constexpr int kAccumulatorRowPad = 4;   // shared accumulator rows are bn + 4 elements (bank spread)
inline constexpr int kStaticSharedBytes = 256; // room left for the kernels' static __shared__ variables (barriers, flags)

}  // namespace tessel::emit_cuda
