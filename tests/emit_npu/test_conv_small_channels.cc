// Convolutions with fewer input channels than the cube's fractal (workloads/conv_small_channels.tsl):
// the window's columns folded into the channels (compiler/emit_npu/conv_fold.h), so the cube's K
// holds R x round_up(S C, 16) values instead of R x S x 16. ResNet-50's stem (7x7, stride 2,
// padding 3, 3 channels, its batch-norm epilogue) and a 5x5 convolution of 4 channels (stride 1,
// padding 2, f32 result), each on davinci-910 and davinci-310: compared element by element with the
// reference interpreter (naive and pruned syncs, race-free), mapped on the cube (the fold's note,
// the img2col convolution, mmads in the program), and the pruned program held under a bound.
//
// Bounds: about 1.5x the cycles the folded mapping takes (as test_conv_general.cc), each well under
// what the channel-padded mapping took before (padded scratch copies through UB, K = R x S x 16):
// stem_7x7s2 at N=1, 20 x 20, K=64: folded 1,057 (910) / 2,525 (310) against 6,377 / 6,451 padded;
// at N=1, 21 x 19, K=32 (odd: rows not one run of windows): 1,505 / 1,864 against 4,536 / 4,578;
// conv5x5_pad2 at N=2, 12 x 10, 4 -> 32: folded 1,149 / 1,755 against 4,523 / 4,523 padded (one core).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const std::string kFile = "conv_small_channels.tsl";

void check_folded(const std::string& def, const std::string& shape, const std::string& target, const std::string& fold_note,
                  uint64_t max_cycles) {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(target);
  auto c = compile_case(kFile, def, shape, "", true, target);
  for (const auto& n : c->kernel.notes) MESSAGE(n);
  CHECK(notes_contain(c->kernel, fold_note));
  CHECK(notes_contain(c->kernel, "img2col convolution"));
  CHECK_FALSE(notes_contain(c->kernel, "zero-padded copies"));
  const auto& code = c->kernel.program.code;
  CHECK(std::count_if(code.begin(), code.end(), [](const npu::Instruction& i) { return i.opcode == npu::Opcode::Mmad; }) > 0);
  CHECK(std::count_if(code.begin(), code.end(), [](const npu::Instruction& i) { return i.opcode == npu::Opcode::Load3d; }) > 0);
  verify(*c, def, shape, false);  // exact (max_abs_err 0), naive and pruned, race-free, no deadlock
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  MESSAGE(def << " on " << target << ": " << pruned.sim.record.total_cycles << " cycles");
  CHECK(pruned.sim.record.total_cycles <= max_cycles);
}

}  // namespace

TEST_CASE("ResNet-50's stem (3 channels, 7x7/2, padding 3) folds its window's columns into the cube's K") {
  const std::string note = "3 input channels < the fractal: the window's 7 columns folded into the channels (3 -> 32, K 224 instead of 784)";
  check_folded("stem_7x7s2", "N=1,H=20,W=20,P=10,Q=10,K=64", kTarget, note, 1700);
  check_folded("stem_7x7s2", "N=1,H=20,W=20,P=10,Q=10,K=64", kTarget310, note, 3900);
  // odd sizes: W (19) is not OW x 2 (20), so each input row's windows are a run of their own, and
  // the last window reads one pixel past the row (masked)
  check_folded("stem_7x7s2", "N=1,H=21,W=19,P=11,Q=10,K=32", kTarget, note, 2300);
  check_folded("stem_7x7s2", "N=1,H=21,W=19,P=11,Q=10,K=32", kTarget310, note, 2800);
}

TEST_CASE("a 4-channel 5x5 convolution (stride 1, padding 2, two images) folds too") {
  const std::string note = "4 input channels < the fractal: the window's 5 columns folded into the channels (4 -> 32, K 160 instead of 400)";
  check_folded("conv5x5_pad2", "N=2,H=12,W=10,P=12,Q=10,C=4,K=32", kTarget, note, 1700);
  check_folded("conv5x5_pad2", "N=2,H=12,W=10,P=12,Q=10,C=4,K=32", kTarget310, note, 2600);
}

TEST_CASE("a convolution whose folded K would be no smaller keeps the channel-padded mapping") {
  // 15 channels, 5x5: R x round_up(S x 15, 16) = 5 x 80 = 400 = R x S x 16, nothing to gain
  auto c = compile_case(kFile, "conv5x5_pad2", "N=1,H=6,W=6,P=6,Q=6,C=15,K=16", "", true, kTarget);
  CHECK_FALSE(notes_contain(c->kernel, "folded into the channels"));
  CHECK(notes_contain(c->kernel, "img2col convolution"));
  verify(*c, "conv5x5_pad2", "N=1,H=6,W=6,P=6,Q=6,C=15,K=16", false);
}
