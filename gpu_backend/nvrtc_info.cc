#include "gpu_backend/nvrtc_info.h"

#include <nvrtc.h>

namespace tessel::gpu {
std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}
}  // namespace tessel::gpu
