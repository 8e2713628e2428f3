// The fused attention program of the CUDA emitter (compiler/emit_cuda/attention_kernel.h), CI side
// (no GPU): which plan a record gets on which machine and why (mma.sync flash kernel, SIMT online
// kernel, key splits for decode shapes), the cases where the TensorCore kernel must not fire, and
// that every form of workloads/attention.tsl compiles through NVRTC with HMMA in the mma.sync
// kernels' cubins. Correctness on a GPU: `tessel run workloads/attention.tsl --target ...`.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_cuda/attention_kernel.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"
#endif

using namespace tessel;

namespace {

struct Fused {
  std::unique_ptr<Compilation> c;
  emit_cuda::CudaProgram program;
  isa::GpuMachine machine;
};

// `def` of workloads/attention.tsl (or of `text`) compiled for `target` (sm75 / sm80 / sm90).
Fused fused(const std::string& def, const std::map<std::string, int64_t>& sizes, const std::string& target, const std::string& text = "") {
  frontend::Module module = text.empty() ? frontend::load_module("workloads/attention.tsl") : frontend::parse_module(text, "test.tsl");
  CompileOptions o;
  o.target = "isa/targets/" + target + ".yaml";
  o.sizes = sizes;
  Fused r;
  r.c = compile(frontend::select_function(module, def), o);
  REQUIRE_MESSAGE(r.c->kernel.attention, def << " is one fused attention kernel");
  emit_cuda::CudaOptions co;
  co.arch = "sm_" + target.substr(2);
  co.machine = isa::GpuMachine::from(r.c->hierarchy);
  r.machine = *co.machine;
  r.program = emit_cuda::emit_cuda(r.c->kernel, co);
  return r;
}

std::map<std::string, int64_t> shape(int64_t b, int64_t h, int64_t s, int64_t t, int64_t d) {
  return {{"B", b}, {"H", h}, {"S", s}, {"T", t}, {"D", d}};
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

// NVRTC compiles the program for its architecture; the number of tensor-core instructions (HMMA,
// HGMMA) in the cubin.
int hmma_count(const emit_cuda::CudaProgram& p) {
#ifdef TESSEL_HAVE_CUDA
  std::string log;
  try {
    auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
    const auto ops = gpu::scan_cubin(cubin.cubin).tensor_ops;
    int n = 0;
    for (const char* op : {"HMMA", "HGMMA"})
      if (auto it = ops.find(op); it != ops.end()) n += int(it->second);
    return n;
  } catch (const std::exception& ex) {
    log = ex.what();
  }
  CHECK_MESSAGE(log.empty(), log);
  return -1;
#else
  (void)p;
  return 0;
#endif
}

}  // namespace

TEST_CASE("f16 attention on sm_80: the mma.sync flash kernel, 64-row blocks where 128-row blocks would not fill the SMs") {
  auto r = fused("attention_bhsd", shape(1, 2, 128, 128, 64), "sm80");
  const auto plan = emit_cuda::plan_attention(*r.c->kernel.attention, r.machine);
  CHECK(plan.to_string() == "attention/mma/64x64/w4/st2");
  CHECK(r.program.tensor_cores);
  CHECK(r.program.arch == "sm_80");
  REQUIRE(r.program.launches.size() == 1);
  CHECK(r.program.launches[0].grid[0] == 2 * 2);  // 2 query blocks x 2 heads
  CHECK(r.program.launches[0].block == 128);
  CHECK(r.program.scratch_bytes == 0);
  CHECK(r.program.flops == doctest::Approx(r.c->kernel.attention->flops()));
  CHECK(contains(r.program.source, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
  CHECK(contains(r.program.source, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
  CHECK(contains(r.program.source, "cp.async.cg.shared.global"));
  CHECK(contains(joined(r.program.explain), "mma.sync flash kernel 64x64 (4 warps of 16 query rows)"));
  CHECK(hmma_count(r.program) != -1);
}

TEST_CASE("long sequences take 128-row blocks of 8 warps, head dim 256 takes 32-key blocks and reads Q per key block") {
  auto big = fused("attention_bhsd", shape(4, 16, 4096, 4096, 128), "sm80");
  CHECK(emit_cuda::plan_attention(*big.c->kernel.attention, big.machine).to_string() == "attention/mma/128x64/w8/st2");
  auto wide = fused("attention_bhsd", shape(1, 2, 128, 256, 256), "sm80");
  const auto plan = emit_cuda::plan_attention(*wide.c->kernel.attention, wide.machine);
  CHECK(plan.key_block == 32);
  CHECK_FALSE(plan.q_in_registers);
  CHECK(contains(joined(wide.program.explain), "read by ldmatrix per key block"));
}

TEST_CASE("causal masks: key blocks above the diagonal are not loaded, the heaviest query blocks start first") {
  auto r = fused("attention_causal_bshd", shape(2, 4, 1000, 1000, 64), "sm80");
  REQUIRE(r.c->kernel.attention->causal_offset);
  CHECK(contains(r.program.source, "kb_end_ = (int)tessel_imin(kb_end_, (i0 + BQ - 1 + 0LL) / BK + 1);"));
  CHECK(contains(r.program.source, "const int qb_ = (int)(15LL - bid_ % 16LL);"));
  CHECK(contains(joined(r.program.explain), "causal: key blocks above the diagonal skipped"));
  CHECK(r.program.flops < 0.51 * r.c->kernel.attention->flops());
}

TEST_CASE("decode shapes split the keys over blocks: partials in scratch, a combine launch") {
  auto r = fused("attention_bhsd", shape(2, 4, 1, 4096, 128), "sm80");
  const auto plan = emit_cuda::plan_attention(*r.c->kernel.attention, r.machine);
  CHECK(plan.key_splits == 16);  // 8 query blocks for 108 SMs; 64 key blocks, at least 4 a split
  REQUIRE(r.program.launches.size() == 2);
  CHECK(r.program.launches[0].grid[0] == 8 * 16);
  CHECK(r.program.launches[1].kernel == "tessel_attention_combine");
  CHECK(r.program.scratch_bytes == 4 * 8 * 16 * (2 + 128));
  CHECK(contains(joined(r.program.explain), "keys split over 16 blocks per query block"));
  // short key ranges are not split
  auto s = fused("attention_bhsd", shape(1, 2, 1, 128, 64), "sm80");
  CHECK(s.program.launches.size() == 1);
  CHECK(hmma_count(r.program) > 0);
}

TEST_CASE("decode shapes: the warps share 16 query rows and split each key block, whole waves of key splits") {
  // 1 x 32 heads: 32 blocks unsplit; 132 SMs x 2 blocks = 264 -> 8 splits (256 blocks, one wave; 9 would start a second)
  auto r = fused("attention_bhsd", shape(1, 32, 1, 4096, 128), "sm90");
  const auto plan = emit_cuda::plan_attention(*r.c->kernel.attention, r.machine);
  CHECK(plan.to_string() == "attention/mma/16x64/w4/st3/kw/ks8");
  CHECK(plan.key_warps);
  REQUIRE(r.program.launches.size() == 2);
  CHECK(r.program.launches[0].grid[0] == 32 * 8);
  CHECK(r.program.launches[0].block == 128);
  // Q 16 rows + 3 stages x 64 keys x (K + V rows of 128 + 8 padding elements), f16
  CHECK(r.program.launches[0].dynamic_shared_bytes == 2 * (16 * 136 + 3 * 64 * 272));
  CHECK(contains(r.program.source, "constexpr int BKW = BK / (NT / 32);"));
  CHECK(contains(r.program.source, "const long long j0 = (long long)kb * BK + warp * BKW;"));
  CHECK(contains(r.program.source, "red_[(W + warp) * 16 + r] = lrow[h];"));
  CHECK(contains(joined(r.program.explain), "4 warps sharing the 16 query rows, 16 keys of each block a warp"));
  // a few query rows (a draft of 5 tokens) keep the form; 17 rows take the query-parallel warps again
  auto few = fused("attention_causal_bhsd", shape(2, 4, 5, 700, 64), "sm80");
  CHECK(emit_cuda::plan_attention(*few.c->kernel.attention, few.machine).key_warps);
  auto more = fused("attention_bhsd", shape(2, 4, 17, 700, 64), "sm80");
  CHECK_FALSE(emit_cuda::plan_attention(*more.c->kernel.attention, more.machine).key_warps);
  // head dim 256: 2 warps of 16 keys
  auto wide = fused("attention_bhsd", shape(1, 2, 1, 3000, 256), "sm80");
  CHECK(emit_cuda::plan_attention(*wide.c->kernel.attention, wide.machine).to_string().rfind("attention/mma/16x32/w2/st3/kw", 0) == 0);
  for (const auto* p : {&r.program, &few.program, &wide.program}) CHECK(hmma_count(*p) > 0);
}

TEST_CASE("the mma.sync kernel does not fire: sm_75, f32, head dim not a multiple of 16, head index not innermost") {
  auto old = fused("attention_bhsd", shape(1, 2, 77, 77, 64), "sm75");
  CHECK_FALSE(old.program.tensor_cores);
  CHECK(contains(joined(old.program.explain), "SIMT online kernel"));
  CHECK(contains(joined(old.program.explain), "no mma.sync m16n8k16 on sm_75"));
  auto f32 = fused("attention_f32", shape(1, 2, 77, 77, 64), "sm80");
  CHECK(contains(joined(f32.program.explain), "Q, K, V are not all f16 or all bf16"));
  auto odd = fused("attention_bhsd", shape(1, 2, 77, 77, 72), "sm80");
  CHECK(contains(joined(odd.program.explain), "is not a multiple of 16"));
  const std::string dmajor = R"(def dmajor(f16[D, S] Q, f16[D, T] K, f16[T, D] V) -> (f16[S, D] Out) {
  Sc(i, j) +=! f32(Q(d, i)) * f32(K(d, j))
  Mx(i) max=! Sc(i, j)
  E(i, j) = exp(Sc(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  O(i, e) +=! E(i, j) * f32(V(j, e))
  Out(i, e) = f16(O(i, e) / Z(i))
}
)";
  auto t = fused("dmajor", {{"S", 64}, {"T", 64}, {"D", 64}}, "sm80", dmajor);
  CHECK(contains(joined(t.program.explain), "not the unit-stride dimension"));
  for (const auto* p : {&old.program, &f32.program, &odd.program, &t.program}) CHECK(hmma_count(*p) == 0);
}

TEST_CASE("a contraction plan given for a fused attention kernel is a user error") {
  auto r = fused("attention_bhsd", shape(1, 2, 64, 64, 64), "sm80");
  emit_cuda::CudaOptions o;
  o.arch = "sm_80";
  o.config = emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st3");
  o.plan_required = true;
  CHECK_THROWS_WITH_AS(emit_cuda::emit_cuda(r.c->kernel, o), doctest::Contains("takes no contraction plan"), UserError);
}

TEST_CASE("attention plans print and parse back, malformed plans are user errors naming the field") {
  for (const char* text : {"attention/mma/128x64/w8/st2", "attention/mma/64x32/w4/st3/ks8", "attention/mma/16x64/w4/st3/kw/ks8",
                           "attention/simt/w4", "attention/simt/w4/ks16"}) {
    CAPTURE(text);
    CHECK(emit_cuda::AttentionPlan::is_plan_text(text));
    CHECK(emit_cuda::AttentionPlan::parse(text).to_string() == text);
  }
  CHECK_FALSE(emit_cuda::AttentionPlan::is_plan_text("128x128x32/64x64/ks1/st3"));
  CHECK_THROWS_WITH_AS(emit_cuda::AttentionPlan::parse("attention/mma/128x64/w4/st2"), doctest::Contains("16 query rows a warp"), UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::AttentionPlan::parse("attention/mma/128x64/w8/q2"), doctest::Contains("unknown field 'q2'"), UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::AttentionPlan::parse("attention/wmma/w4"), doctest::Contains("unknown kernel 'wmma'"), UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::AttentionPlan::parse("attention/mma/16x48/w4/st3/kw"), doctest::Contains("16 keys a warp"), UserError);
  CHECK_THROWS_WITH_AS(emit_cuda::AttentionPlan::parse("attention/simt/w4/kw"), doctest::Contains("unknown field 'kw'"), UserError);
}

TEST_CASE("every form of workloads/attention.tsl compiles through NVRTC for sm_75, sm_80 and sm_90, TensorCore forms with HMMA") {
  const char* defs[] = {"attention_bhsd",          "attention_bshd",  "attention_causal_bhsd", "attention_causal_bshd",
                        "attention_bf16_bhsd",     "attention_softmax_first", "attention_f32"};
  for (const char* target : {"sm75", "sm80", "sm90"})
    for (const char* def : defs)
      for (const auto& sz : {shape(1, 2, 77, 77, 64), shape(2, 2, 1, 1000, 128)}) {
        CAPTURE(target);
        CAPTURE(def);
        CAPTURE(sz.at("S"));
        auto r = fused(def, sz, target);
        const int hmma = hmma_count(r.program);
        CHECK(hmma != -1);
#ifdef TESSEL_HAVE_CUDA
        CHECK((hmma > 0) == r.program.tensor_cores);
#endif
      }
}

namespace {

// The sm_90 program of `def` (of attention.tsl or `text`) with the GPU plan `plan` given, as --tile records it.
emit_cuda::CudaProgram with_plan(const std::string& def, const std::map<std::string, int64_t>& sizes, const std::string& plan,
                                 const std::string& text = "") {
  frontend::Module module = text.empty() ? frontend::load_module("workloads/attention.tsl") : frontend::parse_module(text, "test.tsl");
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = sizes;
  o.gpu_plan = plan;
  o.plan_source.kind = PlanSource::Kind::Given;
  auto c = compile(frontend::select_function(module, def), o);
  emit_cuda::CudaOptions co;
  co.arch = "sm_90";
  co.machine = isa::GpuMachine::from(c->hierarchy);
  return emit_cuda::emit_cuda(c->kernel, co);
}

}  // namespace

TEST_CASE("sm_90: the wgmma kernel's K and V come from a TMA producer warpgroup, one tensor map per operand's view") {
  // BSHD, 2 x 3 heads, 256 queries, 200 keys (a partial last key block, zero-filled by the TMA unit)
  auto r = fused("attention_bshd", shape(2, 3, 256, 200, 64), "sm90");
  const auto& p = r.program;
  REQUIRE(p.launches.size() == 1);
  const auto& l = p.launches[0];
  CHECK(p.plan == "attention/wgmma/64x128/tma/lazy");  // 12 blocks of 128 rows would not fill the SMs: 64-row blocks
  CHECK(l.block == 2 * r.machine.threads_per_warpgroup());  // one consumer warpgroup and the producer
  CHECK(contains(p.source, "setmaxnreg.dec.sync.aligned.u32"));
  CHECK(contains(p.source, "cp.async.bulk.tensor.4d"));
  CHECK_FALSE(contains(p.source, "__syncthreads();  /* every warpgroup"));
  REQUIRE(l.tensor_maps.size() == 3);
  const auto& q = l.tensor_maps[0];
  const auto& k = l.tensor_maps[1];
  const auto& v = l.tensor_maps[2];
  CHECK(q.tensor == "Q");
  CHECK(k.tensor == "K");
  CHECK(v.tensor == "V");
  // Q[B, S, H, D] viewed as {d, i, b, h}: rows H * D apart, batches S * H * D, heads D (bytes)
  CHECK(q.dims == std::vector<uint64_t>{64, 256, 2, 3});
  CHECK(q.strides == std::vector<uint64_t>{3 * 64 * 2, 256 * 3 * 64 * 2, 64 * 2});
  CHECK(q.box == std::vector<uint32_t>{64, 64, 1, 1});
  CHECK(k.dims == std::vector<uint64_t>{64, 200, 2, 3});
  CHECK(k.box == std::vector<uint32_t>{64, 128, 1, 1});
  CHECK(q.swizzle_bytes == 128);
  CHECK(contains(joined(p.explain), "TMA producer warpgroup"));
  CHECK(hmma_count(p) > 0);
}

TEST_CASE("sm_90: a wgmma plan chooses how K and V are copied, and /tma is refused where TMA cannot fetch them") {
  const auto sz = shape(4, 16, 1024, 1024, 128);
  auto r = fused("attention_bhsd", sz, "sm90");
  CHECK(r.program.plan == "attention/wgmma/128x128/tma/pingpong/lazy/persistent");  // 1k keys: the short-sequence rule
  CHECK(contains(r.program.source, "bar.sync %0, 256"));
  CHECK(hmma_count(r.program) > 0);  // NVRTC compiles the ping-pong form
  CHECK(r.program.launches.at(0).block == 3 * r.machine.threads_per_warpgroup());
  const auto cp = with_plan("attention_bhsd", sz, "attention/wgmma/128x128/cpasync");
  CHECK(cp.plan == "attention/wgmma/128x128/cpasync");
  CHECK(cp.launches.at(0).tensor_maps.empty());
  CHECK(cp.launches.at(0).block == 2 * r.machine.threads_per_warpgroup());
  CHECK(contains(cp.source, "cp.async.cg.shared.global"));
  CHECK(with_plan("attention_bhsd", sz, "attention/wgmma/64x128/tma").launches.at(0).tensor_maps.size() == 3);
  const auto no_pp = with_plan("attention_bhsd", sz, "attention/wgmma/128x128/tma");
  CHECK(no_pp.plan == "attention/wgmma/128x128/tma");
  CHECK_FALSE(contains(no_pp.source, "bar.sync"));
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", sz, "attention/wgmma/64x128/tma/pingpong"), doctest::Contains("two consumer warpgroups"),
                       UserError);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", sz, "attention/wgmma/128x128/bulk"), doctest::Contains("/tma/pingpong (its two consumer warpgroups taking turns) or /cpasync"),
                       UserError);
  // four batch indices: a map of rank 6, past the TMA unit's 5
  const std::string text = R"(
def att4(f16[A, B, C, H, S, D] Q, f16[A, B, C, H, T, D] K, f16[A, B, C, H, T, D] V) -> (f16[A, B, C, H, S, D] Out) {
  Sc(a, b, c, h, i, j) +=! f32(Q(a, b, c, h, i, d)) * f32(K(a, b, c, h, j, d))
  Mx(a, b, c, h, i) max=! Sc(a, b, c, h, i, j)
  E(a, b, c, h, i, j) = exp(Sc(a, b, c, h, i, j) - Mx(a, b, c, h, i))
  Z(a, b, c, h, i) +=! E(a, b, c, h, i, j)
  O(a, b, c, h, i, e) +=! E(a, b, c, h, i, j) * f32(V(a, b, c, h, j, e))
  Out(a, b, c, h, i, e) = f16(O(a, b, c, h, i, e) / Z(a, b, c, h, i))
}
)";
  const std::map<std::string, int64_t> sz4 = {{"A", 2}, {"B", 2}, {"C", 2}, {"H", 2}, {"S", 128}, {"T", 128}, {"D", 64}};
  auto r4 = fused("att4", sz4, "sm90", text);
  CHECK(r4.program.plan == "attention/wgmma/64x128/cpasync/lazy");
  CHECK(r4.program.launches.at(0).tensor_maps.empty());
  CHECK_THROWS_WITH_AS(with_plan("att4", sz4, "attention/wgmma/64x128/tma", text), doctest::Contains("more than 3 batch indices"), UserError);
}

TEST_CASE("sm_90: wgmma plan options (192-row blocks for value dim 64, heavy-first causal order, lazy rescale), chosen by the policy") {
  // value dim 64, 4k tokens: three consumer warpgroups (192 rows, 160 registers each) in a ring of turns
  auto tall = fused("attention_bhsd", shape(4, 16, 4096, 4096, 64), "sm90");
  CHECK(tall.program.plan == "attention/wgmma/192x128/tma/pingpong/lazy");
  const auto& l = tall.program.launches.at(0);
  CHECK(l.block == 4 * tall.machine.threads_per_warpgroup());
  CHECK(l.grid[0] == 22);  // ceil(4096 / 192)
  CHECK(contains(tall.program.source, "setmaxnreg.inc.sync.aligned.u32 160"));
  CHECK(contains(tall.program.source, "(1 + (wg_ + 1) % 3)"));
  CHECK(contains(tall.program.source, "if (wg_ == 2 && nblocks_ > 0) asm volatile(\"bar.arrive 1, 256"));
  CHECK(l.tensor_maps.at(0).box == std::vector<uint32_t>{64, 192, 1, 1});
  CHECK(hmma_count(tall.program) > 0);
  // 1k tokens: 192-row blocks pad 1024 rows to 1152 (1/8 more): taken without a mask, not with a causal one
  CHECK(fused("attention_bhsd", shape(16, 16, 1024, 1024, 64), "sm90").program.plan == "attention/wgmma/192x128/tma/pingpong/lazy");
  // (causal 1k tokens, value dim 64: two 64-row blocks an SM instead, the short-sequence rule below)
  CHECK(fused("attention_causal_bhsd", shape(16, 16, 1024, 1024, 64), "sm90").program.plan == "attention/wgmma/64x128/tma/heavy/lazy/occ2");
  CHECK(fused("attention_causal_bhsd", shape(4, 16, 2048, 2048, 64), "sm90").program.plan == "attention/wgmma/192x128/tma/pingpong/heavy/lazy");
  CHECK(fused("attention_causal_bhsd", shape(4, 16, 4096, 4096, 64), "sm90").program.plan == "attention/wgmma/192x128/tma/pingpong/heavy/lazy");
  // few blocks: one warpgroup
  CHECK(fused("attention_bhsd", shape(1, 2, 1024, 1024, 64), "sm90").program.plan == "attention/wgmma/64x128/tma/lazy");
  // value dim 128: two warpgroups; 192 rows given is refused (registers)
  const auto d128 = shape(4, 16, 4096, 4096, 128);
  CHECK(fused("attention_bhsd", d128, "sm90").program.plan == "attention/wgmma/128x128/tma/pingpong/lazy");
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d128, "attention/wgmma/192x128/tma/pingpong"), doctest::Contains("take a value dim of 64, not 128"),
                       UserError);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d128, "attention/wgmma/128x128/tma/fast"), doctest::Contains("unknown field 'fast'"), UserError);
  // causal: the query blocks in reverse order (the most key blocks first)
  auto causal = fused("attention_causal_bhsd", shape(16, 16, 1024, 1024, 128), "sm90");
  CHECK(causal.program.plan == "attention/wgmma/128x128/tma/pingpong/heavy/lazy");
  CHECK(contains(causal.program.source, "(gridDim.x - 1 - blockIdx.x) * 128"));
  CHECK(hmma_count(causal.program) > 0);
  // given plans are carried out as written: no option unless named
  const auto plain = with_plan("attention_causal_bhsd", d128, "attention/wgmma/128x128/tma/pingpong");
  CHECK(plain.plan == "attention/wgmma/128x128/tma/pingpong");
  CHECK_FALSE(contains(plain.source, "gridDim.x - 1 - blockIdx.x"));
  CHECK_FALSE(contains(plain.source, "__any_sync(0xffffffffu, corr_"));
  const auto lazy = with_plan("attention_causal_bhsd", d128, "attention/wgmma/128x128/tma/lazy/heavy");
  CHECK(lazy.plan == "attention/wgmma/128x128/tma/heavy/lazy");
  CHECK(contains(lazy.source, "__any_sync(0xffffffffu, corr_"));
  // always: the scale step rsqrt(D) folded into the exponent's FMA, S's first MMA overwriting (scale-d 0)
  CHECK(contains(plain.source, "fmaf(s_[c_ * 4 + h_], scl2_, nm_[h_ / 2])"));
  CHECK(contains(plain.source, "_sa0z(s_,"));
  CHECK(contains(plain.source, "ex2.approx.ftz.f32"));
  // persistent: one block an SM (132 on the H100 description) walks 8 x 256 tiles, heaviest first; the ring runs on across tiles
  const auto per = with_plan("attention_causal_bhsd", shape(16, 16, 1024, 1024, 128), "attention/wgmma/128x128/tma/pingpong/heavy/lazy/persistent");
  CHECK(per.plan == "attention/wgmma/128x128/tma/pingpong/heavy/lazy/persistent");
  CHECK(per.launches.at(0).grid[0] == 132);
  CHECK(per.launches.at(0).grid[1] == 1);
  CHECK(contains(per.source, "for (int tile_ = blockIdx.x; tile_ < 2048; tile_ += gridDim.x, ++tc_)"));
  CHECK(contains(per.source, "(7 - tile_ / 256) * 128"));
  CHECK(contains(per.source, "tessel_att_mbar_wait(&qempty_, (tc_ - 1) & 1)"));
  CHECK(contains(per.source, "tessel_att_mbar_arrive(vempty_ + (it0_ + nblocks_ - 1) % 3)"));  // the tile's last V slot released
  CHECK(hmma_count(per) > 0);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d128, "attention/wgmma/128x128/cpasync/persistent"), doctest::Contains("takes TMA copies"),
                       UserError);
}

