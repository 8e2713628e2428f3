// Stride-1 window sums over channel-last maps on the vector unit (compiler/emit_npu/window_sum.h):
// outputs against the reference interpreter element by element (the taps are added in the
// interpreter's order, so the outputs are exact), naive and pruned syncs, race-free; the roofline
// suite's 3x3 average pool against the hand-computed vector work of a core's tiles.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_npu/window_sum.h"
#include "mapping_cases.h"

using namespace tessel;
using namespace tessel::npu_test;

// pool.avg3x3_s1_nhwc.f16 (4 x 56 x 56 x 128, f16): the general lowering loaded and converted every
// input row once per tap (63,430 cycles on davinci-910, 1,005,180 on davinci-310). Tiles of 4 output
// rows x 7 columns: per tile 6 input rows of 9 x 128 f16 converted once (6 x 1152 / 64 = 108
// repeats), 4 rows x 8 adds x 14 repeats (448), and f16(S / 9) over 4 x 896 elements (the constant,
// the division, the cast: 3 x 56 = 168): 724 repeats; 14 tiles per core on 32 cores, 224 on 2.
TEST_CASE("a 3x3 average pool converts each tile's input once and adds its taps at full width") {
  const uint64_t per_tile = 6 * 1152 / 64 + 4 * 8 * 14 + 3 * 56;
  auto c = compile_case("window_sum.tsl", "avgpool_nhwc", "N=4,P=56,Q=56,C=128");
  CAPTURE(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, "tiles of 4 output row(s) x 7 columns on 32 core(s), 14 tiles each"));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("avgpool_nhwc 4x56x56x128 on davinci-910: " << cycles << " cycles");
  CHECK(cycles >= 14 * per_tile);  // 10,136
  CHECK(cycles < 14 * per_tile * 23 / 20);  // 11,175 measured
  auto d = compile_case("window_sum.tsl", "avgpool_nhwc", "N=4,P=56,Q=56,C=128", "", true, kTarget310);
  CHECK(d->kernel.program.cores == 2);
  const uint64_t cycles310 = verified_cycles(*d, true);
  MESSAGE("avgpool_nhwc 4x56x56x128 on davinci-310: " << cycles310 << " cycles");
  CHECK(cycles310 >= 224 * per_tile);  // 162,176
  CHECK(cycles310 < 224 * per_tile * 103 / 100);  // 164,175 measured
}

// f32 input without a cast, the sum itself stored, a 2 x 4 window in a wider input; a window along q
// only (the pipeline collapsed n with p: a 3-d kernel) with two outputs; an uneven last core;
// several rows per tile.
TEST_CASE("window sums of other forms and sizes verify on the vector unit") {
  check_forms("window_sum.tsl",
              {{"avgpool_nhwc", "N=1,P=3,Q=4,C=8"}, {"avgpool_nhwc", "N=1,P=37,Q=9,C=16"}, {"avgpool_nhwc", "N=2,P=12,Q=7,C=64"},
               {"sum_window_f32", "N=2,P=9,Q=10,C=24"}, {"row_window_two_outputs", "N=3,P=5,Q=11,C=32"},
               {"row_window_two_outputs", "N=1,P=40,Q=60,C=64"}},
              true, [](const std::string&) { return "window sum"; });
}

// Channels not whole f32 blocks, a stride-2 window: the general lowering's (still exact).
TEST_CASE("window sums this mapping does not take go to the general lowering") {
  auto c = refused_case("window_sum.tsl", "avgpool_nhwc", "N=2,P=7,Q=7,C=5", "window sum", true);
  const isa::NpuMachine m = isa::npu_machine(c->compilation->hierarchy);
  CHECK(emit_npu::why_not_window_sum(c->compilation->kernel, m).find("channels not a whole number of f32 blocks") != std::string::npos);
  auto d = refused_case("window_sum.tsl", "avgpool_s2_nhwc", "N=2,P=5,Q=6,C=16", "window sum", true);
  CHECK(emit_npu::why_not_window_sum(d->compilation->kernel, m).find("not at the output's indices plus windows") != std::string::npos);
}
