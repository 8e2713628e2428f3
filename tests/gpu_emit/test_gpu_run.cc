// Generated CUDA on the GPU, compared element by element with the reference interpreter. Every
// case skips with a message where no GPU is present (CI). Run from the repository root.
#include <doctest/doctest.h>

#include <functional>

#include "compiler/cli/run_gpu.h"
#include "compiler/cli/run_gpu_internal.h"
#include "compiler/emit_c/run_c.h"
#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_tensor_core.h"
#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/interpreter.h"
#include "gpu_backend/device_query.h"

using namespace tessel;

namespace {

bool have_gpu() {
  std::string why;
  if (gpu::device_count(&why) > 0) return true;
  MESSAGE("skipped: no GPU (" << why << ")");
  return false;
}

// A GPU of sm_90 or newer; otherwise the test says it is skipped and why.
bool have_sm90(const char* what) {
  if (!have_gpu()) return false;
  if (cli::gpurun::device_arch() >= std::string("sm_90")) return true;
  MESSAGE("skipped: " << what << " need(s) sm_90");
  return false;
}

struct Compiled {
  frontend::Module module;
  std::unique_ptr<Compilation> c;
  const ir::Function* f = nullptr;
};

Compiled compile_for(const std::string& file, const std::string& def, const std::map<std::string, int64_t>& sizes) {
  Compiled r;
  r.module = frontend::load_module(file);
  r.f = &frontend::select_function(r.module, def);
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = sizes;
  r.c = compile(*r.f, o);
  return r;
}

std::map<std::string, NpyArray> run(const kernel::Kernel& k, const std::map<std::string, NpyArray>& in, emit_cuda::CudaOptions o,
                                     bool* tensor_cores = nullptr) {
  o.arch = cli::gpurun::device_arch();
  auto lp = cli::gpurun::load_program(k, o);
  auto d = cli::gpurun::allocate(k, in, lp.program.scratch_bytes);
  gpu::Stream s;
  cli::gpurun::launch_all(lp, d, s);
  s.synchronize();
  if (tensor_cores) *tensor_cores = lp.program.tensor_cores;
  return cli::gpurun::download_outputs(k, d);
}

void check_verifies(const Compiled& r, const std::map<std::string, int64_t>& sizes, const emit_cuda::CudaOptions& o, bool expect_tc,
                    const std::string& label) {
  auto inputs = interp::random_inputs(*r.f, sizes, 7);
  bool tc = false;
  auto outs = run(r.c->kernel, inputs, o, &tc);
  auto v = emit_c::verify(interp::evaluate(*r.f, sizes, inputs), outs);
  CHECK_MESSAGE(v.verified, label << ": " << v.first_mismatch << " (" << v.mismatches << " mismatches)");
  CHECK_MESSAGE(tc == expect_tc, label << ": tensor cores " << tc);
}

}  // namespace

TEST_CASE("every small-suite workload verifies on the GPU (tessel run's path)") {
  if (!have_gpu()) return;
  frontend::Suite suite = frontend::load_suite("workloads/small.yaml");
  for (const auto& e : suite.entries) {
    CAPTURE(e.name);
    Compiled r = compile_for(e.file, e.def, e.shape);
    auto inputs = interp::random_inputs(*r.f, e.shape, 1);
    auto g = cli::run_on_gpu(*r.c, inputs, false, false);
    auto v = emit_c::verify(interp::evaluate(*r.f, e.shape, inputs), g.outputs);
    CHECK_MESSAGE(v.verified, e.name << ": " << v.first_mismatch << " (" << v.mismatches << " mismatches)");
  }
}

