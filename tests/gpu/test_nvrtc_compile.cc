// NVRTC compile + on-disk cache (gpu_backend/nvrtc_compile.h). Needs the CUDA toolkit, not a GPU.
#include <doctest/doctest.h>

#include <filesystem>

#include "gpu_backend/error.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"
#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "tests/gpu/gpu_test_kernels.h"

using namespace tessel;
using namespace tessel::gpu;

TEST_CASE("nvrtc: WMMA source compiles to a CUBIN for each GPU description's architecture") {
  test::use_fresh_cache_dir();
  for (const char* target : {"sm75", "sm80", "sm90"}) {
    const isa::Hierarchy h = isa::load_hierarchy(test::source_dir() + "/isa/targets/" + target + ".yaml");
    REQUIRE(h.gpu);
    CAPTURE(h.gpu->arch);
    const CompiledCubin c = compile_to_cubin(test::kWmmaGemmSource, {.arch = h.gpu->arch});
    CHECK_FALSE(c.from_cache);
    REQUIRE(c.cubin.size() > 64);
    CHECK(std::string(reinterpret_cast<const char*>(c.cubin.data()) + 1, 3) == "ELF");
    CHECK(scan_cubin(c.cubin).sm == parse_sm_arch(h.gpu->arch));
  }
}

TEST_CASE("nvrtc: the second compile of the same source hits the cache, another source or arch misses") {
  const std::string dir = test::use_fresh_cache_dir();
  const std::string src = std::string(test::kSimtSource) + "// cache test\n";
  const CompiledCubin first = compile_to_cubin(src, {.arch = "sm_75"});
  CHECK_FALSE(first.from_cache);
  const CompiledCubin second = compile_to_cubin(src, {.arch = "sm_75"});
  CHECK(second.from_cache);
  CHECK(second.cache_key == first.cache_key);
  CHECK(second.cubin == first.cubin);
  CHECK(std::filesystem::exists(std::filesystem::path(dir) / "nvrtc"));

  const CompiledCubin changed = compile_to_cubin(src + "// changed\n", {.arch = "sm_75"});
  CHECK_FALSE(changed.from_cache);
  CHECK(changed.cache_key != first.cache_key);
  const CompiledCubin other_arch = compile_to_cubin(src, {.arch = "sm_90"});
  CHECK_FALSE(other_arch.from_cache);
  const CompiledCubin other_option = compile_to_cubin(src, {.arch = "sm_75", .options = {"-DX=1"}});
  CHECK_FALSE(other_option.from_cache);
  const CompiledCubin uncached = compile_to_cubin(src, {.arch = "sm_75", .use_cache = false});
  CHECK_FALSE(uncached.from_cache);
}

TEST_CASE("nvrtc: a compile error carries NVRTC's log, naming the program and the line") {
  test::use_fresh_cache_dir();
  const std::string bad = "extern \"C\" __global__ void k(float* p) {\n  p[0] = undefined_name;\n}\n";
  try {
    compile_to_cubin(bad, {.arch = "sm_90", .program_name = "broken.cu"});
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("could not compile broken.cu for sm_90") != std::string::npos);
    CHECK(what.find("undefined_name") != std::string::npos);
    CHECK(what.find("broken.cu(2)") != std::string::npos);
    CHECK(e.log().find("undefined_name") != std::string::npos);
  }
  // Must not fire: nothing is cached for a failed compile, so the next try compiles again.
  CHECK_THROWS_AS(compile_to_cubin(bad, {.arch = "sm_90"}), CompileError);
}

TEST_CASE("nvrtc: architectures not of the form sm_XX are user errors") {
  CHECK_THROWS_WITH_AS(compile_to_cubin(test::kSimtSource, {.arch = "compute_90"}),
                       doctest::Contains("not of the form sm_XX"), UserError);
  CHECK_THROWS_AS(compile_to_cubin(test::kSimtSource, {.arch = "sm_"}), UserError);
  CHECK_THROWS_AS(compile_to_cubin(test::kSimtSource, {.arch = "sm_12"}), UserError);  // NVRTC rejects it
  CHECK(parse_sm_arch("sm_90a") == 90);
}

TEST_CASE("nvrtc: the default options name the architecture and the CUDA include directory") {
  const auto opts = default_nvrtc_options("sm_80");
  CHECK(opts.at(0) == "--gpu-architecture=sm_80");
  bool has_include = false;
  for (const auto& o : opts) has_include |= o == "-I" + cuda_include_directory();
  CHECK(has_include);
  CHECK(std::filesystem::exists(std::filesystem::path(cuda_include_directory()) / "mma.h"));
}
