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
// 64-wide atom, atom after atom. Used by the tile policy (legality) and the kernel emitter.
#pragma once

#include <string>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/operand_plan.h"

namespace tessel::emit_cuda {

struct TmaPlan {
  bool ok = false;
  std::string why;                     // why the operand cannot use TMA (when !ok)
  TensorMapSpec map;
  int boxes = 1;                       // copies per stage
  int64_t box_elems = 0;               // shared elements one copy fills (box_elems * boxes = the stage)
  int64_t stage_bytes = 0;             // bytes per stage (all boxes)
  std::vector<std::string> batch_vars; // coordinates after the first two: these batch indices, in map order
};

// The global-memory rules of tensor maps (CUDA driver API, cuTensorMapEncodeTiled): the base
// address and every byte stride 16-byte aligned, strides below 2^40, box sides at most 256.
inline constexpr int kTmaAlignBytes = 16;
inline constexpr int kTmaMaxBox = 256;
inline constexpr int kTmaMaxRank = 5;

TmaPlan tma_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m);

}  // namespace tessel::emit_cuda
