#include "gpu_backend/driver_api.h"

#include <dlfcn.h>

#include <mutex>

#include "gpu_backend/error.h"

#define TESSEL_STR2(x) #x
#define TESSEL_STR(x) TESSEL_STR2(x)

namespace tessel::gpu {
namespace {

struct LoadedDriver {
  DriverApi api;
  void* lib = nullptr;
  std::string failure;  // empty: loaded and initialised
};

LoadedDriver load_driver() {
  LoadedDriver d;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    d.failure = std::string("no CUDA driver on this machine (dlopen libcuda.so.1: ") + dlerror() + ")";
    return d;
  }
  d.lib = lib;
  // The name each X expands to is the versioned ABI symbol cuda.h selects (cuMemAlloc_v2).
#define TESSEL_X(fn)                                                                                \
  d.api.fn = reinterpret_cast<decltype(d.api.fn)>(dlsym(lib, TESSEL_STR(fn)));                      \
  if (!d.api.fn) {                                                                                  \
    d.failure = "the CUDA driver lacks " TESSEL_STR(fn) " (driver older than the CUDA " TESSEL_STR( \
        CUDA_VERSION) " headers tessel was built with?)";                                           \
    return d;                                                                                       \
  }
  TESSEL_DRIVER_FUNCTIONS(TESSEL_X)
#undef TESSEL_X
  const CUresult init = d.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* text = "unknown error";
    d.api.cuGetErrorString(init, &text);
    d.failure = std::string("cuInit failed: ") + text + (init == CUDA_ERROR_NO_DEVICE ? " (no GPU present)" : "");
  }
  return d;
}

const LoadedDriver& loaded() {
  static const LoadedDriver d = load_driver();
  return d;
}

}  // namespace

const DriverApi& driver() {
  const LoadedDriver& d = loaded();
  if (!d.failure.empty()) throw GpuError("cuInit", d.failure);
  return d.api;
}

TensorMapEncodeTiledFn tensor_map_encode_tiled() {
  driver();  // throws when there is no driver
  return reinterpret_cast<TensorMapEncodeTiledFn>(dlsym(loaded().lib, "cuTensorMapEncodeTiled"));
}

TensorMapEncodeIm2colFn tensor_map_encode_im2col() {
  driver();
  return reinterpret_cast<TensorMapEncodeIm2colFn>(dlsym(loaded().lib, "cuTensorMapEncodeIm2col"));
}

bool driver_available(std::string* why) {
  const LoadedDriver& d = loaded();
  if (why) *why = d.failure;
  return d.failure.empty();
}

}  // namespace tessel::gpu
