// Safety: deadlocks are reported (never a hang), bad addresses and event ids are user errors that
// name the instruction, bad bindings are user errors, and correct syncs produce no race.
#include <doctest/doctest.h>

#include <chrono>

#include "isa/base/error.h"
#include "npu_sim/report.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

std::string error_of(const std::string& text, const std::map<std::string, NpyArray>& inputs = {}, bool timing_only = true) {
  try {
    SimOptions o;
    o.timing_only = timing_only;
    simulate(npu::assemble_program(text, "bad.npu"), davinci(), inputs, o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a wait_flag with no set_flag is a deadlock report with the pipe states, in bounded time") {
  const auto start = std::chrono::steady_clock::now();
  const npu::Program p = npu::assemble_program(
      "dma_in L1[0], GM[0], 1, 32, 0, 0\nwait_flag MTE2, MTE1, 0\nload2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0\n"
      "pipe_barrier ALL\n.tensor G f16 [16] at GM+0 scratch\n",
      "deadlock.npu");
  const SimResult r = simulate(p, davinci(), {});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 2.0);
  REQUIRE(r.record.deadlock);
  const std::string& d = *r.record.deadlock;
  CHECK(d.find("deadlock") != std::string::npos);
  CHECK(d.find("pipe MTE1: blocked in deadlock.npu:2:1: 'wait_flag MTE2, MTE1, 0'") != std::string::npos);
  CHECK(d.find("flag MTE2->MTE1 id 0 is never set") != std::string::npos);
  CHECK(d.find("1 queued instruction(s)") != std::string::npos);  // the load2d behind it
  CHECK(d.find("pipe S: blocked in deadlock.npu:4:1: 'pipe_barrier ALL'") != std::string::npos);
  CHECK(report_json(r.record)["deadlock"].is_string());
}

TEST_CASE("a full queue behind a blocked wait is part of the deadlock report") {
  std::string text = "wait_flag V, MTE1, 0\n";
  for (int i = 0; i < 40; ++i) text += "load2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0\n";
  text += "pipe_barrier ALL\n";
  const SimResult r = simulate(npu::assemble_program(text, "full.npu"), davinci(), {});
  REQUIRE(r.record.deadlock);
  CHECK(r.record.deadlock->find("queue of MTE1 full") != std::string::npos);
}

TEST_CASE("simulations run one after another in one process (and after a deadlock)") {
  for (int i = 0; i < 3; ++i) {
    const SimResult r = simulate(npu::assemble_program("wait_flag M, V, 1\npipe_barrier ALL\n", "d.npu"), davinci(), {});
    CHECK(r.record.deadlock);
    const SimResult ok = simulate(npu::assemble_program("set_flag M, V, 1\nwait_flag M, V, 1\npipe_barrier ALL\n", "ok.npu"),
                                  davinci(), {});
    CHECK_FALSE(ok.record.deadlock);
    CHECK(ok.record.total_cycles > 0);
  }
}

TEST_CASE("an address past a buffer's capacity names the instruction, the buffer and the capacity") {
  const std::string e = error_of(".tensor G f16 [4096] at GM+0 in\nmov r1, 1048064\ndma_in L1[r1], GM[0], 1, 8192, 0, 0\npipe_barrier ALL\n");
  CHECK(e.find("bad.npu:3:1: 'dma_in L1[r1], GM[0], 1, 8192, 0, 0' on core 0") != std::string::npos);
  CHECK(e.find("beyond L1 capacity_bytes 1048576") != std::string::npos);
}

TEST_CASE("GM accesses must stay inside the declared tensors") {
  const std::string e = error_of(".tensor G f16 [16] at GM+0 in\ndma_in UB[0], GM[0], 1, 64, 0, 0\npipe_barrier ALL\n");
  CHECK(e.find("beyond the GM the program's tensors declare (32 bytes)") != std::string::npos);
}

TEST_CASE("misaligned L0A addresses are rejected with the level's alignment") {
  const std::string e = error_of("load2d f16, L0A[256], L1[0], 1, 1, 0, 1, 0\npipe_barrier ALL\n");
  CHECK(e.find("not aligned to 512 bytes (L0A alignment_bytes)") != std::string::npos);
}

TEST_CASE("event ids at or beyond event_ids_per_pipe_pair are rejected") {
  const std::string e = error_of("set_flag MTE2, MTE1, 4\nwait_flag MTE2, MTE1, 4\npipe_barrier ALL\n");
  CHECK(e.find("'set_flag MTE2, MTE1, 4'") != std::string::npos);
  CHECK(e.find("event id 4 is out of range: the target has 4 event ids per pipe pair (0..3)") != std::string::npos);
}

TEST_CASE("repeat counts beyond max_repeat are rejected") {
  const std::string e = error_of("vrelu f16, UB[0], UB[0], 256, 1, 1, 8, 8\npipe_barrier ALL\n");
  CHECK(e.find("repeat 256 is outside 1..255") != std::string::npos);
}

TEST_CASE("input bindings: unknown name, wrong shape, wrong dtype, missing input") {
  const std::string text = ".tensor A f16 [4, 4] at GM+0 in\npipe_barrier ALL\n";
  CHECK(error_of(text, {{"Q", random_f16({4, 4}, 1)}}).find("declares no tensor 'Q' (declared: A)") != std::string::npos);
  CHECK(error_of(text, {{"A", random_f16({4, 5}, 1)}}).find("the .npy holds f16 [4, 5], the program declares f16 [4, 4]") !=
        std::string::npos);
  NpyArray f32;
  f32.dtype = DType::F32;
  f32.shape = {4, 4};
  f32.data.resize(64);
  CHECK(error_of(text, {{"A", f32}}).find("holds f32 [4, 4]") != std::string::npos);
  CHECK(error_of(text, {}, false).find("input tensor 'A' is not bound (give --input A=FILE.npy)") != std::string::npos);
}

TEST_CASE("correct syncs between pipes produce no race, dropping the wait produces one") {
  const std::string synced =
      ".tensor G f16 [16, 16] at GM+0 in\ndma_in L1[0], GM[0], 1, 512, 0, 0\nset_flag MTE2, MTE1, 0\n"
      "wait_flag MTE2, MTE1, 0\nload2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0\npipe_barrier ALL\n";
  SimOptions o;
  o.timing_only = true;
  CHECK(simulate(npu::assemble_program(synced, "s.npu"), davinci(), {}, o).record.races.empty());
  const std::string racy =
      ".tensor G f16 [16, 16] at GM+0 in\ndma_in L1[0], GM[0], 1, 512, 0, 0\nset_flag MTE2, MTE1, 0\n"
      "load2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0\nwait_flag MTE2, MTE1, 0\npipe_barrier ALL\n";
  const SimResult r = simulate(npu::assemble_program(racy, "r.npu"), davinci(), {}, o);
  REQUIRE(r.record.races.size() == 1);
  CHECK(r.record.races[0].first.pc == 0);
  CHECK(r.record.races[0].second.pc == 2);
}

TEST_CASE("pipe_barrier ALL orders everything before it: no race across it") {
  const std::string text =
      ".tensor G f16 [16, 16] at GM+0 in\ndma_in L1[0], GM[0], 1, 512, 0, 0\npipe_barrier ALL\n"
      "load2d f16, L0A[0], L1[0], 1, 1, 0, 1, 0\npipe_barrier ALL\n";
  SimOptions o;
  o.timing_only = true;
  CHECK(simulate(npu::assemble_program(text, "b.npu"), davinci(), {}, o).record.races.empty());
}

TEST_CASE("a run past max_cycles stops with an error instead of running on") {
  SimOptions o;
  o.timing_only = true;
  o.max_cycles = 1000;
  try {
    simulate(npu::assemble_program("loop r1, 0, 1000000000000, 1\nendloop\npipe_barrier ALL\n", "long.npu"), davinci(), {}, o);
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("passed --max-cycles 1000") != std::string::npos);
  }
}

