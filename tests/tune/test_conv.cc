// The tuner on the NPU convolution mapping (compiler/emit_npu/conv.cc): it reads the tile (outer k
// -> output-channel tile, inner p x q -> pixel block rows, inner r x s -> kernel positions per L0
// step) and checks its own buffers, so the space asks it what fits; the analytic model follows
// its plan. A mapping that ignored the tile would be detected by comparing emitted programs.
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

struct Conv {
  frontend::Module module = frontend::parse_module(kConv, "conv.tsl");
  const ir::Function& f = module.functions.at(0);
  CompileOptions options;
  Conv(int64_t n, int64_t hw, int64_t c, int64_t k) {
    options.target = davinci();
    options.sizes = {{"N", n}, {"H", hw}, {"W", hw}, {"C", c}, {"K", k}, {"R", 3}, {"S", 3}};
  }
};

}  // namespace

TEST_CASE("tune space of an NPU convolution: what conv.cc rejects is left out, with its reason") {
  // C = 256, K = 256, 14x14: the weights of tn output channels (256 x 9 x tn x 2 bytes) and one
  // image's feature map (14 x 14 x 256 x 2 = 100352) share L1 (1 MiB): tn = 256 needs 1279976
  // bytes; tn = 128 with 9 kernel positions per step needs 9 x 16 x 128 x 2 = 36864 bytes of
  // half of L0B (32 KiB). Promotion alone accepts both.
  Conv c(2, 14, 256, 256);
  FitChecker fit(c.f, c.options);
  std::string why;
  CHECK(!fit.check(tile::parse_tile_spec("k=256/16,p=2,q=14,r=1,s=1,n=1,c=64/16"), &why));
  CHECK(why.find("level L1") != std::string::npos);
  CHECK(!fit.check(tile::parse_tile_spec("k=128/16,p=2,q=14,r=3,s=3,n=1,c=64/16"), &why));
  CHECK(why.find("level L0B") != std::string::npos);
  CHECK(fit.check(tile::parse_tile_spec("k=128/16,p=2,q=14,r=1,s=3,n=1,c=64/16")));
  const Space space = build_space(parse_space_spec("k=64|128|256/16,p=2,q=14,r=1|3,s=3"), fit);
  CHECK(space.configs.size() == 3);  // k=64 with 3 or 9 positions, k=128 with 3
  CHECK(space.stats.not_fitting == 3);
  // conv.cc reads the tile: no fixed mapping, the configurations are different programs
  CHECK(fit.problem().fixed_mapping.empty());
  CHECK(!fit.detect_fixed_mapping({space.configs.front(), space.configs.back()}));
  CHECK(fit.problem().npu_conv);
  // a GEMM on the same description: no emitter checks
  testing::SmallGemm g(128, davinci());
  FitChecker gemm(g.f, g.options);
  CHECK(!gemm.problem().npu_conv);
}

TEST_CASE("analytic model: the convolution mapping's cube cycles per tile, hand-computed from the description") {
  // 6x6 pixels (36, padded to 48 = 3 fractal rows), C = 32 (2 slices of 16), K = 32, 3x3. Per
  // job (one image, one output-channel tile of tn): (48/16) x (tn/16) x 2 x 9 fragments of one
  // cycle, plus the cube's start-up (2 cycles) per mmad: pixel blocks x 2 slices x kernel-position
  // groups.
  //  - k=32: tn = 32 (one tile, the N images on N cores, 1 job): 108 fragments; p=2,q=6 -> blocks
  //    of 16 rows (3), r=3,s=3 -> one group of 9: 3 x 2 x 1 mmads -> 108 + 12 = 120.
  //  - k=16: tn = 16 (two tiles, 2N cores, 1 job): 54; p=6,q=6 -> one block of 48; r=1,s=3 ->
  //    3 groups of 3: 1 x 2 x 3 mmads -> 54 + 12 = 66.
  Conv c(2, 6, 32, 32);
  FitChecker fit(c.f, c.options);
  auto breakdown = [&](const std::string& tile) {
    const auto info = fit.check(tile::parse_tile_spec(tile));
    REQUIRE(info.has_value());
    return analytic_breakdown(fit.problem(), *info);
  };
  const AnalyticBreakdown a = breakdown("k=32/16,p=2,q=6,r=3,s=3,n=1,c=32/16");
  CHECK(a.compute_cycles == doctest::Approx(120));
  CHECK(a.cores_used == 2);
  const AnalyticBreakdown b = breakdown("k=16/16,p=6,q=6,r=1,s=3,n=1,c=32/16");
  CHECK(b.compute_cycles == doctest::Approx(66));
  CHECK(b.cores_used == 4);
  CHECK(b.tiles == 4);
  CHECK(a.total > a.compute_cycles);
}
