// CUDA emitter (`--target` a GPU description): kernel IR -> CUDA C text for NVRTC.
//
// Two code shapes, chosen per kernel:
//   - TensorCore contraction (contraction.h, tile_policy.h, emit_tensor_core.h): the seed's AutoCodeGen. The
//     anchor statement of the kernel is identified as a matrix multiply (matrix_a / matrix_b and
//     their majorness from the accesses, batch dims, im2col views through inlined padding
//     producers, fused element-wise epilogues); the block tile is the `stage` level, warps take
//     operand-level tiles, thread indices are unified per warp and fragment loops are scaled by
//     16, so the kernel is WMMA load_matrix_sync / mma_sync / store_matrix_sync. Global loads are
//     128-bit, shared memory is multi-buffered (cp.async on sm_80+) with padded rows, the K range
//     of a block tile may be split across warps (reduced in shared memory before the epilogue).
//   - SIMT contraction (simt_gemm.h): a contraction whose dtypes have no TensorCore shape (f32)
//     as a register-blocked kernel (thread tiles of FMAs over cp.async-staged K slices), or with
//     CudaOptions::tf32 on the TensorCores as TF32 (mma.sync m16n8k8), never without it.
//   - SIMT (emit_simt.cc): a direct walk of the kernel IR. ParallelCores loops -> grid, buffers ->
//     shared memory (global scratch when they do not fit), copies cooperative over the block,
//     data-parallel compute loops spread over threads, reductions sequential per thread.
//   - fused attention (attention_kernel.h): a kernel whose `attention` record is set (online
//     softmax, no S x T tensor) as the wgmma, mma.sync flash or SIMT online kernel.
// `explain` says which shape was chosen and, for SIMT, why TensorCores were not used.
// A function that uses floor division or modulo ('/', '%') in an index, range or shape
// (ir::division_use) is a UserError naming the place: neither shape lowers it yet.
// The emitter produces text only; compiling and launching live in compiler/cli/run_gpu.* (tessel_gpu).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// The choices of a TensorCore kernel that exclude one another, one enum each (TcConfig below), so
// an impossible combination cannot be written; name() gives each value's word for plans and
// `--explain` (tile_policy.cc).
// The main loop's matrix instruction family.
enum class MmaKind {
  wmma,      // WMMA fragments (load_matrix_sync / mma_sync / store_matrix_sync)
  mma_sync,  // `/mma`, sm_80+, f16 or bf16: ldmatrix + mma.sync.m16n8k16 (inline PTX)
  // `/wg` (or `/wgd`, `/ws`), sm_90a, f16 or bf16: warpgroup MMA (wgmma.mma_async) on operands in
  // 128-byte-swizzled shared memory, one warpgroup (4 warps) per wm x bn slice (wm a multiple of
  // 64), bk = 64
  wgmma,
};
// How operand tiles reach shared memory.
enum class OperandLoader {
  cp_async,  // 16-byte cp.async per thread (multi-buffered; plain loads before sm_80)
  // `/bc`, sm_90, not wgmma: operand tiles whose rows are long contiguous runs (or a whole stage
  // that is one run) are fetched by the bulk copy engine (cp.async.bulk, one copy per row, issued
  // by one warp) completing on one mbarrier per stage
  bulk,
  // `/ws`, sm_90a wgmma: a persistent, warp-specialised kernel (kernel_wgmma_ws.h). A producer
  // warpgroup issues TMA tensor-map copies (128-byte swizzle) into a ring of `stages` slots, each
  // slot with a full and an empty mbarrier; the bm / wm consumer warpgroups run wgmma on a slot as
  // soon as its bytes land and release it when their MMAs have read it (no block-wide barrier in
  // the main loop); register reallocation (setmaxnreg) moves the producer's registers to the
  // consumers; one block per SM walks the output tiles in grouped order, so the next tile's copies
  // overlap this tile's epilogue.
  tma_ws,
};
// Split-K across blocks (k_blocks > 1): how the blocks' partial tiles are combined.
enum class SplitKReduce {
  // partial tiles go to global scratch and the last block to arrive (a per-tile counter) sums them
  // in split order (deterministic) and runs the epilogue
  last_block,
  // `/red`: f32/s32 atomicAdd into the output, zeroed by a small kernel launched first (plain
  // outputs only)
  atomic,
  // `/cl`, sm_90: the k_blocks blocks of a tile form a thread-block cluster and reduce their
  // partial tiles through distributed shared memory (no global round trip, deterministic)
  cluster,
};
// The cp.async wgmma main loop (`/wg`): where a K tile's operand copies are issued.
enum class CopyIssue {
  after_mma,   // after the K tile's MMAs, stages - 2 K tiles ahead
  before_mma,  // `/cf`: before the K tile's MMAs, stages - 2 K tiles ahead
  deep,        // `/wgd`: stages - 1 K tiles ahead (a second barrier per K tile)
};
// The persistent TMA kernel (`/ws`): how its blocks take the output tiles.
enum class WsSchedule {
  grouped,  // whole tiles in grouped order, the bm / wm consumer warpgroups sharing each tile
  // `/sk`: stream-K for the tiles of the last waves (tile_policy.h stream_k_split): the full waves
  // but one take whole tiles, the rest of the tiles' K iterations are cut into one equal contiguous
  // range per block; a tile cut between blocks is summed by the last of them to finish (a per-tile
  // counter) from the partial tiles in global scratch, in block order
  stream_k,
  // `/pp`: ping-pong consumers: bm == wm, the two consumer warpgroups take alternate tiles (each a
  // whole bm x bn tile), so one's epilogue overlaps the other's main loop
  pingpong,
  // `/mc`: 2-block thread-block clusters along M; the two blocks take M-adjacent tiles of one
  // column and share its B tile: each fetches half of B's boxes and the TMA unit multicasts them
  // into both blocks' shared memory (half the L2 -> SM traffic for B); a slot is refilled when the
  // consumers of both blocks have released it
  multicast,
};
// How the accumulators reach the output.
enum class OutputStore {
  plain,        // ordinary stores
  evict_first,  // `/cs`, wgmma or mma.sync: evict-first (st.global.cs) stores
  // `/ts`, the persistent TMA kernel: a plain f32 output leaves through shared memory and the TMA
  // unit: each consumer warpgroup writes 32-column chunks of its rows into a 128-byte-swizzled
  // double buffer and one thread issues a tensor-map store per chunk (cp.async.bulk.tensor ...
  // bulk_group), which the TMA unit clips at the tensor's edges, instead of 64-bit stores from the
  // registers
  tma,
};
const char* name(MmaKind k);       // "wmma", "mma.sync", "wgmma"
const char* name(OperandLoader k);  // "cp.async", "bulk", "tma-ws"
const char* name(SplitKReduce k);  // "last-block", "atomic", "cluster"
const char* name(CopyIssue k);     // "after-mma", "before-mma", "deep"
const char* name(WsSchedule k);    // "grouped", "stream-k", "ping-pong", "multicast"
const char* name(OutputStore k);   // "plain", "evict-first", "tma"

