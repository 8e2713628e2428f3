// The CUDA emitter, CI side (no GPU): matrix identification, the TensorCore / SIMT choice and its
// diagnostic, and NVRTC compiles of every small-suite workload for sm_75 and sm_90 with HMMA in
// the cubins of matmul and convolution (sass_scan.h: no cuobjdump needed).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/row_kernel.h"
#include "compiler/emit_cuda/emit_tensor_core.h"
#include "compiler/emit_cuda/repack_plan.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"
#include "compiler/emit_cuda/tma_plan.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/kernel/check_parallel.h"
#include "compiler/pipeline.h"
#include "tests/emit_cuda/emit_cuda_case.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/error.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"
#endif

using namespace tessel;

using namespace tessel::cuda_test;

TEST_CASE("matmul is identified: A row-major matrix_a, B row-major matrix_b, M/N/K from the accesses") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 64}, {"N", 32}, {"K", 48}});
  const std::string& why = r.c->kernel.no_contraction;
  const auto& c = r.c->kernel.contraction;
  REQUIRE_MESSAGE(c, why);
  CHECK(c->a.tensor == "A");
  CHECK(c->b.tensor == "B");
  CHECK(c->size_m() == 64);
  CHECK(c->size_n() == 32);
  CHECK(c->size_k() == 48);
  CHECK(c->a.coeff.at("k") == 1);
  CHECK(c->b.coeff.at("n") == 1);
  auto p = emit_cuda::emit_cuda(r.c->kernel);
  CHECK(p.tensor_cores);
  CHECK(contains(p.source, "wmma::mma_sync"));
  CHECK(contains(p.source, "wmma::matrix_a, 16, 16, 16, __half, wmma::row_major"));
  CHECK(contains(p.source, "wmma::matrix_b, 16, 16, 16, __half, wmma::row_major"));
  CHECK(contains(p.source, "cp.async"));  // sm_90
}

TEST_CASE("the emitter carries out the kernel's recorded contraction and never matches one itself") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 64}, {"N", 32}, {"K", 48}});
  kernel::Kernel k = r.c->kernel;
  REQUIRE(k.contraction);
  k.contraction.reset();  // what the core would record for a kernel it did not match
  k.no_contraction = "recorded reason";
  auto p = emit_cuda::emit_cuda(k);
  CHECK_FALSE(p.tensor_cores);
  CHECK(contains(joined(p.explain), "SIMT: TensorCores not used: recorded reason"));
}

TEST_CASE("a transposed operand becomes a col_major fragment") {
  frontend::Module m = frontend::parse_module(
      "def mt(f16[K, M] A, f16[N, K] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(k, m)) * f32(B(n, k))\n}\n", "mt.tsl");
  CompileOptions o;
  o.target = target("sm90");
  o.sizes = {{"M", 64}, {"N", 64}, {"K", 64}};
  auto c = compile(m.functions[0], o);
  auto p = emit_cuda::emit_cuda(c->kernel);
  REQUIRE(p.tensor_cores);
  CHECK(contains(p.source, "wmma::matrix_a, 16, 16, 16, __half, wmma::col_major"));
  CHECK(contains(p.source, "wmma::matrix_b, 16, 16, 16, __half, wmma::col_major"));
}

TEST_CASE("sizes that are not multiples of 16 give SIMT code and say why (--explain)") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 7}, {"N", 5}, {"K", 9}});
  auto p = emit_cuda::emit_cuda(r.c->kernel);
  CHECK_FALSE(p.tensor_cores);
  CHECK(contains(joined(p.explain), "not multiples of the 16x16x16 fragment"));
  CHECK_FALSE(contains(p.source, "mma_sync"));
}

TEST_CASE("no reduction, no TensorCores: relu and softmax are SIMT with a reason") {
  auto r = compile_for("relu.tsl", "relu", {{"N", 2}, {"C", 3}, {"H", 4}, {"W", 5}});
  auto p = emit_cuda::emit_cuda(r.c->kernel);
  CHECK_FALSE(p.tensor_cores);
  CHECK(contains(joined(p.explain), "no reduction statement of the form"));
  auto s = compile_for("bert.tsl", "softmax", {{"M", 6}, {"N", 11}});
  auto ps = emit_cuda::emit_cuda(s.c->kernel);
  CHECK_FALSE(ps.tensor_cores);
}

TEST_CASE("i8 GEMM uses s8 -> s32 fragments, unsupported dtypes are explained") {
  auto r = compile_for("gemm_fused.tsl", "matmul_i8", {{"M", 32}, {"N", 32}, {"K", 32}});
  auto p = emit_cuda::emit_cuda(r.c->kernel);
  REQUIRE(p.tensor_cores);
  CHECK(contains(p.source, "signed char, wmma::row_major"));
  CHECK(contains(p.source, "wmma::accumulator, 16, 16, 16, int"));
}

TEST_CASE("convolution is an implicit GEMM: the padded input is read through an im2col view with zero-filled borders") {
  auto r = compile_for("conv_seed.tsl", "conv2d_nhwc", {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}});
  const std::string& why = r.c->kernel.no_contraction;
  const auto& c = r.c->kernel.contraction;
  REQUIRE_MESSAGE(c, why);
  CHECK(c->a.tensor == "X");  // read through the padding: inlined producer or folded shifted reads
  CHECK(c->b.tensor == "Wt");
  CHECK(c->m.size() == 3);  // n, p, q
  CHECK(c->k.size() == 3);  // r, s, c
  CHECK(c->k.back().var == "c");
  auto p = emit_cuda::emit_cuda(r.c->kernel);
  REQUIRE(p.tensor_cores);
  CHECK(contains(joined(p.explain), "implicit GEMM"));
  auto b = compile_for("conv_seed.tsl", "conv2d_blocked", {{"NB", 1}, {"H", 4}, {"W", 3}, {"CB", 2}, {"KB", 1}, {"R", 3}, {"S", 3}});
  auto pb = emit_cuda::emit_cuda(b.c->kernel);
  CHECK(pb.tensor_cores);
}

TEST_CASE("element-wise statements after the GEMM are fused into the epilogue") {
  auto r = compile_for("bert.tsl", "matmul_bias_gelu", {{"M", 32}, {"N", 32}, {"K", 32}});
  auto p = emit_cuda::emit_cuda(r.c->kernel);
  REQUIRE(p.tensor_cores);
  CHECK(contains(joined(p.explain), "fused epilogue"));
  CHECK(contains(p.source, "tanhf"));
  auto b = compile_for("resnet50.tsl", "conv_bn_relu", {{"N", 2}, {"H", 4}, {"W", 4}, {"C", 16}, {"K", 16}, {"R", 3}, {"S", 3}});
  CHECK(emit_cuda::emit_cuda(b.c->kernel).tensor_cores);
}

