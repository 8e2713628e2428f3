// sync_all, the cross-core barrier (isa/README.md "Sync"): every core's S drains its own pipes, then
// waits until every core of the launch has arrived; all resume sync.cross_core_barrier_cycles (450 on
// davinci-910.yaml) after the last arrival. It orders GM written by one core before it against GM read
// by another after it (the race detector joins every core's clocks), and a sync_all some core never
// reaches is refused with the cores missing, never a hang.
#include <doctest/doctest.h>

#include <cstring>

#include "isa/base/error.h"
#include "npu_sim/report.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

SimResult run_text(const std::string& text, bool timing_only = true) {
  SimOptions o;
  o.timing_only = timing_only;
  return simulate(npu::assemble_program(text, "barrier.npu"), davinci(), {}, o);
}

uint64_t cores_stall(const SimRecord& r, int core) {
  uint64_t total = 0;
  for (const StallEvent& s : r.stalls)
    if (s.core == core && s.kind == StallKind::Cores) total += s.end - s.start;
  return total;
}

// Each core fills 64 f32 lanes with core_id + 1, writes them to its slot of X, and (after
// `between`) reads the other core's slot back into Y's half of its own.
std::string exchange_program(const std::string& between) {
  return ".cores 2\n"
         ".tensor X f32 [128] at GM+0 scratch\n"
         ".tensor Y f32 [128] at GM+512 out\n"
         "add r1, core_id, 1\n"
         "mul r2, core_id, 256\n"
         "vdup f32, UB[0], r1, 1, 1, 8\n"
         "set_flag V, MTE3, 0\n"
         "wait_flag V, MTE3, 0\n"
         "dma_out GM[r2], UB[0], 1, 256, 0, 0\n" +
         between +
         "sub r3, 1, core_id\n"
         "mul r3, r3, 256\n"
         "dma_in UB[256], GM[r3], 1, 256, 0, 0\n"
         "set_flag MTE2, MTE3, 0\n"
         "wait_flag MTE2, MTE3, 0\n"
         "dma_out GM[r2+512], UB[256], 1, 256, 0, 0\n"
         "pipe_barrier ALL\n";
}

}  // namespace

TEST_CASE("sync_all with no work: every core resumes cross_core_barrier_cycles after the last arrival") {
  CHECK(davinci().sync->cross_core_barrier_cycles == 450);
  const SimResult r = run_text(".cores 2\nsync_all\npipe_barrier ALL\n");
  // both arrive at 0; release at 0 + 450; sync_all's own scalar cycle (1); pipe_barrier ALL (1)
  CHECK(r.record.total_cycles == 450 + 1 + 1);
  CHECK_FALSE(r.record.deadlock);
  CHECK(cores_stall(r.record, 0) == 450);
  CHECK(cores_stall(r.record, 1) == 450);
}

TEST_CASE("sync_all waits for the latest core: arrivals at cycles 2 and 12 release both at 12 + 450") {
  // core 0: mul, loop of no trip (2 scalar cycles); core 1: mul, loop, 10 end_loops (12 cycles)
  const SimResult r = run_text(".cores 2\nmul r1, core_id, 10\nloop r2, 0, r1, 1\nendloop\nsync_all\npipe_barrier ALL\n");
  CHECK(r.record.total_cycles == 12 + 450 + 1 + 1);
  CHECK(cores_stall(r.record, 0) == 12 + 450 - 2);
  CHECK(cores_stall(r.record, 1) == 450);
  const auto stats = pipe_stats(r.record);
  CHECK(stats[0][0].stall_cores_cycles == 460);
}

TEST_CASE("sync_all drains the core's own pipes first: a dma_in in flight delays the arrival") {
  // dma_in dispatched at 2 (after mul and its own dispatch), occupies MTE2 ceil(8192 / 87) = 95 cycles
  // on each core (the shared GM's 2784 B/cycle is no limit for two), completes 300 later: 397
  const SimResult r = run_text(".cores 2\n.tensor G f16 [8192] at GM+0 in\nmul r1, core_id, 8192\n"
                               "dma_in UB[0], GM[r1], 1, 8192, 0, 0\nsync_all\npipe_barrier ALL\n");
  CHECK(r.record.total_cycles == 2 + 95 + 300 + 450 + 1 + 1);
  CHECK(cores_stall(r.record, 0) == 450);
  uint64_t barrier = 0;  // the drain is a barrier stall, the wait for the other core a cores stall
  for (const StallEvent& s : r.record.stalls) barrier += s.kind == StallKind::Barrier && s.core == 0 && s.pc == 2;
  CHECK(barrier == 1);
}

