// The NPU GEMM's L1 ring (compiler/tile/npu_gemm_plan.cc, choose_l1_ring) and the block-by-block
// tail chunk's copies (compiler/emit_npu/gemm.cc, GemmLoop::load, Order::Blocks).
// - The load of chunk c + S - 1 waits until chunk c - 1's slot is read, so a slot is held for a
//   chunk's copy, the GM read latency and its compute: with two slots a GEMM whose chunk copies take
//   about the latency left MTE2 idle (ResNet-50's l3_x_a, 49 x 1024 -> 256 on davinci-910: 24 KiB
//   chunks, 283 cycles of copy at 87 B/cycle + 300 latency + 32 of cube: chunk 2's copy waited for
//   chunk 0's slot). The ring is deepened until a load, issued when the chunk before it is
//   computed, lands within S - 1 chunk periods (the slower of copy and cube): 283 + 300 > 2 x 283
//   -> 4 slots, all four chunks.
// - The last chunk, computed block by block, came by one copy per operand tile (2 KiB: each holds
//   the shared GM a turn on each of the 32 cores, 31 cycles where 87 B/cycle would take 24); where
//   a chunk's pieces are one copy, a block's are too (A's row block, B's column block).
// Every program is compared element by element with the reference interpreter, naive and pruned.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "compiler/tile/npu_gemm_plan.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {
constexpr const char* kBnRelu = "../tests/emit_npu/data/gemm_dividing_tiles.tsl";
constexpr const char* kBnAddRelu = "../tests/emit_npu/data/gemm_epilogue_loads.tsl";

std::vector<size_t> copies_to(const npu::Program& p, npu::Buffer buffer) {
  std::vector<size_t> at;
  for (size_t i = 0; i < p.code.size(); ++i)
    if (p.code[i].opcode == npu::Opcode::DmaInNz && p.code[i].operands[1].buffer == buffer) at.push_back(i);
  return at;
}
}  // namespace

TEST_CASE("GEMM L1 ring deep enough for the copies to run back to back, and the tail chunk one copy per block") {
  const std::string shape = "N=1,P=7,Q=7,C=1024,K=256";
  auto c = compile_case(kBnRelu, "conv1x1_bn_relu", shape);
  CAPTURE(kernel_notes(*c));
  REQUIRE(notes_contain(c->kernel, "stage tiles of 16x32x256"));
  CHECK(notes_contain(c->kernel, "L1 ring of 4 chunks (was 2)"));
  const npu::Program& p = c->kernel.program;
  // chunks 0-2: A 16 x 256 and B 256 x 32; chunk 3 (block by block): A 16 x 256, then B's two
  // column blocks 256 x 16; each chunk in its own slot (24 KiB apart)
  const std::vector<size_t> chunks = copies_to(p, npu::Buffer::L1);
  REQUIRE(chunks.size() == 9);
  for (size_t n = 0; n < 9; ++n) {
    const auto& o = p.code[chunks[n]].operands;
    CAPTURE(n);
    const bool a = n % 2 == 0 && n < 7;
    CHECK(o[3].imm == (a ? 16 : 256));
    CHECK(o[4].imm == (a ? 256 : n < 6 ? 32 : 16));
    CHECK(o[1].imm / 24576 == int64_t(n < 6 ? n / 2 : 3));
  }
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  // Hand bound: a core copies 96 KiB (A 16 x 1024, B 1024 x 32) and 4 value rows at its 87 B/cycle
  // (2,784 / 32 cores): 1,130 cycles back to back, + 300 read latency, + the last block (2 x 16
  // mmads, its move, epilogue and copy out ~50) and its 150 write latency: ~1,630.
  MESSAGE("conv1x1_bn_relu " << shape << " on davinci-910: " << cycles << " cycles (ring of 2, the last chunk per tile: 1,988)");
  CHECK(cycles < 1950);  // 1,933
  CHECK(cycles > 1630);
  auto d = compile_case(kBnRelu, "conv1x1_bn_relu", shape, "", true, kTarget310);
  MESSAGE("on davinci-310: " << verified_cycles(*d, /*exact=*/true) << " cycles");
}

