// `tessel bench gpu` as a stand-alone program: bench_gpu_emit [out.json]. Run from the repository
// root. Without a GPU it compiles every tile candidate into the NVRTC cache ($TESSEL_CACHE_DIR).
#include <fstream>
#include <iostream>

#include "compiler/cli/run_gpu.h"

int main(int argc, char** argv) {
  try {
    const nlohmann::json j = tessel::cli::bench_gpu(".");
    if (argc > 1) std::ofstream(argv[1]) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench_gpu_emit: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