// Tile configuration of a TensorCore kernel (elements). Warps = (bm/wm) * (bn/wn) * k_split.
struct TcConfig {
  int bm = 128, bn = 128, bk = 32;  // block tile (stage level)
  int wm = 64, wn = 64;             // warp tile (operand level): (wm/16) x (wn/16) fragments
  int k_split = 1;                  // warps sharing one output tile, each a slice of bk
  int stages = 3;                   // shared-memory buffers (2 = double buffering)
  // split-K across blocks: gridDim.y blocks share one output tile, each a contiguous range of K
  // tiles, combined as `reduce` says
  int k_blocks = 1;
  MmaKind mma = MmaKind::wmma;
  OperandLoader loader = OperandLoader::cp_async;  // tma_ws goes with MmaKind::wgmma
  SplitKReduce reduce = SplitKReduce::last_block;  // with k_blocks > 1
  CopyIssue issue = CopyIssue::after_mma;          // with MmaKind::wgmma, OperandLoader::cp_async
  WsSchedule schedule = WsSchedule::grouped;       // with OperandLoader::tma_ws
  OutputStore store = OutputStore::plain;
  // wgmma with OutputStore::evict_first: operand copies with an L2 evict-last policy (createpolicy
  // + cache_hint), `/el`
  bool keep_operands = false;
  // tma_ws, `/rp`: an operand the TMA unit cannot read in 128-byte rows in its own layout (a
  // blocked layout's 32-byte runs) is first copied into global scratch in the canonical order of
  // its role by a memory-bound kernel of the same program, and the kernel reads the copy
  // (repack_plan.h)
  bool repack = false;
  bool wgmma() const { return mma == MmaKind::wgmma; }
  bool tma_ws() const { return loader == OperandLoader::tma_ws; }
  int warps() const {
    return wgmma() ? 4 * (tma_ws() ? (schedule == WsSchedule::pingpong ? 3 : bm / wm + 1) : bm / wm) : (bm / wm) * (bn / wn) * k_split;
  }
  std::string to_string() const;    // "128x128x32/64x64/ks1/st3" (+ "/kb4" when k_blocks > 1, "/mma", "/wg")
  // to_string's form back; UserError naming the bad field, or two fields that are choices of one enum
  static TcConfig parse(const std::string& text);
};

