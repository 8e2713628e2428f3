// bench_gpu_runtime [JSON_PATH]: runs the gpu-runtime benchmark suite (gpu_backend/runtime_bench.h),
// prints its table and writes its JSON. A stand-in until `tessel bench` has a gpu suite.
#include <fstream>
#include <iostream>

#include "gpu_backend/device_query.h"
#include "gpu_backend/runtime_bench.h"

int main(int argc, char** argv) {
  std::string why;
  if (tessel::gpu::device_count(&why) == 0) {
    std::cerr << "bench_gpu_runtime: no GPU: " << why << "\n";
    return 2;
  }
  try {
    const auto report = tessel::gpu::run_runtime_bench();
    std::cout << report.table();
    if (argc > 1) std::ofstream(argv[1]) << report.json();
  } catch (const std::exception& e) {
    std::cerr << "bench_gpu_runtime: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
