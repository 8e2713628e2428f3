// The analytic cost model on GPU descriptions (compiler/tune/analytic_model.cc, issue 19 item 2):
// each rule that brings its prediction to what Nsight Compute counts, by hand on a small problem.
//
// The GEMM: 256^3 f16 -> f32, tile m=128/64,n=128/64,k=32/16 on isa/targets/sm90-h100.yaml
// (132 SMs, 4 tensor cores of 16x16x16 f16 in 8 cycles, warp-level MMA 1277 MAC/cycle/SM, L2
// 3600 B/cycle, DRAM 1830 B/cycle, global latency 480, shared paths 128 B/cycle and 30 cycles):
// P = 4 stage tiles (one per core), R = 8 chunks, I = 2 x 2 x 2 = 8 operand tiles per chunk, each
// of (64/16) x (64/16) x 1 = 16 fragments; buffers A, B in shared (8 KiB per chunk each), in
// frag_a / frag_b (2 KiB per operand tile each), C in frag_acc (64 KiB per stage tile).
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/tune/cost_model.h"
#include "isa/base/error.h"
#include "tune_test_util.h"

using namespace tessel;
using namespace tessel::tune;
using testing::SmallGemm;

namespace {

std::string target(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/isa/targets/" + name + ".yaml"; }

struct Priced {
  SmallGemm gemm;
  FitChecker fit;
  ConfigInfo info;
  explicit Priced(const std::string& compiled_for, const std::string& tile = "m=128/64,n=128/64,k=32/16")
      : gemm(256, target(compiled_for)), fit(gemm.f, gemm.options) {
    auto i = fit.check(tile::parse_tile_spec(tile));
    REQUIRE(i.has_value());
    info = *i;
  }
  AnalyticBreakdown on(MmaPath path, const std::string& runs_on = "") const {
    Problem p = fit.problem();
    p.mma_path = path;
    if (!runs_on.empty()) p.hierarchy = isa::load_hierarchy(target(runs_on));
    return analytic_breakdown(p, info);
  }
};

// A kernel of one operator of workloads/ at its default mapping on sm90-h100.
struct Workload {
  frontend::Module module;
  const ir::Function* f = nullptr;
  CompileOptions options;
  Workload(const std::string& file, const std::string& def, std::map<std::string, int64_t> sizes)
      : module(frontend::load_module(std::string(TESSEL_SOURCE_DIR) + "/workloads/" + file)) {
    f = &frontend::select_function(module, def);
    options.target = target("sm90-h100");
    options.sizes = std::move(sizes);
  }
};

}  // namespace

TEST_CASE("analytic model, GPU: warp-level MMA at gpu.warp_mma_f16_macs_per_cycle, wgmma at the tensor cores' peak") {
  Priced g("sm90-h100");
  const double per_operand_tile_startup = 64 * 32;  // Pc x R x I operand tiles, 32 start-up cycles each
  // wgmma (and an unknown path): 16 fragments x 8 cycles over 4 tensor cores per operand tile
  CHECK(g.on(MmaPath::Wgmma).compute_cycles == doctest::Approx(64 * 16 * 8 / 4 + per_operand_tile_startup));  // 4096
  CHECK(g.on(MmaPath::Unknown).compute_cycles == doctest::Approx(4096));
  // WMMA and mma.sync: 16 fragments x 4096 MACs at 1277 MAC/cycle per SM
  const double warp_level = 64 * 16 * 4096 / 1277.0 + per_operand_tile_startup;  // 5332.5
  CHECK(g.on(MmaPath::Wmma).compute_cycles == doctest::Approx(warp_level));
  CHECK(g.on(MmaPath::MmaSync).compute_cycles == doctest::Approx(warp_level));
  // the whole wgmma prediction: fill (A, B: 8192 / 128 + 480 each; frag_a, frag_b: 2048 / 128 + 30
  // each) + R x (busiest of compute 512 and lsu 384 per chunk, + handoff 30 + 30) + the drain of C
  // (65536 / 128 + 480)
  CHECK(g.on(MmaPath::Wgmma).total == doctest::Approx(2 * (64 + 480) + 2 * (16 + 30) + 8 * (512 + 60) + (512 + 480)));  // 6748
}

TEST_CASE("analytic model, GPU: a kernel compiled for one description is priced on the one it runs on") {
  // compiled for sm75 (a T4: 8 tensor cores per SM of 16x16x16 f16 in 64 cycles, 5 B/cycle per SM
  // from global, no L2 bandwidth figure) and run on an H100: the H100's rates, the sm75 tile fit
  Priced g("sm75");
  const AnalyticBreakdown t4 = g.on(MmaPath::Wmma), h100 = g.on(MmaPath::Wmma, "sm90-h100");
  CHECK(h100.compute_cycles == doctest::Approx(64 * 16 * 4096 / 1277.0 + 64 * 32));
  CHECK(h100.total == doctest::Approx(Priced("sm90-h100").on(MmaPath::Wmma).total));
  CHECK(h100.total < t4.total / 5);  // 7984.5 cycles against 46310.4 on the T4's description
  CHECK(h100.global_bytes == t4.global_bytes);  // the same tiles move the same bytes
}

TEST_CASE("analytic model, GPU: global traffic moves at the L2's bandwidth shared by the cores in use") {
  Priced g("sm90-h100");
  const AnalyticBreakdown b = g.on(MmaPath::Wgmma);
  // 4 cores in use: 3600 / 4 = 900 B/cycle each, capped by the fastest path into shared (128):
  // per chunk A + B 16384 B / 128 and 8 operand tiles x 4096 B / 128 from shared, over 8 chunks
  CHECK(b.engine_cycles.at("lsu") == doctest::Approx(8 * (16384.0 / 128 + 8 * 4096.0 / 128)));  // 3072
  // global bytes: 4 tiles x 8 chunks x 16 KiB of A and B, and C (256 x 256 x 4 B) once
  CHECK(b.global_bytes == 4 * 8 * 16384 + 256 * 256 * 4);
  CHECK(b.shared_global_cycles == doctest::Approx(786432 / 3600.0));  // all of it through the L2
  CHECK(b.dram_bytes == 2 * 256 * 256 * 2);                           // A and B once; C stays in the L2
  // without an L2 figure the description's global paths (DRAM share per SM, 13.9) apply
  Problem p = g.fit.problem();
  p.hierarchy.gpu->l2_bandwidth_bytes_per_cycle = 0;
  const AnalyticBreakdown dram_paths = analytic_breakdown(p, g.info);
  CHECK(dram_paths.engine_cycles.at("lsu") == doctest::Approx(8 * (16384.0 / 13.9 + 8 * 4096.0 / 128)));
  CHECK(dram_paths.shared_global_cycles == doctest::Approx(786432 / 1830.0));
}

TEST_CASE("analytic model, GPU: a partitioned L2 looks the accesses homed in the other partition up twice") {
  // sm90-h100: gpu.l2_partitions 2. Every global byte is looked up in the requesting SM's partition;
  // the half homed in the other one crosses the L2 fabric and is looked up again there (ncu's
  // lts__t_bytes = global + fabric; lts__t_sectors_srcunit_tex = global alone)
  Priced g("sm90-h100");
  const AnalyticBreakdown b = g.on(MmaPath::Wgmma);
  const double global = 4 * 8 * 16384 + 256 * 256 * 4;  // A and B of every chunk, C once: 786432
  CHECK(b.global_bytes == global);
  CHECK(b.l2_fabric_bytes == global / 2);  // 393216
  // the path does not change what crosses: WMMA moves the same tiles
  CHECK(g.on(MmaPath::Wmma).l2_fabric_bytes == global / 2);
  // four partitions: an access is homed elsewhere 3 times in 4; one L2 (a T4's): nothing crosses
  Problem p = g.fit.problem();
  p.hierarchy.gpu->l2_partitions = 4;
  const AnalyticBreakdown four = analytic_breakdown(p, g.info);
  CHECK(four.l2_fabric_bytes == global * 3 / 4);
  p.hierarchy.gpu->l2_partitions = 1;
  CHECK(analytic_breakdown(p, g.info).l2_fabric_bytes == 0);
  CHECK(Priced("sm75").on(MmaPath::Wmma).l2_fabric_bytes == 0);
  // the time is not changed by it: the L2 bandwidth is measured in the SMs' request bytes
  CHECK(four.total == doctest::Approx(b.total));
  CHECK(four.shared_global_cycles == doctest::Approx(b.shared_global_cycles));
  // the register row kernel too: softmax 4096 x 768 f16 reads X and writes Y once, half of it far
  Workload s("bert.tsl", "softmax", {{"M", 4096}, {"N", 768}});
  FitChecker fit(*s.f, s.options);
  const auto row = default_mapping_breakdown(fit.problem());
  REQUIRE(row.has_value());
  CHECK(row->l2_fabric_bytes == 4096.0 * 768 * 2);  // (2 x 4096 x 768 x 2 B) / 2
}

TEST_CASE("analytic model, GPU: stage bytes are those of shared-memory instructions") {
  Priced g("sm90-h100");
  const double copied_in = 4 * 8 * 16384;         // A and B into shared, every chunk of every tile
  const double operand_loads = 4 * 8 * 8 * 4096;  // every operand tile's A and B fragments out of it
  CHECK(g.on(MmaPath::Wmma).stage_bytes == copied_in + operand_loads);
  CHECK(g.on(MmaPath::MmaSync).stage_bytes == copied_in + operand_loads);
  // wgmma reads its operands from shared through matrix descriptors: no load instructions
  CHECK(g.on(MmaPath::Wgmma).stage_bytes == copied_in);
  // The SIMT walk keeps every buffer in shared memory: transpose 512 x 256 f16 writes X there and
  // reads it, writes Y there and reads it (ncu: 4 x 6.3 MB for 4096 x 768 on an H100)
  Workload t("vector.tsl", "transpose2d", {{"M", 512}, {"N", 256}});
  FitChecker fit(*t.f, t.options);
  const auto info = fit.check(fit.compiled_tile_spec());
  REQUIRE(info.has_value());
  CHECK(analytic_breakdown(fit.problem(), *info).stage_bytes == 4.0 * 512 * 256 * 2);
}

TEST_CASE("analytic model, GPU: a row program without a tile spec is priced as the register row kernel") {
  // softmax 4096 x 768 f16 (4 statements): the row kernel reads X once and writes Y once
  Workload s("bert.tsl", "softmax", {{"M", 4096}, {"N", 768}});
  FitChecker fit(*s.f, s.options);
  REQUIRE(fit.problem().gpu_row_kernel.has_value());
  const auto b = default_mapping_breakdown(fit.problem());
  REQUIRE(b.has_value());
  const double bytes = 2.0 * 4096 * 768 * 2;
  CHECK(b->global_bytes == bytes);
  CHECK(b->dram_bytes == bytes / 2);  // Y stays in the L2
  CHECK(b->stage_bytes == 0);
  CHECK(b->cores_used == 132);
  // per SM its share of the bytes at 3600 / 132 B/cycle, behind a read and a write latency (480
  // each); the vector units' 4 passes (4096 x 768 x 4 B x 4 / 512 / 132 = 744.7) overlap it
  CHECK(b->compute_cycles == doctest::Approx(4096.0 * 768 * 4 * 4 / 512 / 132));
  CHECK(b->total == doctest::Approx(bytes / 132 / (3600.0 / 132) + 960));
  // a GEMM is no row program: its default tile spec is an ordinary configuration
  SmallGemm gemm(256, target("sm90-h100"));
  FitChecker gemm_fit(gemm.f, gemm.options);
  CHECK(!gemm_fit.problem().gpu_row_kernel);
  CHECK(!default_mapping_breakdown(gemm_fit.problem()));
}

TEST_CASE("tensor-core paths are named as tessel run reports them") {
  CHECK(parse_mma_path("wmma") == MmaPath::Wmma);
  CHECK(parse_mma_path("mma.sync") == MmaPath::MmaSync);
  CHECK(parse_mma_path("wgmma") == MmaPath::Wgmma);
  CHECK(parse_mma_path("simt") == MmaPath::Unknown);
  CHECK(parse_mma_path("") == MmaPath::Unknown);
  CHECK_THROWS_WITH_AS(parse_mma_path("hmma"), doctest::Contains("unknown tensor-core path 'hmma'"), UserError);
}

TEST_CASE("analytic model: a fused group's stage tiles are over its tile axes only") {
  // softmax 64 x 256 tiled m=2/2,n=16/16: its statements share one row tile (poly/fusion.h), the
  // column index n of the element-wise statements is walked inside it as the reductions' is, so
  // 64 / 2 = 32 stage tiles (not 32 x 256 / 16), and X is read once: 64 x 256 x 2 B in, Y as much out
  Workload s("bert.tsl", "softmax", {{"M", 64}, {"N", 256}});
  FitChecker fit(*s.f, s.options);
  const auto info = fit.check(tile::parse_tile_spec("m=2/2,n=16/16"));
  REQUIRE(info.has_value());
  const AnalyticBreakdown b = analytic_breakdown(fit.problem(), *info);
  CHECK(b.tiles == 32);
  CHECK(b.cores_used == 32);
  CHECK(b.global_bytes == 2.0 * 64 * 256 * 2);
}
