// How one contraction operand is staged in shared memory for a TensorCore kernel (issue 13).
//
// Input: an identified contraction (contraction.h), one operand, the block tile along its outer
// dims and K, and the GPU machine model (isa/gpu_machine.h: widest access, bulk-copy alignment).
// Output: an OperandPlan (vector width, K-inner or outer-inner shared rows, padding or the wgmma
// swizzle, which tensor dims need bounds checks) and, for the bulk copy engine, a BulkPlan (row
// copies per stage, or why the operand keeps cp.async). Used by the tile policy (legality) and by
// the kernel pieces (loaders, main loops), so both see one layout.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

inline int elem_bytes(DType t) { return dtype_bytes(t); }  // f16 2, i8 1, f32 4 (the SIMT contraction kernel stages f32)

inline std::string S(int64_t v) { return std::to_string(v); }

// wgmma operands use the 128-byte swizzle mode of the PTX matrix descriptors: the pattern repeats
// every 8 rows of 128 bytes, so swizzled stages start on 1024-byte boundaries.
inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kSwizzleAlignBytes = 1024;
inline constexpr int kDescriptorUnitBytes = 16;  // matrix-descriptor addresses and offsets count 16-byte units

// How one operand is staged in shared memory.
struct OperandPlan {
  const ContractionOperand* op = nullptr;
  const std::vector<ContractionDim>* outer = nullptr;  // M dims for A, N dims for B
  const std::vector<ContractionDim>* kdims = nullptr;
  int tile_outer = 0, bk = 0;
  int vec = 1;           // elements per load (1: scalar, synchronous)
  bool k_inner = true;   // shared tile [outer][bk + pad]; else [bk][outer + pad]
  int pad = 0;
  // wgmma: 128-byte-swizzled canonical layout, no padding. K-inner: rows of 64 elements (128 B),
  // 16-byte chunk c of row r at chunk c ^ (r % 8). Outer-inner: 64-wide atoms of bk rows (K) of
  // 128 B, atom after atom, chunk c of K row r at c ^ (r % 8). Stages 1024-byte aligned.
  bool swz = false;
  int64_t outer_size = 0;
  std::set<std::string> guard_vars;  // anchor indices the guards depend on
  std::vector<int> bounded;          // tensor dims needing a bounds check
  int ld() const { return (k_inner ? bk : tile_outer) + pad; }
  int stage_elems() const { return (k_inner ? tile_outer : bk) * ld(); }
};

// The staging of `op` (A: outer = M dims, B: N dims) for a tile_outer x bk block tile; `swizzle`:
// the wgmma 128-byte-swizzled layout instead of padded rows.
OperandPlan plan_operand(const ContractionOperand& op, const Contraction& c, const std::map<std::string, int64_t>& sizes,
                         const std::vector<ContractionDim>& outer, const std::vector<ContractionDim>& kd, int tile_outer, int bk,
                         int64_t outer_size, const isa::GpuMachine& m, bool swizzle = false);

// How the bulk copy engine fetches one stage of an operand tile (TcConfig::bulk): `rows` copies of
// `row_elems` contiguous elements, `row_stride` elements apart in global memory, into shared rows
// ld() apart; `whole`: the rows are adjacent in global memory, so the stage is one copy into
// unpadded shared rows. `why` says why the operand keeps cp.async.
struct BulkPlan {
  bool ok = false, whole = false;
  int rows = 0, row_elems = 0;
  int64_t row_stride = 0, k_stride = 0;  // global elements per outer row / per K step
  std::string outer_var, k_var;
  std::string why;
};

BulkPlan bulk_plan(const OperandPlan& p, const Contraction& c, const isa::GpuMachine& m);

}  // namespace tessel::emit_cuda
