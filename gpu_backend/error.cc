#include "gpu_backend/error.h"

#include "gpu_backend/driver_api.h"

namespace tessel::gpu {
namespace {

std::string call_name(const char* call) {  // "cuMemAlloc(&p, n)" -> "cuMemAlloc"
  std::string s(call);
  const size_t paren = s.find('(');
  return paren == std::string::npos ? s : s.substr(0, paren);
}

}  // namespace

GpuError::GpuError(std::string call, std::string status, const std::string& detail)
    : std::runtime_error(call + " failed: " + status + (detail.empty() ? "" : "\n" + detail)),
      call_(std::move(call)),
      status_(std::move(status)) {}

void check_cu(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* text = nullptr;
  const char* name = nullptr;
  const DriverApi& api = driver();
  if (api.cuGetErrorString(result, &text) != CUDA_SUCCESS) text = "unknown CUDA error";
  if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "?";
  throw GpuError(call_name(call), std::string(text) + " (" + name + ", " + std::to_string(int(result)) + ")");
}

void check_nvrtc(nvrtcResult result, const char* call) {
  if (result == NVRTC_SUCCESS) return;
  throw GpuError(call_name(call), nvrtcGetErrorString(result));
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw GpuError(call_name(call), std::string(cublasGetStatusString(status)) + " (" +
                                      cublasGetStatusName(status) + ")");
}

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  throw GpuError(call_name(call), cudnnGetErrorString(status), detail);
}

}  // namespace tessel::gpu