TEST_CASE("GEMM L1 ring: the residual form and odd sizes are exact with the deeper ring") {
  auto c = compile_case(kBnAddRelu, "conv1x1_bn_add_relu", "N=1,P=7,Q=7,C=256,K=1024");
  MESSAGE("conv1x1_bn_add_relu on davinci-910: " << verified_cycles(*c, /*exact=*/true) << " cycles (1,780 before)");
  check_verifies(kBnAddRelu, "conv1x1_bn_add_relu", "N=2,P=5,Q=3,C=1000,K=200");
  check_verifies(kBnAddRelu, "conv1x1_bn_add_relu", "N=2,P=5,Q=3,C=1000,K=200", "", kTarget310);
  check_verifies(kBnRelu, "conv1x1_bn_relu", "N=1,P=4,Q=4,C=2048,K=512");
}

TEST_CASE("GEMM L1 ring: no deeper ring where one period covers a load or K has one chunk") {
  auto c = compile_case(kBnRelu, "conv1x1_bn_relu", "N=1,P=7,Q=7,C=256,K=256");
  CAPTURE(kernel_notes(*c));
  CHECK_FALSE(notes_contain(c->kernel, "chunks (was 2)"));
  // the plan alone: one 128 x 128 x 64 chunk copies 32 KiB, 377 cycles at 87 B/cycle, while the
  // cube takes 8 x 8 x 4 = 256: a load must land (377 + 300) within S - 1 periods of 377 -> 3
  // slots; with a cube 8 times slower (2,048 per chunk) one period covers it: 2 slots
  const isa::NpuMachine m = isa::npu_machine(c->compilation->hierarchy);
  tile::GemmRequest r;
  r.M = r.N = 128, r.K = 1024, r.box_m = r.box_n = 128, r.box_k = 64, r.box_m0 = r.box_n0 = 128, r.box_k0 = 64;
  const tile::GemmPlanResult fast = tile::plan_gemm(r, m);
  REQUIRE(fast.plan);
  CHECK(fast.plan->l1_slots == 3);
  isa::NpuMachine slow = m;
  slow.cube_f16.cycles *= 8;
  const tile::GemmPlanResult planned = tile::plan_gemm(r, slow);
  REQUIRE(planned.plan);
  CHECK(planned.plan->l1_slots == 2);
}


TEST_CASE("GEMM L1 ring deeper than the tail's chunks + 1: the chunk loop loads no chunk past K") {
  // 128 x 128 x 1024 in stage tiles of 64 x 64 x 32 on 4 cores: 32 chunks, the last 2 block by
  // block, a ring of 6 (5 loads ahead). The loop over the chunks between runs while its loads stay
  // below K's chunks: one that ran up to the tail would load chunks 32-34, reading past B into C,
  // which the other cores write (the simulator's race detector: a dma_in_nz of GM[r + 475136] 16 x
  // 64 against each core's dma_out), and the chunks left run as straight-line code.
  auto c = compile_case("matmul.tsl", "matmul", "M=128,N=128,K=1024", "m=64/32,n=64/32,k=32/16");
  CAPTURE(kernel_notes(*c));
  REQUIRE(notes_contain(c->kernel, "L1 ring of 6 chunks (was 3)"));
  REQUIRE(notes_contain(c->kernel, "last 2 K chunk(s) block by block"));
  const npu::Program& p = c->kernel.program;
  int64_t loops = 0, trips = 0;
  for (const auto& in : p.code)
    if (in.opcode == npu::Opcode::Loop) ++loops, trips = in.operands[2].imm;
  REQUIRE(loops == 1);
  // 16 chunks peeled, the loop's chunks c (loads c + 5) at most 32 - 5 - 16 = 11: one trip of 6
  CHECK(trips == 1);
  verified_cycles(*c, /*exact=*/true);  // race-free naive and pruned, exact
}
