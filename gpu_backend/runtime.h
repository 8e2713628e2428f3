// Driver-API runtime: the device's primary context, streams, device buffers, modules and launches.
//
// Everything is RAII and move-only; every failing CUDA call throws GpuError naming the call. The
// primary context is the one the CUDA runtime uses too, so cuBLAS and cuDNN (which go through the
// runtime) share memory and streams with kernels launched here. Typical use:
//
//   Context& ctx = Context::get();                       // device 0, made current on this thread
//   CompiledCubin c = compile_to_cubin(src, {.arch = ctx.device().properties.arch});
//   Module m(c.cubin);
//   Kernel k = m.function("gemm");
//   DeviceBuffer a = DeviceBuffer::from_host(host_a);    // bytes, e.g. NpyArray::data
//   Stream s;
//   k.launch({.grid = {64, 1, 1}, .block = {128, 1, 1}, .dynamic_shared_bytes = 64 << 10}, s,
//            a.ptr(), b.ptr(), c.ptr(), M, N, K);
//   s.synchronize();
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_backend/device_query.h"
#include "isa/base/npy.h"

namespace tessel::gpu {

class Context {
 public:
  // The primary context of `ordinal`, retained for the life of the process and made current on the
  // calling thread. Throws GpuError when there is no such device.
  static Context& get(int ordinal = 0);
  void make_current() const;
  void synchronize() const;
  const DeviceInfo& device() const { return info_; }
  CUcontext handle() const { return ctx_; }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  explicit Context(int ordinal);
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  DeviceInfo info_;
};

class Stream {
 public:
  Stream();  // a non-blocking stream in the current context (graph capture needs one)
  ~Stream();
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  void synchronize() const;
  CUstream handle() const { return s_; }
  operator CUstream() const { return s_; }

 private:
  CUstream s_ = nullptr;
};

// An event for ordering streams (no timing): `record` on one stream, `wait` for it on another; in
// a stream capture the pair becomes an edge of the graph.
class SyncEvent {
 public:
  SyncEvent();
  ~SyncEvent();
  SyncEvent(SyncEvent&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  SyncEvent& operator=(SyncEvent&&) = delete;
  SyncEvent(const SyncEvent&) = delete;
  void record(CUstream s) const;
  void wait_on(CUstream s) const;  // work issued to `s` after this waits for the recorded point

 private:
  CUevent e_ = nullptr;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  static DeviceBuffer from_host(const void* data, size_t bytes);
  static DeviceBuffer from_host(const std::vector<uint8_t>& bytes) { return from_host(bytes.data(), bytes.size()); }
  template <class T>
  static DeviceBuffer from_vector(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    return from_host(v.data(), v.size() * sizeof(T));
  }
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;

  // Synchronous copies; `bytes` must not exceed size() (InternalError otherwise).
  void upload(const void* data, size_t bytes);  // synchronous: the device holds the data on return
  void download(void* data, size_t bytes) const;
  std::vector<uint8_t> download() const;
  template <class T>
  std::vector<T> download_as() const {
    std::vector<T> v(bytes_ / sizeof(T));
    download(v.data(), v.size() * sizeof(T));
    return v;
  }
  void fill_bytes(uint8_t value);  // e.g. 0xff to poison an output before a run; synchronous

  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// NpyArray element bytes (C order) to a new device buffer, and back into an array whose dtype and
// shape are already set (the buffer must hold at least array.data.size() bytes).
DeviceBuffer upload_npy(const NpyArray& array);
void download_npy(const DeviceBuffer& buffer, NpyArray& array);

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  uint32_t dynamic_shared_bytes = 0;  // above the default 48 KiB the kernel's limit is raised first
  // programmatic dependent launch (sm_90+): cuLaunchKernelEx with
  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so the kernel may start before the
  // previous kernel of the stream has finished (it must griddepcontrol.wait before touching memory)
  bool programmatic = false;
};

struct KernelAttributes {
  int registers_per_thread = 0;
  int static_shared_bytes = 0;
  int local_bytes_per_thread = 0;  // spills and local arrays
  int max_threads_per_block = 0;
};

class Kernel {
 public:
  Kernel(CUfunction f, std::string name) : f_(f), name_(std::move(name)) {}
  // Kernel parameters by value, in declaration order; each must match the kernel's parameter type
  // (CUdeviceptr for pointers, int for int, ...).
  template <class... Args>
  void launch(const LaunchConfig& config, CUstream stream, const Args&... args) {
    static_assert((std::is_trivially_copyable_v<Args> && ...));
    void* params[sizeof...(Args) + 1] = {const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
    launch_raw(config, stream, params);
  }
  void launch_raw(const LaunchConfig& config, CUstream stream, void** params);
  KernelAttributes attributes() const;
  const std::string& name() const { return name_; }
  CUfunction handle() const { return f_; }

 private:
  CUfunction f_;
  std::string name_;
  uint32_t dynamic_shared_limit_ = 0;  // what cuFuncSetAttribute last allowed
};

class Module {
 public:
  explicit Module(const std::vector<uint8_t>& cubin);  // loads into the current context
  ~Module();
  Module(Module&& o) noexcept : m_(o.m_) { o.m_ = nullptr; }
  Module& operator=(Module&&) = delete;
  Module(const Module&) = delete;
  // Throws UserError naming the kernel when the module has no such (extern "C") function.
  Kernel function(const std::string& name) const;
  CUmodule handle() const { return m_; }

 private:
  CUmodule m_ = nullptr;
};

}  // namespace tessel::gpu
