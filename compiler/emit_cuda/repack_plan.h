// Operand repacking for the persistent TMA kernel (TcConfig::repack, `/rp`, issue 16).
//
// An operand whose own layout the TMA unit cannot read in 128-byte swizzled rows -- a blocked
// layout's 32-byte channel runs (X[NB, H, W, CB, 16, 16], read through 32-byte boxes), a filter
// [R, S, CB, KB, 16, 16] whose N runs are 32 B -- is copied once per call into the program's
// global scratch with its dims permuted into the canonical order of its role; the main kernel
// reads the copy through an ordinary 128-byte-swizzled map (an im2col gather for a convolution
// window). The copy is a memory-bound permutation (repack_kernel.h) launched before the main
// kernel in the same program. f32 operands read as TF32 (contraction.h tf32_wgmma_operand) are
// also copied where they are not K-contiguous (wgmma .tf32 reads K-major tiles only): the K group
// goes innermost (B[K, N] becomes [N, K]; the copy transposes).
//
// Input: the contraction (contraction.h), a tile configuration (its block tile decides whether an
// operand's own layout already has a 128-byte TMA plan, tma_plan.h), the GPU machine model and the
// scratch offset where the copies may start. Output: a RepackPlan -- per copied operand the
// permutation, the copy's shape, the width of the copy kernel's moves, its scratch offset and
// bytes -- and the contraction the main kernel reads: the operand re-described over its copy
// (tensor `scratch:<name>`, `base` the copy's element offset in scratch, no padding producer:
// indices outside the copy's shape read as 0, which is exactly what the padding guard said --
// checked, tma_plan.h guard_is_bounds), its outer dims (M for A, N for B) reordered to the copy's
// order. Or why not (`why`). Pure analysis: no code is written here.
//
// Canonical order of a copy (outer -> inner), each group keeping the tensor's order:
//   1. dims whose index reads no outer or K index (batch indices, constants);
//   2. the group that is not the contiguous one (outer-only or K-only dims);
//   3. window dims (an index reading outer and K indices: h = p + r - 1);
//   4. the contiguous group: the group of the tensor's innermost dim (K-only dims when that is a
//      window dim), K-only dims in the contraction's K order.
// An operand read through a window that needs a copy sets the K order first: the window's K
// indices, then the others (the im2col gather's (r, s, c)); the other operand is judged, and
// copied if it must be, in that order.
// So the blocked input [NB, H, W, CB, 16 ni, 16 ci] becomes [NB, 16 ni, H, W, CB, 16 ci] (an NHWC
// tensor with N = (nb, ni) and C = (cb, ci); M is then walked as (nb, ni, p, q)) and the blocked
// filter [R, S, CB, KB, 16 ci, 16 ki] becomes [R, S, CB, 16 ci, KB, 16 ki] ([R*S*C, K]); an NCHW
// input [N, C, H, W] becomes NHWC and its filter [K, C, R, S] becomes [K, R, S, C]. Where the
// innermost dim stays, the copy moves runs of it (16-byte moves where it is a multiple of 16 B);
// where it moves, the copy kernel transposes through shared memory (repack_kernel.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// The tensor name of an operand read from its copy in scratch: "scratch:<tensor>".
inline constexpr const char* kScratchCopyPrefix = "scratch:";
bool in_scratch(const std::string& tensor);

// Copies start on this boundary in scratch (tensor maps need 16 B; the swizzle pattern is
// computed from global addresses in 1024-byte units).
inline constexpr uint64_t kCopyAlignBytes = 1024;

struct OperandCopy {
  std::string source;                // the kernel tensor copied
  DType dtype = DType::F16;
  std::vector<int64_t> source_shape;
  std::vector<int> perm;             // copy dim d is source dim perm[d]
  std::vector<int64_t> shape;        // the copy's shape (source_shape permuted)
  int move_bytes = 0;                // bytes per move of the copy kernel (a divisor of the innermost run; one element when it transposes)
  uint64_t offset = 0, bytes = 0;    // where the copy lies in scratch
  int64_t elements() const;
};

struct RepackPlan {
  bool ok = false;
  std::string why;
  std::vector<OperandCopy> copies;  // A's first
  Contraction contraction;          // what the main kernel reads
  uint64_t scratch_end = 0;         // scratch bytes up to the end of the last copy
};

RepackPlan plan_repack(const Contraction& c, const TcConfig& g, const isa::GpuMachine& m, uint64_t scratch_offset);

}  // namespace tessel::emit_cuda
