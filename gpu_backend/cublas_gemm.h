// cuBLAS baseline: row-major C[M,N] = A[M,K] . B[K,N], f16 inputs, f32 compute on tensor cores
// (cublasGemmEx, CUBLAS_COMPUTE_32F), C in f32 or f16. The same contract as the tessel `matmul`
// workload, so the two are timed side by side with the harnesses of timing.h.
#pragma once

#include <cublas_v2.h>
#include <cuda.h>

#include <cstdint>

#include "gpu_backend/runtime.h"
#include "isa/base/dtype.h"

namespace tessel::gpu {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

class CublasHandle {
 public:
  // workspace_bytes: cuBLAS's own recommendation for Hopper is 32 MiB; a user workspace keeps
  // cuBLAS from allocating during graph capture.
  explicit CublasHandle(size_t workspace_bytes = size_t(32) << 20);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

// Enqueues C = A . B on `stream`. a: M*K f16, b: K*N f16, c: M*N of c_type (F32 or F16), all
// row-major and densely packed. Throws UserError for another c_type or a non-positive size.
void cublas_gemm_f16(const CublasHandle& handle, CUstream stream, const GemmShape& shape, CUdeviceptr a,
                     CUdeviceptr b, CUdeviceptr c, DType c_type = DType::F32);

}  // namespace tessel::gpu
