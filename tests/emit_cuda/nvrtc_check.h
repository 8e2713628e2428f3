// Shared by the CUDA emitter tests: the generated program compiles under NVRTC for its architecture
// (a check message with NVRTC's log otherwise); nothing where tessel is built without CUDA.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "gpu_backend/nvrtc_compile.h"

namespace tessel::cuda_test {

inline void compiles_under_nvrtc(const emit_cuda::CudaProgram& p) {
#ifdef TESSEL_HAVE_CUDA
  std::string log;
  try {
    gpu::compile_to_cubin(p.source, {.arch = p.arch});
  } catch (const std::exception& ex) {
    log = ex.what();
  }
  CHECK_MESSAGE(log.empty(), log);
#else
  (void)p;
#endif
}

}  // namespace tessel::cuda_test