TEST_CASE("two cores exchange data through GM across sync_all, with no race") {
  const SimResult r = run_text(exchange_program("sync_all\n"), false);
  CHECK(r.record.races.empty());
  CHECK_FALSE(r.record.deadlock);
  const NpyArray y = r.tensor(npu::assemble_program(exchange_program("sync_all\n"), "x"), "Y");
  for (int i = 0; i < 64; ++i) {
    CHECK(f32_at(y, i) == 2.0f);       // core 0 read core 1's slot
    CHECK(f32_at(y, 64 + i) == 1.0f);  // core 1 read core 0's slot
  }
}

TEST_CASE("without sync_all the same exchange is a cross-core GM race") {
  const SimResult r = run_text(exchange_program(""), false);
  REQUIRE_FALSE(r.record.races.empty());
  bool cross_core = false;
  for (const Race& race : r.record.races)
    cross_core |= race.buffer == npu::Buffer::GM && race.first.core != race.second.core;
  CHECK(cross_core);
}

TEST_CASE("pipe_barrier ALL is no cross-core barrier: the exchange still races") {
  const SimResult r = run_text(exchange_program("pipe_barrier ALL\n"), false);
  CHECK_FALSE(r.record.races.empty());
}

TEST_CASE("a sync_all under a core-dependent trip count is refused, naming the barrier and the missing core") {
  // core 0 runs the loop once (slt 0 < 1), core 1 never: core 1 ends while core 0 waits
  const std::string early_end = ".cores 2\nslt r1, core_id, 1\nloop r2, 0, r1, 1\nsync_all\nendloop\npipe_barrier ALL\n";
  // the waiting core arrives after the other ended (a delay loop first): noticed on arrival
  const std::string late_arrival =
      ".cores 2\nslt r1, core_id, 1\nmul r3, r1, 50\nloop r4, 0, r3, 1\nendloop\nloop r2, 0, r1, 1\nsync_all\nendloop\n"
      "pipe_barrier ALL\n";
  for (const std::string& text : {early_end, late_arrival}) {
    CAPTURE(text);
    try {
      run_text(text);
      FAIL("the run should be refused");
    } catch (const UserError& e) {
      const std::string m = e.what();
      CHECK(m.find("cross-core barrier never completes") != std::string::npos);
      CHECK(m.find("core(s) 0 wait in sync_all") != std::string::npos);
      CHECK(m.find("core(s) 1 ended without reaching it") != std::string::npos);
      CHECK(m.find("'sync_all'") != std::string::npos);
    }
  }
}

TEST_CASE("every core reaching the same sync_all twice opens it twice") {
  const SimResult r = run_text(".cores 3\nloop r1, 0, 2, 1\nsync_all\nendloop\npipe_barrier ALL\n");
  // loop (1); per iteration: release 450 after arrival, sync_all (1), end_loop (1); pipe_barrier (1)
  CHECK(r.record.total_cycles == 1 + 2 * (450 + 1 + 1) + 1);
  CHECK_FALSE(r.record.deadlock);
}

TEST_CASE("sync_all assembles, prints and encodes back to itself") {
  const npu::Program p = npu::assemble_program(".cores 4\nsync_all\npipe_barrier ALL\n", "a.npu");
  REQUIRE(p.code.size() == 2);
  CHECK(p.code[0].opcode == npu::Opcode::SyncAll);
  CHECK(npu::executing_pipe(p.code[0]) == npu::Pipe::S);
  CHECK(npu::format_instruction(p.code[0]) == "sync_all");
  CHECK(npu::assemble_program(npu::print_program(p), "b") == p);
  CHECK(npu::decode_program(npu::encode_program(p), "c") == p);
  CHECK_THROWS_AS(npu::assemble_program("sync_all 1\npipe_barrier ALL\n", "d.npu"), UserError);
}
