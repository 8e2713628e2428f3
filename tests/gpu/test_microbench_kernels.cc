// The microbenchmarks' CUDA sources (gpu_backend/microbench_kernels.h) compile with NVRTC for
// every architecture tessel targets; no GPU needed (the runs are on the device, by hand).
#include <doctest/doctest.h>

#include <set>

#include "gpu_backend/microbench_kernels.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"

using namespace tessel;
using namespace tessel::gpu;

TEST_CASE("microbenchmark modules per architecture: sm_75 has WMMA only, sm_80 adds mma.sync, sm_90 TMA and wgmma") {
  auto names = [](const std::string& arch) {
    std::set<std::string> s;
    for (const auto& m : microbench_modules(arch)) s.insert(m.name);
    return s;
  };
  CHECK(names("sm_75") == std::set<std::string>{"memory", "wmma_f16", "wmma_s8"});
  CHECK(names("sm_80") == std::set<std::string>{"memory", "wmma_f16", "wmma_bf16", "wmma_s8", "mma_f16", "mma_bf16", "mma_s8"});
  CHECK(names("sm_90") == std::set<std::string>{"memory", "tma", "wmma_f16", "wmma_bf16", "wmma_s8", "mma_f16", "mma_bf16",
                                                "mma_s8", "wgmma_f16", "wgmma_bf16", "wgmma_s8"});
  for (const auto& m : microbench_modules("sm_90"))
    if (m.name.rfind("wgmma", 0) == 0) {
      CHECK(m.arch == "sm_90a");
      CHECK(m.threads == 256);
      // two warpgroups x four m64n256k16 (k32 for s8)
      CHECK(m.macs_per_iter_per_block == doctest::Approx(2.0 * 4 * 64 * 256 * (m.name == "wgmma_s8" ? 32 : 16)));
    }
}

TEST_CASE("every microbenchmark module compiles with NVRTC, and the tensor-core modules contain tensor-core instructions") {
  for (const char* arch : {"sm_75", "sm_80", "sm_90"}) {
    for (const auto& m : microbench_modules(arch)) {
      CAPTURE(arch);
      CAPTURE(m.name);
      CompiledCubin c;
      try {
        c = compile_to_cubin(m.source, {.arch = m.arch});
      } catch (const std::exception& e) {
        FAIL(e.what());
      }
      CHECK(!c.cubin.empty());
      // sass_scan knows HMMA, IMMA and HGMMA; the s8 wgmma's IGMMA is not among its opcodes
      if (!m.path.empty() && m.name != "wgmma_s8") CHECK(cubin_tensor_core_op_count(c.cubin) > 0);
    }
  }
}
