// Errors of the CUDA libraries: each names the failing call and the library's own text for the
// status ("cuMemAlloc: out of memory (CUDA_ERROR_OUT_OF_MEMORY)").
//
// A failing CUDA call is neither the user's mistake nor, in general, a tessel bug (no GPU, a busy
// or broken device, an old driver), so GpuError is its own kind; the CLI prints it and exits 1.
// An NVRTC compile failure is CompileError, which carries the compile log.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <nvrtc.h>

#include <stdexcept>
#include <string>

#include "isa/base/error.h"

namespace tessel::gpu {

class GpuError : public std::runtime_error {
 public:
  GpuError(std::string call, std::string status, const std::string& detail = {});
  const std::string& call() const { return call_; }
  const std::string& status() const { return status_; }

 private:
  std::string call_, status_;
};

// The CUDA source did not compile. A UserError: where the source is generated, the emitter that
// produced it catches this and reports an internal error of its own.
class CompileError : public UserError {
 public:
  CompileError(const std::string& message, std::string log) : UserError(message), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

void check_cu(CUresult result, const char* call);
void check_nvrtc(nvrtcResult result, const char* call);
void check_cublas(cublasStatus_t status, const char* call);
void check_cudnn(cudnnStatus_t status, const char* call);

}  // namespace tessel::gpu

// TESSEL_CU(cuMemAlloc(&p, n)): calls through the loaded driver table and checks the result.
#define TESSEL_CU(call) ::tessel::gpu::check_cu(::tessel::gpu::driver().call, #call)
#define TESSEL_NVRTC(call) ::tessel::gpu::check_nvrtc(call, #call)
#define TESSEL_CUBLAS(call) ::tessel::gpu::check_cublas(call, #call)
#define TESSEL_CUDNN(call) ::tessel::gpu::check_cudnn(call, #call)
