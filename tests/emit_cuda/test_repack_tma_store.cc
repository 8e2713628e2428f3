// The persistent TMA kernel's operand copies and output stores: operand copies (/rp) repack a
// blocked convolution's input and filter into scratch in the canonical order of their roles (the
// plan, the copy kernels, the 128-byte maps over the copies, the obstacles), and TMA stores (/ts)
// of a plain f32 output or of the fused statements' one dense output through swizzled buffers.
#include <doctest/doctest.h>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/repack_plan.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tma_plan.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"
#include "isa/base/error.h"
#include "isa/gpu_machine.h"
#include "tests/emit_cuda/emit_cuda_case.h"

using namespace tessel;
using namespace tessel::cuda_test;

TEST_CASE("operand copies (/rp): a blocked convolution's input and filter are repacked into scratch and read through 128-byte maps") {
  const auto m = isa::stock_gpu_machine("sm_90");
  // X [NB=16, H=14, W=14, CB=16, 16, 16], filter [3, 3, CB=16, KB=32, 16, 16]
  auto r = compile_for("conv_seed.tsl", "conv2d_blocked", {{"NB", 16}, {"H", 14}, {"W", 14}, {"CB", 16}, {"KB", 32}, {"R", 3}, {"S", 3}});
  const auto& c = *r.c->kernel.contraction;
  const auto g = emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st3/cs/ws/rp");
  REQUIRE(emit_cuda::config_obstacle(c, g, m) == "");
  SUBCASE("the plan: canonical orders, scratch placement, M walked as (nb, ni, p, q)") {
    const auto rp = emit_cuda::plan_repack(c, g, m, 1000);
    REQUIRE(rp.ok);
    REQUIRE(rp.copies.size() == 2);
    const auto &x = rp.copies[0], &w = rp.copies[1];
    CHECK(x.source == "X");
    CHECK(x.perm == std::vector<int>{0, 4, 1, 2, 3, 5});  // [NB, 16 ni, H, W, CB, 16 ci]: NHWC with N = (nb, ni), C = (cb, ci)
    CHECK(x.shape == std::vector<int64_t>{16, 16, 14, 14, 16, 16});
    CHECK(x.offset == 1024);  // 1000 rounded up to the copy alignment
    CHECK(x.bytes == 16ull * 16 * 14 * 14 * 256 * 2);
    CHECK(x.move_bytes == 16);
    CHECK(w.perm == std::vector<int>{0, 1, 2, 4, 3, 5});  // [R, S, CB, 16 ci, KB, 16 ki]: [R*S*C, K]
    CHECK(w.offset == 1024 + x.bytes);                   // already 1024-aligned
    CHECK(rp.scratch_end == w.offset + w.bytes);
    const auto& rc = rp.contraction;
    std::vector<std::string> mv;
    for (const auto& d : rc.m) mv.push_back(d.var);
    CHECK(mv == std::vector<std::string>{"nb", "ni", "p", "q"});
    CHECK(rc.a.tensor == "scratch:X");
    CHECK(rc.a.producer == nullptr);
    CHECK(rc.a.coeff.at("ni") == 14 * 14 * 256);
    CHECK(rc.a.coeff.at("cb") == 16);
    CHECK(rc.a.base == -(14 * 256) - 256);  // the window's (-1, -1) origin in the copy
    CHECK(rc.b.coeff.at("ci") == 512);
  }
  SUBCASE("the program: copy kernels first, the main kernel's maps over scratch (im2col for the input)") {
    emit_cuda::CudaOptions o;
    o.config = g;
    o.pdl = true;  // refused for a program of several kernels
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    REQUIRE(p.launches.size() == 3);
    CHECK(p.launches[0].kernel == "tessel_copy0_X");
    CHECK(p.launches[1].kernel == "tessel_copy1_Wt");
    CHECK_FALSE(p.launches[2].pdl);
    CHECK(p.scratch_bytes == 16ull * 16 * 14 * 14 * 256 * 2 + 3 * 3 * 256 * 512 * 2);
    const auto& a = p.launches[2].tensor_maps.at(0);
    CHECK(a.in_scratch);
    CHECK(a.scratch_offset == 0);
    CHECK(a.im2col);
    CHECK(a.dims == std::vector<uint64_t>{256, 14, 14, 256});  // {C, W, H, N}: the seed's NHWC map
    CHECK(a.strides == std::vector<uint64_t>{512, 7168, 100352});
    CHECK(a.swizzle_bytes == 128);
    const auto& b = p.launches[2].tensor_maps.at(1);
    CHECK(b.in_scratch);
    CHECK(b.scratch_offset == 16ull * 16 * 14 * 14 * 256 * 2);
    CHECK(b.dims == std::vector<uint64_t>{512, 2304});
    CHECK(b.strides == std::vector<uint64_t>{1024});
    // the input's copy: 16-byte moves in copy order, the source offset from the copy's index
    // (h, w, cb) stay adjacent: one dim of 14 * 14 * 16 whose steps are 256 halves = 32 moves in X
    CHECK(contains(p.source, "src_at_ += (r_ % 3136u) * 32u; r_ /= 3136u;"));
    CHECK(contains(p.source, "src_at_ += (r_ % 16u) * 2u; r_ /= 16u;"));   // ni: 16 halves = 2 moves apart
    CHECK(contains(joined(p.explain), "operand copy (/rp): X [16,14,14,16,16,16] is copied once per call into scratch as [16,16,14,14,16,16]"));
    const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
    const auto scan = gpu::scan_cubin(cubin.cubin);
    CHECK(scan.tensor_ops.count("HGMMA"));
    CHECK(scan.copy_ops.count("UTMALDG"));
  }
  SUBCASE("a GEMM whose A splits K around M ([K1, M, K2]): A copied to [M, K1, K2], then TMA stores of the plain output") {
    Compiled s;
    s.module = frontend::parse_module("def split_k(f16[K1, M, K2] A, f16[K1, K2, N] B) -> (f32[M, N] C) {\n"
                                      "  C(m, n) +=! f32(A(k1, m, k2)) * f32(B(k1, k2, n))\n}\n", "split_k.tsl");
    CompileOptions co;
    co.target = target("sm90");
    co.sizes = {{"K1", 4}, {"M", 4096}, {"K2", 64}, {"N", 4096}};
    s.c = compile(s.module.functions[0], co);
    const auto& sc = *s.c->kernel.contraction;
    const auto plain = emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st4/ws/ts");
    CHECK(contains(emit_cuda::config_obstacle(sc, plain, m), "not one linear stride"));  // A's K dims do not compose in place
    const auto g2 = emit_cuda::TcConfig::parse("128x256x64/64x256/ks1/st4/ws/rp/ts");
    REQUIRE(emit_cuda::config_obstacle(sc, g2, m) == "");
    const auto rp = emit_cuda::plan_repack(sc, g2, m, 0);
    REQUIRE(rp.copies.size() == 1);  // B [K1, K2, N] composes: read in place
    CHECK(rp.copies[0].perm == std::vector<int>{1, 0, 2});
    CHECK(rp.contraction.plain_output);  // M keeps its order: the output stays plain
    CHECK(emit_cuda::tc_candidates(sc, m).front().to_string() == "128x256x64/64x256/ks1/st4/ws/rp/ts");
  }
  SUBCASE("an NCHW convolution: both operands transposed (the innermost dim moves), K in the gather's order (r, s, c)") {
    auto n = compile_for("conv2d.tsl", "conv2d", {{"N", 8}, {"C", 64}, {"H", 14}, {"W", 14}, {"K", 256}, {"R", 3}, {"S", 3}});
    const auto& nc = *n.c->kernel.contraction;
    const auto g3 = emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st4/ws/pp/rp");
    REQUIRE(emit_cuda::config_obstacle(nc, g3, m) == "");
    const auto rp = emit_cuda::plan_repack(nc, g3, m, 0);
    REQUIRE(rp.copies.size() == 2);
    std::vector<std::string> kv;
    for (const auto& d : rp.contraction.k) kv.push_back(d.var);
    CHECK(kv == std::vector<std::string>{"r", "s", "c"});  // was (c, r, s)
    for (const auto& cp : rp.copies) {
      CAPTURE(cp.source);
      CHECK(cp.perm == std::vector<int>{0, 2, 3, 1});  // X [N, C, H, W] -> NHWC; Wt [K, C, R, S] -> [K, R, S, C]
    }
    emit_cuda::CudaOptions o;
    o.config = g3;
    const auto p = emit_cuda::emit_cuda(n.c->kernel, o);
    REQUIRE(p.launches.size() == 3);
    // the input's transpose: (h, w) merged into one 196-wide dim, 32 x 32 tiles of (hw, c)
    CHECK(contains(p.source, "__shared__ unsigned short tile_[32][33];"));
    CHECK(contains(p.source, "tile_[y_][tx_] = src_[so_ + a_ + (unsigned)b_ * 196u];"));
    CHECK(contains(p.source, "dst_[do_ + b_ + (unsigned)a_ * 64u] = tile_[tx_][y_];"));
    CHECK(p.launches[2].tensor_maps.at(1).im2col);  // B (the input, operands swapped) gathered in im2col mode
    CHECK(contains(joined(p.explain), "a tiled transpose"));
    const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
    CHECK(gpu::scan_cubin(cubin.cubin).copy_ops.count("UTMALDG"));
  }
  SUBCASE("refused with the reason: no /ws, or no operand that needs a copy") {
    CHECK(contains(emit_cuda::config_obstacle(c, emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st4/rp"), m), "persistent TMA kernel"));
    auto mm = compile_for("matmul.tsl", "matmul", {{"M", 1024}, {"N", 1024}, {"K", 1024}});
    CHECK(contains(emit_cuda::config_obstacle(*mm.c->kernel.contraction, g, m), "no operand needs a copy (A and B have 128-byte TMA plans)"));
    bool any = false;
    for (const auto& x : emit_cuda::tc_candidates(*mm.c->kernel.contraction, m)) any |= x.repack;
    CHECK_FALSE(any);
    bool blocked_rp = false;
    for (const auto& x : emit_cuda::tc_candidates(c, m)) blocked_rp |= x.repack;
    CHECK(blocked_rp);
    // a guard that is not the input's bounds (a row of the image masked off) cannot become the
    // copy's zero fill
    Compiled q;
    q.module = frontend::parse_module(
        "def masked(f16[N, C, H, W] X, f16[K, C, R, S] Wt) -> (f32[N, K, H, W] Y) {\n"
        "  Xp(n, c, h, w) = select(h >= 2 && h <= H && w >= 1 && w <= W, X(n, c, h - 1, w - 1), 0)\n"
        "      where h in 0:H+2, w in 0:W+2\n"
        "  Y(n, k, p, q) +=! f32(Xp(n, c, p + r, q + s)) * f32(Wt(k, c, r, s))\n}\n", "masked.tsl");
    CompileOptions mo;
    mo.target = target("sm90");
    mo.sizes = {{"N", 8}, {"C", 64}, {"H", 14}, {"W", 14}, {"K", 256}, {"R", 3}, {"S", 3}};
    q.c = compile(q.module.functions[0], mo);
    CHECK(contains(emit_cuda::config_obstacle(*q.c->kernel.contraction, emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st4/ws/pp/rp"), m),
                   "the padding guard is not the input's bounds"));
  }
}

TEST_CASE("TMA stores (/ts): a plain f32 output leaves through a swizzled double buffer and tensor-map stores") {
  const auto m = isa::stock_gpu_machine("sm_90");
  auto r = compile_for("matmul.tsl", "matmul", {{"M", 1000}, {"N", 1024}, {"K", 512}});
  const auto& c = *r.c->kernel.contraction;
  emit_cuda::CudaOptions o;
  o.config = emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st5/ws/pp/ts");
  REQUIRE(emit_cuda::config_obstacle(c, *o.config, m) == "");
  const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
  REQUIRE(p.launches.size() == 1);
  REQUIRE(p.launches[0].tensor_maps.size() == 3);
  const auto& out = p.launches[0].tensor_maps[2];
  CHECK(out.tensor == "C");
  CHECK(out.dtype == DType::F32);
  CHECK(out.dims == std::vector<uint64_t>{1024, 1000});  // rows past M = 1000 are clipped by the TMA unit
  CHECK(out.strides == std::vector<uint64_t>{4096});
  CHECK(out.box == std::vector<uint32_t>{32, 128});  // one warpgroup's 128 rows of 32 columns (128 B)
  CHECK(out.swizzle_bytes == 128);
  // the ping-pong warpgroups' double buffers: 2 x 2 x 128 x 32 f32 after the 5 stages
  CHECK(emit_cuda::ws_epilogue_bytes(c, *o.config) == 2 * 2 * 128 * 32 * 4);
  CHECK(contains(p.source, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"));
  CHECK(contains(p.source, "cp.async.bulk.wait_group.read 1;"));
  CHECK(contains(p.source, "fence.proxy.async.shared::cta;"));
  CHECK(contains(p.source, "((u_ ^ (r_ & 7)) << 2)"));  // the 128-byte swizzle of the map
  CHECK(contains(p.source, "if (lead_) tessel_tma_store2(&tmap_c_, buf_, n0_ + c_ * 32, m0_ + wrow0_);"));
  CHECK(contains(p.source, "cp.async.bulk.wait_group 0;"));  // before the consumers exit
  CHECK_FALSE(contains(p.source, "*(float2*)(out_"));        // no register stores
  const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
  const auto scan = gpu::scan_cubin(cubin.cubin);
  CHECK(scan.tensor_ops.count("HGMMA"));
  CHECK(scan.copy_ops.count("UTMALDG"));
  CHECK(scan.copy_ops.count("UTMASTG"));  // the stores are TMA stores in the SASS
  SUBCASE("the fused statements' dense f16 output: the staged results through a swizzled chunk and a tensor-map store") {
    auto f = compile_for("resnet50.tsl", "conv_bn_relu", {{"N", 2}, {"H", 14}, {"W", 14}, {"C", 128}, {"K", 256}, {"R", 3}, {"S", 3}});
    const auto& fc = *f.c->kernel.contraction;
    CHECK(emit_cuda::tma_store_fused(fc));
    emit_cuda::CudaOptions fo;
    fo.config = emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st3/ws/pp/ts");
    REQUIRE(emit_cuda::config_obstacle(fc, *fo.config, m) == "");
    // the accumulator chunks (2 x 128 x 68 f32) and the output chunks (2 x 128 x 64 f16)
    CHECK(emit_cuda::ws_epilogue_bytes(fc, *fo.config) == 2 * 128 * 68 * 4 + 2 * 128 * 64 * 2);
    const auto fp = emit_cuda::emit_cuda(f.c->kernel, fo);
    const auto& y = fp.launches.at(0).tensor_maps.at(2);
    CHECK(y.tensor == "Y");
    CHECK(y.dtype == DType::F16);
    CHECK(y.dims == std::vector<uint64_t>{256, 2 * 14 * 14});  // [N, H, W, K] as {K, N*H*W}
    CHECK(y.box == std::vector<uint32_t>{64, 128});             // 64 halves: one 128-byte swizzle row
    CHECK(contains(fp.source, "uint2* o_ = (uint2*)(ob_ + bx_ * 8192 + rr_ * 64 + ((u_ ^ (rr_ & 7)) * 8) + cc_ % 8);"));
    CHECK(contains(fp.source, "tessel_tma_store2(&tmap_c_, ob_ + 0, n0_ + c_ * 64 + 0, m0_ + wrow0_);"));
    CHECK(contains(fp.source, "cp.async.bulk.wait_group.read 0;"));
    CHECK_FALSE(contains(fp.source, "*(uint2*)(t_Y"));  // no vector stores of Y
    const auto fcub = gpu::compile_to_cubin(fp.source, {.arch = fp.arch});
    CHECK(gpu::scan_cubin(fcub.cubin).copy_ops.count("UTMASTG"));
    // the blocked layout's output is not dense in (M, N) order: no TMA store
    auto b = compile_for("conv_seed.tsl", "conv2d_blocked", {{"NB", 2}, {"H", 7}, {"W", 7}, {"CB", 4}, {"KB", 4}, {"R", 3}, {"S", 3}});
    CHECK_FALSE(emit_cuda::tma_store_fused(*b.c->kernel.contraction));
  }
  SUBCASE("refused with the reason") {
    // evict-first and TMA stores are two values of one choice: the text naming both is refused
    CHECK_THROWS_WITH_AS(emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st5/cs/ws/pp/ts"),
                         doctest::Contains("'/cs' and '/ts' are two choices of the output store (evict-first, tma)"), UserError);
    CHECK(contains(emit_cuda::config_obstacle(c, emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st4/ts"), m), "persistent TMA kernel"));
    // the blocked layout's output is not dense in (M, N) order
    auto f = compile_for("conv_seed.tsl", "conv2d_blocked", {{"NB", 16}, {"H", 14}, {"W", 14}, {"CB", 16}, {"KB", 32}, {"R", 3}, {"S", 3}});
    CHECK(contains(emit_cuda::config_obstacle(*f.c->kernel.contraction, emit_cuda::TcConfig::parse("128x128x64/128x128/ks1/st4/ws/pp/ts"), m),
                   "plain f32 output or one dense"));
    bool ts = false;
    for (const auto& g : emit_cuda::tc_candidates(c, m)) ts |= g.store == emit_cuda::OutputStore::tma;
    CHECK(ts);  // offered next to the register-store tiles
  }
}