// Plan of the register-blocked SIMT contraction kernel (simt_gemm.h): contractions whose dtypes
// have no TensorCore shape on the description (f32, ...), or f32 on the TensorCores as TF32 when the
// caller opts in (CudaOptions::tf32). Block tile bm x bn, K slices of bk staged in shared memory
// (`stages` buffers, cp.async on sm_80+). `simt`: each thread keeps a tm x tn register tile of
// FMAs (threads = bm/tm * bn/tn). `tf32`: each warp keeps a tm x tn warp tile of
// mma.sync.m16n8k8 TF32 fragments (warps = bm/tm * bn/tn), f32 accumulate.
// Text: "BMxBNxBK/TMxTN/stS/simt" or "BMxBNxBK/WMxWN/stS/tf32" (simt_gemm_plan.cc).
struct SimtGemmPlan {
  int bm = 128, bn = 128, bk = 16;
  int tm = 8, tn = 8;  // thread tile (simt) or warp tile (tf32)
  int stages = 2;
  bool tf32 = false;
  int threads(int warp_size) const { return tf32 ? (bm / tm) * (bn / tn) * warp_size : (bm / tm) * (bn / tn); }
  std::string to_string() const;
  static SimtGemmPlan parse(const std::string& text);  // UserError naming the bad field
  static bool is_plan_text(const std::string& text);   // ends in /simt or /tf32
};

// What to compile for and how: a value the caller fills (the CLI from its flags, tests and
// benches directly); the emitter keeps no state between calls.
struct CudaOptions {
  std::string arch = "sm_90";            // what to compile for: sm_75, sm_80, sm_90 (a description's gpu.arch)
  // The target's machine model (the --target description, isa/gpu_machine.h): SMs, shared-memory
  // budgets, matrix shapes, features. Absent, or of another arch than `arch` (a device that differs
  // from the description): the stock description of `arch` (isa::stock_gpu_machine).
  std::optional<isa::GpuMachine> machine;
  std::optional<TcConfig> config;        // TensorCore tiles; default: the tile policy's first candidate (tile_policy.h)
  bool tiles_from_kernel = false;        // take block/warp tiles from the kernel IR's buffers (--tile given)
  // `config` (or the kernel IR's tiles) is what the user asked for: a plan the kernel cannot run
  // is a UserError with the reason, never replaced by the policy's choice
  bool plan_required = false;
  bool allow_tensor_cores = true;        // false: always SIMT
  bool row_kernels = true;               // row programs as register row kernels (row_kernel.h); false: the SIMT walk
  // sm_90+: programmatic dependent launch. The kernel lets the next kernel of the stream start
  // (griddepcontrol.launch_dependents) and waits for the previous one to finish and flush
  // (griddepcontrol.wait) before its first global memory access, so only the launch and the
  // index set-up overlap the previous kernel. Launch::pdl tells the runtime to launch it with the
  // programmatic-stream-serialisation attribute. Single-kernel TensorCore programs only.
  bool pdl = false;
  // With pdl: input tensors that no earlier kernel of the stream writes (weights, constants). The
  // prologue copies of such an operand are issued before griddepcontrol.wait, so they overlap the
  // previous kernel's tail. Naming a tensor that the previous kernel does write is a race.
  std::vector<std::string> pdl_prefetch;
  // The SIMT contraction plan (the caller's, e.g. --tile 128x128x16/8x8/st2/simt); default: the
  // tile policy's first candidate (simt_gemm_plan.h)
  std::optional<SimtGemmPlan> simt_plan;
  // sm_80+: f32 contractions run on the TensorCores with TF32 inputs (10-bit mantissa, rounded to
  // nearest by cvt.rna.tf32.f32) and f32 accumulation. An explicit opt-in, never a default.
  bool tf32 = false;
  // SIMT programs: a group whose tiles each read what a fixed set of the previous group's tiles
  // writes (a split reduction's phase two) runs in the last of those tiles to arrive, not as a
  // launch of its own (simt_finalise.h). Off by default: on the H200 it took reduce.sum_lead from
  // 8.09 to 6.53 us but made batch norm, group norm and a whole-tensor sum slower (one block
  // folds a phase two that a launch spreads over several; docs/results/gpu_split_finalisation_h200.md).
  bool finalise_split_reductions = false;
};

