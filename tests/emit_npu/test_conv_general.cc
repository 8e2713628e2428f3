// NPU convolutions beyond the plain NHWC template (compiler/emit_npu/conv.cc, depthwise.cc), each on
// the cube on davinci-910 and davinci-310: grouped NHWC (a channel tile within one group) and NCHW
// (per-core copies of the tile's group's planes), 3-D NDHWC and NCDHW (depth taps as channel slices
// accumulating in L0C), depthwise NHWC and NCHW (groups of 16 channels with diagonal weight
// fractals built on chip), NCHW through the vtranspose copies (straight into L1, the result
// transposed in UB; banded maps through GM slots; tiny problems on one core). Each program is
// compared element by element with the reference interpreter (naive and pruned syncs, race-free),
// the mapping is asserted from the emitter's notes and cores, and the pruned program's cycles are
// held under a bound (about 1.5x what the mapping takes today) that the fall-back mappings (the
// general vector lowering, the one-core vector template) exceed several times over.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const std::string kFile = "conv_general.tsl";

// The kernel maps as `note` says on at least `min_cores` cores, verifies exactly (naive and pruned,
// race-free) and its pruned program takes at most `max_cycles`.
void check_mapped(const std::string& def, const std::string& shape, const std::string& target, const std::string& note, int min_cores,
                  uint64_t max_cycles) {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(target);
  auto c = compile_case(kFile, def, shape, "", true, target);
  for (const auto& n : c->kernel.notes) MESSAGE(n);
  CHECK(notes_contain(c->kernel, note));
  CHECK_FALSE(notes_contain(c->kernel, "general vector lowering"));
  CHECK(c->kernel.program.cores >= min_cores);
  verify(*c, def, shape);
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  CHECK(pruned.sim.record.total_cycles <= max_cycles);
}

}  // namespace

TEST_CASE("grouped NHWC convolution on the cube: channel tiles within one group, every tile its group's channels and weights") {
  // general vector lowering before: 4,405 cycles (910) and 52,072 (310) at N=1,P=3,Q=4,G=2,C=16,K=16
  check_mapped("conv_grouped_nhwc", "N=1,P=3,Q=4,G=2,C=16,K=16,R=3,S=3", kTarget, "2 groups of 16 -> 16 channels: img2col", 2, 1000);
  check_mapped("conv_grouped_nhwc", "N=1,P=3,Q=4,G=2,C=16,K=16,R=3,S=3", kTarget310, "2 groups of 16 -> 16 channels: img2col", 2, 1100);
  check_mapped("conv_grouped_nhwc", "N=2,P=6,Q=5,G=3,C=32,K=16,R=3,S=3", kTarget, "3 groups of 32 -> 16 channels", 6, 1300);
  check_mapped("conv_grouped_nhwc", "N=2,P=6,Q=5,G=3,C=32,K=16,R=3,S=3", kTarget310, "3 groups of 32 -> 16 channels", 2, 2700);
}

TEST_CASE("grouped NCHW convolution on the cube: per-core copies of the tile's group's planes") {
  check_mapped("conv_grouped_nchw", "N=2,G=2,C=16,P=5,Q=6,K=32,R=3,S=3", kTarget, "2 groups of 16 -> 32 channels", 4, 2500);
  check_mapped("conv_grouped_nchw", "N=2,G=2,C=16,P=5,Q=6,K=32,R=3,S=3", kTarget310, "2 groups of 16 -> 32 channels", 2, 3800);
}

TEST_CASE("3-D convolutions on the cube: an image per (n, o), depth taps as channel slices accumulating in L0C") {
  check_mapped("conv3d_ndhwc", "N=1,O=3,P=4,Q=5,C=16,K=32,T=3,R=3,S=3", kTarget, "3-D: images (n, o) of 3 output depths, 3 depth taps", 3, 1500);
  check_mapped("conv3d_ndhwc", "N=1,O=3,P=4,Q=5,C=16,K=32,T=3,R=3,S=3", kTarget310, "3 depth taps", 2, 3500);
  check_mapped("conv3d_ndhwc", "N=2,O=2,P=3,Q=3,C=32,K=16,T=2,R=1,S=3", kTarget, "2 depth taps", 4, 1100);
  check_mapped("conv3d_ncdhw", "N=2,C=16,O=2,P=4,Q=3,K=16,T=3,R=3,S=3", kTarget, "3-D: images (n, o) of 2 output depths, 3 depth taps", 4, 4100);
  check_mapped("conv3d_ncdhw", "N=2,C=16,O=2,P=4,Q=3,K=16,T=3,R=3,S=3", kTarget310, "3 depth taps", 2, 6300);
}

