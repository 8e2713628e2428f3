#include "gpu_backend/runtime.h"

#include <map>
#include <memory>
#include <mutex>

#include "gpu_backend/driver_api.h"
#include "gpu_backend/error.h"
#include "isa/base/error.h"

namespace tessel::gpu {

// ---- Context ----------------------------------------------------------------------------------

Context::Context(int ordinal) {
  TESSEL_CU(cuDeviceGet(&dev_, ordinal));
  TESSEL_CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
  TESSEL_CU(cuCtxSetCurrent(ctx_));
  info_ = query_device(ordinal);
}

Context& Context::get(int ordinal) {
  // Retained until exit and never released: releasing at static destruction races the driver's own
  // teardown.
  static std::mutex mu;
  static std::map<int, Context*> contexts;
  std::lock_guard<std::mutex> lock(mu);
  auto it = contexts.find(ordinal);
  if (it == contexts.end()) it = contexts.emplace(ordinal, new Context(ordinal)).first;
  it->second->make_current();
  return *it->second;
}

void Context::make_current() const { TESSEL_CU(cuCtxSetCurrent(ctx_)); }
void Context::synchronize() const { TESSEL_CU(cuCtxSynchronize()); }

// ---- Stream -----------------------------------------------------------------------------------

Stream::Stream() { TESSEL_CU(cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING)); }
Stream::~Stream() {
  if (s_) driver().cuStreamDestroy(s_);
}
void Stream::synchronize() const { TESSEL_CU(cuStreamSynchronize(s_)); }

SyncEvent::SyncEvent() { TESSEL_CU(cuEventCreate(&e_, CU_EVENT_DISABLE_TIMING)); }
SyncEvent::~SyncEvent() {
  if (e_) driver().cuEventDestroy(e_);
}
void SyncEvent::record(CUstream s) const { TESSEL_CU(cuEventRecord(e_, s)); }
void SyncEvent::wait_on(CUstream s) const { TESSEL_CU(cuStreamWaitEvent(s, e_, 0)); }

// ---- DeviceBuffer -----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) TESSEL_CU(cuMemAlloc(&ptr_, bytes));
}

DeviceBuffer DeviceBuffer::from_host(const void* data, size_t bytes) {
  DeviceBuffer b(bytes);
  b.upload(data, bytes);
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = 0, o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* data, size_t bytes) {
  TESSEL_CHECK(bytes <= bytes_, "upload of " + std::to_string(bytes) + " bytes into a device buffer of " +
                                    std::to_string(bytes_));
  if (bytes) TESSEL_CU(cuMemcpyHtoD(ptr_, data, bytes));
  // A copy from pageable memory may return before its DMA has landed, and it is ordered only on
  // the legacy stream: a kernel on a non-blocking stream could read the old contents.
  if (bytes) TESSEL_CU(cuCtxSynchronize());
}

void DeviceBuffer::download(void* data, size_t bytes) const {
  TESSEL_CHECK(bytes <= bytes_, "download of " + std::to_string(bytes) + " bytes from a device buffer of " +
                                    std::to_string(bytes_));
  if (bytes) TESSEL_CU(cuMemcpyDtoH(data, ptr_, bytes));
}

std::vector<uint8_t> DeviceBuffer::download() const {
  std::vector<uint8_t> v(bytes_);
  download(v.data(), v.size());
  return v;
}

void DeviceBuffer::fill_bytes(uint8_t value) {
  // cuMemsetD8 is asynchronous with respect to the host and ordered only on the legacy stream: a
  // kernel on a non-blocking stream could run before it, and the memset then overwrites the results
  // (seen as outputs that are all 0xff under load). Wait for it.
  if (bytes_) {
    TESSEL_CU(cuMemsetD8(ptr_, value, bytes_));
    TESSEL_CU(cuCtxSynchronize());
  }
}

DeviceBuffer upload_npy(const NpyArray& array) { return DeviceBuffer::from_host(array.data); }

void download_npy(const DeviceBuffer& buffer, NpyArray& array) {
  TESSEL_CHECK(array.data.size() == size_t(array.element_count()) * size_t(dtype_bytes(array.dtype)),
               "download_npy: the array's data must be sized for its shape " + array.shape_string());
  buffer.download(array.data.data(), array.data.size());
}

// ---- Module and Kernel ------------------------------------------------------------------------

Module::Module(const std::vector<uint8_t>& cubin) {
  TESSEL_CHECK(!cubin.empty(), "Module built from an empty CUBIN (compile_to_cubin must have produced one)");
  TESSEL_CU(cuModuleLoadData(&m_, cubin.data()));
}

Module::~Module() {
  if (m_) driver().cuModuleUnload(m_);
}

Kernel Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  const CUresult r = driver().cuModuleGetFunction(&f, m_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    throw UserError("the CUDA module has no kernel named '" + name + "' (is it declared extern \"C\" __global__?)");
  check_cu(r, "cuModuleGetFunction");
  return Kernel(f, name);
}

void Kernel::launch_raw(const LaunchConfig& c, CUstream stream, void** params) {
  if (c.dynamic_shared_bytes > dynamic_shared_limit_) {
    // Without this a launch asking for more than the default dynamic limit (48 KiB) fails.
    TESSEL_CU(cuFuncSetAttribute(f_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(c.dynamic_shared_bytes)));
    dynamic_shared_limit_ = c.dynamic_shared_bytes;
  }
  CUresult r;
  if (c.programmatic) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig lc{};
    lc.gridDimX = c.grid.x, lc.gridDimY = c.grid.y, lc.gridDimZ = c.grid.z;
    lc.blockDimX = c.block.x, lc.blockDimY = c.block.y, lc.blockDimZ = c.block.z;
    lc.sharedMemBytes = c.dynamic_shared_bytes;
    lc.hStream = stream;
    lc.attrs = &attr;
    lc.numAttrs = 1;
    r = driver().cuLaunchKernelEx(&lc, f_, params, nullptr);
  } else {
    r = driver().cuLaunchKernel(f_, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z, c.dynamic_shared_bytes, stream,
                                params, nullptr);
  }
  if (r != CUDA_SUCCESS) {
    try {
      check_cu(r, "cuLaunchKernel");
    } catch (const GpuError& e) {
      throw GpuError("cuLaunchKernel", e.status(),
                     "kernel '" + name_ + "' grid (" + std::to_string(c.grid.x) + "," + std::to_string(c.grid.y) + "," +
                         std::to_string(c.grid.z) + ") block (" + std::to_string(c.block.x) + "," +
                         std::to_string(c.block.y) + "," + std::to_string(c.block.z) + ") dynamic shared " +
                         std::to_string(c.dynamic_shared_bytes) + " bytes");
    }
  }
}

KernelAttributes Kernel::attributes() const {
  KernelAttributes a;
  TESSEL_CU(cuFuncGetAttribute(&a.registers_per_thread, CU_FUNC_ATTRIBUTE_NUM_REGS, f_));
  TESSEL_CU(cuFuncGetAttribute(&a.static_shared_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f_));
  TESSEL_CU(cuFuncGetAttribute(&a.local_bytes_per_thread, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f_));
  TESSEL_CU(cuFuncGetAttribute(&a.max_threads_per_block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f_));
  return a;
}

}  // namespace tessel::gpu
