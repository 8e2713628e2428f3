// `tessel compile --explain[=all]`'s plan section (analysis; changes nothing): the plan the command
// runs and where it came from, the bound it targets and the alternatives the target's tile policy
// could run, each with the analytic model's predicted time (compiler/tune/cost_model.h).
//   NPU: the roofline of the kernel (compiler/kernel/roofline.h: cycles, the bound that binds) and
//        the default search space of tile specs (compiler/tune/space.h) ranked by predicted cycles;
//        the chosen plan's own prediction beside them.
//   GPU: the policy's TensorCore plans (run_gpu.h gpu_plan_space) in its order, the shortlist
//        (emit_cuda::tc_shortlist: every plan family's best variant) first; each priced by the
//        analytic model at its block / warp tiles and tensor-core path (WMMA, mma.sync, wgmma);
//        variants of one family (epilogue, stages) share a prediction.
// `top` alternatives are printed (0: all of them). Needs the compilation's function and options
// (the model re-runs the passes before tiling once).
#pragma once

#include <iosfwd>
#include <string>

#include "compiler/cli/run_gpu.h"
#include "compiler/pipeline.h"

namespace tessel::program {
struct ProgramCompilation;
}

namespace tessel::cli {

// `gpu`: the GPU flags of the command (--tf32 changes which kernel an f32 contraction runs).
void explain_plan(const ir::Function& f, const CompileOptions& options, const Compilation& c, int top, std::ostream& os,
                  const GpuFlags& gpu = {});

// `compile --explain` of a def compiled to several kernels (compiler/program/program.h): each
// kernel's roofline on one line (GPU: compiler/kernel/gpu_roofline.h, NPU: roofline.h) and their
// sum, the program's bound (its kernels run one after another). "" for the C target.
std::string explain_program_bounds(const program::ProgramCompilation& p, const std::string& target, const GpuFlags& gpu = {});

}  // namespace tessel::cli