TEST_CASE("TensorCore kernels verify: GEMMs (every tile candidate), guards, transposes, batch, i8, epilogues, convolutions") {
  if (!have_gpu()) return;
  struct W {
    const char* file;
    const char* def;
    std::map<std::string, int64_t> sizes;
    bool all_candidates;
  };
  const W ws[] = {
      {"workloads/matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}}, true},
      {"workloads/matmul.tsl", "matmul", {{"M", 256}, {"N", 256}, {"K", 256}}, true},
      {"workloads/matmul.tsl", "matmul", {{"M", 200}, {"N", 72}, {"K", 96}}, true},
      {"workloads/matmul.tsl", "matmul", {{"M", 512}, {"N", 512}, {"K", 256}}, true},
      {"workloads/batch_matmul.tsl", "batch_matmul", {{"B", 3}, {"M", 64}, {"N", 48}, {"K", 32}}, false},
      {"workloads/gemm_fused.tsl", "matmul_i8", {{"M", 64}, {"N", 64}, {"K", 64}}, false},
      {"workloads/gemm_fused.tsl", "matmul_bias_relu", {{"M", 64}, {"N", 48}, {"K", 80}}, false},
      {"workloads/gemm_fused.tsl", "matmul_bias_relu", {{"M", 512}, {"N", 16}, {"K", 512}}, true},  // split-K + epilogue
      {"workloads/bert.tsl", "matmul_bias_gelu", {{"M", 64}, {"N", 48}, {"K", 32}}, false},
      {"workloads/conv_seed.tsl", "conv2d_nhwc", {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}}, true},
      {"workloads/conv_seed.tsl", "conv2d_blocked", {{"NB", 1}, {"H", 4}, {"W", 3}, {"CB", 2}, {"KB", 2}, {"R", 3}, {"S", 3}}, true},
      {"workloads/resnet50.tsl", "conv_bn_relu", {{"N", 2}, {"H", 4}, {"W", 4}, {"C", 16}, {"K", 32}, {"R", 3}, {"S", 3}}, false},
      {"workloads/conv2d.tsl", "conv2d", {{"N", 2}, {"C", 16}, {"H", 6}, {"W", 6}, {"K", 16}, {"R", 3}, {"S", 3}}, false},
  };
  for (const auto& w : ws) {
    CAPTURE(w.def);
    Compiled r = compile_for(w.file, w.def, w.sizes);
    const std::string& why = r.c->kernel.no_contraction;
    const auto& c = r.c->kernel.contraction;
    REQUIRE_MESSAGE(c, why);
    check_verifies(r, w.sizes, {}, true, std::string(w.def) + " default tiles");
    if (!w.all_candidates) continue;
    for (const auto& cfg : emit_cuda::tc_candidates(*c, "sm_90", int(r.c->hierarchy.cores))) {
      if (cfg.loader == emit_cuda::OperandLoader::bulk) continue;  // bulk operand copies: their own test below
      emit_cuda::CudaOptions o;
      o.config = cfg;
      check_verifies(r, w.sizes, o, true, std::string(w.def) + " " + cfg.to_string());
    }
  }
}

// The kernels every TensorCore path is checked on: two matmuls, one with transposed operands
// (A[K, M], B[N, K]), a convolution and a matmul with a fused epilogue; CHECK_ALL(compiled, sizes, label).
using Sizes = std::map<std::string, int64_t>;
template <class CheckAll>
void check_contraction_family(const CheckAll& check_all, const std::vector<Sizes>& matmuls, const Sizes& transposed,
                              const Sizes& conv, const Sizes& fused) {
  for (const auto& mm : matmuls)
    check_all(compile_for("workloads/matmul.tsl", "matmul", mm), mm,
              "matmul " + std::to_string(mm.at("M")) + "x" + std::to_string(mm.at("N")) + "x" + std::to_string(mm.at("K")));
  Compiled r;
  r.module = frontend::parse_module(
      "def mt(f16[K, M] A, f16[N, K] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(k, m)) * f32(B(n, k))\n}\n", "mt.tsl");
  r.f = &r.module.functions[0];
  CompileOptions o;
  o.target = "isa/targets/sm90.yaml";
  o.sizes = transposed;
  r.c = compile(*r.f, o);
  check_all(r, o.sizes, "transposed A and B");
  check_all(compile_for("workloads/conv_seed.tsl", "conv2d_nhwc", conv), conv, "conv2d_nhwc");
  check_all(compile_for("workloads/gemm_fused.tsl", "matmul_bias_relu", fused), fused, "matmul_bias_relu");
}

