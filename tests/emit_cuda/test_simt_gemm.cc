// The register-blocked SIMT contraction kernel and its TF32 variant (compiler/emit_cuda/simt_gemm.h,
// simt_gemm_policy.h; issue 35 item 2), CI side (no GPU): which contractions take it, the plan the
// policy chooses for small, large and odd shapes, the plan text round trip, the refusals with their
// reasons, and NVRTC compiles of the generated source for sm_75 and sm_90 (where NVRTC is built in).
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/simt_gemm_policy.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#endif

using namespace tessel;

namespace {

constexpr const char* kOps = R"(
def mm(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! A(m, k) * B(k, n)
}
def mm_tn(f32[K, M] A, f32[N, K] B) -> (f32[M, N] C) {
  C(m, n) +=! A(k, m) * B(n, k)
}
def bmm(f32[Z, M, K] A, f32[Z, K, N] B) -> (f32[Z, M, N] C) {
  C(z, m, n) +=! A(z, m, k) * B(z, k, n)
}
def mm_bias_relu(f32[M, K] A, f32[K, N] B, f32[N] bias) -> (f32[M, N] D) {
  C(m, n) +=! A(m, k) * B(k, n)
  D(m, n) = max(C(m, n) + bias(n), 0)
}
def hmm(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
}
)";

struct Built {
  frontend::Module module;
  std::unique_ptr<Compilation> c;
};

Built build(const std::string& def, const std::map<std::string, int64_t>& sizes, const std::string& arch) {
  Built b;
  b.module = frontend::parse_module(kOps, "simt_gemm.tsl");
  CompileOptions o;
  o.target = "isa/targets/" + arch + ".yaml";
  o.sizes = sizes;
  b.c = compile(frontend::select_function(b.module, def), o);
  return b;
}

emit_cuda::CudaOptions options_for(const Compilation& c) {
  emit_cuda::CudaOptions o;
  o.arch = c.hierarchy.gpu->arch;
  o.machine = isa::GpuMachine::from(c.hierarchy);
  return o;
}

std::map<std::string, int64_t> mnk(int64_t m, int64_t n, int64_t k) { return {{"M", m}, {"N", n}, {"K", k}}; }

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

void nvrtc_compiles(const emit_cuda::CudaProgram& p) {
#ifdef TESSEL_HAVE_CUDA
  CHECK_NOTHROW(gpu::compile_to_cubin(p.source, {.arch = p.arch, .options = {"-fmad=false"}}));
#else
  (void)p;
#endif
}

}  // namespace

TEST_CASE("simt gemm: f32 contractions take the register-blocked kernel and NVRTC compiles it for sm_75 and sm_90") {
  struct Case {
    const char* def;
    std::map<std::string, int64_t> sizes;
  };
  const Case cases[] = {
      {"mm", mnk(97, 61, 53)},   {"mm", mnk(2048, 2048, 2048)}, {"mm", mnk(1000, 776, 520)}, {"mm_tn", mnk(97, 61, 53)},
      {"mm_tn", mnk(256, 128, 64)}, {"bmm", {{"Z", 3}, {"M", 67}, {"N", 45}, {"K", 33}}}, {"mm_bias_relu", mnk(130, 70, 40)},
  };
  for (const char* arch : {"sm90", "sm75"})
    for (const auto& cs : cases) {
      CAPTURE(arch);
      CAPTURE(cs.def);
      CAPTURE(cs.sizes.at("M"));
      const Built b = build(cs.def, cs.sizes, arch);
      const emit_cuda::CudaProgram p = emit_cuda::emit_cuda(b.c->kernel, options_for(*b.c));
      REQUIRE(p.simt_gemm.has_value());
      CHECK_FALSE(p.tensor_cores);
      CHECK_FALSE(p.simt_gemm->tf32);
      REQUIRE(p.launches.size() == 1);
      CHECK(contains(p.launches[0].kernel, "tessel_sgemm_"));
      CHECK(contains(joined(p.explain), "SIMT contraction: "));
      CHECK(contains(joined(p.explain), "plan candidates (ranked): " + p.simt_gemm->to_string()));
      CHECK(contains(p.source, "fmaf("));
      // cp.async where the description has it, synchronous loads where it has not
      CHECK(contains(p.source, "tessel_cp_async16(") == (std::string(arch) == "sm90"));
      if (std::string(cs.def) == "bmm") CHECK(p.launches[0].grid[2] == 3);
      if (std::string(cs.def) == "mm_bias_relu") CHECK(contains(joined(p.explain), "fused epilogue"));
      nvrtc_compiles(p);
    }
}

