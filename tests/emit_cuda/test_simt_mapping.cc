// The SIMT walk's mapping (compiler/emit_cuda/emit_simt.h), CI side (no GPU): block threads from
// the machine model and the block-tile count, copy-in boxes read straight from global memory where
// the reads coalesce (and kept where they would not: a transpose), reductions over several or
// non-trailing axes flattened over a group's lanes, short reductions on one thread per output (or
// several, the innermost output loop split, in large short column reductions), and
// that each generated source compiles through NVRTC for sm_75 and sm_90.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/emit_cuda/simt_mapping.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#include "tests/emit_cuda/nvrtc_check.h"
#endif

using namespace tessel;

namespace {

struct Simt {
  emit_cuda::CudaProgram program;
  std::unique_ptr<Compilation> c;
};

Simt simt_for(const std::string& file, const std::string& def, const std::map<std::string, int64_t>& sizes,
              const std::string& arch = "sm90") {
  frontend::Module module = frontend::load_module("workloads/" + file);
  CompileOptions o;
  o.target = "isa/targets/" + arch + ".yaml";
  o.sizes = sizes;
  Simt r;
  r.c = compile(frontend::select_function(module, def), o);
  emit_cuda::CudaOptions co;
  co.arch = arch == "sm75" ? "sm_75" : "sm_90";
  r.program = emit_cuda::emit_cuda(r.c->kernel, co);
  return r;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

using cuda_test::compiles_under_nvrtc;

}  // namespace

TEST_CASE("group norm: 16 block tiles on 132 SMs take 512 threads, X read from global, the (i, e) sums flattened over 512 lanes") {
  auto r = simt_for("pool_norm_resample.tsl", "group_norm", {{"N", 2}, {"I", 196}, {"G", 8}, {"E", 16}});
  const auto& p = r.program;
  REQUIRE(p.launches.size() == 1);
  CHECK(p.launches[0].grid[0] == 16);
  CHECK(p.launches[0].block == 512);
  CHECK(p.launches[0].dynamic_shared_bytes < 1024);  // no X or Y box in shared memory
  CHECK(contains(p.source, "__launch_bounds__(512)"));
  CHECK(contains(p.source, "constexpr int G_ = 512;"));
  CHECK(contains(p.source, "for (int f_ = lane_; f_ < totalr_; f_ += G_)"));  // both reduced axes over the lanes
  CHECK_FALSE(contains(p.source, "copy in X"));
  CHECK_FALSE(contains(p.source, "copy out Y"));
  CHECK(contains(p.source, "t_Y[((((0 * 2 + i_n) * 196 + i_i) * 8 + i_g) * 16 + i_e)] ="));
  compiles_under_nvrtc(p);
}

TEST_CASE("depthwise stride-2 convolution: a thread per output runs all 9 taps (the filter-row loop inside the thread), inputs from global with the window guard") {
  auto r = simt_for("quasi.tsl", "depthwise_stride2", {{"N", 2}, {"H", 29}, {"W", 29}, {"C", 32}, {"R", 3}, {"S", 3}});
  const auto& p = r.program;
  REQUIRE(p.launches.size() == 1);
  CHECK(p.launches[0].block == 256);  // 56 tiles, but a 256-element output box: 256 threads keep 1 element each
  CHECK(contains(p.source, "constexpr int G_ = 1; /* a short reduction: 3 element(s) per output */"));
  // the filter-row loop (sequential, its copies gone) runs inside each thread: 9 loads in flight, one barrier
  CHECK(contains(p.source, "inside the thread: the enclosing loop over"));
  CHECK(contains(p.source, "/* sequential, per thread */"));
  // the zero-initialisation nest is folded in: the thread stores its sum once
  CHECK(contains(p.source, "= ((float)(acc_)); /* the output's initialisation folded in */"));
  CHECK_FALSE(contains(p.source, "compute nest over threads"));
  CHECK_FALSE(contains(p.source, "__shfl_xor_sync"));
  CHECK_FALSE(contains(p.source, "copy in X"));
  CHECK_FALSE(contains(p.source, "copy in Wt"));
  CHECK(contains(p.source, "< 29ULL"));  // rows and columns of the window checked against H and W
  compiles_under_nvrtc(p);
}

TEST_CASE("depthwise NHWC convolution at MobileNet size: blocks of 1024 outputs, 4 per thread along the channels, their taps side by side") {
  auto r = simt_for("conv_general.tsl", "depthwise_nhwc", {{"N", 4}, {"H", 56}, {"W", 56}, {"C", 128}, {"R", 3}, {"S", 3}});
  const auto& p = r.program;
  REQUIRE(p.launches.size() == 1);
  CHECK(p.launches[0].block == 256);
  CHECK(contains(p.source, "-> 1568 block tiles"));  // 1,605,632 outputs in blocks of 8 columns x 128 channels
  CHECK(contains(p.source, "a thread per output, 4 consecutive ones (a lane vector along the innermost output loop)"));
  CHECK(contains(p.source, "float acc_[4];"));
  CHECK(contains(p.source, "for (int base_ = 0; base_ < totalo_ / 4; base_ += groups_)"));
  // the thread's 4 neighbouring channels: one 8-byte load per tap (simt_lane_vector.cc)
  CHECK(contains(p.source, "const int qo_ = (int)(ro_ % ((unsigned)no1_ / 4u));"));
  CHECK(contains(p.source, "(qo_ * 4 + u_)"));
  CHECK(contains(p.source, "= ((float)(acc_[u_])); /* the output's initialisation folded in */"));
  CHECK_FALSE(contains(p.source, "__shfl_xor_sync"));
  compiles_under_nvrtc(p);
  // the same operator at a size with fewer outputs than 4 per thread of a block on every SM: one each
  auto small = simt_for("conv_general.tsl", "depthwise_nhwc", {{"N", 1}, {"H", 14}, {"W", 14}, {"C", 64}, {"R", 3}, {"S", 3}});
  CHECK_FALSE(contains(small.program.source, "4 consecutive ones"));
  CHECK(contains(small.program.source, "float acc_ = "));
  compiles_under_nvrtc(small.program);
}

TEST_CASE("global average pool: a column reduction, a thread per (n, c), reads straight from global and unrolled") {
  auto r = simt_for("pool_norm_resample.tsl", "global_avg_pool", {{"N", 32}, {"H", 7}, {"W", 7}, {"C", 2048}});
  const auto& p = r.program;
  REQUIRE(!p.launches.empty());
  CHECK(p.launches[0].block == 256);
  CHECK(contains(p.source, "constexpr int G_ = 1; /* column reduction: a thread per output */"));
  CHECK(contains(p.source, "#pragma unroll 8"));
  CHECK_FALSE(contains(p.source, "copy in X"));
  compiles_under_nvrtc(p);
}

TEST_CASE("16M-element sum: phase one 1024 block tiles of 256 threads, 128 lanes per partial reading global memory, phase two one block") {
  auto r = simt_for("vector.tsl", "total", {{"N", 16777216}});
  const auto& p = r.program;
  REQUIRE(p.launches.size() == 2);
  CHECK(p.launches[0].grid[0] == 1024);
  CHECK(p.launches[0].block == 256);
  CHECK(p.launches[1].grid[0] == 1);
  CHECK(contains(p.source, "constexpr int G_ = 128;"));
  CHECK_FALSE(contains(p.source, "copy in X"));
  compiles_under_nvrtc(p);
}

TEST_CASE("upsampling writes its output straight to global, a permutation keeps its coalescing copy-in and writes straight to global") {
  auto up = simt_for("pool_norm_resample.tsl", "upsample2x", {{"N", 2}, {"H", 7}, {"W", 6}, {"C", 8}});
  CHECK_FALSE(contains(up.program.source, "copy in X"));
  CHECK_FALSE(contains(up.program.source, "copy out Y"));
  CHECK(contains(up.program.source, "tessel_floordiv"));
  compiles_under_nvrtc(up.program);
  auto perm = simt_for("pool_norm_resample.tsl", "permute3d", {{"A", 64}, {"B", 32}, {"C", 48}});
  CHECK(contains(perm.program.source, "copy in X"));  // read across the threads' order: staged
  CHECK_FALSE(contains(perm.program.source, "copy out Y"));
  compiles_under_nvrtc(perm.program);
}

// A copy in from global memory of several passes per thread loads a batch into registers before
// storing any (emit_simt.cc SimtEmitter::copy): 2,016 16-byte chunks over 256 threads are 8 passes,
// all 8 in flight; a 384-element scalar copy over 256 threads, 2. Timed on the H200: the column sum
// of a 2048x1024 f32 matrix 9.33 -> 7.96 us (docs/results/gpu_default_tiles_h200.txt).
TEST_CASE("copies in from global memory keep a batch of loads in flight per thread, 16-byte and scalar") {
  auto cols = simt_for("reduction_cores.tsl", "sum_cols_f16", {{"M", 2048}, {"N", 1024}});
  CHECK(contains(cols.program.source, "e0_ < 2016; e0_ += 8 * blockDim.x) { /* copy in X_shared_g0, 16 B per thread, 8 loads in flight */"));
  CHECK(contains(cols.program.source, "uint4 v_[8];"));
  CHECK(contains(cols.program.source, "= v_[u_];"));
  compiles_under_nvrtc(cols.program);
  auto perm = simt_for("pool_norm_resample.tsl", "permute3d", {{"A", 64}, {"B", 32}, {"C", 48}});
  CHECK(contains(perm.program.source, "e0_ < 384; e0_ += 2 * blockDim.x) { /* copy in X_registers_g0, 2 loads in flight */"));
  CHECK(contains(perm.program.source, "float v_[2];"));
  compiles_under_nvrtc(perm.program);
  auto sm75 = simt_for("reduction_cores.tsl", "sum_cols_f16", {{"M", 2048}, {"N", 1024}}, "sm75");
  CHECK(contains(sm75.program.source, "loads in flight"));
  compiles_under_nvrtc(sm75.program);
}

TEST_CASE("the same mappings compile for sm_75") {
  for (const auto& [file, def, sizes] :
       std::vector<std::tuple<std::string, std::string, std::map<std::string, int64_t>>>{
           {"pool_norm_resample.tsl", "group_norm", {{"N", 2}, {"I", 196}, {"G", 8}, {"E", 16}}},
           {"quasi.tsl", "depthwise_stride2", {{"N", 2}, {"H", 29}, {"W", 29}, {"C", 32}, {"R", 3}, {"S", 3}}},
           {"pool_norm_resample.tsl", "global_avg_pool", {{"N", 4}, {"H", 7}, {"W", 7}, {"C", 256}}},
           {"pool_norm_resample.tsl", "upsample2x", {{"N", 2}, {"H", 7}, {"W", 6}, {"C", 8}}}}) {
    CAPTURE(def);
    auto r = simt_for(file, def, sizes, "sm75");
    CHECK_FALSE(r.program.tensor_cores);
    compiles_under_nvrtc(r.program);
  }
}

TEST_CASE("simt_direct_buffers and simt_block_threads decide per group: a permutation's input staged, its output not, and 16 tiles on sm90 get 512 threads, 2048 tiles 256") {
  auto perm = simt_for("pool_norm_resample.tsl", "permute3d", {{"A", 64}, {"B", 32}, {"C", 48}});
  const auto& k = perm.c->kernel;
  const kernel::NodePtr group = k.body->kind == kernel::NodeKind::Block ? k.body->children.at(0) : k.body;
  const auto d = emit_cuda::simt_direct_buffers(k, group);
  REQUIRE(d.out.size() == 1);
  CHECK(k.buffers.at(*d.out.begin()).tensor == "Y");
  CHECK(d.in.empty());  // X(a, b, c) read with b innermost: staged by its 16-byte copy
  auto gn = simt_for("pool_norm_resample.tsl", "group_norm", {{"N", 2}, {"I", 196}, {"G", 8}, {"E", 16}});
  const isa::GpuMachine m = isa::stock_gpu_machine("sm_90");
  std::set<int> all;
  for (const auto& b : gn.c->kernel.buffers) all.insert(b.id);
  CHECK(emit_cuda::simt_block_threads(gn.c->kernel, m, all, 16) == 512);
  CHECK(emit_cuda::simt_block_threads(gn.c->kernel, m, all, 2048) == emit_cuda::kSimtThreads);
}
