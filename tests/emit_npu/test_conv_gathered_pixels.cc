// Strided 1x1 convolutions without padding with their read pixels gathered (conv_match.h
// gathered_pointwise, Conv::Gather): the pixels read come into L1 pixel-major by one copy per output
// row, first on MTE2, the weights after them in chunks ahead of their slices; each slice's load3d
// reads its 16 channels of every pixel as a row of pixels C / 16 fractal rows apart. conv.cc plans
// both forms and keeps the one tile::plan_conv prices lower (the gathered one only where a core
// runs one job of one band). ResNet-50's stage-4 projection (k44) on davinci-910: 4,415 cycles
// reading every pixel of 64 map planes by 64 copies, 2,989 gathered.
// Every program is compared element by element with the reference interpreter, naive and pruned,
// race-free.
#include <doctest/doctest.h>

#include <set>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

constexpr const char* kGathered = "gathered pixel-major into L1";

int64_t count(const npu::Program& p, npu::Opcode o, npu::Buffer dst) {
  int64_t n = 0;
  for (const auto& in : p.code) n += in.opcode == o && in.operands[0].buffer == dst;
  return n;
}

int64_t position(const npu::Program& p, npu::Opcode o, bool first) {
  int64_t at = -1;
  for (size_t i = 0; i < p.code.size(); ++i)
    if (p.code[i].opcode == o) {
      at = int64_t(i);
      if (first) break;
    }
  return at;
}

}  // namespace

TEST_CASE("stage 4's 1x1/2 projection gathers its 16 read pixels: 4 map copies before the weights, exact, under 3,000 cycles") {
  auto c = compile_case("conv_projection.tsl", "projection", "N=1,H=7,W=7,C=1024,K=2048,P=4,Q=4");
  INFO(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, kGathered));
  CHECK(notes_contain(c->kernel, "output channels in tiles of 64"));
  CHECK(notes_contain(c->kernel, "weights in chunks of"));
  const npu::Program& p = c->kernel.program;
  CHECK(p.cores == 32);
  // the map: one copy per output row (4 rows of 4 pixels, 2 KiB bursts 2 pixels apart), all of them
  // ahead of the weights' first chunk and of the first mmad; the later chunks between mmads
  CHECK(count(p, npu::Opcode::DmaIn, npu::Buffer::L1) == 4);
  for (const auto& in : p.code)
    if (in.opcode == npu::Opcode::DmaIn && in.operands[0].buffer == npu::Buffer::L1) {
      CHECK(in.operands[2].imm == 4);
      CHECK(in.operands[3].imm == 2048);
      CHECK(in.operands[4].imm == 2048);
    }
  int64_t last_map = -1, first_chunk = -1;
  for (size_t i = 0; i < p.code.size(); ++i) {
    const auto& in = p.code[i];
    if (in.opcode == npu::Opcode::DmaIn && in.operands[0].buffer == npu::Buffer::L1) last_map = int64_t(i);
    if (in.opcode == npu::Opcode::DmaInNz && first_chunk < 0) first_chunk = int64_t(i);
  }
  CHECK(last_map < first_chunk);
  CHECK(first_chunk < position(p, npu::Opcode::Mmad, true));
  CHECK(position(p, npu::Opcode::Mmad, true) < position(p, npu::Opcode::DmaInNz, false));
  // img2col over one row of (16 - 1) x 64 + 1 pixels at stride 64: slice c1's channels of every pixel
  bool fm = false;
  for (const auto& in : p.code)
    if (in.opcode == npu::Opcode::SetFmatrix) fm = in.operands[0].imm == 1 && in.operands[1].imm == 15 * 64 + 1 && in.operands[7].imm == 64;
  CHECK(fm);
  // the write-back's four column blocks each in a UB region of their own (ConvEmitter::column_sets:
  // with two, the third block's epilogue waited for the first one's GM write latency)
  std::set<int64_t> regions;
  for (const auto& in : p.code)
    if (in.opcode == npu::Opcode::DmaOut && in.operands[0].buffer == npu::Buffer::GM) regions.insert(in.operands[1].imm);
  CHECK(regions.size() == 4);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("projection 7x7x1024 -> 4x4x2048 gathered: " << cycles << " cycles (4,415 reading 64 planes of 49 pixels, 2,989 with two column regions)");
  CHECK(cycles <= 3000);
}

TEST_CASE("stage 3's 1x1/2 projection (14x14x512 -> 7x7x1024) gathers its 49 read pixels, exact, under 2,500 cycles") {
  auto c = compile_case("conv_projection.tsl", "projection", "N=1,H=14,W=14,C=512,K=1024,P=7,Q=7");
  INFO(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, kGathered));
  CHECK(count(c->kernel.program, npu::Opcode::DmaIn, npu::Buffer::L1) == 7);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("projection 14x14x512 -> 7x7x1024 gathered: " << cycles << " cycles (2,914 with the even columns' planes)");
  CHECK(cycles <= 2500);
}

TEST_CASE("gathered projections of odd sizes, two images and no epilogue are exact on 910 and 310") {
  struct Shape {
    const char* def;
    const char* shape;
  };
  for (const Shape& s : {Shape{"projection", "N=1,H=9,W=11,C=256,K=512,P=5,Q=6"}, Shape{"projection_acc", "N=2,H=8,W=8,C=512,K=512,P=4,Q=4"},
                         Shape{"projection_acc", "N=1,H=13,W=13,C=256,K=256,P=7,Q=7"}}) {
    CAPTURE(s.shape);
    auto c = compile_case("conv_projection.tsl", s.def, s.shape);
    CHECK(notes_contain(c->kernel, kGathered));
    CHECK(verified_cycles(*c, /*exact=*/true) > 0);
  }
  // davinci-310 (2 cores): gathered where a core runs one tile (13x13x256 -> 7x7x256), else the
  // planes of the columns read (tiles per core re-read the map: the gathered map would not overlap)
  auto one = compile_case("conv_projection.tsl", "projection_acc", "N=1,H=13,W=13,C=256,K=256,P=7,Q=7", "", true, kTarget310);
  CHECK(notes_contain(one->kernel, kGathered));
  CHECK(verified_cycles(*one, /*exact=*/true) > 0);
  auto many = compile_case("conv_projection.tsl", "projection", "N=1,H=7,W=7,C=1024,K=2048,P=4,Q=4", "", true, kTarget310);
  CHECK_FALSE(notes_contain(many->kernel, kGathered));
  CHECK(verified_cycles(*many, /*exact=*/true) > 0);
}

TEST_CASE("a tile spec keeps the strided projection's planes (its pixel axes are the image's)") {
  auto c = compile_case("conv_projection.tsl", "projection", "N=1,H=7,W=7,C=1024,K=2048,P=4,Q=4", "k=64");
  INFO(kernel_notes(*c));
  CHECK_FALSE(notes_contain(c->kernel, kGathered));
}
