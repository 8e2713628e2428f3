// The general NPU vector lowering's ring of value sets (compiler/emit_npu/nest.cc: ring_sets,
// ring_fixed, levels): a statement's innermost tile loop cycles through as many value sets as keep
// a core's DMAs back to back across the GM latencies (read 300 + write 150 cycles on davinci-910)
// — ceil((latencies + a tile's transfer) / transfer), at most kMaxRing and what fits UB —
// instead of two; a group of ring_ tiles loads before it computes. Where the ring loop has fewer tiles than that, the next outer loop takes its
// tiles in straight (an upsampling's two columns inside its two rows). With more than two sets the
// accumulators, partials and row values take the bytes they hold instead of a tile-sized region
// each. Verified against the interpreter (naive and pruned syncs, race-free, exact), the ring
// counted in the program (distinct UB destinations of its loads), cycles below the two-set figures.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

// The distinct UB addresses the program's dma_in instructions write: one per value set where every
// tile is one load.
size_t load_slots(const Case& c) {
  std::set<int64_t> at;
  for (const auto& in : c.kernel.program.code)
    if (in.opcode == npu::Opcode::DmaIn) at.insert(in.operands[0].imm);
  return at.size();
}

uint64_t ring_case(const std::string& def, const std::string& shape, size_t sets, uint64_t two_sets, uint64_t bound) {
  auto c = compile_case("tile_ring.tsl", def, shape);
  CAPTURE(kernel_notes(*c));
  CHECK(c->kernel.program.cores == 32);
  CHECK(load_slots(*c) == sets);
  const uint64_t cycles = verified_cycles(*c, true, false, run_any);
  MESSAGE(def << " " << shape << " on davinci-910: " << cycles << " cycles (two sets: " << two_sets << ")");
  CHECK(cycles < two_sets);
  CHECK(cycles <= bound);
  return cycles;
}

}  // namespace

// reduce.max_middle.f16 (16 x 512 x 256, max over the 512): a core's 512 x 128 f16 in tiles of 39
// rows, 9,984 bytes = 115 cycles at 87 B/cycle; the read latency 300: ceil(415 / 115) = 4 sets
// wanted. A set: 3 tile regions (39 x 128 x 4 bytes) + accumulator 512 + partial 512 = 60,928
// bytes; 4 fit UB's 262,144 (243,712; 5 would not). Two sets: 4,496 cycles.
TEST_CASE("a max over the middle index cycles its tiles through four value sets") {
  ring_case("reduce_max_middle", "A=16,B=512,C=256", 4, 4496, 3500);
}

// reduce.sum_lead.f32 (2048 x 1024, sum over the 2048): tiles of 78 rows x 32 lanes (pitch 64),
// 9,984 bytes read: 4 sets wanted, and they fit (3 x 19,968 + 256 + 512 bytes each). Two sets: 8,707.
TEST_CASE("a sum over the leading index cycles its tiles through four value sets") {
  ring_case("reduce_lead", "M=2048,N=1024", 4, 8707, 6400);
}

// upsample.nearest2x_nhwc.f16 (8 x 28 x 28 x 128): a tile is one input row (28 x 128 f16, 7,168
// bytes) stored to one of the 2 x 2 output positions: 14,336 bytes in and out = 165 cycles, read
// and write latency 450: ceil(615 / 165) = 4 sets wanted; the ring loop (w % 2) has 2 tiles and
// h % 2 another 2, so the h / 2 loop takes the 4 tiles in straight, each its own set (4 x 43,008
// bytes). Two sets: 9,299 cycles.
TEST_CASE("a nearest upsampling's four output positions of a row each take a value set") {
  ring_case("upsample_nhwc", "N=8,H=28,W=28,C=128", 4, 9299, 5750);
}

// permute.4d_bshd_to_bhsd.f16 (4 x 512 x 12 x 64): tiles of 39 x 64 f16 (4,992 bytes each way,
// 115 cycles; latencies 450): ceil(565 / 115) = 5 sets wanted, 3 fit UB (3 x 19,968 bytes of values
// and a 19,968-byte partial each: 239,616). Two sets: 6,907 cycles.
TEST_CASE("a BSHD to BHSD permute cycles its tiles through three value sets") {
  ring_case("bshd_to_bhsd", "B=4,S=512,H=12,D=64", 3, 6907, 5400);
}

// Small shapes and davinci-310 (2 cores, 95 B/cycle shared: tiles' transfers are long next to the
// latency, fewer sets): still exact.
TEST_CASE("ring-buffered statements verify at small shapes and on davinci-310") {
  check_verifies("tile_ring.tsl", "upsample_nhwc", "N=1,H=3,W=4,C=5");
  check_verifies("tile_ring.tsl", "bshd_to_bhsd", "B=2,S=5,H=3,D=4");
  check_verifies("tile_ring.tsl", "reduce_lead", "M=5,N=7");
  check_verifies("tile_ring.tsl", "reduce_max_middle", "A=2,B=5,C=7");
  // (two cores sharing GM: the pruned program may meet a DMA of the other core a cycle later)
  for (const auto& [def, shape] : {std::pair<std::string, std::string>{"upsample_nhwc", "N=2,H=14,W=14,C=64"},
                                   {"reduce_lead", "M=300,N=96"}, {"reduce_max_middle", "A=3,B=200,C=64"}}) {
    CAPTURE(def);
    verify(*compile_case("tile_ring.tsl", def, shape, "", true, kTarget310), def, shape, false);
  }
}
