// bf16 contractions on the mma.sync and wgmma main loops (issue 35), CI side (no GPU): the tile
// policy ranks the same plans for bf16 as for f16 operands on sm80 and sm90 (the element type is
// data: ptx_operand_type), the kernels carry the .bf16 instructions, bf16 tensor maps and bf16
// evict-first stores and compile through NVRTC with HGMMA / HMMA in the cubin; sm75 has no bf16
// tensor cores and says so in --explain.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/emit_cuda/tile_policy.h"
#include "tests/emit_cuda/contraction_def.h"

using namespace tessel;

namespace {

constexpr const char* kOps = R"(
def bfmm(bf16[M, K] A, bf16[K, N] B) -> (bf16[M, N] D) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
  D(m, n) = bf16(C(m, n))
}
def hfmm(f16[M, K] A, f16[K, N] B) -> (f16[M, N] D) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
  D(m, n) = f16(C(m, n))
}
def bfp(bf16[M, K] A, bf16[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
}
)";

using cuda_test::contains;
using Compiled = cuda_test::CompiledDef;

Compiled compile_def(const std::string& def, const std::string& target, int64_t M, int64_t N, int64_t K) {
  return cuda_test::compile_mnk(kOps, "bf16.tsl", def, target, M, N, K);
}

std::vector<std::string> plan_texts(const std::vector<emit_cuda::TcConfig>& v) {
  std::vector<std::string> out;
  for (const auto& g : v) out.push_back(g.to_string());
  return out;
}

emit_cuda::CudaProgram emit_plan(const Compiled& r, const std::string& arch, const emit_cuda::TcConfig& g) {
  emit_cuda::CudaOptions o;
  o.arch = arch;
  o.config = g;
  o.plan_required = true;
  return emit_cuda::emit_cuda(r.c->kernel, o);
}

#ifdef TESSEL_HAVE_CUDA
using cuda_test::tensor_ops;
#endif

}  // namespace

TEST_CASE("bf16 operands: the tile policy ranks the f16 plans (wgmma, mma.sync) on sm90 and sm80") {
  struct Shape {
    int64_t M, N, K;
    bool sm90_warp_mma, sm80_warp_mma;  // mma.sync or wgmma plans among the candidates (else WMMA tiles only)
  };
  for (const Shape s : {Shape{1024, 1024, 1024, true, true}, Shape{512, 768, 768, true, false}, Shape{1000, 1500, 700, true, true},
                        Shape{64, 64, 2048, false, false}}) {
    for (const auto& t : {std::tuple<std::string, std::string, int>{"sm90", "sm_90", 132}, {"sm80", "sm_80", 108}}) {
      const std::string target = std::get<0>(t), arch = std::get<1>(t);
      const int sms = std::get<2>(t);
      CAPTURE(s.M);
      CAPTURE(s.N);
      CAPTURE(s.K);
      CAPTURE(target);
      const Compiled bf = compile_def("bfmm", target, s.M, s.N, s.K), hf = compile_def("hfmm", target, s.M, s.N, s.K);
      REQUIRE(bf.contraction().in_type == DType::BF16);
      const auto b = emit_cuda::tc_candidates(bf.contraction(), arch, sms), h = emit_cuda::tc_candidates(hf.contraction(), arch, sms);
      CHECK(plan_texts(b) == plan_texts(h));
      int warp_mma = 0;
      for (const auto& g : b) warp_mma += g.mma != emit_cuda::MmaKind::wmma;
      CHECK((warp_mma > 0) == (target == "sm90" ? s.sm90_warp_mma : s.sm80_warp_mma));
    }
  }
  const Compiled big = compile_def("bfmm", "sm90", 1024, 1024, 1024);
  const auto first = emit_cuda::tc_candidates(big.contraction(), "sm_90", 132).front();
  CHECK(first.tma_ws());  // the persistent TMA wgmma kernel, as for f16
  emit_cuda::TcConfig mma{128, 256, 32, 64, 64, 1, 4};
  mma.mma = emit_cuda::MmaKind::mma_sync;
  CHECK(emit_cuda::config_obstacle(big.contraction(), mma, "sm_80").empty());
  CHECK(emit_cuda::config_obstacle(big.contraction(), first, "sm_80") == "wgmma tiles need sm_90 (compiled for sm_90a) and f16 or bf16 operands");
  CHECK(emit_cuda::ptx_operand_type(DType::BF16) == std::string("bf16"));
  CHECK(emit_cuda::ptx_operand_type(DType::F16) == std::string("f16"));
  CHECK_THROWS_AS(emit_cuda::ptx_operand_type(DType::I8), InternalError);
}

TEST_CASE("sm75 has no bf16 tensor cores: bf16 GEMMs take the SIMT contraction kernel and --explain says why") {
  const Compiled r = compile_def("bfmm", "sm75", 256, 256, 256);
  emit_cuda::CudaOptions o;
  o.arch = "sm_75";
  const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
  CHECK_FALSE(p.tensor_cores);
  CHECK(p.simt_gemm);
  std::string explain;
  for (const auto& l : p.explain) explain += l + "\n";
  CHECK(contains(explain, "dtypes bf16 -> f32 have no WMMA shape on sm_75"));
  CHECK(contains(explain, "bf16 -> f32 from sm_80"));
  CHECK_FALSE(contains(p.source, "mma.sync.aligned"));
  // a TensorCore plan asked for is refused with the reason
  emit_cuda::TcConfig g{128, 128, 32, 64, 64, 1, 2};
  o.config = g;
  o.plan_required = true;
  CHECK_THROWS_WITH_AS(emit_cuda::emit_cuda(r.c->kernel, o), doctest::Contains("bf16 -> f32 have no WMMA shape on sm_75"), UserError);
}

