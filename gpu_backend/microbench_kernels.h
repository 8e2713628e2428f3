// The CUDA C sources of the microbenchmarks (gpu_backend/microbench.h), one module per group, for
// a device architecture. Apart from the runner so that a test compiles every module with NVRTC on
// a machine without a GPU (tests/gpu/test_microbench_kernels.cc).
#pragma once

#include <string>
#include <vector>

#include "isa/base/dtype.h"

namespace tessel::gpu {

struct MicrobenchModule {
  std::string name;    // "memory", "tma", "wmma_f16", "mma_bf16", "wgmma_i8"
  std::string arch;    // NVRTC architecture ("sm_90a" for wgmma)
  std::string source;  // extern "C" kernels
  // tensor-core modules: the kernel, the path's name in the report, the types, the block size and
  // the multiply-accumulates one block does per loop iteration (kernel(int iters, long long*
  // cycles, int* sink), one clock64 count per block)
  std::string kernel, path;
  DType a = DType::F16, acc = DType::F32;
  unsigned threads = 0;
  double macs_per_iter_per_block = 0;
};

// Every module the device architecture ("sm_75", "sm_90") can run.
std::vector<MicrobenchModule> microbench_modules(const std::string& device_arch);

}  // namespace tessel::gpu