TEST_CASE("fused epilogue: column-only subexpressions are evaluated once per column, outside the element loop") {
  // the element loop's body is the text after the loop header; the per-column locals come before it
  auto loop_body = [](const std::string& src, const std::string& header) {
    const auto at = src.find(header);
    REQUIRE(at != std::string::npos);
    return src.substr(at);
  };
  SUBCASE("conv + batch norm + relu: mean[k], gamma[k] * rsqrt(var[k] + eps) and beta[k] per column") {
    auto r = compile_for("resnet50.tsl", "conv_bn_relu", {{"N", 2}, {"H", 14}, {"W", 14}, {"C", 64}, {"K", 128}, {"R", 3}, {"S", 3}});
    for (const char* tiles : {"128x128x64/64x128/ks1/st4/cs/ws", "128x128x64/64x128/ks1/st4/wgd"}) {
      CAPTURE(tiles);
      emit_cuda::CudaOptions o;
      o.config = emit_cuda::TcConfig::parse(tiles);
      const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
      REQUIRE(p.tensor_cores);
      CHECK(contains(joined(p.explain), "3 column-only subexpression(s) of the fused statements evaluated once per column"));
      const bool ws = contains(tiles, "/ws");
      // 4 adjacent columns per thread: the staged chunks (64 columns, 16 groups of 4 per row, 128
      // threads per warpgroup) and the cp.async epilogue (32 groups per 128-column row, 256 threads)
      CHECK(contains(p.source, ws ? "const int n_ = n0_ + c_ * 64 + (wt_ % 16) * 4 + q_;" : "const int n_ = n0_ + ((threadIdx.x) % 32) * 4 + q_;"));
      CHECK(contains(p.source, "float hv1_[4];"));
      // Y is a dense [N*H*W, K] f16 tensor: the 4 columns' results leave in one 8-byte store
      CHECK(contains(p.source, ws ? "__stcs((uint2*)(t_Y + ((long long)bz_ * 392LL + m_) * 128LL + nb_), *(const uint2*)sv_Y);"
                                  : "*(uint2*)(t_Y + ((long long)blockIdx.z * 392LL + m_) * 128LL + n0_ + col_) = *(const uint2*)sv_Y;"));
      CHECK(contains(p.source, "sqrtf(((float)(((float)t_var["));
      const std::string body = loop_body(p.source, ws ? "for (int e_ = wt_;" : "for (int e_ = threadIdx.x;");
      CHECK_FALSE(contains(body, "sqrtf"));
      CHECK_FALSE(contains(body, "t_gamma"));
      CHECK_FALSE(contains(body, "t_mean"));
      CHECK(contains(body, "((float)ev_Acc) - ((float)hv0_[q_])"));
    }
  }
  SUBCASE("a row operand and a guarded read stay in the element loop; the guard's whole select is hoisted when column-only") {
    const std::string src = R"(
def f(f16[M, K] A, f16[K, N] B, f32[N] s, f32[M, N] R) -> (f32[M, N] D) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
  D(m, n) = C(m, n) * s(n) + R(m, n) + select(m < 7, s(n), 0) + select(n < 5, s(n) * 2, 1)
}
)";
    Compiled r;
    r.module = frontend::parse_module(src, "hoist.tsl");
    CompileOptions co;
    co.target = target("sm90");
    co.sizes = {{"M", 256}, {"N", 128}, {"K", 64}};
    r.c = compile(frontend::select_function(r.module, "f"), co);
    emit_cuda::CudaOptions o;
    o.config = emit_cuda::TcConfig::parse("128x128x64/64x128/ks1/st4/cs/ws");
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    REQUIRE(p.tensor_cores);
    // s(n) (the product's operand) and select(n < 5, s(n) * 2, 1); not s(n) under m < 7, not R
    CHECK(contains(joined(p.explain), "2 column-only subexpression(s)"));
    const std::string body = loop_body(p.source, "for (int e_ = wt_;");
    CHECK(contains(body, "t_R["));
    CHECK(contains(body, "? t_s["));  // the row-guarded read keeps its guard
    CHECK(contains(body, "hv0_"));
    CHECK(contains(body, "hv1_"));
    CHECK(contains(body, "__stcs((uint4*)(t_D + "));  // 4 f32 results in one 16-byte store
  }
  // the 128x128 persistent kernel's source
  auto ws_source = [](const Compiled& r) {
    emit_cuda::CudaOptions o;
    o.config = emit_cuda::TcConfig::parse("128x128x64/64x128/ks1/st4/cs/ws");
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    REQUIRE(p.tensor_cores);
    return p;
  };
  SUBCASE("an output row of 90 elements (not whole groups of 4) keeps one column per thread and scalar stores") {
    const auto p = ws_source(compile_for("gemm_layouts.tsl", "matmul_nt", {{"M", 64}, {"N", 90}, {"K", 64}}));
    CHECK(contains(p.source, "const int m_ = m0_ + wrow0_ + e_ / 64, n_ = n0_ + c_ * 64 + e_ % 64;"));
    CHECK(contains(p.source, "tessel_stcs(&t_C["));
    CHECK_FALSE(contains(p.source, "sv_C"));
  }
  SUBCASE("a blocked output [NB, H, W, KB, 16, 16]: 4 adjacent columns of one 16-wide block in one store") {
    const auto p = ws_source(compile_for("conv_seed.tsl", "conv2d_blocked", {{"NB", 2}, {"H", 7}, {"W", 7}, {"CB", 4}, {"KB", 4}, {"R", 3}, {"S", 3}}));
    CHECK(contains(p.source, "gv_ki = r_ % 16;"));
    CHECK(contains(p.source, "* 16LL + (0 + 1 * (ov_ni))) * 16LL + (0 + 1 * (gv_ki)))), *(const uint4*)sv_Y);"));
  }
}

TEST_CASE("tile candidates are legal, skinny GEMMs split K over warps") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}});
  const auto& c = r.c->kernel.contraction;
  REQUIRE(c);
  auto cands = emit_cuda::tc_candidates(*c, "sm_90");
  REQUIRE(!cands.empty());
  for (const auto& g : cands) CHECK_MESSAGE(emit_cuda::config_obstacle(*c, g, "sm_90").empty(), g.to_string());
  CHECK(cands.front().k_split > 1);
  emit_cuda::TcConfig bad{.bm = 24};
  CHECK_FALSE(emit_cuda::config_obstacle(*c, bad, "sm_90").empty());
}