TEST_CASE("bf16 wgmma plans (sm_90a): .bf16 wgmma, bf16 tensor maps and stores, NVRTC with HGMMA") {
  const Compiled r = compile_def("bfmm", "sm90", 1024, 1024, 1024);
  // one plan of each main-loop family: persistent TMA (evict-first, TMA stores, stream-K, ping-pong,
  // multicast), cp.async wgmma (/wg, /wgd)
  std::set<std::tuple<bool, emit_cuda::WsSchedule, emit_cuda::OutputStore, emit_cuda::CopyIssue>> seen;
  int n = 0;
  for (const auto& g : emit_cuda::tc_candidates(r.contraction(), "sm_90", 132)) {
    if (!g.wgmma() || g.repack || !seen.insert({g.tma_ws(), g.schedule, g.store, g.issue}).second) continue;
    CAPTURE(g.to_string());
    const auto p = emit_plan(r, "sm_90", g);
    CHECK(p.arch == "sm_90a");
    CHECK(contains(p.source, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(g.bn) + "k16.f32.bf16.bf16"));
    CHECK_FALSE(contains(p.source, ".f16.f16"));
    if (g.tma_ws()) {
      const auto& maps = p.launches.at(0).tensor_maps;
      REQUIRE(maps.size() == (g.store == emit_cuda::OutputStore::tma ? 3u : 2u));
      for (const auto& m : maps) CHECK(m.dtype == DType::BF16);  // A, B and the bf16 output (/ts)
      CHECK(contains(p.source, "tessel_stcs(__nv_bfloat16* p"));  // evict-first element stores of the bf16 output
    }
#ifdef TESSEL_HAVE_CUDA
    CHECK(tensor_ops(p).count("HGMMA"));
#endif
    ++n;
  }
  CHECK(n >= 6);
  CHECK(seen.count({true, emit_cuda::WsSchedule::stream_k, emit_cuda::OutputStore::evict_first, emit_cuda::CopyIssue::after_mma}));
  CHECK(seen.count({true, emit_cuda::WsSchedule::pingpong, emit_cuda::OutputStore::tma, emit_cuda::CopyIssue::after_mma}));
  CHECK(seen.count({false, emit_cuda::WsSchedule::grouped, emit_cuda::OutputStore::plain, emit_cuda::CopyIssue::deep}));
  // the f16 kernel keeps its instruction and gets no bf16 store helper
  const Compiled h = compile_def("hfmm", "sm90", 1024, 1024, 1024);
  const auto hp = emit_plan(h, "sm_90", emit_cuda::tc_candidates(h.contraction(), "sm_90", 132).front());
  CHECK(contains(hp.source, "k16.f32.f16.f16"));
  CHECK(contains(hp.source, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
  CHECK_FALSE(contains(hp.source, ".bf16"));
  CHECK_FALSE(contains(hp.source, "tessel_stcs(__nv_bfloat16*"));
}

TEST_CASE("bf16 mma.sync plans (sm_80, sm_90) and bf16 split-K plans emit .bf16 instructions and compile with HMMA") {
  for (const auto& t : {std::pair<std::string, std::string>{"sm80", "sm_80"}, {"sm90", "sm_90"}}) {
    const std::string target = t.first, arch = t.second;
    CAPTURE(arch);
    const Compiled r = compile_def("bfmm", target, 1000, 1500, 700);  // ragged: tails on M, N and K
    emit_cuda::CudaOptions o;  // the default plan
    o.arch = arch;
    const auto p = emit_cuda::emit_cuda(r.c->kernel, o);
    REQUIRE(p.config);
    CHECK(p.config->mma == emit_cuda::MmaKind::mma_sync);
    CHECK(p.arch == arch);
    CHECK(contains(p.source, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    CHECK(contains(p.source, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
#ifdef TESSEL_HAVE_CUDA
    CHECK(tensor_ops(p).count("HMMA"));
#endif
  }
  // split-K across blocks (WMMA bf16 fragments): cluster, last-block and atomic reductions
  const Compiled s = compile_def("bfp", "sm90", 64, 64, 2048);
  std::set<emit_cuda::SplitKReduce> kinds;
  for (const auto& g : emit_cuda::tc_candidates(s.contraction(), "sm_90", 132)) {
    if (g.k_blocks == 1 || !kinds.insert(g.reduce).second) continue;
    CAPTURE(g.to_string());
    const auto p = emit_plan(s, "sm_90", g);
    CHECK(contains(p.source, "wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16"));
#ifdef TESSEL_HAVE_CUDA
    CHECK(tensor_ops(p).count("HMMA"));
#endif
  }
  CHECK(kinds.size() == 3);
}