TEST_CASE("GM bandwidth is shared across cores: a second core's copy waits for the first") {
  isa::Hierarchy narrow = davinci();
  for (isa::Level& l : narrow.levels)
    if (l.role == isa::Role::Global) l.shared_bandwidth_bytes_per_cycle = 87;  // one core's worth
  const npu::Program p = npu::assemble_program(
      ".cores 2\n.tensor G f16 [8192] at GM+0 in\nmul r1, core_id, 8192\ndma_in L1[0], GM[r1], 1, 8192, 0, 0\n"
      "pipe_barrier ALL\n",
      "shared.npu");
  SimOptions o;
  o.timing_only = true;
  const SimResult r = simulate(p, narrow, {}, o);
  std::vector<uint64_t> occupancy;
  for (const InstructionEvent& e : r.record.instructions)
    if (e.pipe == npu::Pipe::MTE2) occupancy.push_back(e.end - e.start);
  REQUIRE(occupancy.size() == 2);
  std::sort(occupancy.begin(), occupancy.end());
  CHECK(occupancy[0] == 95);       // ceil(8192 / 87)
  CHECK(occupancy[1] == 95 + 95);  // waits for the shared GM, then its own 95
  // With the real shared bandwidth (32 x 87) both cores copy at full speed.
  const SimResult wide = simulate(p, davinci(), {}, o);
  for (const InstructionEvent& e : wide.record.instructions)
    if (e.pipe == npu::Pipe::MTE2) CHECK(e.end - e.start == 95);
}