TEST_CASE("simt gemm: small problems get small tiles that fill the SMs, large ones 8x8 thread tiles of 128 threads") {
  const Built small = build("mm", mnk(97, 61, 53), "sm90");
  const auto& m = options_for(*small.c).machine;
  const auto s = emit_cuda::simt_gemm_candidates(*small.c->kernel.contraction, *m, false);
  REQUIRE(!s.empty());
  CHECK(s.front().bm * s.front().bn <= 64 * 64);
  const Built large = build("mm", mnk(2048, 2048, 2048), "sm90");
  const auto l = emit_cuda::simt_gemm_candidates(*large.c->kernel.contraction, *m, false);
  REQUIRE(!l.empty());
  // 2048^3 on an H100: 64x128 / 128x64 blocks (128 threads, 8x8) 404-414 us, 128x128 438 us
  CHECK(l.front().tm == 8);
  CHECK(l.front().tn == 8);
  CHECK(l.front().threads(32) == 128);
  // an odd shape: every candidate is legal (tails are bounds-checked) and the first fills the machine
  const Built odd = build("mm", mnk(1000, 776, 520), "sm90");
  const auto& oc = *odd.c->kernel.contraction;
  const auto o = emit_cuda::simt_gemm_candidates(oc, *m, false);
  REQUIRE(!o.empty());
  for (const auto& g : o) CHECK(emit_cuda::simt_plan_obstacle(oc, g, *m).empty());
  const int64_t blocks = ((1000 + o.front().bm - 1) / o.front().bm) * ((776 + o.front().bn - 1) / o.front().bn);
  CHECK(blocks >= int64_t(m->sm_count) / 2);
  // sm_75: no cp.async, so two stages (double buffering) only
  const Built t = build("mm", mnk(2048, 2048, 2048), "sm75");
  for (const auto& g : emit_cuda::simt_gemm_candidates(*t.c->kernel.contraction, *options_for(*t.c).machine, false)) CHECK(g.stages == 2);
}

TEST_CASE("simt gemm: plan text round trip, and the plans given by the user run as given") {
  for (const char* text : {"128x128x16/8x8/st3/simt", "32x32x16/4x4/st2/simt", "128x128x32/64x32/st3/tf32"})
    CHECK(emit_cuda::SimtGemmPlan::parse(text).to_string() == text);
  CHECK(emit_cuda::SimtGemmPlan::is_plan_text("64x64x16/4x4/st2/simt"));
  CHECK_FALSE(emit_cuda::SimtGemmPlan::is_plan_text("128x128x32/64x64/ks1/st3"));
  for (const char* bad : {"128x128/8x8/st2/simt", "128x128x16/8x8/ks1/simt", "128x128x16/8x8/st2/fast", "128x128x16/8/st2/simt"})
    CHECK_THROWS_AS(emit_cuda::SimtGemmPlan::parse(bad), UserError);
  const Built b = build("mm", mnk(97, 61, 53), "sm90");
  auto o = options_for(*b.c);
  o.simt_plan = emit_cuda::SimtGemmPlan::parse("32x64x16/4x4/st2/simt");
  o.plan_required = true;
  const auto p = emit_cuda::emit_cuda(b.c->kernel, o);
  REQUIRE(p.simt_gemm.has_value());
  CHECK(p.simt_gemm->to_string() == "32x64x16/4x4/st2/simt");
  CHECK(contains(joined(p.explain), "plan 32x64x16/4x4/st2/simt (given)"));
  nvrtc_compiles(p);
}

