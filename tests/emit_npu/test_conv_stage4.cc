// ResNet-50's stage-4 convolutions at 112 x 112 (7 x 7 maps of 512 and 1,024 channels read by
// every core): what the shared GM charges shapes their plans and code. Each DMA of any core holds
// the shared GM for at least a cycle (npu_sim), so 32 cores' copies of 64 map planes alone are
// 2,048 such cycles:
//  - tile::plan_conv prices a copy at ceil(its bytes / the shared bandwidth) cycles (it added a
//    cycle to each copy's share of the bandwidth, which kept the 1x1/2 projection at tiles of 128
//    channels on 16 cores: 7,962 cycles) and a core's one band as its reads then its compute;
//  - the slices of up to 1,024 channels run straight-line, each plane's copy emitted a few slices
//    ahead of the slice that reads it, so the cube follows the planes as they land instead of
//    waiting behind all of them (conv_emitter.cc load_band);
//  - the epilogue's per-channel patterns take one DMA per tensor, their rows copied on the vector
//    unit (conv_epilogue.cc), instead of one DMA per pattern row.
// Every program is compared element by element with the reference interpreter, race-free, naive
// and pruned.
#include <doctest/doctest.h>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

// Position in program order of the first instruction with opcode `o` (first = true) or the last.
int64_t position(const npu::Program& p, npu::Opcode o, bool first, npu::Buffer dst = npu::Buffer::GM) {
  int64_t at = -1;
  for (size_t i = 0; i < p.code.size(); ++i) {
    const auto& in = p.code[i];
    if (in.opcode != o || (dst != npu::Buffer::GM && in.operands[0].buffer != dst)) continue;
    at = int64_t(i);
    if (first) break;
  }
  return at;
}

}  // namespace

TEST_CASE("stage 4's 1x1/2 projection (1024 -> 2048 channels) runs tiles of 64 on 32 cores, exact, under 3,200 cycles") {
  auto c = compile_case("conv_projection.tsl", "projection", "N=1,H=7,W=7,C=1024,K=2048,P=4,Q=4");
  INFO(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, "output channels in tiles of 64"));
  CHECK(c->kernel.program.cores == 32);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("projection 7x7x1024 -> 4x4x2048: " << cycles << " cycles (7,962 as 16 tiles of 128, 4,415 reading 64 planes)");
  CHECK(cycles <= 3200);
  // the scale's and the bias's patterns: one DMA each, then rows 1.. on V (f32 rows: two vector
  // blocks, a vmuls per block whose source blocks are all row 0's)
  int ub_dmas = 0, spreads = 0;
  for (const auto& in : c->kernel.program.code) {
    if (in.opcode == npu::Opcode::DmaIn && in.operands[0].buffer == npu::Buffer::UB) ++ub_dmas;
    if (in.opcode == npu::Opcode::Vmuls && in.operands[6].imm == 0 && in.operands[5].imm == 2) ++spreads;
  }
  CHECK(ub_dmas == 2);
  CHECK(spreads == 4);
  // its 16 read pixels gathered first (test_conv_gathered_pixels.cc), the weights' later chunks
  // copied between the slices' mmads
  const npu::Program& p = c->kernel.program;
  CHECK(position(p, npu::Opcode::Mmad, true) < position(p, npu::Opcode::DmaInNz, false));
}

TEST_CASE("stage 4's 3x3/2 convolution (512 channels) follows its map's planes, exact on 910 and 310") {
  const std::string shape = "N=1,H=7,W=7,C=512,K=512,R=3,S=3,P=4,Q=4";
  auto c = compile_case("resnet50_layers.tsl", "conv3x3_s2", shape);
  INFO(kernel_notes(*c));
  const npu::Program& p = c->kernel.program;
  // straight-line slices (no loop over them), the first mmad issued before the last plane's copy
  CHECK(position(p, npu::Opcode::Loop, true) == -1);
  CHECK(position(p, npu::Opcode::Mmad, true) < position(p, npu::Opcode::DmaIn, false, npu::Buffer::L1));
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv3x3_s2 " << shape << ": " << cycles << " cycles (5,045 with the slices in a loop)");
  CHECK(cycles <= 4400);
  check_verifies("resnet50_layers.tsl", "conv3x3_s2", shape, "", kTarget310);
  check_verifies("conv_projection.tsl", "projection", "N=1,H=7,W=7,C=1024,K=256,P=4,Q=4", "", kTarget310);
}