TEST_CASE("ldmatrix + mma.sync kernels verify: row/col-major operands, direct and epilogue stores, convolutions") {
  if (!have_gpu()) return;
  if (cli::gpurun::device_arch() < std::string("sm_80")) {
    MESSAGE("skipped: mma.sync path needs sm_80+");
    return;
  }
  std::vector<emit_cuda::TcConfig> cfgs;
  for (emit_cuda::TcConfig g : std::initializer_list<emit_cuda::TcConfig>{{128, 256, 32, 64, 64, 1, 4},
                                                                          {256, 128, 32, 64, 64, 1, 4},
                                                                          {128, 128, 64, 32, 64, 1, 3},
                                                                          {64, 64, 32, 32, 32, 1, 2},
                                                                          {32, 64, 16, 16, 32, 1, 3}}) {
    g.mma = emit_cuda::MmaKind::mma_sync;
    cfgs.push_back(g);
  }
  auto check_all = [&](const Compiled& r, const std::map<std::string, int64_t>& sizes, const std::string& label) {
    for (const auto& cfg : cfgs) {
      emit_cuda::CudaOptions o;
      o.config = cfg;
      check_verifies(r, sizes, o, true, label + " " + cfg.to_string());
    }
  };
  check_contraction_family(check_all, {{{"M", 512}, {"N", 512}, {"K", 256}}, {{"M", 200}, {"N", 72}, {"K", 96}}},
                           {{"M", 256}, {"N", 128}, {"K", 96}},
                           {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}},
                           {{"M", 64}, {"N", 48}, {"K", 80}});
}

// Verifies every configuration of `cfgs` the contraction can use (sm_90), with and without PDL
// (and with B prefetched before the wait when `prefetch`); counts them in `ran`.
std::function<void(const Compiled&, const std::map<std::string, int64_t>&, const std::string&)> verifier(
    const std::vector<emit_cuda::TcConfig>& cfgs, bool prefetch, int* ran = nullptr) {
  return [&cfgs, prefetch, ran](const Compiled& r, const std::map<std::string, int64_t>& sizes, const std::string& label) {
    const auto& c = r.c->kernel.contraction;
    REQUIRE(c);
    for (const auto& cfg : cfgs) {
      if (!emit_cuda::config_obstacle(*c, cfg, "sm_90").empty()) continue;
      emit_cuda::CudaOptions o;
      o.config = cfg;
      check_verifies(r, sizes, o, true, label + " " + cfg.to_string());
      o.pdl = true;
      check_verifies(r, sizes, o, true, label + " " + cfg.to_string() + " PDL");
      if (prefetch) {
        o.pdl_prefetch = {c->b.tensor};
        check_verifies(r, sizes, o, true, label + " " + cfg.to_string() + " PDL, B prefetched");
      }
      if (ran) ++*ran;
    }
  };
}

