// f32 contractions with --tf32 on the wgmma main loop (issue 35), CI side (no GPU): on sm_90 the
// tile policy lists the persistent TMA kernel's tiles with 32-deep K tiles for f32 operands, the
// kernel carries wgmma.mma_async m64nNk8 .tf32 (no transpose operands) over f32 tensor maps, an
// operand that is not K-contiguous is read from a K-major copy (/rp: wgmma .tf32 has no transposed
// form), and NVRTC compiles it with HGMMA in the cubin; where no wgmma plan fits (sm_80, small or
// misaligned shapes, a .../tf32 plan given) the register-blocked mma.sync kernel runs and --explain
// says which main loop runs and why. f32 without --tf32 never reaches the TensorCores.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "compiler/emit_cuda/repack_plan.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "tests/emit_cuda/contraction_def.h"

using namespace tessel;

namespace {

// workloads/gemm_f32.tsl's layouts: nn (A [M, K], B [K, N]), nt (B [N, K]: both K-contiguous),
// tn (A [K, M], B [N, K]), and a fused bias + relu
constexpr const char* kOps = R"(
def nn(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! A(m, k) * B(k, n)
}
def nt(f32[M, K] A, f32[N, K] B) -> (f32[M, N] C) {
  C(m, n) +=! A(m, k) * B(n, k)
}
def tn(f32[K, M] A, f32[N, K] B) -> (f32[M, N] C) {
  C(m, n) +=! A(k, m) * B(n, k)
}
def bias_relu(f32[M, K] A, f32[K, N] B, f32[N] bias) -> (f32[M, N] D) {
  C(m, n) +=! A(m, k) * B(k, n)
  D(m, n) = max(C(m, n) + bias(n), 0)
}
)";

using cuda_test::contains;
using Compiled = cuda_test::CompiledDef;

Compiled compile_def(const std::string& def, const std::string& target, int64_t M, int64_t N, int64_t K) {
  return cuda_test::compile_mnk(kOps, "tf32.tsl", def, target, M, N, K);
}

std::string explain_text(const emit_cuda::CudaProgram& p) {
  std::string s;
  for (const auto& l : p.explain) s += l + "\n";
  return s;
}

emit_cuda::CudaProgram emit_tf32(const Compiled& r, const std::string& arch, std::optional<emit_cuda::TcConfig> g = std::nullopt) {
  emit_cuda::CudaOptions o;
  o.arch = arch;
  o.tf32 = true;
  if (g) o.config = g, o.plan_required = true;
  return emit_cuda::emit_cuda(r.c->kernel, o);
}

#ifdef TESSEL_HAVE_CUDA
using cuda_test::tensor_ops;
#endif

}  // namespace

TEST_CASE("tf32 operands: wgmma K depth 8, the tf32 PTX name, persistent-kernel tiles with 32-deep K tiles on sm90 only") {
  const isa::GpuMachine sm90 = isa::stock_gpu_machine("sm_90");
  CHECK(emit_cuda::wgmma_k_depth(sm90, DType::F32) == 8);
  CHECK(emit_cuda::wgmma_k_depth(sm90, DType::F16) == 16);
  CHECK(emit_cuda::wgmma_k_depth(sm90, DType::BF16) == 16);
  CHECK(emit_cuda::ptx_operand_type(DType::F32) == std::string("tf32"));
  CHECK(emit_cuda::tf32_wgmma_operand(DType::F32));
  CHECK_FALSE(emit_cuda::tf32_wgmma_operand(DType::F16));
  CHECK_FALSE(emit_cuda::warp_mma_operand(DType::F32));  // no mma.sync / ldmatrix main loop for f32
  for (const std::string def : {"nn", "nt", "tn"}) {
    CAPTURE(def);
    const Compiled r = compile_def(def, "sm90", 2048, 2048, 2048);
    const auto cands = emit_cuda::tc_candidates(r.contraction(), "sm_90", 132);
    REQUIRE(cands.size() >= 7);
    for (const auto& g : cands) {
      CAPTURE(g.to_string());
      CHECK(g.tma_ws());
      CHECK(g.bk == 32);
      // nt reads both operands K-contiguous in place; nn copies B [K, N] to [N, K], tn copies A
      CHECK(g.repack == (def != "nt"));
    }
    CHECK(cands.front().bm * cands.front().bn >= 128 * 128);
    // none on sm_80: no wgmma
    CHECK(emit_cuda::tc_candidates(r.contraction(), "sm_80", 108).empty());
  }
  // too small or misaligned for the persistent TMA kernel: no candidates
  CHECK(emit_cuda::tc_candidates(compile_def("nn", "sm90", 97, 61, 53).contraction(), "sm_90", 132).empty());
  CHECK(emit_cuda::tc_candidates(compile_def("nn", "sm90", 256, 256, 250).contraction(), "sm_90", 132).empty());
}

