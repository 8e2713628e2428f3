// TensorCore code shape of the CUDA emitter (see emit_cuda.h): one WMMA / mma.sync / wgmma kernel
// for an identified contraction (contraction.h) and a legal tile configuration (tile_policy.h).
//
// Input: the kernel IR and its contraction (tensor order = parameter order), the configuration,
// the GPU machine model (isa/gpu_machine.h) and the launch options (PDL). Output: the kernel's
// CUDA text appended to `os`, its launch (returned), launches that must run before it (the
// output zeroing of atomic split-K, appended to `before`) and the mapping decisions (`explain`).
// The kernel is composed from separate pieces (tc_kernel.h lists them): preamble and operand
// loaders, one main loop (mainloop.h), one epilogue (epilogue.h), the launch builder
// (launch_builder.h).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/tc_kernel.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// UserError when `cfg` is not legal for `c` on `m` (config_obstacle).
Launch emit_tensor_core(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const isa::GpuMachine& m,
                        const TcLaunchOptions& launch, std::ostringstream& os, std::vector<std::string>& explain,
                        std::vector<Launch>* before);

}  // namespace tessel::emit_cuda
