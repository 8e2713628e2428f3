// The tile policy of the register-blocked SIMT contraction kernel (simt_gemm.h; issue 35 item 2):
// which SimtGemmPlan values (emit_cuda.h) a contraction may use on a machine, and which one to run.
//
// Input: an identified contraction (contraction.h) and the GPU machine model (isa/gpu_machine.h:
// SM count, warp size, threads per block, registers and shared memory per SM, mma.sync shape).
// Output:
//   - simt_gemm_obstacle: why the kernel cannot take a contraction at all ("" when it can): dtypes
//     (the accumulator must be f32 or i32, both operands one dtype; TF32 needs f32 and mma.sync),
//     operands the shared loads cannot read;
//   - simt_plan_obstacle: why one plan cannot run ("" when it can): tile divisibility, the thread
//     count, the shared memory of its stages, the accumulators a thread keeps;
//   - simt_gemm_candidates: the legal plans, ranked by a small analytic model (waves of blocks over
//     the SMs, the fraction of an SM's lanes the resident blocks keep busy, the FMAs per shared
//     load of the register tile, a latency per K slice); the emitter's default is the first,
//     `--explain` lists them.
// Nothing here emits code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// Why no SIMT contraction plan can take `c` on `m` ("" when one can); `tf32`: the TF32 main loop.
std::string simt_gemm_obstacle(const Contraction& c, const isa::GpuMachine& m, bool tf32);

// Why `plan` cannot run `c` on `m` ("" when it can).
std::string simt_plan_obstacle(const Contraction& c, const SimtGemmPlan& plan, const isa::GpuMachine& m);

// Legal plans of the kind `tf32` asks for, best guess first (empty when simt_gemm_obstacle says why).
std::vector<SimtGemmPlan> simt_gemm_candidates(const Contraction& c, const isa::GpuMachine& m, bool tf32);

// The model's estimate for ranking (arbitrary units, lower is better).
double simt_plan_cost(const Contraction& c, const SimtGemmPlan& plan, const isa::GpuMachine& m);

// Blocks per SM the kernel asks for in __launch_bounds__: 2 where two blocks' shared memory fits an
// SM and 128 registers per thread hold the tile (8x8 thread tiles measured 130 registers without
// the bound and one block per SM on an H100), else 1.
int simt_min_blocks_per_sm(const Contraction& c, const SimtGemmPlan& plan, const isa::GpuMachine& m);

// Shared-memory geometry the policy and the kernel share: an operand's shared row padding
// (elements) and the dynamic shared bytes of a plan.
int simt_operand_pad(const SimtGemmPlan& plan, bool k_inner, int tile_outer, int elem_bytes);
int64_t simt_plan_shared_bytes(const Contraction& c, const SimtGemmPlan& plan, const isa::GpuMachine& m);

}  // namespace tessel::emit_cuda
