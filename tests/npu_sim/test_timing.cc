// Single-instruction cycle counts equal the arithmetic on davinci-910.yaml's numbers
// (isa/README.md "Timing"): occupancy = what holds the pipe, latency = until results are visible.
#include <doctest/doctest.h>

#include "npu_sim/report.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

// Runs `body` (one instruction plus what it needs) timing-only and returns the event of the
// first instruction executed on `pipe`.
InstructionEvent first_on(const std::string& body, npu::Pipe pipe, SimRecord* out = nullptr) {
  const std::string text = ".tensor G f16 [64, 64] at GM+0 inout\n" + body + "\npipe_barrier ALL\n";
  const npu::Program p = npu::assemble_program(text, "timing.npu");
  SimOptions o;
  o.timing_only = true;
  SimResult r = simulate(p, davinci(), {}, o);
  for (const InstructionEvent& e : r.record.instructions)
    if (e.pipe == pipe) {
      if (out) *out = r.record;
      return e;
    }
  FAIL("no instruction ran on the pipe");
  return {};
}

}  // namespace

TEST_CASE("dma_in GM->L1: ceil(bytes / 87 B/cycle) occupancy, 300 cycles latency, dispatch after 1 scalar cycle") {
  SimRecord r;
  const InstructionEvent e = first_on("dma_in L1[0], GM[0], 1, 8192, 0, 0", npu::Pipe::MTE2, &r);
  CHECK(e.start == 1);              // scalar_cycles: 1 to dispatch
  CHECK(e.end - e.start == 95);     // ceil(8192 / 87) = ceil(94.16)
  CHECK(e.completion - e.end == 300);
  CHECK(e.bytes == 8192);
  // pipe_barrier ALL waits for the completion (1 + 95 + 300), then takes barrier_cycles (1).
  CHECK(r.total_cycles == 1 + 95 + 300 + 1);
  CHECK(bytes_per_path(r).at("GM->L1") == 8192);
}

TEST_CASE("dma_in_nz GM->L0A: 64x16 f16 = 2048 bytes at 87 B/cycle") {
  const InstructionEvent e = first_on("dma_in_nz f16, L0A[0], GM[0], 64, 16, 64", npu::Pipe::MTE2);
  CHECK(e.end - e.start == 24);  // ceil(2048 / 87) = ceil(23.54)
  CHECK(e.completion - e.end == 300);
}

TEST_CASE("load2d L1->L0B: 4 fractals x 512 bytes at 128 B/cycle, 27 cycles latency") {
  const InstructionEvent e = first_on("load2d f16, L0B[0], L1[0], 1, 4, 0, 1, 1", npu::Pipe::MTE1);
  CHECK(e.end - e.start == 16);  // 2048 / 128
  CHECK(e.completion - e.end == 27);
}

TEST_CASE("load2d L1->L0A: 4 fractals at 256 B/cycle") {
  const InstructionEvent e = first_on("load2d f16, L0A[0], L1[0], 2, 2, 2, 1, 0", npu::Pipe::MTE1);
  CHECK(e.end - e.start == 8);  // 2048 / 256
}

TEST_CASE("mmad 64x64x64 f16: 4 x 4 x 4 fractals at 1 cycle each, cube start-up 2") {
  const InstructionEvent e = first_on("mmad f16, L0C[0], L0A[0], L0B[0], 64, 64, 64, 1", npu::Pipe::M);
  CHECK(e.end - e.start == 64);
  CHECK(e.completion - e.end == 2);
}

TEST_CASE("mmad 32x64x32 i8: fractal 16x32x16, (2 x 2 x 2) fractals") {
  const InstructionEvent e = first_on("mmad i8, L0C[0], L0A[0], L0B[0], 32, 64, 32, 1", npu::Pipe::M);
  CHECK(e.end - e.start == 8);
}

TEST_CASE("vadd: one cycle per repeat plus 15 cycles vector start-up") {
  const InstructionEvent e = first_on("vadd f16, UB[0], UB[8192], UB[16384], 32, 1, 1, 1, 8, 8, 8", npu::Pipe::V);
  CHECK(e.end - e.start == 32);
  CHECK(e.completion - e.end == 15);
}

TEST_CASE("mov_l0c L0C->UB: bytes written (f16: 16 fractals x 512) at 128 B/cycle, 15 latency") {
  const InstructionEvent e = first_on("mov_l0c f16, UB[0], L0C[0], 16, 0", npu::Pipe::V);
  CHECK(e.end - e.start == 64);  // 8192 / 128
  CHECK(e.completion - e.end == 15);
}

TEST_CASE("dma_out UB->GM: 64 bursts of 64 bytes = 4096 bytes at 87 B/cycle, 150 latency") {
  const InstructionEvent e = first_on("dma_out GM[0], UB[0], 64, 64, 0, 64", npu::Pipe::MTE3);
  CHECK(e.end - e.start == 48);  // ceil(4096 / 87) = ceil(47.08)
  CHECK(e.completion - e.end == 150);
}

TEST_CASE("set_flag waits for the source pipe's completions before the flag is visible") {
  SimRecord r;
  first_on("dma_in L1[0], GM[0], 1, 8192, 0, 0\nset_flag MTE2, MTE1, 0\nwait_flag MTE2, MTE1, 0", npu::Pipe::MTE1, &r);
  REQUIRE(r.flags.size() == 1);
  CHECK(r.flags[0].available_time == 1 + 95 + 300);  // the dma_in's completion
  CHECK(r.flags[0].wait_time == 1 + 95 + 300);
  const auto stats = pipe_stats(r);
  // MTE1 got its wait_flag at cycle 3 (third dispatch) and stalled until 396.
  CHECK(stats[0][static_cast<int>(npu::Pipe::MTE1)].stall_flag_cycles == 396 - 3);
}

TEST_CASE("the scalar pipe charges scalar_cycles per instruction, loops included") {
  SimRecord r;
  first_on("loop r1, 0, 10, 1\n  add r2, r2, r1\nendloop\ndma_in L1[0], GM[0], 1, 32, 0, 0", npu::Pipe::MTE2, &r);
  // loop (1) + 10 x (add + endloop) + dispatch (1) = 22 cycles before MTE2 starts.
  CHECK(r.instructions.back().pipe == npu::Pipe::S);
  uint64_t mte2_start = 0;
  for (const auto& e : r.instructions)
    if (e.pipe == npu::Pipe::MTE2) mte2_start = e.start;
  CHECK(mte2_start == 22);
}