TEST_CASE("depthwise convolutions on the cube: groups of 16 channels with diagonal weight fractals built in UB") {
  // NHWC with the padding statement and the f16 result (the fused cast); 48 channels: more than
  // the one-core vector template's 64 lanes would hold at N=2,H=W=16, every core here
  check_mapped("depthwise_nhwc", "N=2,H=7,W=9,C=48,R=3,S=3", kTarget, "depthwise as 3 groups of 16 channels", 6, 1500);
  check_mapped("depthwise_nhwc", "N=2,H=7,W=9,C=48,R=3,S=3", kTarget310, "depthwise as 3 groups of 16 channels", 2, 2500);
  check_mapped("depthwise_nhwc", "N=1,H=16,W=16,C=80,R=3,S=3", kTarget, "depthwise as 5 groups of 16 channels", 5, 1900);
  // NCHW, f32 result: the diagonal gathered from Wt[C][R S], per-core copies of the group's planes
  check_mapped("depthwise_nchw", "N=2,C=32,P=6,Q=5,R=3,S=3", kTarget, "depthwise as 2 groups of 16 channels", 4, 1900);
  check_mapped("depthwise_nchw", "N=2,C=32,P=6,Q=5,R=3,S=3", kTarget310, "depthwise as 2 groups of 16 channels", 2, 2800);
}

TEST_CASE("a depthwise convolution whose channels are no multiple of the fractal is refused by the cube, with both reasons") {
  auto c = compile_case(kFile, "depthwise_nchw", "N=1,C=24,P=5,Q=7,R=3,S=3", "", false);
  REQUIRE_FALSE(c->kernel.notes.empty());
  const std::string& first = c->kernel.notes.front();
  CHECK(first.find("24 channels, not a multiple of the cube's fractal (16)") != std::string::npos);
  CHECK(first.find("the NCHW layout (this template takes NHWC)") != std::string::npos);
  CHECK(first.find("the general vector lowering maps it") != std::string::npos);
}

TEST_CASE("NCHW convolutions through vtranspose copies: into L1 per core, banded through GM slots, tiny ones on one core") {
  // per core: the planes straight into L1, the result transposed in UB
  // (one core took 4,355 and 13,201 cycles: the planner weighs the copies' GM traffic on one core)
  check_mapped("conv_s2_nchw", "N=2,C=32,P=5,Q=6,K=32,R=3,S=3", kTarget, "straight into L1 for one band", 4, 2800);
  check_mapped("conv_s2_nchw", "N=2,C=32,P=14,Q=14,K=64,R=3,S=3", kTarget310, "straight into L1 for one band", 2, 11000);
  // bands (the accumulator of 4,900 pixels exceeds L0C): on 910 spread over the cores one image
  // leaves idle (equal bands: 14 of 5 rows), each core's band's rows straight into L1 at its
  // offsets (one core, banded: 35,341 cycles)
  check_mapped("conv_s2_nchw", "N=1,C=16,P=70,Q=70,K=16,R=3,S=3", kTarget, "14 bands of 5 output rows", 14, 4500);
  // on 310 (two images, two cores) every core runs its image's bands: C1HWC0 slots in GM per core,
  // each band's window from there
  check_mapped("conv_s2_nchw", "N=2,C=16,P=70,Q=70,K=16,R=3,S=3", kTarget310, "3 bands of 24 output rows", 2, 77000);
  // channel counts not multiples of 16 (zero rows in the transposes), one core
  check_mapped("conv_s2_nchw", "N=2,C=5,P=3,Q=4,K=18,R=3,S=3", kTarget, "(16 x 16 vtranspose), the result back to NCHW; one core", 1, 6000);
  check_mapped("conv_s2_nchw", "N=2,C=5,P=3,Q=4,K=18,R=3,S=3", kTarget310, "one core", 1, 6000);
}