TEST_CASE("skinny GEMMs split K across blocks, sized from the SM count, the decision is in --explain") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}});
  const auto& c = r.c->kernel.contraction;
  REQUIRE(c);
  const int sms = int(r.c->hierarchy.cores);
  REQUIRE(sms > 0);
  auto cands = emit_cuda::tc_candidates(*c, "sm_90", sms);
  REQUIRE(!cands.empty());
  auto it = std::find_if(cands.begin(), cands.end(), [](const emit_cuda::TcConfig& x) { return x.k_blocks > 1; });
  REQUIRE(it != cands.end());
  const auto g = *it;
  const int64_t blocks = (512 / g.bm) * (16 / g.bn) * g.k_blocks;
  CHECK(blocks >= sms / 2);
  CHECK(g.reduce == emit_cuda::SplitKReduce::cluster);  // sm_90: the split blocks reduce through distributed shared memory
  CHECK(emit_cuda::tc_scratch_bytes(*c, g, isa::stock_gpu_machine("sm_90")) == 0);
  emit_cuda::TcConfig last = g;
  last.reduce = emit_cuda::SplitKReduce::last_block;
  CHECK(emit_cuda::tc_scratch_bytes(*c, last, isa::stock_gpu_machine("sm_90")) > 0);
  CHECK_FALSE(emit_cuda::config_obstacle(*c, g, "sm_75").empty());
  for (const auto& x : cands) CHECK_MESSAGE(emit_cuda::config_obstacle(*c, x, "sm_90").empty(), x.to_string());
  // no SM count: no split across blocks
  for (const auto& x : emit_cuda::tc_candidates(*c, "sm_90")) CHECK(x.k_blocks == 1);
  emit_cuda::CudaOptions o;
  o.machine = isa::GpuMachine::from(r.c->hierarchy);  // the SM count sizes split-K across blocks
  // the default (front) keeps K split over warps only (measured faster); --explain says why
  auto def = emit_cuda::emit_cuda(r.c->kernel, o);
  REQUIRE(def.config);
  CHECK(def.config->k_blocks == 1);
  CHECK(contains(joined(def.explain), "split-K across blocks: not used"));
  o.config = g;
  auto p = emit_cuda::emit_cuda(r.c->kernel, o);
  REQUIRE(p.config);
  CHECK(p.config->k_blocks > 1);
  CHECK(contains(joined(p.explain), "split-K across blocks"));
  CHECK(contains(p.source, "__cluster_dims__"));
  REQUIRE(p.launches.size() == 1);
  CHECK(p.launches[0].grid[1] == unsigned(p.config->k_blocks));
  // a large GEMM has enough tiles: no split
  auto big = compile_for("matmul.tsl", "matmul", {{"M", 1024}, {"N", 1024}, {"K", 1024}});
  const auto& cb = big.c->kernel.contraction;
  REQUIRE(cb);
  CHECK(emit_cuda::tc_candidates(*cb, "sm_90", sms).front().k_blocks == 1);
  emit_cuda::TcConfig bad = g;
  bad.k_blocks = 1000;
  CHECK_FALSE(emit_cuda::config_obstacle(*c, bad, "sm_90").empty());
}