TEST_CASE("wgmma kernels (sm_90a) verify: K- and M/N-major operands, tails, direct and epilogue stores, convolutions, with and without PDL") {
  if (!have_sm90("wgmma")) return;
  std::vector<emit_cuda::TcConfig> cfgs;
  for (emit_cuda::TcConfig g : std::initializer_list<emit_cuda::TcConfig>{{128, 256, 64, 64, 256, 1, 4},
                                                                          {256, 128, 64, 128, 128, 1, 4},
                                                                          {128, 128, 64, 64, 128, 1, 6},
                                                                          {128, 128, 64, 128, 128, 1, 3},
                                                                          {64, 64, 64, 64, 64, 1, 3}}) {
    g.mma = emit_cuda::MmaKind::wgmma;
    cfgs.push_back(g);
    g.issue = emit_cuda::CopyIssue::deep;
    cfgs.push_back(g);
  }
  {
    emit_cuda::TcConfig g{192, 256, 64, 64, 256, 1, 4};  // 3 warpgroups, chunk count not a multiple of the block
    g.mma = emit_cuda::MmaKind::wgmma;
    cfgs.push_back(g);
    g = {128, 256, 64, 64, 256, 1, 4};  // evict-first stores (plain outputs only: skipped elsewhere)
    g.mma = emit_cuda::MmaKind::wgmma;
    g.store = emit_cuda::OutputStore::evict_first;
    cfgs.push_back(g);
    g = {128, 128, 64, 64, 128, 1, 3};  // two blocks per SM
    g.mma = emit_cuda::MmaKind::wgmma;
    g.store = emit_cuda::OutputStore::evict_first;
    cfgs.push_back(g);
    g = {256, 128, 64, 128, 128, 1, 4};  // evict-last operand copies
    g.mma = emit_cuda::MmaKind::wgmma;
    g.store = emit_cuda::OutputStore::evict_first;
    g.keep_operands = true;
    cfgs.push_back(g);
    g.keep_operands = false;  // copies before the MMA issue
    g.issue = emit_cuda::CopyIssue::before_mma;
    cfgs.push_back(g);
  }
  auto check_all = verifier(cfgs, true);
  check_contraction_family(check_all, {{{"M", 256}, {"N", 256}, {"K", 256}}, {{"M", 200}, {"N", 192}, {"K", 96}}},
                           {{"M", 256}, {"N", 128}, {"K", 192}},
                           {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 64}, {"R", 3}, {"S", 3}},
                           {{"M", 128}, {"N", 64}, {"K", 128}});
}

TEST_CASE("persistent TMA kernels (/ws, sm_90a) verify: every majorness, tails, batches, epilogues, stream-K, im2col convolutions, PDL") {
  if (!have_sm90("wgmma")) return;
  std::vector<emit_cuda::TcConfig> cfgs;
  for (emit_cuda::TcConfig g : std::initializer_list<emit_cuda::TcConfig>{{128, 256, 64, 64, 256, 1, 4},
                                                                          {256, 128, 64, 128, 128, 1, 4},
                                                                          {128, 192, 64, 64, 192, 1, 5},
                                                                          {128, 128, 64, 64, 128, 1, 2},
                                                                          {128, 64, 64, 64, 64, 1, 8}}) {
    g.mma = emit_cuda::MmaKind::wgmma, g.loader = emit_cuda::OperandLoader::tma_ws;
    for (bool sk : {false, true})
      for (bool cs : {false, true}) {
        g.schedule = sk ? emit_cuda::WsSchedule::stream_k : emit_cuda::WsSchedule::grouped;
        g.store = cs ? emit_cuda::OutputStore::evict_first : emit_cuda::OutputStore::plain;
        cfgs.push_back(g);
      }
  }
  for (emit_cuda::TcConfig g : std::initializer_list<emit_cuda::TcConfig>{{128, 128, 64, 128, 128, 1, 6}, {64, 256, 64, 64, 256, 1, 3}}) {
    g.mma = emit_cuda::MmaKind::wgmma, g.loader = emit_cuda::OperandLoader::tma_ws, g.schedule = emit_cuda::WsSchedule::pingpong;  // ping-pong consumers: alternate tiles per warpgroup
    cfgs.push_back(g);
    g.store = emit_cuda::OutputStore::evict_first;
    cfgs.push_back(g);
  }
  for (emit_cuda::TcConfig g : std::initializer_list<emit_cuda::TcConfig>{{128, 256, 64, 64, 256, 1, 4}, {128, 128, 64, 64, 128, 1, 2}}) {
    g.mma = emit_cuda::MmaKind::wgmma, g.loader = emit_cuda::OperandLoader::tma_ws, g.schedule = emit_cuda::WsSchedule::multicast;  // B multicast across 2-block clusters (odd tile rows: a block with no rows)
    cfgs.push_back(g);
  }
  int ran = 0;
  auto check_all = verifier(cfgs, false, &ran);
  check_contraction_family(check_all, {{{"M", 256}, {"N", 256}, {"K", 256}}, {{"M", 200}, {"N", 192}, {"K", 96}}},
                           {{"M", 256}, {"N", 128}, {"K", 192}},
                           {{"N", 2}, {"H", 6}, {"W", 6}, {"C", 64}, {"K", 64}, {"R", 3}, {"S", 3}},
                           {{"M", 128}, {"N", 64}, {"K", 128}});
  CHECK(ran >= 40);
}

