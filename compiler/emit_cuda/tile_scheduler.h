// The tile scheduler of the GPU GEMM-like kernels (issue 29): the one place that maps a block's
// linear index or a work unit to (batch index, M tile, N tile, K range), and the one place the
// launch grid of those kernels comes from. Its users: the TensorCore kernels (wmma, mma.sync,
// cp.async wgmma; tc_kernel.cc, mainloop.cc, launch_builder.cc), the SIMT contraction kernel
// (simt_gemm.cc) and the persistent warp-specialised kernel (kernel_wgmma_ws.cc). The fused
// attention kernels keep their own order (one block per query tile and head).
//
// Contract. `tile_schedule(c, cfg, m)` describes a configuration's schedule as numbers
// (TileSchedule). Everything else is derived from that one value:
//   - host: `TileSchedule::grid()`, the launch grid;
//   - device: the CUDA text computing the coordinates (emit_grid_tile, emit_split_k_range,
//     emit_persistent_work, emit_pingpong_tiles, emit_persistent_tile) with the same numbers;
//   - reference: C++ evaluations of the same formulas (grouped_tile, split_k_range,
//     persistent_work), which define what the text computes and which the unit tests check
//     (tests/emit_cuda/test_tile_scheduler.cc).
// The orders:
//   - grouped rasterisation (L2-friendly): the tiles of one batch index, rows x cols, are taken in
//     groups of kRasterGroupRows tile rows; linear tile p is in group g = p / (G x cols), whose
//     rows are first = g x G .. first + size - 1, size = min(rows - first, G); within the group
//     q = p % (G x cols) is tile (first + q % size, q / size): a group's tiles walk down its
//     rows first, so consecutive blocks share B tiles (the last group may have fewer rows);
//   - plain grid: grid = (rows x cols, k_blocks, batch); block x is the grouped tile, z the batch
//     index, y the split-K block, which takes K tiles [y x per, min((y + 1) x per, K tiles)),
//     per = ceil(K tiles / k_blocks) (the policy never leaves one empty);
//   - persistent (TcConfig::tma_ws): grid = (blocks, 1, 1); work unit u numbers the batch index
//     u / (rows x cols) and the grouped tile u % (rows x cols); units [0, dp_tiles) are taken
//     whole, block b the units b, b + blocks, ... (ping-pong: its consumer warpgroup w the
//     block's units w, w + 2, ...; multicast: units are pairs of M-adjacent tiles, rows counts
//     pairs, cluster c = blockIdx.x / 2 takes the units c, c + blocks / 2, ...); with stream-K the
//     other sk_tiles tiles' W = sk_tiles x K tiles iterations are cut into `blocks` ranges, block
//     b the range [b W / blocks, (b + 1) W / blocks), cut again at tile boundaries into pieces.
// Generated names: tile_ (work unit), bz_ (batch index), pid_ (tile within the batch index), m0_ /
// n0_ (tile origin), mend_ (rows from it on are not stored), bv_<var> (batch indices), kt0_ (first
// K tile), kt_total_ / ktn_ (K tile count), sk_ / head_ / sk_tile_ (stream-K pieces).
// Split-K across blocks (plain grid, SplitKReduce::last_block) and stream-K combine a tile's
// partials through global scratch: first an arrival counter (unsigned) per tile whose K range is
// cut between blocks, then the partial tiles from split_counter_bytes(those tiles) on. A plain-grid
// split-K block's counter and partials' slot are its output tile's, its (batch index, tile) pair
// numbered z x (rows x cols) + x (split_k_tile; the text's tile_, emit_split_k_tile); a stream-K
// piece's are its stream-K tile's, sk_tile_.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

struct TcKernel;

inline constexpr int kRasterGroupRows = 8;  // tile rows of one rasterisation group (they share B tiles in L2)
inline constexpr int64_t kCounterBytes = 256;  // split-K / stream-K scratch: alignment of the partial tiles after the counters

// The persistent kernel's split of the output tiles (TcConfig::tma_ws): `blocks` blocks (one per
// SM, fewer when there are fewer tiles); `dp_tiles` tiles taken whole, block b the tiles b, b +
// blocks, ...; with stream_k the other `sk_tiles` tiles' K iterations (sk_tiles x K tiles) cut
// into `blocks` contiguous ranges, block b from b * W / blocks (W = sk_tiles x K tiles). Stream-K
// applies when the tiles are not a whole number of waves: the last wave plus one full wave.
// Multicast: dp_tiles counts pairs of M-adjacent tiles, blocks is even (2-block clusters).
struct PersistentSplit {
  int64_t blocks = 0, dp_tiles = 0, sk_tiles = 0, k_tiles = 0;
  int64_t sk_iterations() const { return sk_tiles * k_tiles; }
};
PersistentSplit persistent_split(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m);

