// Product reductions (`*=!`) on the GPU path, CI side (no GPU): the generated CUDA multiplies from
// the identity 1 (a lane's elements, the warp's xor shuffles, the block's warps), a product too long
// for one block per output is split into two launches whose partials are multiplied (no atomics:
// CUDA has no atomic multiply; split_reductions pads a cut chunk with 1), and each source compiles
// through NVRTC for sm_90 and sm_75 (workloads/reduction_product.tsl).
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

emit_cuda::CudaProgram cuda_for(const std::string& def, const std::map<std::string, int64_t>& sizes, const std::string& arch = "sm90") {
  frontend::Module module = frontend::load_module("workloads/reduction_product.tsl");
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

TEST_CASE("a row product multiplies from 1 across lanes and warps, and compiles under NVRTC") {
  for (const std::string arch : {"sm90", "sm75"}) {
    CAPTURE(arch);
    const auto p = cuda_for("prod_rows", {{"M", 64}, {"N", 4096}}, arch);
    CAPTURE(p.source);
    CHECK(contains(p.source, "((float)1)"));
    CHECK(contains(p.source, " * (float)"));
    CHECK_FALSE(contains(p.source, "atomic"));
    compiles_under_nvrtc(p);
  }
}

TEST_CASE("i32, i8 and f16 products and a column product compile under NVRTC") {
  for (const char* def : {"prod_rows_i32", "prod_rows_i8", "prod_rows_f16", "prod_cols", "prod_accumulate"}) {
    CAPTURE(def);
    const auto p = cuda_for(def, {{"M", 96}, {"N", 1000}});
    const bool integer = std::string(def).find("_i") != std::string::npos;
    CHECK(contains(p.source, integer ? "(unsigned long long)" : " * (float)"));
    compiles_under_nvrtc(p);
  }
}

TEST_CASE("a product of products of two reads is no matrix multiply: SIMT code, no TensorCore fragments") {
  const auto p = cuda_for("prod_pairs", {{"M", 128}, {"N", 128}, {"K", 64}});
  CHECK_FALSE(contains(p.source, "wmma"));
  CHECK_FALSE(contains(p.source, "mma."));
  CHECK(contains(p.source, " * (float)"));
  compiles_under_nvrtc(p);
}

// 16M factors to one value: split_reductions cuts it into chunks (phase one: a partial product per
// chunk over many blocks; phase two: the partials multiplied in one block), no atomics.
TEST_CASE("a product of 16M elements runs in two launches whose partials are multiplied, no atomics") {
  const auto p = cuda_for("prod_all_long", {{"M", 4096}, {"N", 4096}});
  CAPTURE(p.source);
  REQUIRE(p.launches.size() == 2);
  CHECK(p.launches[0].grid[0] > 1);
  CHECK(p.launches[1].grid[0] == 1);
  CHECK_FALSE(contains(p.source, "atomic"));
  compiles_under_nvrtc(p);
}

// A 16-bit product rounds at every step, so its order is its value: one thread per output walks
// the factors in the interpreter's order (no lanes, no shuffles, no split into chunks), however
// long the row; an f32 product of the same rows spreads over the lanes (conformance
// reduce.prod_2d_lead.f16 was one f16 step off in 7 of 32 outputs on sm90 before).
TEST_CASE("an f16 product keeps the interpreter's order on the GPU: a thread per output, never split") {
  for (int64_t n : {80, 100000}) {
    CAPTURE(n);
    const auto p = cuda_for("prod_rows_f16", {{"M", 2}, {"N", n}});
    CAPTURE(p.source);
    CHECK(p.launches.size() == 1);
    CHECK(contains(p.source, "constexpr int G_ = 1;"));
    CHECK_FALSE(contains(p.source, "__shfl_xor_sync"));
    compiles_under_nvrtc(p);
  }
  const auto wide = cuda_for("prod_all_long", {{"M", 4096}, {"N", 4096}});
  CHECK(contains(wide.source, "__shfl_xor_sync"));
}
