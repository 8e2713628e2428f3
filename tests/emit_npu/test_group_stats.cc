// Statistics per group on the vector unit (compiler/emit_npu/group_stats.h): a group's values stay
// in UB through every statement, X is read once and Y written once, no barrier. Outputs against the
// reference interpreter element by element (f32 sums reassociated: within the sum tolerance), naive
// and pruned syncs, race-free; the roofline suite's group norm against its hand-computed work.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_npu/group_stats.h"
#include "mapping_cases.h"

using namespace tessel;
using namespace tessel::npu_test;

// groupnorm.nige.f32 (2 x 1024 x 8 x 32): the general lowering's six phases and five sync_all took
// 23,207 cycles on davinci-910 (D through GM), 265,917 on davinci-310. A group here: 32 chunks of
// 32 rows (16 repeats); per chunk Sum 15 fold + 1, D 16, D * D 16 + 15 + 1, Y 3 x 16 (its
// rsqrt(SqSum / 1024 + eps) once per group): 112, so 3,584 repeats per group. davinci-910: one
// group on each of 16 cores (its 128 KiB in and out at 87 B/cycle, overlapped by chunks);
// davinci-310: 8 groups a core, bound by the 95 B/cycle of GM both cores share (4 MiB: 44,172).
TEST_CASE("group norm keeps each group in UB: X read once, Y written once, no barrier") {
  auto c = compile_case("group_stats.tsl", "group_norm", "N=2,I=1024,G=8,E=32");
  CAPTURE(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, "1 group(s) per core on 16 core(s)"));
  const uint64_t cycles = verified_cycles(*c, false);
  MESSAGE("group_norm 2x1024x8x32 on davinci-910: " << cycles << " cycles");
  CHECK(cycles >= 3584);
  CHECK(cycles < 3584 * 8 / 5);  // 5,302 measured
  auto d = compile_case("group_stats.tsl", "group_norm", "N=2,I=1024,G=8,E=32", "", true, kTarget310);
  const uint64_t cycles310 = verified_cycles(*d, false);
  MESSAGE("group_norm 2x1024x8x32 on davinci-310: " << cycles310 << " cycles");
  CHECK(cycles310 >= 44172);
  CHECK(cycles310 < 44172 * 3 / 2);  // 61,174 measured
}

// Other sizes (E of one, two and eight blocks; I not a power of two; more groups than cores on
// davinci-310) and a kernel without parameters with two outputs.
TEST_CASE("group statistics of other sizes and forms verify") {
  check_forms("group_stats.tsl",
              {{"group_norm", "N=1,I=64,G=4,E=16"}, {"group_norm", "N=3,I=96,G=2,E=8"}, {"group_norm", "N=2,I=7,G=3,E=64"},
               {"group_share", "N=2,I=48,G=5,E=32"}},
              false, [](const std::string&) { return "group statistics"; });
}

// E not whole blocks, a per-group output: the general lowering's.
TEST_CASE("group statistics this mapping does not take go to the general lowering") {
  auto c = refused_case("group_stats.tsl", "group_norm", "N=2,I=5,G=3,E=4", "group statistics", false);
  const isa::NpuMachine m = isa::npu_machine(c->compilation->hierarchy);
  CHECK(emit_npu::why_not_group_stats(c->compilation->kernel, m).find("E does not divide a repeat in whole blocks") != std::string::npos);
  auto d = refused_case("group_stats.tsl", "group_mean", "N=2,I=48,G=5,E=32", "group statistics", false);
  CHECK(emit_npu::why_not_group_stats(d->compilation->kernel, m).find("output Mean is not [N, I, G, E]") != std::string::npos);
}
