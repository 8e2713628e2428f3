// Pieces of run_gpu.cc shared with bench_gpu.cc (CUDA builds only).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"
#include "gpu_backend/cublas_gemm.h"
#include "gpu_backend/cudnn_conv.h"
#include "gpu_backend/device_query.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/runtime.h"
#include "gpu_backend/sass_scan.h"
#include "gpu_backend/timing.h"

namespace tessel::cli::gpurun {

struct LoadedProgram {
  emit_cuda::CudaProgram program;
  std::unique_ptr<gpu::Module> module;
  std::vector<gpu::Kernel> kernels;
  std::vector<gpu::KernelAttributes> attributes;
  uint64_t tensor_core_ops = 0;
  bool compile_from_cache = false;
  std::vector<std::string> notes;
  // the launches' tensor maps (Launch::tensor_maps), encoded over the buffers of `maps_ptrs`
  std::vector<std::vector<CUtensorMap>> maps;
  std::vector<CUdeviceptr> maps_ptrs;
};

struct DeviceTensors {
  std::vector<gpu::DeviceBuffer> buffers;  // Kernel::tensors order
  std::map<std::string, size_t> index;
  gpu::DeviceBuffer scratch;
  std::vector<CUdeviceptr> ptrs;           // kernel parameters
};

struct Baseline {
  enum Kind { Gemm, Conv } kind = Gemm;
  gpu::GemmShape gemm;
  gpu::ConvShape conv;
  std::string a, b;  // input tensors
};

struct BaselineRun {
  std::string library;
  NpyArray output;  // cuBLAS: f32 [M, N]; cuDNN: f16 NHWC
  gpu::Timing stream, graph;
  // with `interleave` calls given to run_baseline: the library's graph timing and theirs, samples
  // interleaved (gpu::time_interleaved_in_graph); [0] the library, then the calls in order
  std::vector<gpu::Timing> interleaved;
};

std::string device_arch();
LoadedProgram load_program(const kernel::Kernel& k, emit_cuda::CudaOptions o);
DeviceTensors allocate(const kernel::Kernel& k, const std::map<std::string, NpyArray>& inputs, uint64_t scratch_bytes);
void launch_all(LoadedProgram& lp, DeviceTensors& d, CUstream s);
std::map<std::string, NpyArray> download_outputs(const kernel::Kernel& k, const DeviceTensors& d);
std::optional<Baseline> find_baseline(const kernel::Kernel& k);
// The library's run of the problem: its output and its timings; `interleave`: calls (ours) whose
// graph timings are taken interleaved with the library's (BaselineRun::interleaved).
BaselineRun run_baseline(const Baseline& b, const DeviceTensors& d, const std::map<std::string, NpyArray>& inputs, gpu::Stream& stream,
                         const gpu::TimingOptions& o, const std::vector<gpu::TimedCall>& interleave = {});

}  // namespace tessel::cli::gpurun
