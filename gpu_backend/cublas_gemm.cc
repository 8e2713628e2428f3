#include "gpu_backend/cublas_gemm.h"

#include <cublas_v2.h>

#include <climits>

#include "gpu_backend/error.h"
#include "isa/base/error.h"

namespace tessel::gpu {

CublasHandle::CublasHandle(size_t workspace_bytes) : workspace_(workspace_bytes) {
  TESSEL_CUBLAS(cublasCreate(&handle_));
  TESSEL_CUBLAS(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  if (workspace_bytes) TESSEL_CUBLAS(cublasSetWorkspace(handle_, reinterpret_cast<void*>(workspace_.ptr()), workspace_bytes));
}

CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy(handle_);
}

void cublas_gemm_f16(const CublasHandle& handle, CUstream stream, const GemmShape& s, CUdeviceptr a, CUdeviceptr b,
                     CUdeviceptr c, DType c_type) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.m > INT_MAX || s.n > INT_MAX || s.k > INT_MAX)
    throw UserError("cuBLAS GEMM shape M=" + std::to_string(s.m) + ", N=" + std::to_string(s.n) + ", K=" +
                    std::to_string(s.k) + ": each size must be in 1..2^31-1");
  cudaDataType c_cuda;
  if (c_type == DType::F32)
    c_cuda = CUDA_R_32F;
  else if (c_type == DType::F16)
    c_cuda = CUDA_R_16F;
  else
    throw UserError("cuBLAS GEMM baseline: output dtype must be f32 or f16");
  const float alpha = 1.0f, beta = 0.0f;
  TESSEL_CUBLAS(cublasSetStream(handle.get(), reinterpret_cast<cudaStream_t>(stream)));
  // cuBLAS is column-major. A row-major X[r,c] is the column-major X^T with leading dimension c, so
  // row-major C = A.B is column-major C^T = B^T.A^T: swap the operands and M with N, no transposes.
  const int m = int(s.m), n = int(s.n), k = int(s.k);
  TESSEL_CUBLAS(cublasGemmEx(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                             reinterpret_cast<const void*>(b), CUDA_R_16F, n,  // B^T: n x k, ld n
                             reinterpret_cast<const void*>(a), CUDA_R_16F, k,  // A^T: k x m, ld k
                             &beta, reinterpret_cast<void*>(c), c_cuda, n,     // C^T: n x m, ld n
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tessel::gpu