TEST_CASE("sm_90: /occ plans put several blocks on an SM (their share of registers and shared memory), refused where they do not fit") {
  const auto d128 = shape(16, 16, 1024, 1024, 128), d64 = shape(16, 16, 1024, 1024, 64);
  // the description's SM (sm90.yaml: 228 KiB of shared memory, 1 KiB kept for each resident block)
  const isa::GpuMachine sm = fused("attention_bhsd", shape(1, 1, 128, 128, 64), "sm90").machine;
  const int64_t sm_smem = int64_t(sm.shared_bytes_per_sm), reserve = int64_t(sm.shared_bytes_reserved_per_block);
  REQUIRE(sm_smem > 0);
  // value dim 128, two blocks of a producer and one consumer warpgroup: 128 registers a thread at entry,
  // 24 / 232 after setmaxnreg (2 x 256 x 128 = the 64 K register file); Q 16 KiB and one K / V slot of 64 KiB
  const auto two = with_plan("attention_bhsd", d128, "attention/wgmma/64x128/tma/occ2");
  CHECK(two.plan == "attention/wgmma/64x128/tma/occ2");
  CHECK(contains(two.source, "__launch_bounds__(256, 2)"));
  CHECK(contains(two.source, "setmaxnreg.dec.sync.aligned.u32 24;"));
  CHECK(contains(two.source, "setmaxnreg.inc.sync.aligned.u32 232;"));
  // the plan's layout, not hardware: Q's 64 x 128 f16 block, one slot of a 128-key K and V block (128 x 128 f16 each), 1 KiB of barriers
  const int64_t f16 = 2, q_block = 64 * 128 * f16, kv_slot = 2 * 128 * 128 * f16, barriers = 1024;
  CHECK(two.launches.at(0).dynamic_shared_bytes == q_block + kv_slot + barriers);
  CHECK(2 * (two.launches.at(0).dynamic_shared_bytes + reserve + 1024) <= sm_smem);  // ptxas: 1 KiB static
  // one slot: the producer fetches K_(j+1) before V_j, and V of the last block after the loop
  CHECK(contains(two.source, "(jb_ - 1) * 128"));
  CHECK(contains(two.source, "(nblocks_ - 1) * 128"));
  CHECK(contains(joined(two.explain), "2 blocks resident an SM"));
  CHECK(hmma_count(two) > 0);
  // value dim 64: three slots fit a block's half of the SM
  const auto two64 = with_plan("attention_causal_bhsd", d64, "attention/wgmma/64x128/tma/heavy/lazy/occ2");
  CHECK(two64.plan == "attention/wgmma/64x128/tma/heavy/lazy/occ2");
  CHECK(two64.launches.at(0).dynamic_shared_bytes == 8192 + 3 * 32768 + 1024);
  CHECK_FALSE(contains(two64.source, "(jb_ - 1) * 128"));
  // cp.async, no producer: three blocks of 128 threads, 168 registers each (the register file over 384 threads, whole 8s)
  const auto three = with_plan("attention_bhsd", d64, "attention/wgmma/64x128/cpasync/occ3");
  CHECK(contains(three.source, "__launch_bounds__(128, 3)"));
  CHECK(3 * (three.launches.at(0).dynamic_shared_bytes + reserve) <= sm_smem);
  CHECK(hmma_count(three) > 0);
  // what does not fit, by name
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d128, "attention/wgmma/64x128/cpasync/occ2"), doctest::Contains("B of shared memory a block"),
                       UserError);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d64, "attention/wgmma/64x128/tma/occ3"),
                       doctest::Contains("leave 136 registers a consumer thread, under the 160"), UserError);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d64, "attention/wgmma/128x128/tma/pingpong/occ2"), doctest::Contains("registers a consumer thread"),
                       UserError);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d64, "attention/wgmma/64x128/tma/persistent/occ2"), doctest::Contains("one block an SM"),
                       UserError);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", d64, "attention/wgmma/64x128/tma/occ5"), doctest::Contains("unknown field 'occ5'"), UserError);
}

