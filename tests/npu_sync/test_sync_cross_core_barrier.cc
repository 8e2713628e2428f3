// The sync pass across sync_all (compiler/npu_sync/sync_insertion.h): a sync_all outside every loop
// drains the core and orders everything before it against everything after it on every core, so
// no set_flag / wait_flag pair crosses it (naive or pruned), the pairs on either side stay, and the
// result runs race-free with the data exchanged between cores; a sync_all inside a loop orders
// nothing for the pass (the pairs across it stay, never too few).
#include <doctest/doctest.h>

#include <cstring>

#include "compiler/npu_sync/sync_insertion.h"
#include "npu_sim/simulator.h"

using namespace tessel;

namespace {

const isa::Hierarchy& davinci() {
  static const isa::Hierarchy h = isa::load_hierarchy(std::string(TESSEL_SOURCE_DIR) + "/isa/targets/davinci-910.yaml");
  return h;
}

// Core c writes c + 1 into its slot of X (V then MTE3), then reads the other core's slot into its
// half of Y (MTE2 then MTE3). Without syncs: the pass places them.
std::string exchange(const std::string& between) {
  return ".cores 2\n.tensor X f32 [128] at GM+0 scratch\n.tensor Y f32 [128] at GM+512 out\n"
         "add r1, core_id, 1\nmul r2, core_id, 256\nvdup f32, UB[0], r1, 1, 1, 8\n"
         "dma_out GM[r2], UB[0], 1, 256, 0, 0\n" +
         between + "sub r3, 1, core_id\nmul r3, r3, 256\ndma_in UB[256], GM[r3], 1, 256, 0, 0\n"
                   "dma_out GM[r2+512], UB[256], 1, 256, 0, 0\npipe_barrier ALL\n";
}

int index_of(const npu::Program& p, npu::Opcode op) {
  for (size_t i = 0; i < p.code.size(); ++i)
    if (p.code[i].opcode == op) return static_cast<int>(i);
  return -1;
}

}  // namespace

TEST_CASE("no sync pair crosses a top-level sync_all, and the exchange runs race-free") {
  for (auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
    CAPTURE(npu_sync::sync_mode_name(mode));
    const npu::Program p = npu::assemble_program(exchange("sync_all\n"), "exchange.npu");
    const npu_sync::SyncResult s = npu_sync::insert_syncs(p, davinci(), {mode, -1});
    // V -> MTE3 before the barrier (UB[0]), MTE2 -> MTE3 after it (UB[256]); not MTE3 -> MTE2 over X
    CHECK(s.dependences == 2);
    CHECK(s.pairs == 2);
    const int barrier = index_of(s.program, npu::Opcode::SyncAll);
    REQUIRE(barrier > 0);
    int before = 0, after = 0;
    for (size_t i = 0; i < s.program.code.size(); ++i) {
      const npu::Opcode op = s.program.code[i].opcode;
      if (op != npu::Opcode::SetFlag && op != npu::Opcode::WaitFlag) continue;
      (static_cast<int>(i) < barrier ? before : after) += 1;
    }
    CHECK(before == 2);  // one set and its wait on each side
    CHECK(after == 2);
    const npu_sim::SimResult r = npu_sim::simulate(s.program, davinci(), {});
    CHECK(r.record.races.empty());
    CHECK_FALSE(r.record.deadlock);
    const NpyArray y = r.tensor(s.program, "Y");
    for (int i = 0; i < 128; ++i) {
      float v;
      std::memcpy(&v, y.data.data() + 4 * i, 4);
      CHECK(v == (i < 64 ? 2.0f : 1.0f));
    }
  }
}

TEST_CASE("without the sync_all the pass orders the core's own GM write and read (the cross-core race stays)") {
  const npu::Program p = npu::assemble_program(exchange(""), "exchange.npu");
  const npu_sync::SyncResult s = npu_sync::insert_syncs(p, davinci(), {npu_sync::SyncMode::Naive, -1});
  CHECK(s.dependences == 3);  // the MTE3 write of X and the MTE2 read of X may overlap on one core
  const npu_sim::SimResult r = npu_sim::simulate(s.program, davinci(), {});
  CHECK_FALSE(r.record.races.empty());  // core 1's write against core 0's read: no flag orders cores
}

TEST_CASE("a sync_all inside a loop orders nothing for the pass: the pairs across it stay") {
  const std::string text = ".cores 2\n.tensor X f32 [128] at GM+0 scratch\n"
                           "loop r5, 0, 2, 1\nvdup f32, UB[0], 1.0, 1, 1, 8\nsync_all\n"
                           "dma_out GM[0], UB[0], 1, 256, 0, 0\nendloop\npipe_barrier ALL\n";
  const npu::Program p = npu::assemble_program(text, "loop.npu");
  const npu_sync::SyncResult s = npu_sync::insert_syncs(p, davinci(), {npu_sync::SyncMode::Naive, -1});
  CHECK(s.dependences == 1);
  CHECK(s.pairs == 2);  // forward V -> MTE3 and carried MTE3 -> V, both across the sync_all
  const npu_sim::SimResult r = npu_sim::simulate(s.program, davinci(), {});
  CHECK_FALSE(r.record.deadlock);
}