struct TileSchedule {
  bool persistent = false;  // TcConfig::tma_ws
  bool pairs = false;       // multicast: units are pairs of M-adjacent tiles
  int64_t batch = 1;        // batch indices
  int64_t tiles_m = 0, tiles_n = 0;  // output tiles per batch index (M segments included)
  int64_t k_tiles = 0;
  int64_t k_blocks = 1, k_per_block = 0;  // split-K across blocks (plain grid)
  int64_t group_rows = kRasterGroupRows;
  PersistentSplit split;  // persistent only
  int64_t rows() const { return pairs ? (tiles_m + 1) / 2 : tiles_m; }  // unit rows of the rasterisation
  std::array<unsigned, 3> grid() const;
};
TileSchedule tile_schedule(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m);
TileSchedule tile_schedule(const TcKernel& t);

// Reference evaluations (what the generated text computes).
struct TileCoord {
  int64_t m = 0, n = 0;  // tile row (unit row with pairs) and column
};
TileCoord grouped_tile(int64_t pid, int64_t rows, int64_t cols, int64_t group_rows = kRasterGroupRows);
struct KRange {
  int64_t begin = 0, count = 0;  // K tiles
};
KRange split_k_range(const TileSchedule& s, int64_t k_block);
// Split-K across blocks: the output tile (counter and partials' slot) of the block at blockIdx.x =
// block_x, blockIdx.z = block_z; the tiles a split-K kernel counts: every output tile.
int64_t split_k_tile(const TileSchedule& s, int64_t block_x, int64_t block_z);
int64_t split_k_tiles(const TileSchedule& s);
// Bytes of `tiles` arrival counters, rounded up to kCounterBytes (where the partial tiles start).
int64_t split_counter_bytes(int64_t tiles);
struct WorkPiece {
  int64_t tile = 0, kt0 = 0, ktn = 0;
  bool sk = false, head = false;  // a piece of a stream-K tile cut between blocks; the block's first stream-K piece
};
std::vector<WorkPiece> persistent_work(const PersistentSplit& p, int64_t block, bool pairs = false);
int64_t stream_k_block(const PersistentSplit& p, int64_t iteration);  // the block whose range holds a stream-K iteration

// Device text. Plain grid: the block's tile origin (m0_, n0_) and batch indices from blockIdx.
void emit_grid_tile(const TcKernel& t);
// Plain grid: kt0_ and kt_total_ of this block (split-K: blockIdx.y's range).
void emit_split_k_range(const TcKernel& t);
// Plain grid, split-K across blocks: tile_, the block's output tile (split_k_tile).
void emit_split_k_tile(const TcKernel& t);
// Persistent: the coordinates of work unit tile_ (bz_, m0_, n0_, mend_, bv_<var>).
void emit_persistent_tile(const TcKernel& t, const std::string& pad);
// Persistent: the block's work, identical in the producer and the consumers: whole tiles, then its
// stream-K range cut at tile boundaries; `body` emits one piece (its second argument: the
// stream-K part, where sk_tile_ numbers the stream-K tiles).
void emit_persistent_work(const TcKernel& t, const PersistentSplit& ps, const std::string& pad,
                          const std::function<void(const std::string&, bool)>& body);
// Persistent ping-pong: consumer warpgroup cw_ walks the block's whole tiles cw_, cw_ + 2, ...
// (lt_ the block's tile number, it_ its first ring iteration); `body` emits one tile.
void emit_pingpong_tiles(const TcKernel& t, const PersistentSplit& ps, const std::string& pad, const std::function<void(const std::string&)>& body);
// Stream-K: C expressions of the block whose range holds iteration `iteration`, and of whether
// block `block`'s range starts in stream-K tile `tile`.
std::string stream_k_block_of(const PersistentSplit& ps, const std::string& iteration);
std::string stream_k_starts_in(const PersistentSplit& ps, const std::string& block, const std::string& tile);

}  // namespace tessel::emit_cuda
