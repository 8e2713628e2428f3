// The GPU tile policy's narrow-output tiles (compiler/emit_cuda/tile_policy.cc, large_tiles): a
// padded 3x3 NHWC convolution with 64 or 128 output channels over a large batch (a ResNet's first
// stages) gets the persistent TMA kernel's 128-row tiles as its default plan where they make at
// least 64 tiles, and keeps the previous small tiles where they would not; NVRTC compiles the plan.
// On a GPU (H200): batch 32, 56x56, 64 -> 64 channels 205 -> 20.6 us (docs/results/conv3x3_narrow_ws_h200.txt).
#include <doctest/doctest.h>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#endif

using namespace tessel;

namespace {

constexpr const char* kConv = R"(
def conv_nhwc(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H, W, K] Y) {
  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0)
      where h in 0:H + 2, w in 0:W + 2
  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k))
}
)";

emit_cuda::CudaProgram conv_program(int64_t n, int64_t hw, int64_t c, int64_t k) {
  const frontend::Module m = frontend::parse_module(kConv, "conv.tsl");
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = {{"N", n}, {"H", hw}, {"W", hw}, {"C", c}, {"K", k}, {"R", 3}, {"S", 3}};
  auto comp = compile(frontend::select_function(m, ""), o);
  emit_cuda::CudaOptions co;
  co.arch = comp->hierarchy.gpu->arch;
  return emit_cuda::emit_cuda(comp->kernel, co);
}

}  // namespace

TEST_CASE("narrow 3x3 convolutions over a large batch default to the persistent TMA kernel's 128-row tiles") {
  // M = 32 x 56 x 56 = 100352 rows, N = 64: 784 tiles of 128 x 64
  const auto p64 = conv_program(32, 56, 64, 64);
  REQUIRE(p64.config);
  CHECK(p64.config->tma_ws());
  CHECK(p64.config->bm == 128);
  CHECK(p64.config->bn == 64);
  // N = 128: 128 x 128 tiles (196 of them at 28 x 28)
  const auto p128 = conv_program(32, 28, 128, 128);
  REQUIRE(p128.config);
  CHECK(p128.config->tma_ws());
  CHECK(p128.config->bn == 128);
  // 2 x 56 x 56 rows make 49 tiles of 128 x 64: too few, the small tiles stay
  const auto small = conv_program(2, 56, 64, 64);
  REQUIRE(small.config);
  CHECK_FALSE(small.config->tma_ws());
#ifdef TESSEL_HAVE_CUDA
  for (const auto* p : {&p64, &p128}) CHECK_NOTHROW(gpu::compile_to_cubin(p->source, {.arch = p->arch}));
#endif
}