TEST_CASE("tile configurations read back from their text (--gpu-tiles), bad text names the field") {
  for (const char* t : {"16x32x128/16x32/ks4/st5", "64x32x128/32x32/ks4/st2/kb4/cl", "128x256x64/64x256/ks1/st4/wg/cs", "256x128x64/128x128/ks1/st4/wg/cs/cf",
                        "128x128x64/64x128/ks1/st3/wgd", "16x16x512/16x16/ks8/st2/bc", "16x16x64/16x16/ks1/st6/mma/bc", "32x16x64/32x16/ks2/st3/kb4/red",
                        "128x256x64/64x256/ks1/st4/cs/ws", "128x192x64/64x192/ks1/st5/ws/sk",
                        "128x128x64/128x128/ks1/st6/cs/ws/pp", "256x128x64/128x128/ks1/st4/cs/ws/mc"})
    CHECK(emit_cuda::TcConfig::parse(t).to_string() == t);
  auto err = [](const std::string& t) {
    try {
      emit_cuda::TcConfig::parse(t);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(contains(err("16x32/16x32/ks4/st5"), "block tile needs 3 sizes"));
  CHECK(contains(err("16x32x128/16x32/ks4"), "too few fields"));
  CHECK(contains(err("16x32x128/16x32/ks4/st5/zz"), "unknown field 'zz'"));
  CHECK(contains(err("16x32x128/16x32/st5/ks4"), "third field must be ksN"));
  CHECK(contains(err("16x3a2x128/16x32/ks4/st5"), "bad block tile '3a2'"));
  CHECK(contains(err("16x32x128/16x32/ks4/st5/bc/kb2"), "out of order"));
}

TEST_CASE("persistent TMA kernel (/ws): tensor maps of every operand view, stream-K split, obstacles with the reason") {
  const isa::GpuMachine m = isa::stock_gpu_machine("sm_90");
  emit_cuda::TcConfig g = emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st4/ws");
  SUBCASE("GEMM: A K-inner one box {64, 128}, B N-inner four 64-wide boxes {64, 64}; the launch is one block per SM") {
    auto r = compile_for("matmul.tsl", "matmul", {{"M", 1000}, {"N", 520}, {"K", 200}});
    const auto& c = *r.c->kernel.contraction;
    // M = 1000 rows: the epilogue stages 64-column chunks in shared memory (2 x 128 x 68 x 4 B),
    // which leaves room for 3 stages of 48 KiB, not 4
    CHECK(emit_cuda::ws_epilogue_bytes(c, g) == 2 * 64 * 68 * 4);
    CHECK(contains(emit_cuda::config_obstacle(c, g, m), "shared memory over the"));
    g.stages = 3;
    REQUIRE(emit_cuda::config_obstacle(c, g, m).empty());
    emit_cuda::CudaOptions o;
    o.config = g;
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    const auto& maps = p.launches.at(0).tensor_maps;
    REQUIRE(maps.size() == 2);
    CHECK(maps[0].tensor == "A");
    CHECK(maps[0].dims == std::vector<uint64_t>{200, 1000});
    CHECK(maps[0].strides == std::vector<uint64_t>{400});
    CHECK(maps[0].box == std::vector<uint32_t>{64, 128});
    CHECK(maps[1].dims == std::vector<uint64_t>{520, 200});
    CHECK(maps[1].strides == std::vector<uint64_t>{1040});
    CHECK(maps[1].box == std::vector<uint32_t>{64, 64});
    CHECK(p.launches[0].grid[0] == 24);  // 8 x 3 tiles of 128 x 256, fewer than the 132 SMs
    CHECK(p.launches[0].block == 384);   // producer + 2 consumer warpgroups
    CHECK(contains(joined(p.explain), "tile scheduler: persistent grid of 24 blocks"));
  }
  SUBCASE("stream-K: the last wave and one full wave are cut into equal ranges, scratch for two partials per block") {
    auto r = compile_for("matmul.tsl", "matmul", {{"M", 4096}, {"N", 4096}, {"K", 4096}});
    const auto& c = *r.c->kernel.contraction;
    g.schedule = emit_cuda::WsSchedule::stream_k;
    const auto ps = emit_cuda::persistent_split(c, g, m);
    CHECK(ps.blocks == 132);
    CHECK(ps.dp_tiles == 264);  // 512 tiles = 3 waves + 116: two whole waves
    CHECK(ps.sk_tiles == 248);
    CHECK(ps.k_tiles == 64);
    CHECK(emit_cuda::tc_scratch_bytes(c, g, m) == 1024 + 132 * 2 * 128 * 256 * 4);
    auto r2 = compile_for("matmul.tsl", "matmul", {{"M", 4096}, {"N", 768}, {"K", 3072}});
    const auto ps2 = emit_cuda::persistent_split(*r2.c->kernel.contraction, g, m);
    CHECK(ps2.dp_tiles == 0);
    CHECK(ps2.sk_tiles == 96);  // fewer tiles than SMs: every block gets 96 * 48 / 132 K iterations
    CHECK(ps2.blocks == 132);
    g.schedule = emit_cuda::WsSchedule::grouped;
    CHECK(emit_cuda::persistent_split(*r2.c->kernel.contraction, g, m).blocks == 96);
  }
  SUBCASE("NHWC convolution: the input through an im2col map (padding as the box corners), the filter [R*S*C, K] as one map") {
    auto r = compile_for("conv_seed.tsl", "conv2d_nhwc", {{"N", 256}, {"H", 14}, {"W", 14}, {"C", 256}, {"K", 512}, {"R", 3}, {"S", 3}});
    emit_cuda::CudaOptions o;
    o.config = g;
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    const auto& a = p.launches.at(0).tensor_maps.at(0);
    CHECK(a.im2col);
    CHECK(a.dims == std::vector<uint64_t>{256, 14, 14, 256});
    CHECK(a.strides == std::vector<uint64_t>{512, 7168, 100352});
    CHECK(a.lower == std::vector<int>{-1, -1});
    CHECK(a.upper == std::vector<int>{-1, -1});  // the last window origin (13 - 1) is 1 before the last pixel
    CHECK(a.channels == 64);
    CHECK(a.pixels == 128);
    const auto& b = p.launches[0].tensor_maps.at(1);
    CHECK_FALSE(b.im2col);
    CHECK(b.dims == std::vector<uint64_t>{512, 2304});
    CHECK(b.strides == std::vector<uint64_t>{1024});
    CHECK(contains(p.source, "tessel_tma_im2col4("));
    CHECK(contains(joined(p.explain), "im2col gather of 128 pixels x 64 channels"));
  }
  SUBCASE("blocked-layout convolution: the input through a tiled map over {ci, ni, w, cb, nb * H + h}, M tiles cut per output row") {
    // X [NB=16, H=14, W=14, CB=16, 16, 16], filter [3, 3, CB=16, KB=32, 16, 16]
    auto r = compile_for("conv_seed.tsl", "conv2d_blocked", {{"NB", 16}, {"H", 14}, {"W", 14}, {"CB", 16}, {"KB", 32}, {"R", 3}, {"S", 3}});
    const auto& c = *r.c->kernel.contraction;
    emit_cuda::CudaOptions o;
    o.config = emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st3/cs/ws");
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    const auto& a = p.launches.at(0).tensor_maps.at(0);
    CHECK_FALSE(a.im2col);
    CHECK(a.dims == std::vector<uint64_t>{16, 16, 14, 16, 16 * 14});
    // ni 32 B, w 16 x 512 B, cb 512 B (not in increasing order), (nb, h) 14 x 8 KiB
    CHECK(a.strides == std::vector<uint64_t>{32, 8192, 512, 114688});
    // per channel block: 8 pixels x 16 images = 128 rows of 16 channels (32 B, 32-byte swizzle)
    CHECK(a.box == std::vector<uint32_t>{16, 16, 8, 4, 1});
    CHECK(a.swizzle_bytes == 32);
    const auto& b = p.launches[0].tensor_maps.at(1);
    CHECK(b.dims == std::vector<uint64_t>{16, 16, 32, 3 * 3 * 16});  // {ki, ci, kb, (r, s, cb)}
    CHECK(b.strides == std::vector<uint64_t>{32, 512, 16384});
    CHECK(b.box == std::vector<uint32_t>{16, 16, 16, 4});
    CHECK(b.swizzle_bytes == 32);
    // the 32-byte-swizzle descriptors: A slices of 128 rows x 32 B per K step, B 16-wide atoms 512 B apart
    CHECK(contains(p.source, "tessel_wg_desc32(as_ + (wg_ * 64 + i * 64) * 16, 16, 256) + (unsigned long long)(kq * 256)"));
    CHECK(contains(p.source, "tessel_wg_desc32(bs_, 512, 256) + (unsigned long long)(kq * 512)"));
    // 256 * 14 output rows (nb, p) of 14 pixels x 16 images = 224 rows: 2 M tiles each (128 + 96)
    CHECK(emit_cuda::m_segment(c, *o.config) == 224);
    CHECK(emit_cuda::m_tiles(c, *o.config) == 16 * 14 * 2);
    CHECK(emit_cuda::output_tiles(c, *o.config) == 16 * 14 * 2 * 2);
    CHECK(contains(p.source, "const int m0_ = (mt_ / 2) * 224 + (mt_ % 2) * 128, mend_ = (mt_ / 2) * 224 + 224;"));
    // a tap whose input row is padding fetches a box wholly past W = 14 (zero-filled)
    CHECK(contains(p.source, "tessel_tma_load5(As_ + s_ * 8192, &tmap_a_, full_ + s_, 0, 0, in_ ? w_ : 14, cb_, (row_ / 14) * 14 + (in_ ? h_ : 0));"));
    CHECK(contains(p.source, "tessel_tma_load4(Bs_ + s_ * 16384, &tmap_b_, full_ + s_, 0, 0, n0_ / 16, (kt0_ + kt) * 4);"));
    CHECK(contains(joined(p.explain), "M tiles cut per output row of 224 rows"));
    // the cp.async kernels keep one M range
    CHECK(emit_cuda::m_segment(c, emit_cuda::TcConfig::parse("256x128x64/128x128/ks1/st4/wg")) == 0);
    // multicast splits B's stage between the blocks of a cluster: refused with the reason
    CHECK(contains(emit_cuda::config_obstacle(c, emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st3/ws/mc"), m), "not split between blocks"));
  }
  SUBCASE("multicast: 2-block clusters, B's K-inner stage split into two boxes, one per block; ping-pong: 3 warpgroups") {
    auto r = compile_for("gemm_layouts.tsl", "matmul_nt", {{"M", 1024}, {"N", 512}, {"K", 256}});  // B [N, K]: K-inner
    emit_cuda::CudaOptions o;
    o.config = emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st3/ws/mc");
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    const auto& b = p.launches.at(0).tensor_maps.at(1);
    CHECK(b.box == std::vector<uint32_t>{64, 128});  // two boxes of 128 rows per 256-row stage
    CHECK(p.launches[0].grid[0] == 16);              // (8 tile rows / 2) x 2 tile columns = 8 clusters of 2
    CHECK(contains(p.source, "__cluster_dims__(2, 1, 1)"));
    CHECK(contains(p.source, "if (crank_ == 1u) tessel_tma_load2_mc("));
    CHECK(contains(p.source, "tessel_mbar_init(empty_ + s, 16)"));  // both blocks' 8 consumer warps
    const auto pp = emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st4/ws/pp");
    CHECK(pp.warps() == 12);
    CHECK(contains(emit_cuda::config_obstacle(*r.c->kernel.contraction, emit_cuda::TcConfig::parse("128x128x64/64x128/ks1/st4/ws/pp"), m),
                   "bm = wm"));
  }
  SUBCASE("fused statements: the candidates keep room for the epilogue's staging chunks (fewer stages)") {
    auto r = compile_for("resnet50.tsl", "conv_bn_relu", {{"N", 256}, {"H", 14}, {"W", 14}, {"C", 256}, {"K", 512}, {"R", 3}, {"S", 3}});
    const auto& c = *r.c->kernel.contraction;
    const auto cands = emit_cuda::tc_candidates(c, m);
    REQUIRE_FALSE(cands.empty());
    CHECK(cands[0].to_string() == "128x256x64/64x256/ks1/st3/cs/ws");  // 4 stages of 48 KiB + 34 KiB of chunks do not fit
    for (const auto& x : cands) CHECK_MESSAGE(emit_cuda::config_obstacle(c, x, m).empty(), x.to_string());
  }
  SUBCASE("refused with the reason: a strided window, a guard that is not the bounds, an unaligned row, no TMA on sm_80") {
    auto err = [&](const Compiled& r) { return emit_cuda::config_obstacle(*r.c->kernel.contraction, g, m); };
    CHECK(contains(err(compile_for("conv_halo.tsl", "conv_pad3_s2", {{"N", 2}, {"H", 9}, {"W", 9}, {"C", 64}, {"K", 64}, {"R", 3}, {"S", 3}, {"P", 4}, {"Q", 4}})),
                   "im2col: the window is not stride 1"));
    Compiled shifted;  // zero where h < 2 although X(n, h - 1, ...) is in bounds there: not padding
    shifted.module = frontend::parse_module(
        "def cs(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H, W, K] Y) {\n"
        "  Xp(n, h, w, c) = select(h >= 2 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0) where h in 0:H+2, w in 0:W+2\n"
        "  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k)) where p in 0:H, q in 0:W\n}\n",
        "cs.tsl");
    CompileOptions co;
    co.target = target("sm90");
    co.sizes = {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 64}, {"K", 64}, {"R", 3}, {"S", 3}};
    shifted.c = compile(shifted.module.functions[0], co);
    CHECK(contains(err(shifted), "padding guard is not the input's bounds"));
    for (const auto& x : emit_cuda::tc_candidates(*shifted.c->kernel.contraction, m)) CHECK_FALSE(x.tma_ws());  // the cp.async path keeps it
    CHECK(contains(emit_cuda::config_obstacle(*compile_for("matmul.tsl", "matmul", {{"M", 256}, {"N", 256}, {"K", 256}}).c->kernel.contraction, g,
                                              "sm_80"),
                   "wgmma tiles need sm_90"));
    g.k_blocks = 2;
    CHECK(contains(err(compile_for("matmul.tsl", "matmul", {{"M", 256}, {"N", 256}, {"K", 256}})), "splits K by stream-K (/sk), not /kb"));
  }
}

TEST_CASE("PDL prefetch: the named operand's prologue copies come before griddepcontrol.wait, the others after") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}});
  emit_cuda::CudaOptions o;
  o.config = emit_cuda::TcConfig::parse("16x16x128/16x16/ks4/st5");
  o.pdl = true;
  o.pdl_prefetch = {"B"};
  auto p = emit_cuda::emit_cuda(r.c->kernel, o);
  const size_t wait = p.source.find("griddepcontrol.wait");
  const size_t pre = p.source.find("if (s < kt_total_) { load_b(s, kt0_ + s); }");
  const size_t rest = p.source.find("if (s < kt_total_) { load_a(s, kt0_ + s); }");
  REQUIRE(wait != std::string::npos);
  CHECK(pre < wait);
  CHECK(rest > wait);
  CHECK(rest != std::string::npos);
  // 512 / 128 = 4 K tiles, all in the prologue (5 stages)
  CHECK(contains(joined(p.explain), "the first 4 K tiles of B are copied before griddepcontrol.wait"));
  CHECK(p.launches.back().pdl);
  // without PDL the list changes nothing
  o.pdl = false;
  auto q = emit_cuda::emit_cuda(r.c->kernel, o);
  CHECK(q.source.find("griddepcontrol") == std::string::npos);
  CHECK(contains(q.source, "if (s < kt_total_) { load_a(s, kt0_ + s); load_b(s, kt0_ + s); }"));
}

