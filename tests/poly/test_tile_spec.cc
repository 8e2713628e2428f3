// Tile specs: parsing, rejection with clear messages, the default derived from the hierarchy.
#include <doctest/doctest.h>

#include "compiler/tile/tile_spec.h"
#include "isa/base/error.h"
#include "tests/poly/poly_test_util.h"

using namespace tessel;

namespace {
std::string error_of(const std::string& text) {
  try {
    tile::parse_tile_spec(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("tile spec: outer/inner per axis, outer only means inner = outer, text round-trips") {
  tile::TileSpec s = tile::parse_tile_spec("m=128/64,n=128/32,k=64");
  REQUIRE(s.axes.size() == 3);
  CHECK(s.find("m")->outer == 128);
  CHECK(s.find("m")->inner == 64);
  CHECK(s.find("n")->inner == 32);
  CHECK(s.find("k")->outer == 64);
  CHECK(s.find("k")->inner == 64);
  CHECK(s.to_string() == "m=128/64,n=128/32,k=64/64");
  CHECK(s.find("x") == nullptr);
}

TEST_CASE("tile spec: zero sizes, inner larger than outer, syntax errors and repeated axes are rejected") {
  CHECK(error_of("m=0/0").find("at least 1") != std::string::npos);
  CHECK(error_of("m=64/0").find("at least 1") != std::string::npos);
  std::string e = error_of("m=32/64");
  CHECK(e.find("inner") != std::string::npos);
  CHECK(e.find("larger than the outer") != std::string::npos);
  CHECK(error_of("m128").find("axis=outer/inner") != std::string::npos);
  CHECK(error_of("m=12x").find("positive integer") != std::string::npos);
  CHECK(error_of("m=8,,n=8").find("empty entry") != std::string::npos);
  CHECK(error_of("m=8,m=4").find("given twice") != std::string::npos);
  CHECK(error_of("m=128/64,n=64/32") == "");
}

TEST_CASE("tile spec: unknown axes are rejected naming the operator's index names") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  tile::TileSpec s = tile::parse_tile_spec("m=32/16,x=8");
  try {
    tile::check_tile_spec(s, m.functions[0]);
    FAIL("unknown axis accepted");
  } catch (const UserError& e) {
    std::string msg = e.what();
    CHECK(msg.find("unknown axis 'x'") != std::string::npos);
    CHECK(msg.find("k, m, n") != std::string::npos);
  }
  CHECK_NOTHROW(tile::check_tile_spec(tile::parse_tile_spec("m=32/16,k=8"), m.functions[0]));
}

TEST_CASE("default tile spec: from the matrix unit shape, clamped to the problem, shrunk until it fits") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  isa::Hierarchy h = load_target_hierarchy("c", "");
  tile::TileSpec s = tile::default_tile_spec(m.functions[0], {{"M", 1024}, {"N", 1024}, {"K", 1024}}, h);
  REQUIRE(s.find("k"));
  CHECK(s.find("k")->inner == 4 * 16);  // four times the cube's k
  CHECK(s.find("k")->outer == 8 * 16);
  CHECK(s.find("m")->outer % 16 == 0);
  // NPU GEMM tile from the description's time model (davinci-910: 32 cores, cube 16x16x16 per
  // cycle = 4096 MACs, global->L1 87 B/cycle per core, 2784 B/cycle shared), per K element:
  //   256x128: 32 tiles, 1 wave, max(32768/4096 = 8, 384*2/87 = 8.83); shared 32*384*2/2784 = 8.83
  //   256x256: 16 tiles, max(65536/4096 = 16, 11.8) = 16;  128x128: 64 tiles, 2 waves * 5.89 = 11.8
  CHECK(s.to_string() == "m=256/128,n=128/64,k=128/64");
  //   2048x32: 64x32 -> 32 tiles, max(0.5, 96*2/87 = 2.21), shared 32*96*2/2784 = 2.21;
  //            128x32 -> 16 tiles, 160*2/87 = 3.68;  32x32 -> 64 tiles, 2 waves * 64*2/87 = 2.94
  CHECK(tile::default_tile_spec(m.functions[0], {{"M", 2048}, {"N", 32}, {"K", 512}}, h).to_string() == "m=64/64,n=32/32,k=128/64");
  //   512x16: 32x16 -> 16 tiles, 48*2/87 = 1.10;  64x16 -> 8 tiles, 80*2/87 = 1.84; 16x16 -> 32
  //   tiles, every core, 32*2/87 = 0.74, its K in stages of 256 (two chunks of 256 instead of
  //   four of 128: fewer GM latencies per tile; tessel bench npu gemm_512x16x512 1,295 -> 1,061)
  CHECK(tile::default_tile_spec(m.functions[0], {{"M", 512}, {"N", 16}, {"K", 512}}, h).to_string() == "m=16/16,n=16/16,k=256/64");
  //   2048x2048: 256x256 -> 64 tiles, 2 waves * 16 = 32; 256x128 -> 128 tiles, 4 waves * 8.83 = 35.3
  CHECK(tile::default_tile_spec(m.functions[0], {{"M", 2048}, {"N", 2048}, {"K", 1024}}, h).to_string() == "m=256/128,n=256/64,k=128/64");
  // Sizes that are multiples of the cube's shape run tiles that divide them (plan_gemm): the model
  // weighs those. 784x128 (ResNet-50's 28x28 pixels, K 256): boxes of 32 or 64 rows run as 16
  // (16x128: 49 tiles, 2 waves * 144*2/87 = 6.62; 16x64: 98 tiles, 4 waves * 1.84 = 7.36), 128 or
  // 256 as 112: 112x32 -> 28 tiles, max(0.875, 144*2/87 = 3.31), shared 28*288/2784 = 2.90;
  // 112x64 -> 14 tiles, 4.05. Before, the box 64x64 (26 tiles at 64 rows, 2.94) ran as 16x64.
  CHECK(tile::default_tile_spec(m.functions[0], {{"M", 784}, {"N", 128}, {"K", 256}}, h).to_string() == "m=112/112,n=32/32,k=128/64");
  // not multiples of the cube's shape (K = 250): tails in place take the boxes as they are
  CHECK(tile::default_tile_spec(m.functions[0], {{"M", 784}, {"N", 128}, {"K", 250}}, h).to_string() == "m=64/64,n=64/64,k=128/64");
  tile::TileSpec small = tile::default_tile_spec(m.functions[0], {{"M", 7}, {"N", 5}, {"K", 3}}, h);
  CHECK(small.find("m")->outer == 7);
  CHECK(small.find("k")->outer == 3);
  // the pipeline compiles with the default for a large problem (capacity respected)
  auto c = test::compile_text(m, {{"M", 4096}, {"N", 4096}, {"K", 4096}}, std::nullopt);
  CHECK(c->kernel.buffers.size() == 5);
}

TEST_CASE("default tile spec on a GPU: a reduction's own output tiles reach the SMs, its reduced axes stay whole") {
  // a group norm's statistics: S has the 16 tiles of (n, g) at most, while Y's (n, i) axes alone
  // give 2048, which the chip-wide count saw (S ran on 2 blocks of 8 groups each)
  frontend::Module m = frontend::parse_module(
      "def gn(f32[N, I, G, E] X) -> (f32[N, G] S, f32[N, I, G, E] Y) {\n"
      "  S(n, g) +=! X(n, i, g, e)\n"
      "  Y(n, i, g, e) = X(n, i, g, e) - S(n, g)\n}\n",
      "gn.tsl");
  isa::Hierarchy h = load_target_hierarchy("isa/targets/sm90.yaml", "");
  REQUIRE(h.cores >= 16);
  const tile::TileSpec s = tile::default_tile_spec(m.functions[0], {{"N", 2}, {"I", 1024}, {"G", 8}, {"E", 32}}, h);
  CAPTURE(s.to_string());
  REQUIRE(s.find("g"));
  CHECK(s.find("n")->outer == 1);
  CHECK(s.find("g")->outer == 1);     // 16 tiles: as many as (n, g) have
  CHECK(s.find("e")->outer == 32);    // reduced by S: whole
  // with enough output points (2 x 512) the halving stops once the tiles reach the SM count
  const tile::TileSpec wide = tile::default_tile_spec(m.functions[0], {{"N", 2}, {"I", 64}, {"G", 512}, {"E", 32}}, h);
  CAPTURE(wide.to_string());
  const int64_t tiles = 2 * (512 + wide.find("g")->outer - 1) / wide.find("g")->outer;
  CHECK(tiles >= int64_t(h.cores));
  CHECK(tiles < 4 * int64_t(h.cores));
}

TEST_CASE("default tile spec on a GPU: a reduction over several axes keeps them all whole up to 16384 points") {
  // a group norm's first phase after split_reductions: (i_in, e) reduced per (n, g, i_chunk); an
  // element-wise statement on e would otherwise split e's inner tile (32/16), and i_in got point
  // tiles, so the SIMT nest ran sequential loops around 16 lanes
  frontend::Module m = frontend::parse_module(
      "def gn(f32[N, C, I, G, E] X) -> (f32[N, G, C] P, f32[N, C, I, G, E] Y) {\n"
      "  P(n, g, c) +=! X(n, c, i, g, e)\n"
      "  Y(n, c, i, g, e) = X(n, c, i, g, e) * 2\n}\n",
      "gn.tsl");
  isa::Hierarchy h = load_target_hierarchy("isa/targets/sm90.yaml", "");
  const tile::TileSpec s = tile::default_tile_spec(m.functions[0], {{"N", 2}, {"C", 32}, {"I", 32}, {"G", 8}, {"E", 32}}, h);
  CAPTURE(s.to_string());
  REQUIRE(s.find("i"));
  REQUIRE(s.find("e"));
  CHECK(s.find("i")->outer == 32);
  CHECK(s.find("i")->inner == 32);
  CHECK(s.find("e")->outer == 32);
  CHECK(s.find("e")->inner == 32);
  // past 16384 reduced points the outer reduced axis walks point by point again
  const tile::TileSpec big = tile::default_tile_spec(m.functions[0], {{"N", 2}, {"C", 4}, {"I", 1024}, {"G", 8}, {"E", 32}}, h);
  CAPTURE(big.to_string());
  REQUIRE(big.find("i"));
  CHECK(big.find("i")->outer == 1);
  // the NPU keeps its own rule (point tiles on the outer reduced axes)
  isa::Hierarchy npu = load_target_hierarchy("isa/targets/davinci-910.yaml", "");
  const tile::TileSpec n = tile::default_tile_spec(m.functions[0], {{"N", 2}, {"C", 32}, {"I", 32}, {"G", 8}, {"E", 32}}, npu);
  CAPTURE(n.to_string());
  REQUIRE(n.find("i"));
  CHECK(n.find("i")->outer == 1);
}

TEST_CASE("default tile spec on a GPU: element-wise tiles of 4 KB of the widest tensor, no tail tile on the innermost axis") {
  isa::Hierarchy h = load_target_hierarchy("isa/targets/sm90.yaml", "");
  auto tiles_of = [&](const std::string& text, const std::map<std::string, int64_t>& sizes) {
    frontend::Module m = frontend::parse_module(text, "ew.tsl");
    return tile::default_tile_spec(m.functions[0], sizes, h);
  };
  // one axis: 4096 bytes of f16 (2048 elements), of f32 (1024)
  const tile::TileSpec f16 = tiles_of("def a(f16[N] X, f16[N] Z) -> (f16[N] Y) {\n  Y(i) = X(i) * Z(i)\n}\n", {{"N", 1 << 20}});
  CAPTURE(f16.to_string());
  CHECK(f16.find("i")->outer == 2048);
  const tile::TileSpec f32 = tiles_of("def a(f16[N] X, f32[N] Z) -> (f16[N] Y) {\n  Y(i) = X(i) * f16(Z(i))\n}\n", {{"N", 1 << 20}});
  CHECK(f32.find("i")->outer == 1024);
  // a shorter tensor: whole, then halved until its tiles reach the SM count
  const tile::TileSpec small = tiles_of("def a(f32[N] X) -> (f32[N] Y) {\n  Y(i) = X(i) + 1\n}\n", {{"N", 4096}});
  CHECK(small.find("i")->outer * int64_t(h.cores) <= 2 * 4096);
  // NCHW per-channel scaling: the 784-point plane whole (128 would leave a 16-point tail), one
  // channel per tile (784 f32 is most of 4 KB)
  const std::string bn =
      "def bn(f32[N, C, P] X, f32[C] g) -> (f32[N, C, P] Y) {\n  Y(n, c, p) = X(n, c, p) * g(c)\n}\n";
  const tile::TileSpec plane = tiles_of(bn, {{"N", 8}, {"C", 128}, {"P", 784}});
  CAPTURE(plane.to_string());
  CHECK(plane.find("p")->outer == 784);
  CHECK(plane.find("c")->outer == 1);
  // 3136 points of f32: cut at its largest divisor within 2 x 1024 (1568), no tail
  const tile::TileSpec big = tiles_of(bn, {{"N", 8}, {"C", 64}, {"P", 3136}});
  CHECK(big.find("p")->outer == 1568);
  // a plane the 128-point block divides keeps the general two-axis rule
  const tile::TileSpec even = tiles_of(bn, {{"N", 8}, {"C", 64}, {"P", 1024}});
  CHECK(even.find("p")->outer == 128);
  // a short innermost axis (32 f32): the axes outward fill the 1,024 points, each at a divisor
  const tile::TileSpec groups = tiles_of(
      "def gn(f32[N, I, G, E] X, f32[N, G] S) -> (f32[N, I, G, E] Y) {\n  Y(n, i, g, e) = X(n, i, g, e) - S(n, g)\n}\n",
      {{"N", 2}, {"I", 1024}, {"G", 8}, {"E", 32}});
  CAPTURE(groups.to_string());
  CHECK(groups.find("e")->outer == 32);
  CHECK(groups.find("g")->outer == 8);
  CHECK(groups.find("i")->outer == 4);
  CHECK(groups.find("n")->outer == 1);
  // a transposition keeps its two-axis tiles (the innermost axis is not contiguous in X)
  const tile::TileSpec tr =
      tiles_of("def t(f16[M, N] X) -> (f16[N, M] Y) {\n  Y(n, m) = X(m, n)\n}\n", {{"M", 784}, {"N", 784}});
  CAPTURE(tr.to_string());
  CHECK(tr.find("m")->outer <= 128);
  CHECK(tr.find("n")->outer <= 128);
}
