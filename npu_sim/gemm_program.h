// A generated NPU program: C[M,N] (f32) = A[M,K] (f16) x B[K,N] (f16), row-major in GM, tiled
// tm x tn x tk and double-buffered in L1, L0A, L0B and L0C. Output tiles are spread over
// `cores` cores (core c takes tiles c, c + cores, ...). Used by `tessel bench sim` and the tests;
// it is also a worked example of building an npu::Program in C++ (as the NPU backend will).
#pragma once

#include <cstdint>

#include "isa/npu_machine.h"
#include "isa/npu_program.h"

namespace tessel::npu_sim {

struct GemmTiling {
  int64_t m = 1024, n = 1024, k = 1024;
  int64_t tm = 128, tn = 128, tk = 128;  // multiples of the cube's fractal that divide m, n, k
  int cores = 1;
};

// Tensors: A at GM+0, B after it, C after B; fractal shapes from `machine`. Throws UserError for
// sizes that do not tile.
npu::Program make_gemm_program(const GemmTiling& t, const isa::NpuMachine& machine);

}  // namespace tessel::npu_sim
