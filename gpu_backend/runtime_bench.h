// The `gpu-runtime` benchmark suite: what the runtime and the library baselines cost on the GPU
// present, in both timing harnesses. It is the baseline half of `tessel bench gpu` (issue 7): the
// seed GEMM table, 1024^3 and 4096^3 through cuBLAS, the seed convolution through cuDNN, and the
// cost of launching an empty kernel. Benchmarks are not tests: nothing here asserts a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_backend/cublas_gemm.h"
#include "gpu_backend/cudnn_conv.h"
#include "gpu_backend/timing.h"

namespace tessel::gpu {

struct RuntimeBenchRow {
  std::string name;         // "cublas 512x16x512"
  std::string library;      // "cuBLAS", "cuDNN", "driver"
  std::string detail;       // cuDNN's algorithm, ...
  double flops = 0;         // per call; 0 for the empty kernel
  Timing stream, graph;
  std::string graph_error;  // set when the call could not be captured into a graph
};

struct RuntimeBenchReport {
  std::string device;
  std::vector<RuntimeBenchRow> rows;
  std::string table() const;  // fixed-width text, one row per measurement
  std::string json() const;   // {"suite": "gpu-runtime", "device": ..., "rows": [...]}
};

struct RuntimeBenchOptions {
  std::vector<GemmShape> gemms;  // empty: the seed GEMM table, 1024^3 and 4096^3
  std::vector<ConvShape> convs;  // empty: the seed convolution (NHWC)
  TimingOptions timing;
};

// The seed shapes of DESIGN.md ("Reference workloads").
std::vector<GemmShape> seed_gemm_shapes();
ConvShape seed_conv_shape();

// A device-to-device copy (cuMemcpyDtoDAsync) of `bytes`, timed in the graph harness: the bandwidth
// `tessel bench gpu` compares memory-bound kernels with. Every byte is read once and written once.
struct CopyBandwidth {
  uint64_t bytes = 0;  // copied per call
  Timing graph;
  double bytes_per_second() const { return graph.median_us > 0 ? 2.0 * double(bytes) / (graph.median_us * 1e-6) : 0; }
};
CopyBandwidth measure_copy_bandwidth(uint64_t bytes, CUstream stream, const TimingOptions& options = {});

// Runs on device 0; throws GpuError when there is no GPU.
RuntimeBenchReport run_runtime_bench(const RuntimeBenchOptions& options = {});

}  // namespace tessel::gpu
