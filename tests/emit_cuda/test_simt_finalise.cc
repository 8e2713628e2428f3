// Last-block finalisation of SIMT groups (compiler/emit_cuda/simt_finalise.h), CI side (no GPU):
// with CudaOptions::finalise_split_reductions, a split reduction's phase two runs in the last
// phase-one block of its outputs (one launch fewer, counters in scratch, the partials read through
// L2), a group reading another tile's results is not finalised, and the sources compile through
// NVRTC. The results on a GPU: conformance and the roofline suite (docs/results).
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/simt_finalise.h"
#include "compiler/emit_cuda/simt_mapping.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#include "tests/emit_cuda/nvrtc_check.h"
#endif

using namespace tessel;

namespace {

struct Built {
  std::unique_ptr<frontend::Module> module;  // the kernel's statements point into it
  std::unique_ptr<Compilation> c;
  emit_cuda::CudaProgram program;
};

Built build(const std::string& source, const std::map<std::string, int64_t>& sizes, bool finalise = true, const std::string& arch = "sm90") {
  Built b;
  b.module = std::make_unique<frontend::Module>(frontend::parse_module(source, "finalise.tsl"));
  CompileOptions o;
  o.target = "isa/targets/" + arch + ".yaml";
  o.sizes = sizes;
  b.c = compile(b.module->functions.at(0), o);
  emit_cuda::CudaOptions co;
  co.arch = arch == "sm75" ? "sm_75" : "sm_90";
  co.finalise_split_reductions = finalise;
  b.program = emit_cuda::emit_cuda(b.c->kernel, co);
  return b;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The top-level loops of the kernel body (the SIMT groups of these kernels).
std::vector<const kernel::Node*> groups(const kernel::Kernel& k) {
  std::vector<const kernel::Node*> g;
  for (const auto& n : k.body->children)
    if (n->kind == kernel::NodeKind::Loop) g.push_back(n.get());
  return g;
}

const char* kBatchNormStats = R"(
def bn_stats(f16[N, H, W, C] X) -> (f32[C] Mean, f32[C] Var) {
  Sum(c) +=! f32(X(n, h, w, c))
  Mean(c) = Sum(c) / f32(N * H * W)
  SqSum(c) +=! (f32(X(n, h, w, c)) - Mean(c)) * (f32(X(n, h, w, c)) - Mean(c))
  Var(c) = SqSum(c) / f32(N * H * W)
}
)";

}  // namespace

TEST_CASE("batch-norm statistics: each phase two runs in the last of its phase-one blocks, three launches fewer than groups") {
  const auto b = build(kBatchNormStats, {{"N", 16}, {"H", 28}, {"W", 28}, {"C", 128}});
  const auto& p = b.program;
  CAPTURE(p.source);
  const auto g = groups(b.c->kernel);
  REQUIRE(g.size() == 4);  // Sum's two phases, SqSum's two phases
  const auto f = emit_cuda::plan_finalisation(b.c->kernel, *g[0], *g[1]);
  REQUIRE(f.has_value());
  CHECK(f->tensors == std::set<std::string>{"Sum_partial"});
  // 12,544 pixels in chunks over the 128 channels' tiles: every channel tile's chunks arrive at it
  CHECK(f->b_tiles * f->arrivals == emit_cuda::grid_loops(*g[0]).blocks);
  CHECK(f->arrivals > 100);
  CHECK(p.launches.size() == 2);
  CHECK(count(p.source, "atomicAdd(fin_count_ + fin_, 1u) == " + std::to_string(f->arrivals - 1) + "u") == 2);
  CHECK(contains(p.source, "__ldcg(&t_Sum_partial["));
  CHECK(contains(p.source, "__ldcg(&t_SqSum_partial["));
  CHECK(p.scratch_bytes >= 2 * 16);  // a counter per phase-two tile, twice
  // off (the default): the four groups are four launches
  CHECK(build(kBatchNormStats, {{"N", 16}, {"H", 28}, {"W", 28}, {"C", 128}}, false).program.launches.size() == 4);
#ifdef TESSEL_HAVE_CUDA
  cuda_test::compiles_under_nvrtc(p);
#endif
}

TEST_CASE("a whole-tensor sum's one-block phase two is finalised by the last of all phase-one blocks") {
  const auto b = build("def total(f32[N] X) -> (f32[] T) {\n  T() +=! X(i)\n}\n", {{"N", 16777216}});
  const auto& p = b.program;
  CAPTURE(p.source);
  const auto g = groups(b.c->kernel);
  REQUIRE(!g.empty());
  CHECK(p.launches.size() == 1);
  CHECK(contains(p.source, "finalises group 1 (1 tiles)"));
  CHECK(contains(p.source, "== " + std::to_string(emit_cuda::grid_loops(*g[0]).blocks - 1) + "u;"));
#ifdef TESSEL_HAVE_CUDA
  cuda_test::compiles_under_nvrtc(p);
#endif
}

TEST_CASE("a group reading what other tiles of the group before it wrote is not finalised") {
  // B's tile t reads A's tile (T - 1 - t): no projection of A's tiles onto B's
  const auto b = build(
      "def rev(f32[N, C] X) -> (f32[N, C] Z) {\n  Y(n, c) = X(n, c) * 2.0\n  Z(n, c) = Y(N - 1 - n, c) + 1.0\n}\n",
      {{"N", 4096}, {"C", 256}});
  const auto g = groups(b.c->kernel);
  CAPTURE(b.program.source);
  REQUIRE(g.size() == 2);  // (a reversed read is not fused)
  CHECK_FALSE(emit_cuda::plan_finalisation(b.c->kernel, *g[0], *g[1]).has_value());
  CHECK(b.program.launches.size() == 2);
  CHECK_FALSE(contains(b.program.source, "fin_count_"));
}
