// The tuner on the NPU convolution mapping (compiler/emit_npu/conv.cc), which chooses its sizes
// itself: the space keeps one configuration, and the analytic model follows that mapping.
#include <doctest/doctest.h>

#include "compiler/emit_npu/emit_npu.h"
#include "compiler/tune/cost_model.h"
#include "tune_test_util.h"

using namespace tessel;
using namespace tessel::tune;

namespace {

const char* kConv =
    "def conv2d_nhwc(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H, W, K] Y) {\n"
    "  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0)\n"
    "      where h in 0:H+2, w in 0:W+2\n"
    "  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k))\n"
    "}\n";

std::string davinci() { return std::string(TESSEL_SOURCE_DIR) + "/isa/targets/davinci-910.yaml"; }

struct SmallConv {
  frontend::Module module = frontend::parse_module(kConv, "conv.tsl");
  const ir::Function& f = module.functions.at(0);
  CompileOptions options;
  explicit SmallConv(int64_t n) {
    options.target = davinci();
    options.sizes = {{"N", n}, {"H", 6}, {"W", 6}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}};
  }
};

}  // namespace

TEST_CASE("tune: the NPU convolution mapping ignores the tile spec: one configuration, the same program") {
  SmallConv c(2);
  FitChecker fit(c.f, c.options);
  REQUIRE(!fit.problem().fixed_mapping.empty());
  CHECK(fit.problem().fixed_mapping.find("conv.cc") != std::string::npos);
  const Space space = build_space(parse_space_spec("k=16|32/16,c=16|32/16"), fit);
  REQUIRE(space.configs.size() == 1);
  CHECK(space.stats.same_program > 0);
  CHECK(config_key(space.configs[0]) == config_key(fit.problem().default_spec));
  // what the space relies on: two tile specs, one program
  auto program = [&](const std::string& tile) {
    CompileOptions o = c.options;
    o.tile = tile;
    auto comp = compile(c.f, o);
    return npu::print_program(emit_npu::emit_npu(comp->kernel, comp->hierarchy).program);
  };
  CHECK(program("k=16/16,c=16/16") == program("k=32/16,c=32/16"));
  // a GEMM on the same description is tuned as before
  testing::SmallGemm g(128, davinci());
  FitChecker gemm(g.f, g.options);
  CHECK(gemm.problem().fixed_mapping.empty());
  CHECK(build_space(parse_space_spec("m=32|64/16|32,n=32|64/16|32"), gemm).configs.size() > 1);
}

TEST_CASE("analytic model: the convolution mapping's plan and cube cycles, hand-computed from the description") {
  // 6x6 pixels (36, padded to 48 = 3 fractal rows), C = 32 (2 slices of 16), K = 32, 3x3. conv.cc
  // estimates per output-channel tile tn: jobs per core x max(cube, MTE1), MTE1 = load3d of
  // 48 x 32 x 9 f16 over 256 B/cycle (108) + the weights' 32 x 9 x tn f16 over 128 B/cycle.
  //  - N = 2 or 4: tn = 32 (one tile, N cores, 1 job: max(108, 252) = 252) loses to tn = 16 (two
  //    tiles, 2N cores, 1 job: max(54, 180) = 180). Cube cycles per job: 3 x 1 x 2 x 9 = 54
  //    fragments of one cycle, plus the start-up (2) of each of 1 pixel block x 2 slices x 1
  //    kernel-position group (9 positions fit half of L0B) = 58.
  //  - N = 64: tn = 32 (32 cores, 2 images each: 2 x 252 = 504) beats tn = 16 (32 cores, 4 jobs:
  //    4 x 180 = 720); cube 2 x (108 + 4) = 224.
  // (`tessel compile` notes the same plans: "tiles of 16 ... over 4 core(s)", "tiles of 32 ...
  // over 32 core(s)".)
  for (int64_t n : {2, 4}) {
    SmallConv c(n);
    FitChecker fit(c.f, c.options);
    const auto info = fit.check(fit.problem().default_spec);
    REQUIRE(info.has_value());
    const AnalyticBreakdown b = analytic_breakdown(fit.problem(), *info);
    CHECK(b.compute_cycles == doctest::Approx(58));
    CHECK(b.cores_used == 2 * n);
    CHECK(b.tiles == 2 * n);
    CHECK(b.total > b.compute_cycles);
  }
  SmallConv big(64);
  FitChecker fit(big.f, big.options);
  const auto info = fit.check(fit.problem().default_spec);
  REQUIRE(info.has_value());
  const AnalyticBreakdown b = analytic_breakdown(fit.problem(), *info);
  CHECK(b.compute_cycles == doctest::Approx(224));
  CHECK(b.cores_used == 32);
  CHECK(b.tiles == 64);
}
