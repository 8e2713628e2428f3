// The fused attention kernel on sm_90a warpgroup MMA (Kernel::attention, compiler/kernel/attention.h):
// one code shape of the CUDA emitter's attention lowering (attention_kernel.h dispatches to it).
//
// A block takes 64 query rows a consumer warpgroup, 1-3 warpgroups (WgmmaAttentionPlan: one where two
// would not fill the SMs, three for a value dim of 64), of one batch point; each warpgroup keeps its
// 64 rows' running maximum, sum and context in registers. Per key block of 128 keys: the scores
// S = Q Kᵀ by wgmma.m64n128k16 (Q and the K tile K-major in 128-byte-swizzled shared memory), the
// record's steps (scale, mask, bias: any element-wise expression of the score and its indices) and
// the online softmax on the accumulators (row max and sum across the 4 lanes of a row), the
// probabilities rounded as the record says and packed into wgmma's register A operand (the
// accumulator layout of two n8 tiles is the A fragment of one k16 step), then O += P V by
// wgmma.m64nEk16 with V N-major (transposed by the descriptor). K and V tiles come by TMA from a
// producer warpgroup into a ring of slots, or double-buffered by cp.async (AttentionCopies). Causal blocks
// above the diagonal are never loaded. The epilogue divides by the sum (or not, normalise-first),
// applies the record's epilogue expression and stores through the output's strides.
//
// Conditions (attention_wgmma_obstacle says which fails): the machine has wgmma, Q/K/V f16 (or
// bf16, all three alike), one head index and one value index of 64 or 128, unit stride along them
// and row strides that keep 16-byte copies aligned, f32 accumulation, at least 64 query rows.
#pragma once

#include <sstream>
#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/kernel/attention.h"
#include "compiler/kernel/kernel_ir.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

inline constexpr int kAttentionWarpgroups = 2;   // 128 query rows per block (3: 192, value dim 64 only)
inline constexpr int kAttentionKeyBlock = 128;   // keys per block (the S wgmma's N)

// How K and V tiles reach shared memory. CpAsync: every thread issues 16-byte cp.async copies of
// the next block, two buffers, a block barrier per key block. TmaProducer: warp specialisation —
// one more warpgroup (its registers given to the others by setmaxnreg) whose one thread fetches Q
// once and K / V blocks into a ring of slots by TMA (tensor maps over each operand's view, the
// 128-byte swizzle of the wgmma layout, rows past the end zero-filled), each slot with a full and
// an empty mbarrier, so the consumer warpgroups never wait on each other. Auto: TMA, with
// ping-pong for two consumer warpgroups, where the operands' maps are legal
// (attention_tma_obstacle), else cp.async. TmaPingPong: TmaProducer whose
// two consumer warpgroups take turns issuing their MMAs (named barriers), so one's softmax runs
// while the other's MMAs hold the tensor cores (FA3's inter-warpgroup schedule; one warpgroup: as
// TmaProducer).
enum class AttentionCopies { Auto, CpAsync, TmaProducer, TmaPingPong };

// The wgmma kernel's plan: `attention/wgmma/<rows>x128/<copies>[/heavy][/lazy][/persistent[/dynamic]][/occN]`.
//   warpgroups: consumer warpgroups of 64 query rows a block, 1-3 (3: a value dim of 64 only, each
//     consumer then has 160 registers; K / V tiles shared by 192 rows);
//   copies: TmaPingPong with 2-3 warpgroups takes turns in a ring of named barriers;
//   heavy_first: query blocks in reverse order (causal: the blocks with the most key blocks start
//     first, the short ones fill the last wave);
//   lazy_rescale: the context is rescaled only where a row maximum of the warp grew (a warp vote),
//     not on the first key block;
//   persistent (TMA copies only): one block an SM walks the (query block, batch point) tiles, its
//     ring of K / V slots and Q's barrier running on across tiles, so the producer fetches the next
//     tile while the consumers finish the last (heavy-first: tiles ordered longest first).
//   dynamic (persistent only): a block claims its next tile from a global counter (one tile ahead, an
//     atomic add by the producer, passed to the consumers in shared memory with Q's barrier), tiles
//     in batch-point order with their query blocks adjacent (heavy-first: reversed within a batch
//     point), so blocks that drew short tiles take more (the hardware's order, kept across tiles);
//   occupancy: blocks resident on an SM at once, 1-4 (`/occN`): the register file and shared memory
//     split between them (the registers at entry and after setmaxnreg, the ring of K / V slots sized
//     to a block's share; one slot: the producer fetches K_(j+1) before V_j), so one block's Q load,
//     first copies and epilogue overlap another's MMAs (short sequences, where they are a large part of
//     a block's time). attention_wgmma_occupancy_obstacle says what does not fit.
// Always on (no option): S's first MMA overwrites the accumulators (no zeroing), exponentials by
// ex2.approx.ftz, and a scale step `score * c` (c > 0, f32) folded into the exponent's FMA on the
// blocks without masking.
struct WgmmaAttentionPlan {
  int warpgroups = 2;
  AttentionCopies copies = AttentionCopies::Auto;
  bool heavy_first = false, lazy_rescale = false, persistent = false, dynamic = false;
  int occupancy = 1;
  std::string to_string() const;  // Auto prints as the copies it resolves to
};

// The plan the policy picks for `a` on `m` (consumer warpgroups from the SM count and the value dim,
// ping-pong TMA where legal, heavy-first for a causal mask, lazy rescale).
WgmmaAttentionPlan plan_attention_wgmma(const kernel::Attention& a, const isa::GpuMachine& m);

// A given `attention/wgmma/...` plan text checked against `a` on `m`: UserError naming the field and
// the reason (rows, copies, ping-pong with one warpgroup, 192 rows with a value dim of 128, TMA obstacles).
WgmmaAttentionPlan parse_attention_wgmma(const std::string& text, const kernel::Attention& a, const isa::GpuMachine& m);

// "" when the wgmma kernel lowers `a` on `m`, else why not.
std::string attention_wgmma_obstacle(const kernel::Kernel& k, const kernel::Attention& a, const isa::GpuMachine& m);

// "" when `occupancy` blocks of `plan` (its copies resolved) fit an SM of `m` together: the consumer
// warpgroups' registers (S, O and P accumulators and the rest) and Q with two K / V buffers (cp.async)
// or at least one ring slot (TMA); else why not.
std::string attention_wgmma_occupancy_obstacle(const WgmmaAttentionPlan& plan, const kernel::Attention& a, const isa::GpuMachine& m);

// "" when TMA can fetch Q, K and V (tensor maps on `m`, 16-byte aligned origins and strides, at most
// 3 batch indices per operand), else why not.
std::string attention_tma_obstacle(const kernel::Attention& a, const isa::GpuMachine& m);

// Appends the kernel of `plan` and its launch to `p` (source in `os`, explain lines, arch sm_90a,
// p.plan = plan.to_string()).
void emit_attention_wgmma(const kernel::Kernel& k, const kernel::Attention& a, const isa::GpuMachine& m, std::ostringstream& os,
                          CudaProgram& p, const WgmmaAttentionPlan& plan);

}  // namespace tessel::emit_cuda