TEST_CASE("sm_90: short sequences overlap a block's first copies and epilogue with other tiles (persistent or two blocks an SM)") {
  // 1k keys (8 key blocks): no mask, value dim 128: persistent 128-row blocks, one an SM, walking a batch point's query blocks in order
  const auto d128 = fused("attention_bhsd", shape(16, 16, 1024, 1024, 128), "sm90");
  CHECK(d128.program.plan == "attention/wgmma/128x128/tma/pingpong/lazy/persistent");
  CHECK(d128.program.launches.at(0).grid[0] == 132);
  CHECK(contains(d128.program.source, "(tile_ % 8) * 128"));
  // causal, value dim 64: two blocks of 64 rows an SM
  const auto c64 = fused("attention_causal_bhsd", shape(16, 16, 1024, 1024, 64), "sm90");
  CHECK(c64.program.plan == "attention/wgmma/64x128/tma/heavy/lazy/occ2");
  CHECK(c64.program.launches.at(0).grid[0] == 16);
  CHECK(contains(c64.program.source, "__launch_bounds__(256, 2)"));
  // unchanged: value dim 64 without a mask, causal value dim 128, 4k keys, too few blocks for two an SM
  CHECK(fused("attention_bhsd", shape(16, 16, 1024, 1024, 64), "sm90").program.plan == "attention/wgmma/192x128/tma/pingpong/lazy");
  CHECK(fused("attention_causal_bhsd", shape(16, 16, 1024, 1024, 128), "sm90").program.plan == "attention/wgmma/128x128/tma/pingpong/heavy/lazy");
  CHECK(fused("attention_bhsd", shape(4, 16, 4096, 4096, 128), "sm90").program.plan == "attention/wgmma/128x128/tma/pingpong/lazy");
  CHECK(fused("attention_bhsd", shape(2, 16, 1024, 1024, 128), "sm90").program.plan == "attention/wgmma/128x128/tma/pingpong/lazy");
  CHECK(fused("attention_causal_bhsd", shape(1, 16, 1024, 1024, 64), "sm90").program.plan == "attention/wgmma/64x128/tma/heavy/lazy");
}