// A TMA tensor map the runtime builds at launch (cuTensorMapEncodeTiled) over a global tensor's
// buffer, passed by value after the scratch pointer (a __grid_constant__ 128-byte parameter).
struct TensorMapSpec {
  std::string tensor;              // the Kernel::tensors entry whose buffer the map covers
  // the map covers the program's global scratch from this byte offset instead (an operand's copy,
  // repack_plan.h); `tensor` names the copy
  bool in_scratch = false;
  uint64_t scratch_offset = 0;
  DType dtype = DType::F16;
  int64_t base = 0;                // element offset of the view's origin in the buffer
  std::vector<uint64_t> dims;      // elements per dimension, innermost first
  std::vector<uint64_t> strides;   // bytes between steps of dims 1.. (dim 0 is contiguous)
  std::vector<uint32_t> box;       // elements per dimension of one copy
  int swizzle_bytes = 128;         // shared-memory swizzle span: 0 (none), 32, 64 or 128
  // im2col mode (cuTensorMapEncodeIm2col, a rank-4 NHWC tensor): each copy gathers `pixels`
  // pixels of `channels` channels along the W, H, N walk of the bounding box whose corners are
  // `lower` / `upper` (W first; offsets from the first and last pixel of each image); `box` unused
  bool im2col = false;
  std::vector<int> lower, upper;
  uint32_t channels = 0, pixels = 0;
};

// One launch of the program, in order. Every kernel takes one pointer per Kernel::tensors entry
// (in that order, temporaries included) followed by a scratch pointer, then its tensor maps.
struct Launch {
  std::string kernel;
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 256;
  uint32_t dynamic_shared_bytes = 0;
  bool pdl = false;  // launch with programmatic stream serialisation (CudaOptions::pdl)
  std::vector<TensorMapSpec> tensor_maps;
};

struct CudaProgram {
  std::string source;
  std::string arch;                      // what NVRTC must compile the source for (sm_90a for wgmma)
  std::vector<Launch> launches;
  bool tensor_cores = false;
  std::optional<TcConfig> config;        // set for TensorCore programs
  std::optional<SimtGemmPlan> simt_gemm;  // set for register-blocked SIMT / TF32 contraction programs
  std::string plan;                      // other shapes' plan for reports ("attention/wgmma/128x128")
  uint64_t scratch_bytes = 0;            // global scratch the launches share (zeroed once)
  std::vector<std::string> explain;      // `--explain` lines
  double flops = 0;                      // 2*M*N*K of the contraction (0 when none)
};

CudaProgram emit_cuda(const kernel::Kernel& k, const CudaOptions& options = {});

// The machine model emit_cuda uses for `options` (see CudaOptions::machine).
isa::GpuMachine machine_for(const CudaOptions& options);

}  // namespace tessel::emit_cuda