TEST_CASE("tf32 plans refused with the reason: WMMA / mma.sync, cp.async wgmma, 64-deep K tiles, an N-contiguous B read in place") {
  const Compiled r = compile_def("nn", "sm90", 1024, 1024, 1024);
  emit_cuda::TcConfig w{128, 128, 32, 64, 64, 1, 3};
  CHECK(emit_cuda::config_obstacle(r.contraction(), w, "sm_90") == "f32 contractions on the TensorCores (TF32) take the wgmma main loop (sm_90a) only");
  w.mma = emit_cuda::MmaKind::mma_sync;
  CHECK(emit_cuda::config_obstacle(r.contraction(), w, "sm_90") == "f32 contractions on the TensorCores (TF32) take the wgmma main loop (sm_90a) only");
  emit_cuda::TcConfig g{128, 256, 32, 64, 256, 1, 4};
  g.mma = emit_cuda::MmaKind::wgmma;
  CHECK(emit_cuda::config_obstacle(r.contraction(), g, "sm_90") == "f32 (TF32) wgmma tiles run on the persistent TMA kernel (/ws)");
  g.loader = emit_cuda::OperandLoader::tma_ws;
  CHECK(contains(emit_cuda::config_obstacle(r.contraction(), g, "sm_90"), "wgmma .tf32 reads both operands K-major"));
  g.repack = true;
  CHECK(emit_cuda::config_obstacle(r.contraction(), g, "sm_90").empty());
  g.bk = 64;
  // 64 x 4 bytes is no 128-byte row: A's own TMA plan fails too, and A is already K-major
  CHECK(emit_cuda::config_obstacle(r.contraction(), g, "sm_90") == "operand copies (/rp): copy of A: the operand is already in canonical order");
  g.repack = false;
  const Compiled nt = compile_def("nt", "sm90", 1024, 1024, 1024);
  CHECK(emit_cuda::config_obstacle(nt.contraction(), g, "sm_90") == "wgmma tiles need bk = 32, wm = 64 or 128, wn = bn <= 256");
  g.bk = 32;
  CHECK(emit_cuda::config_obstacle(nt.contraction(), g, "sm_90").empty());
  g.repack = true;  // nothing to copy
  CHECK(contains(emit_cuda::config_obstacle(nt.contraction(), g, "sm_90"), "no operand needs a copy"));
  // the copy of B: [K, N] -> [N, K], element moves (the copy kernel transposes)
  g.repack = true;
  const emit_cuda::RepackPlan rp = emit_cuda::plan_repack(r.contraction(), g, isa::stock_gpu_machine("sm_90"), 0);
  REQUIRE(rp.ok);
  REQUIRE(rp.copies.size() == 1);
  CHECK(rp.copies[0].source == "B");
  CHECK(rp.copies[0].perm == std::vector<int>{1, 0});
  CHECK(rp.copies[0].shape == std::vector<int64_t>{1024, 1024});
  CHECK(rp.copies[0].move_bytes == 4);
  CHECK(rp.copies[0].bytes == 1024u * 1024u * 4u);
  // f16 operands keep their transposed (N-major) wgmma tiles: no copy of an N-contiguous f16 B
  // (the K-major rule is TF32's)
}

