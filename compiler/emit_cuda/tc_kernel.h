// One TensorCore kernel being generated: the facts every piece of it reads, computed once.
//
// Input: the kernel IR, its identified contraction (contraction.h), a legal tile configuration
// (tile_policy.h) and the GPU machine model (isa/gpu_machine.h). TcKernel holds what the pieces
// share: the operand staging plans (operand_plan.h), fragment counts, shared-memory layout and
// size, grid tiles, C type names, and the output stream. The pieces, composed by
// emit_tensor_core.cc in this order, each append CUDA text:
//   tc_kernel.cc       device helpers, kernel preamble (shared memory, the block's tile from
//                      tile_scheduler.h, warp indices), operand loaders (cp.async / 128-bit
//                      loads, bulk copies)
//   mainloop_*.cc      accumulators and the K loop: wmma, mma_sync, wgmma (mainloop.h)
//   epilogue.cc        accumulators -> split-K reduction -> element-wise statements -> global
//   launch_builder.cc  the __global__ signature and the launches
#pragma once

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/operand_plan.h"
#include "compiler/emit_cuda/tma_plan.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// Programmatic dependent launch of a TensorCore kernel (CudaOptions::pdl, pdl_prefetch).
struct TcLaunchOptions {
  bool pdl = false;         // griddepcontrol.wait before the first global access, then launch_dependents
  bool prefetch_a = false;  // with pdl: A's prologue copies before the wait (not written by earlier kernels)
  bool prefetch_b = false;  // likewise B's
};

struct TcKernel {
  TcKernel(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m, const TcLaunchOptions& launch,
           std::ostringstream& os, std::vector<std::string>& explain);

  const kernel::Kernel& k;
  const Contraction& c;
  const TcConfig& cfg;
  const isa::GpuMachine& m;
  const TcLaunchOptions launch;
  std::ostringstream& os;
  std::vector<std::string>& explain;

  const ir::Statement& anchor;
  int64_t M = 0, N = 0, K = 0;
  bool async = false;   // cp.async copies (the machine has them)
  bool wg = false;      // wgmma main loop
  bool mma = false;     // m16n8 accumulator layout per warp (mma.sync and wgmma)
  bool i8 = false;
  bool direct = false;  // accumulators straight to global memory (tile_policy.h direct_store)
  int threads = 0;
  OperandPlan pa, pb;
  BulkPlan ba, bb;      // TcConfig::bulk: which operands the bulk copy engine fetches
  TmaPlan ta, tb;       // TcConfig::tma_ws: the operands' tensor maps
  std::string ft, acct;  // operand / accumulator C types
  std::string la, lb;    // WMMA layouts of matrix_a / matrix_b
  int warps_m = 0, warps_n = 0, fm = 0, fn = 0;  // warps along M / N, fragments per warp
  int fn8 = 0;           // m16n8 accumulator tiles along N (mma layout)
  int rstep = 0;         // rows between accumulator tiles i of a warp
  int fmx = 0;           // accumulator tiles along M (mma layout)
  int ldc = 0;           // shared accumulator row length
  int eb = 0;            // operand element bytes
  int64_t a_stage = 0, b_stage = 0;  // elements per shared stage
  int64_t smem = 0;                   // dynamic shared bytes
  int64_t tiles_m = 0, tiles_n = 0;
  std::string name;      // the __global__ function

  // C expression of an affine expression over anchor indices, with `var` mapping each index.
  std::string affine(const ir::AffineExpr& a, const std::function<std::string(const std::string&)>& var) const;
  // decomposes `lin` over dims (outer -> inner) into `prefix<var>` locals
  void decompose(const std::string& pad, const std::string& lin, const std::vector<ContractionDim>& dims, const std::string& prefix,
                 const std::string& suffix = "") const;
  int64_t output_tile_count() const { return tiles_m * tiles_n * c.size_batch(); }
};

// tc_kernel.cc: the pieces before the main loop.
void emit_device_helpers(const TcKernel& t);  // cluster, bulk-copy and wgmma helper functions
void emit_preamble(const TcKernel& t);        // shared memory, barriers, tile coordinates, warp indices
void emit_operand_loaders(const TcKernel& t); // load_a / load_b lambdas (+ the bulk copy explanation)

}  // namespace tessel::emit_cuda
