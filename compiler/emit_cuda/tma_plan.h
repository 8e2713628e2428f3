// How the TMA unit fetches one stage of a wgmma operand tile (TcConfig::tma_ws, issue 16).
//
// Input: an operand's staging plan (operand_plan.h: the 128-byte-swizzled wgmma layout, K-inner
// or outer-inner), the contraction and the GPU machine model. Output: a TmaPlan — the tensor map
// over the operand's global tensor (dims innermost first, byte strides, the box of one copy, the
// 128-byte swizzle), the copies per stage and where each lands in the stage, and the order of the
// copy coordinates — or why the operand cannot be fetched this way (`why`).
//
// The map is the operand's view, not the tensor's shape: dim 0 is the contiguous one (K for a
// K-inner operand, the outer dim otherwise), dim 1 the other of K / outer, then one dim per batch
// index the operand depends on. Boxes past the view's end are zero-filled by the TMA unit (tails
// of K, M, N need no guards) and still count their full bytes on the transaction barrier.
// A K-inner stage is one box {64, tile_outer}: tile_outer rows of 128 B, which is exactly the
// swizzled K-inner layout; an outer-inner stage is tile_outer / 64 boxes {64, bk}, one per
// 64-wide atom, atom after atom. Several outer or K dims are one map dim where their strides
// compose (a filter [R, S, C, K] read as [R*S*C, K]). A K-inner operand read through an NHWC
// convolution window (the im2col view of the contraction, padding included) uses the im2col mode
// instead: one copy per stage gathers tile_outer output pixels' 64 channels of one filter tap, the
// padding zero-filled by the TMA unit (the padding guard is checked to be exactly the input's
// bounds). Used by the tile policy (legality) and the kernel emitter.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/operand_plan.h"

namespace tessel::emit_cuda {

// The implicit-GEMM view of an NHWC convolution's input that the im2col mode gathers: output
// pixel m = (n, p, q) over N x P x Q, K tile kt = (tap r, s; 64 channels from c0) over R x S x C
// (channels innermost), input pixel (h, w) = (p + dh * r + h0, q + dw * s + w0). N and C may each
// be several plain dims that compose densely (a repacked blocked input [NB, NI, H, W, CB, CI]:
// M = (nb, ni, p, q), K = (r, s, cb, ci); repack_plan.h).
struct Im2colView {
  int64_t N = 0, H = 0, W = 0;  // the input's images and rows / columns
  int64_t P = 0, Q = 0, R = 0, S = 0, C = 0;
  int64_t h0 = 0, w0 = 0;  // the window's offset (-padding)
  int64_t dh = 1, dw = 1;  // dilation
};

// Blocked layouts have inner blocks of 32 B (16 f16), narrower than the 128-byte swizzle. The TMA
// unit gives each inner row of a box its own swizzle-wide row in shared memory (measured on an
// H100, tests/gpu/test_runtime.cc), so 32-byte runs of different blocks cannot be packed into
// one 128-byte row: these operands use the 32-byte swizzle, whose rows are exactly one block,
// and the wgmma descriptors of that layout (mainloop_wgmma.cc).
inline constexpr int kNarrowSwizzleBytes = 32;

// The implicit-GEMM view of a convolution input in a blocked layout X[NB, H, W, CB, NI, CI] (NI
// images and CI channels innermost, e.g. 16 x 16): M = (nb, p, q, ni) over NB x P x Q x NI, K =
// (r, s, cb, ci) over R x S x CB x CI, input pixel (h, w) = (p + dh * r + h0, q + dw * s + w0).
// A tiled map gathers it: dims {ci, ni, w, cb, nb * H + h} (strides not in increasing order), one
// box {CI, NI, tile_outer / NI, 64 / CI, 1} per stage: for each channel block of the K tile, the
// tile's rows (tile_outer / NI pixels of one output row times NI images) of CI = 16 channels, 32 B
// each, 32-byte swizzle (a K-major slice per 16-deep K step). The M tiles are cut per output row
// (segments of Q * NI rows, m_segment): pixels past Q and the columns of the padding are
// zero-filled as out of bounds; a tap whose input row is padding fetches a box wholly past W.
struct BlockedWindow {
  int64_t NB = 0, H = 0, W = 0, CB = 0, NI = 0, CI = 0;
  int64_t P = 0, Q = 0, R = 0, S = 0;
  int64_t h0 = 0, w0 = 0, dh = 1, dw = 1;
};

// An outer-inner operand whose outer dim is split in two (o_hi, o_lo) with o_lo contiguous (32 B)
// and its K dims (k_hi.., k_lo) with k_lo strided, e.g. a blocked filter [R, S, CB, KB, 16 ci,
// 16 ki] read as K = (r, s, cb, ci) x N = (kb, ki): dims {o_lo, k_lo, o_hi, k_hi}, one box {OL,
// KL, tile_outer / OL, bk / KL} per stage: rows of OL outer elements, KL rows per outer block,
// 32-byte swizzle (the N-major layout with 16-wide atoms).
struct SplitOuter {
  int64_t OL = 0, KL = 0;
};

struct TmaPlan {
  bool ok = false;
  std::string why;                     // why the operand cannot use TMA (when !ok)
  TensorMapSpec map;
  int boxes = 1;                       // copies per stage
  int64_t box_elems = 0;               // shared elements one copy fills (box_elems * boxes = the stage)
  int64_t stage_bytes = 0;             // bytes per stage (all boxes)
  std::vector<std::string> batch_vars; // coordinates after the first two: these batch indices, in map order
  bool im2col = false;                 // the operand is an NHWC convolution input gathered in im2col mode
  Im2colView view;
  bool blocked = false;                // a blocked-layout convolution input (BlockedWindow)
  BlockedWindow bview;
  int64_t m_segment = 0;               // blocked: M rows per output row (Q * NI); M tiles do not cross them
  bool split_outer = false;            // an outer-inner operand with a split outer dim (SplitOuter)
  SplitOuter sview;
};

// The blocked-layout window of `op` read with M dims `m` and K dims `k` (BlockedWindow), or why
// not. A pure function of the contraction, so that the tile count (m_tiles) needs no plan.
std::string blocked_window(const ContractionOperand& op, const std::vector<ContractionDim>& m, const std::vector<ContractionDim>& k,
                           const std::map<std::string, int64_t>& sizes, BlockedWindow& v);

// The padding guard of an inlined producer is exactly "the input element is in bounds" ("" when
// it is, or when there is no guard), so that out-of-bounds reads may be zero-filled instead.
std::string guard_is_bounds(const ContractionOperand& op, const std::map<std::string, int64_t>& sizes);

// The global-memory rules of tensor maps (CUDA driver API, cuTensorMapEncodeTiled): the base
// address and every byte stride 16-byte aligned, strides below 2^40, box sides at most 256.
inline constexpr int kTmaAlignBytes = 16;
inline constexpr int kTmaMaxBox = 256;
inline constexpr int kTmaMaxRank = 5;

// `min_boxes`: at least this many copies per stage (a K-inner stage split along its rows), so
// that the blocks of a cluster can each fetch a share (TcConfig::multicast)
TmaPlan tma_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m, int min_boxes = 1);

}  // namespace tessel::emit_cuda
