// The per-core chain of small NPU convolutions (issue 30: latency-bound convolutions of the roofline
// suite on davinci-910): several images spread their bands over the cores channel tiles x images
// leave idle (padded bands too: each kind of band its own code, map and accumulator slot, the
// weights loaded by each kind's code), a channel tile's weights by one dma_in_nz where their rows
// are evenly spaced in GM (each copy holds the shared GM for a cycle at least, so 36 copies of
// 1 KiB on 28 cores took 1,000 cycles where one takes 424), and each channel slice's load3d reads
// its own 16-channel plane of the map, the slice pairs straight-line, so the cube starts once the
// weights and the first plane have landed instead of the whole map.
//
// Each case is compared element by element with the reference interpreter (naive and pruned syncs,
// race-free) on davinci-910 and davinci-310, and its pruned cycles held under a bound between the
// figure measured now and the one before (roofline suite shapes):
// conv 3x3 pad 1, N=2, 28 x 28, 64 -> 64: 910 6,796 (8 cores) -> 2,194 (28 cores); 310 12,626 -> 11,303;
// conv3d NDHWC 3x3x3, 8 x 16 x 16, 32 -> 32: 910 3,727 -> 2,287; 310 14,409 -> 12,219.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

int count(const emit_npu::NpuKernel& k, npu::Opcode op) {
  int n = 0;
  for (const auto& in : k.program.code) n += in.opcode == op;
  return n;
}

// Every load3d reads one 16-channel plane of the map (its channels operand, index 3).
bool load3d_per_plane(const emit_npu::NpuKernel& k) {
  bool any = false;
  for (const auto& in : k.program.code) {
    if (in.opcode != npu::Opcode::Load3d) continue;
    any = true;
    if (in.operands[3].imm != 16) return false;
  }
  return any;
}

uint64_t checked_cycles(const std::string& file, const std::string& def, const std::string& shape, const std::string& target) {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(target);
  auto c = compile_case(file, def, shape, "", true, target);
  for (const auto& n : c->kernel.notes) MESSAGE(n);
  CHECK(load3d_per_plane(c->kernel));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE(def << " " << shape << " on " << target << ": " << c->kernel.program.cores << " cores, " << cycles << " cycles");
  return cycles;
}

}  // namespace

TEST_CASE("a padded 3x3 convolution of two images spreads its bands over 28 cores, weights by one copy per kind of band") {
  const std::string shape = "N=2,H=28,W=28,C=64,K=64,R=3,S=3";
  auto c = compile_case("conv_halo.tsl", "conv_pad1", shape, "", false);
  CHECK(c->kernel.program.cores == 28);                   // 2 images x 7 bands of 4 rows x 2 tiles of 32 (was 8 cores)
  // the first, middle and last band's code: its weights in two chunks of 2 slices (tile::ConvPlan::
  // weight_chunks), a copy per kernel position each (was 36, then one copy per kind: 2,194 cycles)
  CHECK(count(c->kernel, npu::Opcode::DmaInNz) == 3 * 2 * 9);
  CHECK(count(c->kernel, npu::Opcode::SetFmatrix) == 3);
  CHECK(checked_cycles("conv_halo.tsl", "conv_pad1", shape, kTarget) <= 2400);
  CHECK(checked_cycles("conv_halo.tsl", "conv_pad1", shape, kTarget310) <= 11800);
}

TEST_CASE("a 3-D NDHWC convolution loads its depth taps' weights by one copy (slices of tap t at c1 + t (R S - 1) C1d)") {
  const std::string shape = "N=1,O=8,P=16,Q=16,C=32,K=32,T=3,R=3,S=3";
  auto c = compile_case("conv_general.tsl", "conv3d_ndhwc", shape, "", false);
  CHECK(count(c->kernel, npu::Opcode::DmaInNz) == 1);
  CHECK(checked_cycles("conv_general.tsl", "conv3d_ndhwc", shape, kTarget) <= 2500);
  CHECK(checked_cycles("conv_general.tsl", "conv3d_ndhwc", shape, kTarget310) <= 12800);
}

TEST_CASE("grouped NHWC and a 5-slice map keep exact results with one weight copy and straight-line slice pairs") {
  // odd slice counts (the last slice after the pairs) and groups (the tile's group's rows)
  for (const std::string& target : {kTarget, kTarget310}) {
    checked_cycles("conv_seed.tsl", "conv2d_nhwc", "N=2,H=9,W=7,C=80,K=48,R=3,S=3", target);
    checked_cycles("conv_general.tsl", "conv_grouped_nhwc", "N=2,P=6,Q=5,G=2,C=48,K=32,R=3,S=3", target);
  }
}