TEST_CASE("skinny-GEMM variants verify: bulk operand copies, PDL with the weights prefetched, cluster split-K") {
  if (!have_sm90("bulk copies, clusters and PDL")) return;
  struct W {
    const char* file;
    const char* def;
    Sizes sizes;
  };
  const W ws[] = {{"workloads/matmul.tsl", "matmul", {{"M", 512}, {"N", 16}, {"K", 512}}},
                  {"workloads/matmul.tsl", "matmul", {{"M", 2048}, {"N", 32}, {"K", 512}}},
                  {"workloads/matmul.tsl", "matmul", {{"M", 512}, {"N", 128}, {"K", 512}}},
                  {"workloads/gemm_fused.tsl", "matmul_bias_relu", {{"M", 512}, {"N", 16}, {"K", 512}}}};
  for (const auto& w : ws) {
    Compiled r = compile_for(w.file, w.def, w.sizes);
    const auto& c = r.c->kernel.contraction;
    REQUIRE(c);
    int clusters = 0;
    for (const auto& cfg : emit_cuda::tc_candidates(*c, "sm_90", int(r.c->hierarchy.cores))) {
      const bool pdl_ok = cfg.reduce != emit_cuda::SplitKReduce::atomic;
      if (cfg.loader != emit_cuda::OperandLoader::bulk && !(cfg.reduce == emit_cuda::SplitKReduce::cluster && clusters++ < 2)) continue;  // every bulk candidate, two cluster ones
      emit_cuda::CudaOptions o;
      o.config = cfg;
      const std::string label = std::string(w.def) + " " + cfg.to_string();
      check_verifies(r, w.sizes, o, true, label);
      if (!pdl_ok) continue;
      o.pdl = true;
      o.pdl_prefetch = {c->b.tensor};
      check_verifies(r, w.sizes, o, true, label + " PDL, B prefetched");
    }
    for (const char* t : {"16x16x64/16x16/ks2/st6", "32x32x128/32x32/ks4/st5"}) {  // the fastest unsplit tiles, A prefetched too
      emit_cuda::CudaOptions o;
      o.config = emit_cuda::TcConfig::parse(t);
      if (!emit_cuda::config_obstacle(*c, *o.config, "sm_90").empty()) continue;
      o.pdl = true;
      o.pdl_prefetch = {c->a.tensor, c->b.tensor};
      check_verifies(r, w.sizes, o, true, std::string(w.def) + " " + t + " PDL, A and B prefetched");
    }
  }
}

TEST_CASE("the SIMT fallback verifies where TensorCores are refused") {
  if (!have_gpu()) return;
  Compiled r = compile_for("workloads/matmul.tsl", "matmul", {{"M", 67}, {"N", 45}, {"K", 33}});
  emit_cuda::CudaOptions o;
  o.allow_tensor_cores = false;
  check_verifies(r, {{"M", 67}, {"N", 45}, {"K", 33}}, o, false, "matmul 67x45x33 SIMT");
}