TEST_CASE("sm_90: /persistent/dynamic blocks claim their tiles from a counter in scratch, the last block resetting it") {
  const auto dyn = with_plan("attention_causal_bhsd", shape(16, 16, 1024, 1024, 128), "attention/wgmma/128x128/tma/pingpong/heavy/lazy/persistent/dynamic");
  CHECK(dyn.plan == "attention/wgmma/128x128/tma/pingpong/heavy/lazy/persistent/dynamic");
  CHECK(dyn.launches.at(0).grid[0] == 132);
  CHECK(dyn.scratch_bytes == 8);  // two counters
  // claimed one tile ahead by the producer, passed on in shared memory with Q's barrier; 2048 tiles
  CHECK(contains(dyn.source, "next_ = (int)gridDim.x + (int)atomicAdd(count_, 1u)"));
  CHECK(contains(dyn.source, "tile_s_ = tile_;"));
  CHECK(contains(dyn.source, "if (tile_ >= 2048) { tessel_att_mbar_arrive(&qbar_); break; }"));
  CHECK(contains(dyn.source, "const int tile_ = tile_s_;\n  __syncwarp();\n  if (tile_ >= 2048) break;"));
  CHECK(contains(dyn.source, "if (atomicAdd(count_ + 1, 1u) == gridDim.x - 1) { atomicExch(count_, 0u); atomicExch(count_ + 1, 0u); }"));
  // a batch point's query blocks adjacent, heavy-first reversed within it
  CHECK(contains(dyn.source, "(7 - tile_ % 8) * 128"));
  CHECK(contains(dyn.source, "rest_ = (tile_ / 8)"));
  CHECK(hmma_count(dyn) > 0);
  CHECK_THROWS_WITH_AS(with_plan("attention_bhsd", shape(16, 16, 1024, 1024, 128), "attention/wgmma/128x128/tma/dynamic"),
                       doctest::Contains("give /persistent/dynamic"), UserError);
  // cp.async plans compile (the buffers' position it0_ is declared there too)
  CHECK(hmma_count(with_plan("attention_bhsd", shape(16, 16, 1024, 1024, 128), "attention/wgmma/128x128/cpasync")) > 0);
}
