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

#include <string>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/operand_plan.h"

namespace tessel::emit_cuda {

// The implicit-GEMM view of an NHWC convolution's input that the im2col mode gathers: output
// pixel m = (n, p, q) over N x P x Q, K tile kt = (tap r, s; 64 channels from c0) over R x S x C
// (channels innermost), input pixel (h, w) = (p + dh * r + h0, q + dw * s + w0).
struct Im2colView {
  int64_t P = 0, Q = 0, R = 0, S = 0, C = 0;
  int64_t h0 = 0, w0 = 0;  // the window's offset (-padding)
  int64_t dh = 1, dw = 1;  // dilation
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
};

// The global-memory rules of tensor maps (CUDA driver API, cuTensorMapEncodeTiled): the base
// address and every byte stride 16-byte aligned, strides below 2^40, box sides at most 256.
inline constexpr int kTmaAlignBytes = 16;
inline constexpr int kTmaMaxBox = 256;
inline constexpr int kTmaMaxRank = 5;

// `min_boxes`: at least this many copies per stage (a K-inner stage split along its rows), so
// that the blocks of a cluster can each fetch a share (TcConfig::multicast)
TmaPlan tma_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m, int min_boxes = 1);

}  // namespace tessel::emit_cuda
