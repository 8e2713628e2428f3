// A default plan exists on GPU targets whatever the sizes (compiler/pipeline.cc): the kernel IR's
// boxes never limit a GPU mapping (TensorCore kernels take their tiles from the plan; the SIMT walk
// keeps what does not fit in scratch), so a size change never turns a compiling operator into a fit
// error. Case: causal attention written as six statements, whose softmax-and-context group holds a
// whole key row and V panel per query tile: 128 tokens always fitted, 512 was "tile does not fit:
// level registers (vector) of sm90 needs 137480 bytes".
#include <doctest/doctest.h>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#endif

using namespace tessel;

namespace {

constexpr const char* kAttention = R"(
def attention(f16[B, S, H, D] Q, f16[B, S, H, D] K, f16[B, S, H, D] V) -> (f32[B, S, H, D] O) {
  Sc(b, h, i, j) +=! f32(Q(b, i, h, d)) * f32(K(b, j, h, d))
  Sm(b, h, i, j) = select(j <= i, Sc(b, h, i, j) * 0.125, -10000.0)
  Mx(b, h, i) max=! Sm(b, h, i, j)
  E(b, h, i, j) = exp(Sm(b, h, i, j) - Mx(b, h, i))
  Z(b, h, i) +=! E(b, h, i, j)
  O(b, i, h, d) +=! E(b, h, i, j) * f32(V(b, j, h, d)) / Z(b, h, i)
}
)";

}  // namespace

TEST_CASE("default plan on GPU targets: six-statement attention compiles at 128 and 512 tokens, NVRTC accepts it") {
  const frontend::Module m = frontend::parse_module(kAttention, "attention.tsl");
  for (const char* arch : {"sm90", "sm75"})
    for (int64_t s : {128, 512}) {
      CAPTURE(arch);
      CAPTURE(s);
      CompileOptions o;
      o.target = std::string("isa/targets/") + arch + ".yaml";
      o.sizes = {{"B", 1}, {"S", s}, {"H", 2}, {"D", 64}};
      std::unique_ptr<Compilation> c;
      REQUIRE_NOTHROW(c = compile(frontend::select_function(m, ""), o));
      emit_cuda::CudaOptions co;
      co.arch = c->hierarchy.gpu->arch;
      const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(c->kernel, co);
      CHECK(!p.launches.empty());
#ifdef TESSEL_HAVE_CUDA
      CHECK_NOTHROW(gpu::compile_to_cubin(p.source, {.arch = p.arch}));
#endif
    }
  // a user's tile is what runs: a spec whose boxes do not fit is still refused with the reason
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = {{"B", 1}, {"S", 512}, {"H", 2}, {"D", 64}};
  o.tile = "b=1/1,h=1/1,i=64/64,j=512/512,d=64/64";
  CHECK_THROWS_AS(compile(frontend::select_function(m, ""), o), UserError);
}

// A convolution whose operands are both gathered element by element (NCDHW / NCHW windows: no
// 16-byte loads) defaults to the most blocks and warps: 16x16 block tiles, K over 8 warps, 128-deep
// K tiles (H200: conv3d NCDHW 7.6 us against 61.4 us for the 64x32x256 tile the GEMM rule chose,
// docs/results/gpu_default_tiles_h200.txt). NHWC (vector loads) keeps the GEMM ranking.
TEST_CASE("default plan: a convolution of gathered operands takes small tiles with K over 8 warps") {
  const frontend::Module m = frontend::load_module("workloads/conv_general.tsl");
  auto plan_of = [&](const std::string& def, const std::map<std::string, int64_t>& sizes) {
    CompileOptions o;
    o.target = "isa/targets/sm90.yaml";
    o.sizes = sizes;
    auto c = compile(frontend::select_function(m, def), o);
    emit_cuda::CudaOptions co;
    co.arch = c->hierarchy.gpu->arch;
    co.machine = isa::GpuMachine::from(c->hierarchy);
    const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(c->kernel, co);
    REQUIRE(p.config);
    return *p.config;
  };
  const std::map<std::string, int64_t> sizes = {{"N", 1}, {"C", 32}, {"O", 8}, {"P", 16}, {"Q", 16}, {"K", 32}, {"T", 3}, {"R", 3}, {"S", 3}};
  const emit_cuda::TcConfig ncdhw = plan_of("conv3d_ncdhw", sizes);
  CAPTURE(ncdhw.to_string());
  CHECK(ncdhw.bm == 16);
  CHECK(ncdhw.bn == 16);
  CHECK(ncdhw.k_split == 8);
  CHECK(ncdhw.bk == 128);
  const emit_cuda::TcConfig ndhwc = plan_of("conv3d_ndhwc", sizes);
  CAPTURE(ndhwc.to_string());
  CHECK(ndhwc.bm * ndhwc.bn > 256);
}

// Operands in 16-byte loads keep the block-count rule past two blocks per SM: an NHWC 3x3
// convolution 1568x64x576 took 16x16x128/ks8 (392 blocks, 6.6 us on an H200) and now takes a
// 64x32 tile with K over 4 warps (49 blocks, 4.4 us; docs/results/gpu_default_tiles_h200.txt).
TEST_CASE("default plan: an NHWC convolution with 16-byte operand loads is not cut into 16x16 tiles") {
  const frontend::Module m = frontend::load_module("workloads/conv_seed.tsl");
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = {{"N", 2}, {"H", 28}, {"W", 28}, {"C", 64}, {"K", 64}, {"R", 3}, {"S", 3}};
  auto c = compile(frontend::select_function(m, "conv2d_nhwc"), o);
  emit_cuda::CudaOptions co;
  co.arch = c->hierarchy.gpu->arch;
  co.machine = isa::GpuMachine::from(c->hierarchy);
  const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(c->kernel, co);
  REQUIRE(p.config);
  CAPTURE(p.config->to_string());
  CHECK(p.config->bm * p.config->bn >= 32 * 32);
  CHECK(p.config->k_split <= 4);
  bool explained = false;
  for (const auto& line : p.explain) explained = explained || line.find("A 128-bit loads, B 128-bit loads") != std::string::npos;
  CHECK(explained);
}