TEST_CASE("bulk operand copies (cp.async.bulk + mbarrier, sm_90): which operands qualify, explain, obstacles") {
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 2048}, {"N", 32}, {"K", 512}});
  const auto& c = r.c->kernel.contraction;
  REQUIRE(c);
  const int sms = int(r.c->hierarchy.cores);
  auto cands = emit_cuda::tc_candidates(*c, "sm_90", sms);
  const auto bulk = std::count_if(cands.begin(), cands.end(), [](const emit_cuda::TcConfig& g) { return g.loader == emit_cuda::OperandLoader::bulk; });
  CHECK(bulk > 0);
  for (const auto& g : emit_cuda::tc_candidates(*c, "sm_80", sms)) CHECK_FALSE(g.loader == emit_cuda::OperandLoader::bulk);
  emit_cuda::CudaOptions o;
  o.config = emit_cuda::TcConfig::parse("32x32x128/32x32/ks4/st5/bc");
  auto p = emit_cuda::emit_cuda(r.c->kernel, o);
  // A [2048][512]: 32 rows of 128 K elements (256 B) per stage; B [512][32]: a K tile of the full width is one run
  CHECK(contains(joined(p.explain), "A: 32 bulk row copies per stage; B: one bulk copy per stage"));
  CHECK(contains(p.source, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"));
  CHECK(contains(p.source, "tessel_mbar_expect(tessel_bar_ + stage_, " + std::to_string((32 + 32) * 128 * 2) + "u)"));
  CHECK(contains(p.source, "tessel_mbar_wait(tessel_bar_ + kt % 5, (kt / 5) & 1)"));
  CHECK(contains(p.source, "shared tile [128][32]"));  // B unpadded: the shared rows are the global ones
  // N = 128 with 32-wide tiles: B's rows are 64 B, so B keeps cp.async
  auto w = compile_for("matmul.tsl", "matmul", {{"M", 512}, {"N", 128}, {"K", 512}});
  const auto& cw = w.c->kernel.contraction;
  REQUIRE(cw);
  o.config = emit_cuda::TcConfig::parse("32x32x128/32x32/ks4/st5/bc");
  auto pw = emit_cuda::emit_cuda(w.c->kernel, o);
  CHECK(contains(joined(pw.explain), "B: cp.async (rows of 64 B (bulk copies need >= 256 B))"));
  // obstacles: older GPUs, an im2col view, split-K across blocks
  CHECK(contains(emit_cuda::config_obstacle(*c, *o.config, "sm_80"), "bulk operand copies need sm_90+"));
  auto conv = compile_for("conv_seed.tsl", "conv2d_nhwc", {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}});
  const auto& cc = conv.c->kernel.contraction;
  REQUIRE(cc);
  CHECK(contains(emit_cuda::config_obstacle(*cc, emit_cuda::TcConfig::parse("32x32x64/32x32/ks2/st3/bc"), "sm_90"),
                 "neither operand qualifies (A: an im2col view; B: several outer or K dims)"));
  CHECK(contains(emit_cuda::config_obstacle(*c, emit_cuda::TcConfig::parse("64x32x128/32x32/ks4/st2/kb4/bc"), "sm_90"), "no split-K across blocks"));
}

