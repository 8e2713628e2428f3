// The NPU GEMM tile policy weighs the tiles the cube's plan runs (compiler/tile/tile_spec.cc,
// npu_gemm_tile; compiler/tile/npu_gemm_plan.cc, dividing_tile): sizes that are multiples of the
// cube's shape run the largest tiles within the boxes that divide them, so a box of 64 rows over
// M = 784 = 49 x 16 ran as 16 rows (98 tiles, the weights re-read by each: 6,365 cycles on
// davinci-910); the policy now picks the box that runs as 112 rows. Verified against the
// interpreter, naive and pruned syncs, race-free.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {
constexpr const char* kFile = "../tests/emit_npu/data/gemm_dividing_tiles.tsl";
}

TEST_CASE("a GEMM over 784 rows runs 112-row tiles on 28 cores, not 16-row tiles on 32") {
  auto c = compile_case(kFile, "conv1x1_bn_relu", "N=1,P=28,Q=28,C=256,K=128");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(n.find("stage tile 112x32x128") != std::string::npos);
  CHECK(c->kernel.program.cores == 28);
  const uint64_t cycles = verified_cycles(*c, false);
  MESSAGE("conv1x1_bn_relu 784x256x128 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 2500);  // 2,010 (the 16x64 tiles: 6,365)
  // davinci-310 (2 cores): verified with the same rule
  auto d = compile_case(kFile, "conv1x1_bn_relu", "N=1,P=28,Q=28,C=256,K=128", "", true, kTarget310);
  verified_cycles(*d, false);
}
