// The CUDA driver API, loaded at run time from libcuda.so.1.
//
// tessel_gpu never links libcuda: CI machines have the toolkit (NVRTC, cuBLAS, cuDNN) but no
// driver, and a binary linked against libcuda.so.1 would not even start there. Each entry point is
// looked up once by the ABI name cuda.h maps it to (cuMemAlloc -> cuMemAlloc_v2), so the function
// types below are exactly the header's.
#pragma once

#include <cuda.h>

#include <string>

namespace tessel::gpu {

// X(function) for every driver entry point tessel uses.
#define TESSEL_DRIVER_FUNCTIONS(X) \
  X(cuInit)                        \
  X(cuDriverGetVersion)            \
  X(cuGetErrorString)              \
  X(cuGetErrorName)                \
  X(cuDeviceGetCount)              \
  X(cuDeviceGet)                   \
  X(cuDeviceGetName)               \
  X(cuDeviceGetAttribute)          \
  X(cuDeviceTotalMem)              \
  X(cuDevicePrimaryCtxRetain)      \
  X(cuDevicePrimaryCtxRelease)     \
  X(cuCtxSetCurrent)               \
  X(cuCtxSynchronize)              \
  X(cuModuleLoadData)              \
  X(cuModuleUnload)                \
  X(cuModuleGetFunction)           \
  X(cuFuncSetAttribute)            \
  X(cuFuncGetAttribute)            \
  X(cuLaunchKernel)                \
  X(cuLaunchKernelEx)              \
  X(cuMemAlloc)                    \
  X(cuMemFree)                     \
  X(cuMemcpyHtoD)                  \
  X(cuMemcpyDtoH)                  \
  X(cuMemcpyDtoDAsync)             \
  X(cuMemsetD8)                    \
  X(cuStreamCreate)                \
  X(cuStreamDestroy)               \
  X(cuStreamSynchronize)           \
  X(cuStreamBeginCapture)          \
  X(cuStreamEndCapture)            \
  X(cuGraphInstantiate)            \
  X(cuGraphLaunch)                 \
  X(cuGraphExecDestroy)            \
  X(cuGraphDestroy)                \
  X(cuEventCreate)                 \
  X(cuEventRecord)                 \
  X(cuEventSynchronize)            \
  X(cuEventElapsedTime)            \
  X(cuEventDestroy)                \
  X(cuStreamWaitEvent)

struct DriverApi {
#define TESSEL_X(fn) decltype(&::fn) fn = nullptr;
  TESSEL_DRIVER_FUNCTIONS(TESSEL_X)
#undef TESSEL_X
};

// The loaded driver, with cuInit(0) done. Throws GpuError when libcuda.so.1 is missing, lacks an
// entry point, or cuInit fails (no GPU, driver/toolkit mismatch).
const DriverApi& driver();

// Entry points a driver may lack without tessel being unusable (looked up on first use; nullptr
// where the driver has none): cuTensorMapEncodeTiled (CUDA 12+, TMA descriptors; the
// microbenchmarks' TMA copy rate, gpu_backend/microbench.h).
using TensorMapEncodeTiledFn = decltype(&::cuTensorMapEncodeTiled);
TensorMapEncodeTiledFn tensor_map_encode_tiled();
// cuTensorMapEncodeIm2col (CUDA 12+): TMA descriptors whose copies gather convolution windows
// (the persistent kernel's implicit-GEMM operand, compiler/emit_cuda/tma_plan.h)
using TensorMapEncodeIm2colFn = decltype(&::cuTensorMapEncodeIm2col);
TensorMapEncodeIm2colFn tensor_map_encode_im2col();

// True when driver() would succeed; otherwise *why says what is missing (for skip messages).
bool driver_available(std::string* why = nullptr);

}  // namespace tessel::gpu