#ifdef TESSEL_HAVE_CUDA
TEST_CASE("split-K kernels (cluster, last-block, atomic) and mma.sync tiles compile through NVRTC and contain HMMA") {
  for (const char* arch : {"sm_75", "sm_90"}) {
    CAPTURE(arch);
    auto r = compile_for("matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}}, std::string(arch) == "sm_75" ? "sm75" : "sm90");
    const auto& c = r.c->kernel.contraction;
    REQUIRE(c);
    int kinds = 0;
    std::set<std::string> seen;
    for (const auto& g : emit_cuda::tc_candidates(*c, arch, int(r.c->hierarchy.cores))) {
      if (g.k_blocks == 1) continue;
      const std::string kind = emit_cuda::name(g.reduce);
      if (!seen.insert(kind).second) continue;
      CHECK_MESSAGE(!(std::string(arch) == "sm_75" && g.reduce == emit_cuda::SplitKReduce::cluster), "clusters need sm_90");
      emit_cuda::CudaOptions o;
      o.arch = arch;
      o.config = g;
      auto p = emit_cuda::emit_cuda(r.c->kernel, o);
      auto cubin = gpu::compile_to_cubin(p.source, {.arch = arch});
      CHECK(gpu::scan_cubin(cubin.cubin).tensor_ops.count("HMMA"));
      ++kinds;
    }
    CHECK(kinds == (std::string(arch) == "sm_90" ? 3 : 2));
  }
  {  // bulk operand copies (sm_90): WMMA and mma.sync tiles
    auto r = compile_for("matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}});
    for (const char* t : {"16x16x128/16x16/ks4/st5/bc", "16x16x64/16x16/ks1/st6/mma/bc"}) {
      CAPTURE(t);
      emit_cuda::CudaOptions o;
      o.config = emit_cuda::TcConfig::parse(t);
      auto p = emit_cuda::emit_cuda(r.c->kernel, o);
      auto cubin = gpu::compile_to_cubin(p.source, {.arch = "sm_90"});
      CHECK(gpu::scan_cubin(cubin.cubin).tensor_ops.count("HMMA"));
    }
  }
  auto big = compile_for("matmul.tsl", "matmul", {{"M", 1024}, {"N", 1024}, {"K", 1024}});
  emit_cuda::TcConfig g{128, 256, 32, 64, 64, 1, 4};
  g.mma = emit_cuda::MmaKind::mma_sync;
  const auto& cb = big.c->kernel.contraction;
  REQUIRE(cb);
  CHECK_FALSE(emit_cuda::config_obstacle(*cb, g, "sm_75").empty());
  emit_cuda::CudaOptions o;
  o.config = g;
  auto p = emit_cuda::emit_cuda(big.c->kernel, o);
  CHECK(p.source.find("mma.sync.aligned.m16n8k16") != std::string::npos);
  CHECK(p.source.find("ldmatrix") != std::string::npos);
  auto cubin = gpu::compile_to_cubin(p.source, {.arch = "sm_90"});
  CHECK(gpu::scan_cubin(cubin.cubin).tensor_ops.count("HMMA"));
}

TEST_CASE("wgmma tiles (sm_90a): GEMM, transposed operands, NHWC convolution compile through NVRTC and contain HGMMA") {
  struct W {
    std::string file, def;
    std::map<std::string, int64_t> sizes;
  };
  const std::string mt = "def mt(f16[K, M] A, f16[N, K] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(k, m)) * f32(B(n, k))\n}\n";
  const W ws[] = {{"matmul.tsl", "matmul", {{"M", 1024}, {"N", 1024}, {"K", 1024}}},
                  {"conv_seed.tsl", "conv2d_nhwc", {{"N", 64}, {"H", 14}, {"W", 14}, {"C", 64}, {"K", 256}, {"R", 3}, {"S", 3}}},
                  {"", "mt", {{"M", 1024}, {"N", 1024}, {"K", 256}}},
                  // the blocked layout: its /ws candidates (tiled maps over the window, M tiles per output row)
                  {"conv_seed.tsl", "conv2d_blocked", {{"NB", 4}, {"H", 14}, {"W", 14}, {"CB", 4}, {"KB", 16}, {"R", 3}, {"S", 3}}}};
  for (const auto& w : ws) {
    CAPTURE(w.def);
    Compiled r;
    if (w.file.empty()) {
      r.module = frontend::parse_module(mt, "mt.tsl");
      CompileOptions o;
      o.target = target("sm90");
      o.sizes = w.sizes;
      r.c = compile(r.module.functions[0], o);
    } else {
      r = compile_for(w.file, w.def, w.sizes);
    }
    const auto& c = r.c->kernel.contraction;
    REQUIRE(c);
    int n = 0, n_ws = 0;
    for (const auto& g : emit_cuda::tc_candidates(*c, "sm_90", 132)) {
      if (!g.wgmma() || g.repack || (w.def == "conv2d_blocked" && !g.tma_ws())) continue;  // /rp: its own case
      CAPTURE(g.to_string());
      CHECK_FALSE(emit_cuda::config_obstacle(*c, g, "sm_80").empty());
      emit_cuda::CudaOptions o;
      o.config = g;
      o.pdl = true;
      auto p = emit_cuda::emit_cuda(r.c->kernel, o);
      CHECK(p.arch == "sm_90a");
      CHECK(contains(p.source, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(g.bn) + "k16.f32.f16.f16"));
      CHECK(contains(p.source, "griddepcontrol.wait"));
      CHECK(p.launches.at(0).pdl);
      auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
      CHECK_MESSAGE(!contains(cubin.log, "serializ"), cubin.log);
      const auto scan = gpu::scan_cubin(cubin.cubin);
      CHECK(scan.tensor_ops.count("HGMMA"));
      if (g.tma_ws()) {  // the persistent kernel: TMA loads (UTMALDG), its two tensor maps on the launch
        CHECK(scan.copy_ops.count("UTMALDG"));
        REQUIRE(p.launches.at(0).tensor_maps.size() == (g.store == emit_cuda::OutputStore::tma ? 3u : 2u));  // /ts: the output's map too
        CHECK(p.launches[0].tensor_maps[0].im2col == (w.def == "conv2d_nhwc"));
        CHECK(contains(p.source, "setmaxnreg.inc.sync.aligned.u32 232"));
        CHECK_FALSE(contains(p.source, "__syncthreads();\n  if (warp_"));  // one barrier, before the roles split
        ++n_ws;
      } else {
        CHECK(scan.copy_ops.empty());
      }
      CHECK_THROWS_AS(gpu::compile_to_cubin(p.source, {.arch = "sm_90"}), gpu::CompileError);  // needs the sm_90a target (CompileError)
      if (std::getenv("TESSEL_DUMP_OPCODES")) {
        std::map<uint16_t, int> h;
        for (const auto& [k, ops] : gpu::cubin_opcodes(cubin.cubin))
          for (auto op : ops) ++h[op];
        for (auto [op, cnt] : h) MESSAGE(std::hex << op << std::dec << " " << cnt);
        MESSAGE(cubin.log);
        std::ofstream("/tmp/wg_" + w.def + "_" + std::to_string(n) + ".cu") << p.source;
      }
      ++n;
    }
    CHECK(n >= 3);
    CHECK(n_ws >= 4);  // the persistent TMA kernel's candidates come first where TMA applies
  }
}

TEST_CASE("every small-suite workload compiles through NVRTC for sm_75 and sm_90") {
  frontend::Suite suite = frontend::load_suite("workloads/small.yaml");
  REQUIRE(suite.entries.size() >= 10);
  for (const char* arch : {"sm_75", "sm_90"}) {
    for (const auto& e : suite.entries) {
      CAPTURE(e.name);
      CAPTURE(arch);
      frontend::Module m = frontend::load_module(e.file);
      CompileOptions o;
      o.target = target(std::string(arch) == "sm_75" ? "sm75" : "sm90");
      o.sizes = e.shape;
      auto c = compile(frontend::select_function(m, e.def), o);
      emit_cuda::CudaOptions co;
      co.arch = arch;
      auto p = emit_cuda::emit_cuda(c->kernel, co);
      std::string log;
      try {
        gpu::compile_to_cubin(p.source, {.arch = p.arch});  // sm_90a where the kernel uses wgmma
      } catch (const std::exception& ex) {
        log = ex.what();
      }
      CHECK_MESSAGE(log.empty(), log);
    }
  }
}

TEST_CASE("the cubins of matmul, the seed-layout convolutions and the fused GEMMs contain HMMA / IMMA") {
  struct W {
    const char* file;
    const char* def;
    std::map<std::string, int64_t> sizes;
  };
  const W ws[] = {{"matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}}},
                  {"matmul.tsl", "matmul", {{"M", 1024}, {"N", 1024}, {"K", 1024}}},
                  {"conv_seed.tsl", "conv2d_nhwc", {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}}},
                  {"conv_seed.tsl", "conv2d_blocked", {{"NB", 1}, {"H", 4}, {"W", 3}, {"CB", 2}, {"KB", 1}, {"R", 3}, {"S", 3}}},
                  {"gemm_fused.tsl", "matmul_bias_relu", {{"M", 64}, {"N", 64}, {"K", 64}}},
                  {"gemm_fused.tsl", "matmul_i8", {{"M", 64}, {"N", 64}, {"K", 64}}}};
  for (const char* arch : {"sm_75", "sm_90"}) {
    for (const auto& w : ws) {
      CAPTURE(w.def);
      CAPTURE(arch);
      auto r = compile_for(w.file, w.def, w.sizes, std::string(arch) == "sm_75" ? "sm75" : "sm90");
      emit_cuda::CudaOptions co;
      co.arch = arch;
      auto p = emit_cuda::emit_cuda(r.c->kernel, co);
      REQUIRE(p.tensor_cores);
      auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
      const auto scan = gpu::scan_cubin(cubin.cubin);
      CHECK(scan.tensor_op_count() > 0);
      if (std::string(w.def) == "matmul_i8")
        CHECK(scan.tensor_ops.count("IMMA"));
      else if (p.config->wgmma())  // sm_90's default for the large GEMM: warpgroup MMA
        CHECK(scan.tensor_ops.count("HGMMA"));
      else
        CHECK(scan.tensor_ops.count("HMMA"));
    }
  }
}
#endif

TEST_CASE("SIMT reductions: the reduced loops run over a thread group's lanes with warp shuffles, never as threads") {
  auto r = compile_for("bert.tsl", "layer_norm", {{"M", 4096}, {"N", 768}});
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  o.row_kernels = false;  // the loop-tree walk (row programs otherwise become row kernels)
  const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(r.c->kernel, o);
  CHECK(contains(p.source, "reduction over lanes: 1 output loop(s) to thread groups"));
  CHECK(contains(p.source, "__shfl_xor_sync(0xffffffffu, acc_, s_)"));
  CHECK(contains(p.source, "red_smem_"));
  // every thread-shared compute nest maps only loops the core proved parallel
  CHECK_FALSE(contains(p.source, "sequential: the nest's loops carry dependences"));
}

TEST_CASE("SIMT: a reduction to a scalar is reduced by the whole block (no output loop), not by one thread") {
  frontend::Module m = frontend::parse_module("def total(f32[N] X) -> (f32[] T) {\n  T() +=! X(i)\n}\n", "total.tsl");
  CompileOptions co;
  co.target = target("sm90");
  co.sizes = {{"N", 1000}};
  auto c = compile(m.functions[0], co);
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(c->kernel, o);
  CHECK(kernel::check_parallel(c->kernel).conflicts == 0);
  CHECK(contains(p.source, "reduction over lanes: 0 output loop(s) to thread groups"));
  CHECK_FALSE(contains(p.source, "sequential: the nest's loops carry dependences"));
}

TEST_CASE("SIMT copies of tiles whose offsets are multiples of 8 halves move 16 bytes per thread, others stay scalar") {
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  o.row_kernels = false;  // the loop-tree walk (row programs otherwise become row kernels)
  {  // a transpose's input is staged (read across the threads' order): 64x64 tiles of a 4096x3072
     // f16 tensor, every tile origin a multiple of 64
    auto r = compile_for("vector.tsl", "transpose2d", {{"M", 4096}, {"N", 3072}});
    const std::string s = emit_cuda::emit_cuda(r.c->kernel, o).source;
    CHECK(contains(s, "copy in X_registers_g0, 16 B per thread"));
    CHECK(contains(s, "*(uint4*)&t_X["));
  }
  {  // rows of 1001 halves: no chunk of 8 is 16-byte aligned in every row
    auto r = compile_for("vector.tsl", "transpose2d", {{"M", 64}, {"N", 1001}});
    const std::string s = emit_cuda::emit_cuda(r.c->kernel, o).source;
    CHECK(contains(s, "copy in X_registers_g0"));
    CHECK_FALSE(contains(s, "16 B per thread"));
  }
  {  // element-wise rows read and write along the threads' order: no box staged at all
    auto r = compile_for("vector.tsl", "bias_gelu", {{"M", 4096}, {"N", 3072}});
    const std::string s = emit_cuda::emit_cuda(r.c->kernel, o).source;
    CHECK_FALSE(contains(s, "copy in X_registers_g0"));
    CHECK_FALSE(contains(s, "copy out Y_registers_g0"));
    CHECK(contains(s, "t_Y[(("));  // written by the statement itself
  }
}

TEST_CASE("SIMT element-wise nests: one index decoding serves several iterations of the innermost loop") {
  auto r = compile_for("bert.tsl", "softmax", {{"M", 4096}, {"N", 768}});
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  o.row_kernels = false;  // the loop-tree walk (row programs otherwise become row kernels)
  const std::string s = emit_cuda::emit_cuda(r.c->kernel, o).source;
  CHECK(contains(s, "for (int u_ = 0; u_ < 4; ++u_)"));
  CHECK(contains(s, "unsigned rt_ = it_;"));                   // non-negative flat index: unsigned division
  CHECK(contains(s, "constexpr int G_ = 32;"));                 // 8 rows per block: a warp per row
}

TEST_CASE("SIMT shared buffers whose rows are whole bank rows get 16 bytes of padding per row (transpose reads columns)") {
  auto r = compile_for("vector.tsl", "transpose2d", {{"M", 4096}, {"N", 3072}});
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  const std::string s = emit_cuda::emit_cuda(r.c->kernel, o).source;
  // 64 halves = 128 bytes = one row of 32 four-byte banks: the pitch becomes 72 halves
  CHECK(contains(s, "X_registers_g0[((0 * 64 + (y0 - g0_m_o)) * 72 + (y1 - g0_n_o))]"));
  // the output is written along the threads' order, straight to global (no staged copy-out)
  CHECK_FALSE(contains(s, "copy out Y_registers_g0"));
}

TEST_CASE("row programs become register row kernels: a group of threads per row, vector loads, one pass over global memory") {
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  {  // softmax 4096 x 768: a warp per row, 3 x 8 halves per lane, lane 0's reduced values broadcast
    auto r = compile_for("bert.tsl", "softmax", {{"M", 4096}, {"N", 768}});
    const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(r.c->kernel, o);
    REQUIRE(p.launches.size() == 1);
    CHECK(p.launches[0].kernel == "tessel_row_g0");
    CHECK(p.launches[0].grid[0] == 512);  // 8 rows per block of 256 threads
    CHECK(contains(p.source, "__half m_X[24];"));
    CHECK(contains(p.source, "*(uint4*)&(&m_X[j_ * 8])[0] = *(const uint4*)&(&t_X[row_ * 768LL + col0_])[0];"));
    CHECK(contains(p.source, "acc_ = __shfl_sync(0xffffffffu, acc_, 0);"));
    CHECK_FALSE(contains(p.source, "__syncthreads"));  // a warp per row needs no block barrier
    CHECK(contains(p.explain.back(), "32 threads per row (8 row(s) per block, 3 x 8 elements per thread"));
  }
  {  // layer norm 4096 x 3072: the warps of a row combined through shared memory in order
    auto r = compile_for("bert.tsl", "layer_norm", {{"M", 4096}, {"N", 3072}});
    const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(r.c->kernel, o);
    CHECK(contains(p.source, "acc_ = red_[grp_ * 8];"));  // 256 threads per row: 16 elements per thread at most
    // a block per row with barriers in its reductions: 4 blocks per SM walk the rows, the next row's
    // X loaded before the current row's statements
    CHECK(p.launches[0].grid[0] == 4 * 132);
    CHECK(contains(p.source, "const long long next_ = row_ + (long long)gridDim.x * 1;"));
    CHECK(contains(p.explain.back(), "at most 4 blocks per SM, the next row prefetched"));
    CHECK(contains(p.source, "c_gamma["));  // the column vectors in registers too
  }
  {  // rows of 130 f32: 2-element vectors (130 is not a multiple of 4)
    auto r = compile_for("vector.tsl", "center_rows", {{"M", 77}, {"N", 130}});
    const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(r.c->kernel, o);
    CHECK(contains(p.source, "*(uint2*)"));
    CHECK(p.launches[0].grid[0] == 10);  // ceil(77 / 8)
  }
  {  // not row programs: a transpose reads X across rows; a user tile keeps the loop tree
    auto r = compile_for("vector.tsl", "transpose2d", {{"M", 64}, {"N", 64}});
    CHECK(emit_cuda::emit_cuda(r.c->kernel, o).launches[0].kernel != "tessel_row_g0");
    std::string why;
    CHECK_FALSE(emit_cuda::plan_row_kernel(r.c->kernel, isa::stock_gpu_machine("sm_90"), &why));
    CHECK(contains(why, "S0: "));
  }
}
