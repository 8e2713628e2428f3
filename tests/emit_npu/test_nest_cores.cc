// The general NPU vector lowering's split over cores (compiler/emit_npu/nest_cores.cc): a grid over
// several leading output indices where the leading one alone leaves cores idle (workloads/
// short_batch.tsl), the rows where the leading index fills the chip; each choice verified element
// by element on the simulator (naive and pruned syncs, race-free) with cycles under a bound worked
// out from the description by hand.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

// davinci-910: GM -> UB 300 cycles latency, 87 B/cycle per core, write latency 150. Group norm
// (2, 196, 8, 16): the 16 (n, g) pairs on 16 cores, each reading 196 x 16 f32 = 12,544 B (144 cycles
// of transfer) as tiles of the reduction's rows; then S stored and read back for the division:
// about 300 + 144 + vector work (~2 x 98 row adds) + 150 + 300 + 150 = ~1,250 cycles, bound 2,500
// (the rows alone: 2 cores, 33,886 cycles).
TEST_CASE("group norm statistics take a core grid of batch x groups with the reduction's rows in a tile (davinci-910)") {
  auto c = compile_case("short_batch.tsl", "group_norm_mean", "N=2,I=196,G=8,E=16");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 16);
  CHECK(n.find("core grid n 2 x 1, g 8 x 1") != std::string::npos);
  CHECK(n.find("rows i, lanes e") != std::string::npos);  // a core's one group: the tile's rows are the reduction's
  const uint64_t cycles = verified_cycles(*c, false, true);
  MESSAGE("group_norm_mean 2x196x8x16 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 2500);
}

// davinci-310 has 2 cores: the batch of 2 already fills it, so the rows stay (no grid).
TEST_CASE("a leading index that fills every core keeps the rows split (group norm on davinci-310, a long reduction)") {
  auto c = compile_case("short_batch.tsl", "group_norm_mean", "N=2,I=196,G=8,E=16", "", true, kTarget310);
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 2);
  CHECK(n.find("core grid") == std::string::npos);
  CHECK(n.find("1 rows each") != std::string::npos);
  verified_cycles(*c, false, true);
  auto r = compile_case("generality.tsl", "reduce_middle", "A=64,B=8,C=128", "", false);
  CHECK(kernel_notes(*r).find("core grid") == std::string::npos);
  CHECK(r->kernel.program.cores == 32);
}

// Nearest 2x upsampling (2, 14, 14, 64) f16: the batch x the 14 output row pairs on 28 cores
// (the 64 channels stay whole: cutting them would leave a repeat's lanes idle). A core reads 14 x 64
// f16 (1,792 B) and writes 2 x 28 x 64 f16 (7,168 B): 300 + 21 + 150 + 82 plus a tile per (h % 2,
// w % 2) pair, bound 1,500 (the rows alone: 2 cores, 93,101 cycles).
TEST_CASE("nearest upsampling takes a grid of batch x output rows and keeps the channels whole (bit-exact, both targets)") {
  auto c = compile_case("short_batch.tsl", "upsample2x", "N=2,H=14,W=14,C=64,P=28,Q=28");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 28);
  CHECK(n.find("core grid n 2 x 1, h/2 14 x 1 (parts x per core)") != std::string::npos);
  const uint64_t cycles = verified_cycles(*c, true, true);
  MESSAGE("upsample2x 2x14x14x64 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 1500);
  auto small = compile_case("short_batch.tsl", "upsample2x", "N=2,H=5,W=3,C=20,P=10,Q=6", "", true, kTarget310);
  verified_cycles(*small, true, true);
  auto odd = compile_case("short_batch.tsl", "upsample2x", "N=3,H=5,W=3,C=20,P=10,Q=6");  // 3 x 5 = 15 cores
  CHECK(odd->kernel.program.cores == 15);
  verified_cycles(*odd, true, true);
}

// Global average pooling (2, 7, 7, 2048): the batch x 16 blocks of 128 channels (two whole repeats
// of f32 each) on 32 cores.
TEST_CASE("global average pooling splits the batch and the channels in whole repeats over every core") {
  auto c = compile_case("short_batch.tsl", "global_avg_pool", "N=2,H=7,W=7,C=2048", "", false);
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 32);
  CHECK(n.find("c 16 x 128") != std::string::npos);
}
