// The NPU GEMM tile policy weighs 16-wide tiles and K stages of 8, 16 and 32 fractals (issue 33 /
// 30; compiler/tile/tile_spec.cc, npu_gemm_tile, and compiler/tile/npu_gemm_plan.cc,
// plan_gemm_tails): a core's K chunks are each priced at the longer of their copy and half the
// GM read latency plus it, so a GEMM of few rows and a long K (ResNet-50's stage-4 1x1
// convolutions at 112 x 112 input: 16 pixels x 2048 -> 512 channels) takes 16x16 tiles with K
// stages of 512 on all 32 cores of davinci-910 instead of 16x32 tiles with K stages of 128 on 16.
// Every program is compared element by element with the reference interpreter, naive and pruned,
// race-free.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {
constexpr const char* kFile = "../tests/emit_npu/data/gemm_dividing_tiles.tsl";
}

TEST_CASE("a 16x512x2048 GEMM takes 16x16 tiles with K stages of 512 on 32 cores, exact, under 3,000 cycles") {
  const std::string shape = "N=1,P=4,Q=4,C=2048,K=512";
  auto c = compile_case(kFile, "conv1x1_bn_relu", shape);
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(n.find("stage tile 16x16x512") != std::string::npos);
  CHECK(c->kernel.program.cores == 32);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv1x1_bn_relu " << shape << " on davinci-910: " << cycles << " cycles (16x32x128 on 16 cores: 3,937)");
  CHECK(cycles <= 3000);  // 2,887
  auto d = compile_case(kFile, "conv1x1_bn_relu", shape, "", true, kTarget310);
  verified_cycles(*d, /*exact=*/true);
}

TEST_CASE("a 49x256x1024 GEMM with tails in place takes K stages of 256, exact, under 2,600 cycles") {
  const std::string shape = "N=1,P=7,Q=7,C=1024,K=256";
  auto c = compile_case(kFile, "conv1x1_bn_relu", shape);
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(n.find("stage tiles of 16x32x256") != std::string::npos);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv1x1_bn_relu " << shape << " on davinci-910: " << cycles << " cycles (32x32x128: 2,622)");
  CHECK(cycles < 2600);  // 2,554
}

TEST_CASE("a user's tile spec keeps its K stage (no deeper stage weighed)") {
  auto c = compile_case(kFile, "conv1x1_bn_relu", "N=1,P=4,Q=4,C=2048,K=512", "n_p_q=16/16,k=32/32,c=128/64");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(n.find("stage tile 16x32x128") != std::string::npos);
  CHECK(c->kernel.program.cores == 16);
  verified_cycles(*c, /*exact=*/true);
}