TEST_CASE("--tf32 on sm_90: the persistent wgmma kernel with .tf32 m64nNk8, f32 tensor maps, B's K-major copy, NVRTC with HGMMA") {
  for (const std::string def : {"nn", "nt", "tn", "bias_relu"}) {
    CAPTURE(def);
    const Compiled r = compile_def(def, "sm90", 2048, 2048, 2048);
    const auto p = emit_tf32(r, "sm_90");
    REQUIRE(p.config);
    CHECK(p.tensor_cores);
    CHECK_FALSE(p.simt_gemm);
    CHECK(p.arch == "sm_90a");
    CHECK(p.config->tma_ws());
    CHECK(p.config->bk == 32);
    CHECK(contains(p.source, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(p.config->bn) + "k8.f32.tf32.tf32 {"));
    CHECK(contains(p.source, ", 1, 1, 1;\\n\""));  // scale-d, imm-scale-a, imm-scale-b: no transpose operands
    CHECK_FALSE(contains(p.source, ".f16.f16 {"));
    CHECK_FALSE(contains(p.source, "cvt.rna.tf32"));  // not the register-blocked kernel
    const auto& maps = p.launches.back().tensor_maps;
    REQUIRE(maps.size() >= 2u);
    for (const auto& m : maps) CHECK(m.dtype == DType::F32);
    // the nn and tn kernels read one operand from its K-major copy: a copy kernel launched first
    CHECK(p.launches.size() == (def == "nt" ? 1u : 2u));
    CHECK(p.config->repack == (def != "nt"));
    const std::string ex = explain_text(p);
    CHECK(contains(ex, "TF32 TensorCores (--tf32)"));
    CHECK(contains(ex, "the wgmma main loop (sm_90a)"));
    CHECK(contains(ex, "low 13 mantissa bits ignored"));
    CHECK(contains(ex, "k8 tf32 per 8-deep K step"));
#ifdef TESSEL_HAVE_CUDA
    CHECK(tensor_ops(p).count("HGMMA"));
#endif
  }
  // every candidate of the ranked list emits (and, with NVRTC, compiles)
  const Compiled r = compile_def("nn", "sm90", 1000, 776, 520);  // ragged tails on M, N, K
  int n = 0;
  for (const auto& g : emit_cuda::tc_candidates(r.contraction(), "sm_90", 132)) {
    CAPTURE(g.to_string());
    const auto p = emit_tf32(r, "sm_90", g);
    CHECK(contains(p.source, "k8.f32.tf32.tf32"));
#ifdef TESSEL_HAVE_CUDA
    if (n < 4) CHECK(tensor_ops(p).count("HGMMA"));
#endif
    ++n;
  }
  CHECK(n >= 7);
}

TEST_CASE("--tf32 where no wgmma plan fits: the register-blocked mma.sync kernel, and --explain says why") {
  struct Case {
    std::string target, arch;
    int64_t M, N, K;
    std::string why;
  };
  for (const Case& c : {Case{"sm80", "sm_80", 2048, 2048, 2048, "sm_80 has no wgmma with tensor maps"},
                        Case{"sm90", "sm_90", 97, 61, 53, "no wgmma plan fits M=97 N=61 K=53"},
                        Case{"sm90", "sm_90", 256, 256, 250, "no wgmma plan fits M=256 N=256 K=250"}}) {
    CAPTURE(c.arch);
    CAPTURE(c.M);
    const Compiled r = compile_def("nn", c.target, c.M, c.N, c.K);
    const auto p = emit_tf32(r, c.arch);
    CHECK(p.simt_gemm);
    CHECK_FALSE(p.tensor_cores);
    CHECK(contains(p.source, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    const std::string ex = explain_text(p);
    CHECK(contains(ex, "(mma.sync m16n8k8, operands rounded by cvt.rna.tf32.f32), not the wgmma main loop: " + c.why));
  }
  // a plan of the register-blocked kernel given on sm_90 keeps that kernel
  const Compiled r = compile_def("nn", "sm90", 2048, 2048, 2048);
  emit_cuda::CudaOptions o;
  o.arch = "sm_90";
  o.tf32 = true;
  o.simt_plan = emit_cuda::SimtGemmPlan::parse("128x128x32/64x32/st3/tf32");
  o.plan_required = true;
  const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
  CHECK(p.simt_gemm);
  CHECK(contains(explain_text(p), "a plan of the register-blocked kernel was given"));
  // without --tf32 f32 stays off the TensorCores (the SIMT FMA kernel)
  o.tf32 = false;
  o.simt_plan.reset();
  const auto f = emit_cuda::emit_cuda(r.c->kernel, o);
  CHECK(f.simt_gemm);
  CHECK_FALSE(f.tensor_cores);
  CHECK_FALSE(contains(f.source, "tf32"));
}
