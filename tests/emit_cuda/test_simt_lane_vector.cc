// Lane vectors of the SIMT walk (compiler/emit_cuda/simt_lane_vector.cc), CI side (no GPU): a
// thread runs consecutive iterations of the innermost output loop and reads each contiguous input
// as one 4-, 8- or 16-byte load (column reductions: a depthwise NHWC convolution, a 3x3 average
// pool), an element-wise statement also stores its output as one vector; where a row is not a
// multiple of the width, where the block has fewer vectors than threads (a max over the middle
// axis in 256-output blocks) or where a read walks the index in another dim (a transpose) the walk
// keeps its scalar split; each source compiles through NVRTC for sm_90 and sm_75. The same
// programs run on the GPU against the interpreter in tests/gpu_emit/test_simt_lane_vector_run.cc.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#include "tests/emit_cuda/nvrtc_check.h"
#endif

using namespace tessel;

namespace {

constexpr const char* kPrograms = "tests/emit_cuda/data/lane_vector.tsl";  // run from the repository root

emit_cuda::CudaProgram cuda_for(const std::string& def, const std::map<std::string, int64_t>& sizes, const std::string& arch = "sm90") {
  frontend::Module module = frontend::load_module(kPrograms);
  CompileOptions o;
  o.target = "isa/targets/" + arch + ".yaml";
  o.sizes = sizes;
  auto c = compile(frontend::select_function(module, def), o);
  emit_cuda::CudaOptions co;
  co.arch = arch == "sm75" ? "sm_75" : "sm_90";
  return emit_cuda::emit_cuda(c->kernel, co);
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

using cuda_test::compiles_under_nvrtc;

}  // namespace

TEST_CASE("depthwise NHWC convolution: each thread 4 consecutive channels, the input and filter taps one 8-byte load each") {
  for (const std::string arch : {"sm90", "sm75"}) {
    CAPTURE(arch);
    const auto p = cuda_for("depthwise_nhwc", {{"N", 4}, {"H", 56}, {"W", 56}, {"C", 128}, {"R", 3}, {"S", 3}}, arch);
    CAPTURE(p.source);
    CHECK(contains(p.source, "4 consecutive ones (a lane vector along the innermost output loop)"));
    CHECK(contains(p.source, "{ /* a lane vector: 4 consecutive"));
    CHECK(contains(p.source, "const uint2 lv"));          // 4 halves = 8 bytes
    CHECK(contains(p.source, "(qo_ * 4 + u_)"));          // the thread's channels side by side
    CHECK_FALSE(contains(p.source, "u_ * (no1_ / 4)"));   // not 4 runs a quarter of the channels apart
    CHECK(contains(p.source, "make_uint2(0u, 0u)"));      // the padding's guard holds for the whole vector
    compiles_under_nvrtc(p);
  }
}

TEST_CASE("a 3x3 average pool reads its window and stores its output 4 channels at once, a transpose and a short column reduction keep the scalar split") {
  const auto avg = cuda_for("avgpool_nhwc", {{"N", 4}, {"P", 56}, {"Q", 56}, {"C", 128}});
  CAPTURE(avg.source);
  CHECK(contains(avg.source, "4 consecutive ones (a lane vector along the innermost output loop)"));
  CHECK(contains(avg.source, "const uint2 lv"));      // the window's 4 channels, 8 bytes
  CHECK(contains(avg.source, "stored as one 8 B vector"));
  compiles_under_nvrtc(avg);
  // Y(b, n, m) = X(b, m, n): the staged box read by columns would put a warp in one bank
  const auto perm = cuda_for("permute_021", {{"B", 32}, {"M", 256}, {"N", 192}});
  CHECK_FALSE(contains(perm.source, "a lane vector"));
  compiles_under_nvrtc(perm);
  // 256 outputs per block of 256 threads: no vector per thread
  const auto mx = cuda_for("max_middle", {{"A", 16}, {"B", 512}, {"C", 256}});
  CHECK_FALSE(contains(mx.source, "a lane vector"));
  compiles_under_nvrtc(mx);
}

TEST_CASE("channels not a multiple of any width keep the scalar split") {
  const auto odd = cuda_for("depthwise_nhwc", {{"N", 4}, {"H", 56}, {"W", 56}, {"C", 129}, {"R", 3}, {"S", 3}});
  CAPTURE(odd.source);
  CHECK_FALSE(contains(odd.source, "a lane vector"));
  compiles_under_nvrtc(odd);
}

TEST_CASE("an element-wise statement reads and stores 16 bytes per thread and iteration") {
  for (const std::string arch : {"sm90", "sm75"}) {
    CAPTURE(arch);
    const auto p = cuda_for("add_mul", {{"M", 1024}, {"N", 2048}}, arch);
    CAPTURE(p.source);
    CHECK(contains(p.source, "stored as one 16 B vector"));
    CHECK(contains(p.source, "const uint4 lv"));
    compiles_under_nvrtc(p);
  }
  const auto odd = cuda_for("add_mul", {{"M", 33}, {"N", 45}});
  CHECK_FALSE(contains(odd.source, "a lane vector"));
  compiles_under_nvrtc(odd);
}
