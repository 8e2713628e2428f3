// The CUBIN tensor-core scanner (gpu_backend/sass_scan.h). Needs NVRTC only; where cuobjdump is on
// PATH (the GPU machine) the counts are cross-checked against its disassembly.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"
#include "isa/base/error.h"
#include "tests/gpu/gpu_test_kernels.h"

using namespace tessel;
using namespace tessel::gpu;

namespace {

std::vector<uint8_t> cubin(const char* src, const std::string& arch) {
  test::use_fresh_cache_dir();
  return compile_to_cubin(src, {.arch = arch}).cubin;
}

bool have_cuobjdump() { return std::system("command -v cuobjdump > /dev/null 2>&1") == 0; }

// Counts of each tensor-core mnemonic in `cuobjdump -sass` of the CUBIN.
std::map<std::string, uint64_t> cuobjdump_counts(const std::vector<uint8_t>& bytes) {
  const auto path = std::filesystem::temp_directory_path() / ("tessel-sass-" + std::to_string(::getpid()) + ".cubin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(("cuobjdump -sass " + path.string()).c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::map<std::string, uint64_t> counts;
  char line[4096];
  const std::regex instr(R"(/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z0-9_]+)[.\s])");
  while (fgets(line, sizeof line, pipe.get())) {
    std::cmatch m;
    if (std::regex_search(line, m, instr)) {
      const std::string op = m[1];
      if (op == "HMMA" || op == "IMMA" || op == "HGMMA" || op == "IGMMA") ++counts[op];
    }
  }
  std::filesystem::remove(path);
  return counts;
}

}  // namespace

TEST_CASE("sass: a WMMA f16 GEMM uses HMMA on sm_75, sm_80 and sm_90") {
  for (const char* arch : {"sm_75", "sm_80", "sm_90"}) {
    CAPTURE(arch);
    const auto bytes = cubin(test::kWmmaGemmSource, arch);
    const SassScan scan = scan_cubin(bytes);
    CHECK(scan.sm == parse_sm_arch(arch));
    CHECK(scan.kernels == std::vector<std::string>{"wmma_gemm"});
    CHECK(scan.tensor_ops.count("HMMA") == 1);
    CHECK(scan.tensor_ops.count("IMMA") == 0);
    CHECK(cubin_has_tensor_core_ops(bytes));
    CHECK(cubin_tensor_core_op_count(bytes) >= 1);
    if (have_cuobjdump()) {
      const auto expected = cuobjdump_counts(bytes);
      CHECK(scan.tensor_ops == expected);
    }
  }
}

TEST_CASE("sass: a WMMA s8 product uses IMMA on sm_75 and sm_90") {
  for (const char* arch : {"sm_75", "sm_90"}) {
    CAPTURE(arch);
    const auto bytes = cubin(test::kWmmaS8Source, arch);
    const SassScan scan = scan_cubin(bytes);
    CHECK(scan.tensor_ops.count("IMMA") == 1);
    CHECK(scan.tensor_ops.count("HMMA") == 0);
    if (have_cuobjdump()) CHECK(scan.tensor_ops == cuobjdump_counts(bytes));
  }
}

TEST_CASE("sass: SIMT kernels have no tensor-core instructions (must not fire)") {
  for (const char* arch : {"sm_75", "sm_90"}) {
    CAPTURE(arch);
    const auto bytes = cubin(test::kSimtSource, arch);
    const SassScan scan = scan_cubin(bytes);
    CHECK(scan.kernels.size() == 3);
    CHECK(scan.instructions > 0);
    CHECK_FALSE(cubin_has_tensor_core_ops(bytes));
    if (have_cuobjdump()) CHECK(cuobjdump_counts(bytes).empty());
  }
}

TEST_CASE("sass: bytes that are not a CUBIN are user errors") {
  CHECK_THROWS_WITH_AS(scan_cubin({1, 2, 3}), doctest::Contains("not a CUBIN"), UserError);
  auto bytes = cubin(test::kSimtSource, "sm_90");
  bytes[18] = 62;  // EM_X86_64
  CHECK_THROWS_WITH_AS(scan_cubin(bytes), doctest::Contains("EM_CUDA"), UserError);
  auto truncated = cubin(test::kSimtSource, "sm_90");
  truncated.resize(truncated.size() / 2);
  CHECK_THROWS_AS(scan_cubin(truncated), UserError);
}
