// The register-blocked SIMT contraction kernel (issue 35 item 2): contractions whose dtypes have no
// TensorCore shape on the description (f32, bf16 -> f32, i32, ...), and f32 contractions on the
// TensorCores as TF32 when the caller opts in (CudaOptions::tf32).
//
// Input: the kernel IR, its matched contraction (contraction.h), a legal SimtGemmPlan
// (simt_gemm_policy.h) and the machine model. Output: one __global__ kernel's text and its launch.
// It is composed from the TensorCore kernel's pieces wherever they apply, so operand majorness,
// im2col views, batch indices and the fused epilogue are handled once:
//   tc_kernel.h   preamble (shared memory, grouped rasterisation of the output tiles, batch
//                 indices from blockIdx.z) and the operand loaders (16-byte cp.async with zero fill
//                 on sm_80+, 128-bit or scalar loads before; K-inner or outer-inner shared rows
//                 chosen from the operand's contiguous index; bounds checks for tails)
//   this file     the multistage pipeline (stages - 1 K slices in flight, one barrier per slice)
//                 and the main loop: `simt` each thread a tm x tn register tile of FMAs (fmaf:
//                 the runtime compiles with -fmad=false) fed by 16-byte shared loads, 4 K steps per
//                 load; `tf32` each warp a tm x tn tile of mma.sync.m16n8k8 TF32 fragments read
//                 from conflict-free padded rows, operands rounded by cvt.rna.tf32.f32
//   epilogue.h    emit_element: the fused element-wise statements and the stores, per element
//                 (a plain dense output is stored directly, 16-byte stores where 4 columns are adjacent)
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// Appends the kernel to `os` (after the program's prelude and the cp.async helpers) and returns
// its launch; adds the `--explain` lines of the mapping.
Launch emit_simt_gemm(const kernel::Kernel& k, const Contraction& c, const SimtGemmPlan& plan, const isa::GpuMachine& m,
                      std::ostringstream& os, std::vector<std::string>& explain);

}  // namespace tessel::emit_cuda