TEST_CASE("absurd counts fail fast with the buffer named, never loop or overflow") {
  CHECK(error_of(".tensor G f16 [16] at GM+0 in\ndma_in L1[0], GM[0], 1000000000000, 32, 0, 0\npipe_barrier ALL\n")
            .find("operand 2 reaches GM[0, 32000000000000) beyond the GM the program's tensors declare (32 bytes)") != std::string::npos);
  CHECK(error_of("mmad f16, L0C[0], L0A[0], L0B[0], 1600000000000000000, 16, 16, 1\npipe_barrier ALL\n")
            .find("beyond L0A capacity_bytes 65536") != std::string::npos);
  CHECK(error_of("load2d f16, L0A[0], L1[0], 4000000000, 4000000000, 1, 1, 0\npipe_barrier ALL\n")
            .find("beyond L1 capacity_bytes 1048576") != std::string::npos);
}

TEST_CASE("the scalar pipe can take part in flags: set_flag S, V and wait_flag V, S run on S") {
  const std::string text =
      ".tensor G f16 [128] at GM+0 in\nset_flag S, MTE2, 0\nwait_flag S, MTE2, 0\ndma_in UB[0], GM[0], 1, 256, 0, 0\n"
      "set_flag MTE2, S, 1\nwait_flag MTE2, S, 1\nmov r1, 7\npipe_barrier ALL\n";
  SimOptions o;
  o.timing_only = true;
  const SimResult r = simulate(npu::assemble_program(text, "s.npu"), davinci(), {}, o);
  CHECK_FALSE(r.record.deadlock);
  // S waited for the copy's completion (1 + 1 + ceil(256 / 87) + 300) before `mov`.
  uint64_t mov_start = 0;
  for (const InstructionEvent& e : r.record.instructions)
    if (e.pc == 5) mov_start = e.start;
  CHECK(mov_start >= 300);
}

// 32 cores that never synchronise with each other, each copying its row of A to its row of B many
// times, and each reading the next core's row of B once: the detector checks every GM access against
// the pipes whose accesses could overlap it (npu_sim/race_detector.h), so the run stays well within
// seconds (checking each against every earlier access took minutes), and still reports the race.
TEST_CASE("many cores' unsynchronised GM accesses are checked in linear time, the race among them found") {
  const std::string text =
      ".cores 32\n.tensor A f32 [32, 64] at GM+0 in\n.tensor B f32 [33, 64] at GM+8192 out\n"
      "mul r2, core_id, 256\n"
      "loop r1, 0, 6000, 1\n"
      "  dma_in UB[0], GM[r2], 1, 256, 0, 0\nset_flag MTE2, MTE3, 0\nwait_flag MTE2, MTE3, 0\n"
      "  dma_out GM[r2+8192], UB[0], 1, 256, 0, 0\nset_flag MTE3, MTE2, 0\nwait_flag MTE3, MTE2, 0\n"
      "endloop\n"
      "dma_in UB[256], GM[r2+8448], 1, 256, 0, 0\n"
      "pipe_barrier ALL\n";
  SimOptions o;
  o.timing_only = true;
  const auto start = std::chrono::steady_clock::now();
  const SimResult r = simulate(npu::assemble_program(text, "cores.npu"), davinci(), {}, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 20.0);
  REQUIRE(r.record.races.size() == 1);  // core c's read of row c + 1 against core c + 1's writes of it
  CHECK(r.record.races[0].first.text.find("dma_out") != std::string::npos);
  CHECK(r.record.races[0].second.text.find("dma_in UB[256]") != std::string::npos);
}