TEST_CASE("simt gemm: refusals name the reason") {
  const Built b = build("mm", mnk(97, 61, 53), "sm90");
  const auto& c = *b.c->kernel.contraction;
  const auto m = *options_for(*b.c).machine;
  auto why = [&](const char* text) { return emit_cuda::simt_plan_obstacle(c, emit_cuda::SimtGemmPlan::parse(text), m); };
  CHECK(contains(why("100x128x16/8x8/st2/simt"), "not a multiple of the thread tile"));
  CHECK(contains(why("128x128x64/8x8/st4/simt"), "B of shared memory"));
  CHECK(contains(why("128x128x16/8x8/st1/simt"), "stages must be"));
  CHECK(contains(why("128x128x16/16x2/st2/simt"), "multiple of 4"));
  CHECK(contains(why("256x256x16/4x8/st2/simt"), "threads per block"));
  CHECK(contains(why("128x128x12/64x32/st2/tf32"), "multiple of 8"));
  // a plan the kernel cannot run is a UserError listing plans that can
  auto o = options_for(*b.c);
  o.simt_plan = emit_cuda::SimtGemmPlan::parse("100x128x16/8x8/st2/simt");
  o.plan_required = true;
  try {
    emit_cuda::emit_cuda(b.c->kernel, o);
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    CHECK(contains(e.what(), "cannot run on sm_90"));
    CHECK(contains(e.what(), "plans that can: "));
  }
  // a TensorCore plan for an f32 contraction, and a SIMT plan for an f16 one
  auto tc = options_for(*b.c);
  tc.config = emit_cuda::TcConfig::parse("128x128x32/64x64/ks1/st3");
  tc.plan_required = true;
  CHECK_THROWS_WITH_AS(emit_cuda::emit_cuda(b.c->kernel, tc), doctest::Contains("is a TensorCore plan"), UserError);
  const Built h = build("hmm", mnk(256, 256, 256), "sm90");
  auto ho = options_for(*h.c);
  ho.simt_plan = emit_cuda::SimtGemmPlan::parse("64x64x16/4x4/st2/simt");
  ho.plan_required = true;
  CHECK_THROWS_WITH_AS(emit_cuda::emit_cuda(h.c->kernel, ho), doctest::Contains("have a TensorCore shape"), UserError);
  // f16 contractions keep the TensorCores: the SIMT kernel does not fire
  const auto hp = emit_cuda::emit_cuda(h.c->kernel, options_for(*h.c));
  CHECK(hp.tensor_cores);
  CHECK_FALSE(hp.simt_gemm.has_value());
}

TEST_CASE("simt gemm: TF32 only when asked for, on sm_80 and newer") {
  // sm80: on sm90 these shapes take the wgmma main loop (test_tf32_main_loops.cc)
  const Built b = build("mm", mnk(2048, 2048, 2048), "sm80");
  // without the option f32 never reaches the TensorCores
  CHECK_FALSE(contains(emit_cuda::emit_cuda(b.c->kernel, options_for(*b.c)).source, "tf32"));
  auto o = options_for(*b.c);
  o.tf32 = true;
  const auto p = emit_cuda::emit_cuda(b.c->kernel, o);
  REQUIRE(p.simt_gemm.has_value());
  CHECK(p.simt_gemm->tf32);
  CHECK(contains(p.source, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
  CHECK(contains(p.source, "cvt.rna.tf32.f32"));
  CHECK(contains(joined(p.explain), "10-bit mantissa"));
  nvrtc_compiles(p);
  for (const char* def : {"mm_tn", "mm_bias_relu"}) {  // other majorness, fused epilogue
    CAPTURE(def);
    const Built x = build(def, mnk(130, 70, 40), "sm80");
    auto xo = options_for(*x.c);
    xo.tf32 = true;
    const auto xp = emit_cuda::emit_cuda(x.c->kernel, xo);
    CHECK(contains(xp.source, "tessel_mma_tf32("));
    nvrtc_compiles(xp);
  }
  // sm_75 has no TF32 TensorCores; f16 contractions are no TF32 work
  const Built t = build("mm", mnk(97, 61, 53), "sm75");
  auto to = options_for(*t.c);
  to.tf32 = true;
  CHECK_THROWS_WITH_AS(emit_cuda::emit_cuda(t.c->kernel, to), doctest::Contains("has no mma.sync"), UserError);
  const Built h = build("hmm", mnk(256, 256, 256), "sm90");
  auto ho = options_for(*h.c);
  ho.tf32 = true;
  CHECK_THROWS_WITH_AS(emit_cuda::emit_cuda(h.c->kernel, ho), doctest::Contains("TF32 takes f32"), UserError);
}
