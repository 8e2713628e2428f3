// The sync pass (compiler/npu_sync/sync_insertion.h) on the simulator's example programs and on a
// generated tiled, double-buffered, multi-core GEMM: every example is stripped of its syncs, the
// pass inserts them again (naive and pruned), and the simulator's race detector and results judge.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstring>
#include <random>

#include "compiler/npu_sync/footprint.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "isa/base/error.h"
#include "isa/base/f16.h"
#include "npu_sim/gemm_program.h"
#include "npu_sim/simulator.h"

using namespace tessel;

namespace {

const isa::Hierarchy& davinci() {
  static const isa::Hierarchy h = isa::load_hierarchy(std::string(TESSEL_SOURCE_DIR) + "/isa/targets/davinci-910.yaml");
  return h;
}

npu::Program example(const std::string& name) {
  return npu::load_program(std::string(TESSEL_SOURCE_DIR) + "/npu_sim/examples/" + name);
}

std::map<std::string, NpyArray> random_inputs(const npu::Program& p) {
  std::map<std::string, NpyArray> in;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (const auto& t : p.tensors) {
    if (!t.is_input()) continue;
    NpyArray a;
    a.dtype = t.dtype;
    a.shape = t.shape;
    a.data.resize(t.byte_size());
    for (int64_t i = 0; i < a.element_count(); ++i) {
      if (t.dtype == DType::F16) {
        const uint16_t h = f32_to_f16_bits(dist(rng));
        std::memcpy(a.data.data() + 2 * i, &h, 2);
      } else if (t.dtype == DType::F32) {
        const float f = dist(rng);
        std::memcpy(a.data.data() + 4 * i, &f, 4);
      } else {
        for (int b = 0; b < dtype_bytes(t.dtype); ++b) a.data[i * dtype_bytes(t.dtype) + b] = uint8_t(rng() % 7);
      }
    }
    in[t.name] = std::move(a);
  }
  return in;
}

struct Outcome {
  npu_sim::SimResult sim;
  npu_sync::SyncResult sync;
};

Outcome run(const npu::Program& p, npu_sync::SyncMode mode, int omit = -1) {
  Outcome o;
  o.sync = npu_sync::insert_syncs(p, davinci(), {mode, omit});
  o.sim = npu_sim::simulate(o.sync.program, davinci(), random_inputs(p));
  return o;
}

bool same_outputs(const npu::Program& p, const npu_sim::SimResult& a, const npu_sim::SimResult& b) {
  for (const auto& t : p.tensors)
    if (t.is_output() && a.tensor(p, t.name).data != b.tensor(p, t.name).data) return false;
  return true;
}

void check_program(const npu::Program& original) {
  const npu_sim::SimResult reference = npu_sim::simulate(original, davinci(), random_inputs(original));
  REQUIRE(reference.record.races.empty());
  const Outcome naive = run(original, npu_sync::SyncMode::Naive);
  const Outcome pruned = run(original, npu_sync::SyncMode::Pruned);
  MESSAGE(original.source_name << ": syncs naive " << naive.sync.sync_instructions << " (" << naive.sync.pairs
                                << " pairs, " << naive.sync.barriers << " barriers) -> pruned "
                                << pruned.sync.sync_instructions << " (" << pruned.sync.pairs << " pairs); cycles "
                                << naive.sim.record.total_cycles << " -> " << pruned.sim.record.total_cycles
                                << " (hand-written " << reference.record.total_cycles << ")");
  for (const Outcome* o : {&naive, &pruned}) {
    CHECK(o->sim.record.races.empty());
    CHECK_FALSE(o->sim.record.deadlock);
    CHECK(same_outputs(original, reference, o->sim));
  }
  CHECK(pruned.sync.sync_instructions <= naive.sync.sync_instructions);
  CHECK(pruned.sim.record.total_cycles <= naive.sim.record.total_cycles);
}

}  // namespace

TEST_CASE("without syncs the example GEMM races (the pass has something to do)") {
  const npu::Program bare = npu_sync::strip_syncs(example("gemm64_double.npu"));
  const auto r = npu_sim::simulate(bare, davinci(), random_inputs(bare));
  CHECK_FALSE(r.record.races.empty());
}

TEST_CASE("naive and pruned syncs make every example race-free with the hand-written results") {
  for (const char* name : {"gemm64.npu", "gemm64_double.npu", "conv_img2col.npu", "add_relu.npu"}) {
    CAPTURE(name);
    check_program(example(name));
  }
}

TEST_CASE("generated double-buffered multi-core GEMM: naive and pruned are race-free, pruned keeps fewer syncs") {
  npu_sim::GemmTiling t;
  t.m = 128, t.n = 128, t.k = 256, t.tm = 64, t.tn = 64, t.tk = 64, t.cores = 2;
  check_program(npu_sim::make_gemm_program(t, isa::npu_machine(davinci())));
}

TEST_CASE("pruned keeps only needed syncs: removing any kept pair lets the race detector fire") {
  for (const char* name : {"gemm64_double.npu", "conv_img2col.npu", "add_relu.npu"}) {
    CAPTURE(name);
    const npu::Program p = example(name);
    const Outcome pruned = run(p, npu_sync::SyncMode::Pruned);
    REQUIRE(pruned.sim.record.races.empty());
    for (int k = 0; k < pruned.sync.pairs; ++k) {
      CAPTURE(k);
      const Outcome mutant = run(p, npu_sync::SyncMode::Pruned, k);
      CHECK((!mutant.sim.record.races.empty() || mutant.sim.record.deadlock));
    }
  }
}

TEST_CASE("event ids stay below the description's ids per pipe pair") {
  const uint32_t limit = davinci().sync->event_ids_per_pipe_pair;
  for (auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
    const auto r = npu_sync::insert_syncs(example("gemm64_double.npu"), davinci(), {mode, -1});
    for (const auto& in : r.program.code)
      if (in.opcode == npu::Opcode::SetFlag || in.opcode == npu::Opcode::WaitFlag) CHECK(in.operands[2].imm < limit);
  }
}

TEST_CASE("no sync where pipes never share bytes (must not fire)") {
  npu::Program p;
  p.tensors.push_back({"X", DType::F16, {16, 16}, 0, npu::TensorRole::In, {}});
  p.add(npu::Opcode::DmaIn, {npu::Operand::addr(npu::Buffer::UB, 0), npu::Operand::addr(npu::Buffer::GM, 0),
                             npu::Operand::imm_(1), npu::Operand::imm_(512), npu::Operand::imm_(0), npu::Operand::imm_(0)});
  p.add(npu::Opcode::Vdup, {npu::Operand::type(DType::F16), npu::Operand::addr(npu::Buffer::UB, 4096),
                            npu::Operand::float_(1.0), npu::Operand::imm_(1), npu::Operand::imm_(1), npu::Operand::imm_(8)});
  p.add(npu::Opcode::PipeBarrier, {npu::Operand::pipe_(npu::Pipe::All)});
  const auto r = npu_sync::insert_syncs(p, davinci(), {npu_sync::SyncMode::Naive, -1});
  CHECK(r.sync_instructions == 0);
  CHECK(r.dependences == 0);
}

TEST_CASE("parse_sync_mode names the accepted values") {
  CHECK(npu_sync::parse_sync_mode("naive") == npu_sync::SyncMode::Naive);
  CHECK_THROWS_WITH_AS(npu_sync::parse_sync_mode("fast"), doctest::Contains("naive, pruned"), UserError);
}

namespace {

// Core 0 runs the loop once, core 1 not at all (its end is `slt core_id, 1`): the trip count is
// unknown to the pass and may be zero. In the loop a dma_in, a vadd and a dma_out chain MTE2 -> V ->
// MTE3, which orders the dma_in before the loop ahead of the dma_out after it when the loop runs —
// and orders nothing when it does not. (Before the fix the pruned pass dropped that pair, and core 1
// raced on UB[0].)
const char* kPossiblyEmptyLoop = R"(.cores 2
.tensor X f16 [2, 128] at GM+0 in
.tensor Y f16 [2, 128] at GM+512 out
.tensor Z f16 [2, 128] at GM+1024 out
mul r3, core_id, 256
add r4, r3, 512
add r5, r3, 1024
slt r1, core_id, 1
dma_in UB[0], GM[r3], 1, 256, 0, 0
loop r2, 0, r1, 1
  dma_in UB[1024], GM[r3], 1, 256, 0, 0
  vadd f16, UB[2048], UB[1024], UB[1024], 1, 1, 1, 1, 8, 8, 8
  dma_out GM[r5], UB[2048], 1, 256, 0, 0
endloop
dma_out GM[r4], UB[0], 1, 256, 0, 0
pipe_barrier ALL
)";

}  // namespace

TEST_CASE("a loop that may run no iterations orders nothing around it (pruned keeps the pair past it)") {
  const npu::Program p = npu::assemble_program(kPossiblyEmptyLoop, "possibly_empty_loop.npu");
  for (auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
    const std::string name = npu_sync::sync_mode_name(mode);
    CAPTURE(name);
    const Outcome o = run(p, mode);
    CHECK(o.sim.record.races.empty());
    CHECK_FALSE(o.sim.record.deadlock);
    // Y is X on both cores (the dma_out after the loop reads what the dma_in before it wrote)
    const auto in = random_inputs(p);
    CHECK(o.sim.tensor(p, "Y").data == in.at("X").data);
  }
}

TEST_CASE("a loop known to run at least once still lets pruning use the syncs inside it") {
  // the same chain with a loop of one iteration on every core: the pair past the loop is implied
  std::string text = kPossiblyEmptyLoop;
  text.replace(text.find("slt r1, core_id, 1"), 18, "add r1, core_id, 1");
  const npu::Program p = npu::assemble_program(text, "nonempty_loop.npu");
  const Outcome naive = run(p, npu_sync::SyncMode::Naive), pruned = run(p, npu_sync::SyncMode::Pruned);
  CHECK(pruned.sim.record.races.empty());
  CHECK(pruned.sync.pairs < naive.sync.pairs);
}

// Pruning traces the program once per set of loops whose count the registers do not fix; a kernel
// with hundreds of such loops (an imported ResNet-50's 3x3 convolution on the vector units: 32,927
// sets) made those traces outgrow 24 GB. Past SyncOptions::max_trace_events the pass keeps every
// merged pair (correct, not pruned) and says why, instead of exhausting memory.
TEST_CASE("pruning over its trace budget keeps the merged pairs, says why, and the program stays race-free") {
  std::string text = kPossiblyEmptyLoop;  // one iteration on core 0, two on core 1
  text.replace(text.find("slt r1, core_id, 1"), 18, "add r1, core_id, 1");
  const npu::Program p = npu::assemble_program(text, "nonempty_loop.npu");
  npu_sync::SyncOptions tight;
  tight.max_trace_events = 3;
  const npu_sync::SyncResult bounded = npu_sync::insert_syncs(p, davinci(), tight);
  const npu_sync::SyncResult pruned = npu_sync::insert_syncs(p, davinci(), {});
  const npu_sync::SyncResult naive = npu_sync::insert_syncs(p, davinci(), {npu_sync::SyncMode::Naive});
  CHECK(pruned.note.empty());
  CHECK(bounded.note.find("implied pairs kept") != std::string::npos);
  CHECK(bounded.note.find("loop-count scenarios (1 loops whose count the registers do not fix) pass 3 events") != std::string::npos);
  CHECK(bounded.pairs > pruned.pairs);
  CHECK(bounded.pairs <= naive.pairs);
  const auto sim = npu_sim::simulate(bounded.program, davinci(), random_inputs(p));
  CHECK(sim.record.races.empty());
  CHECK(sim.tensor(p, "Y").data == random_inputs(p).at("X").data);
}

// Pruning's checks walk the traces once per candidate run (galloping + bisection); their work is
// bounded by SyncOptions::max_check_events. Past it the pairs not yet shown implied stay: the
// removals already checked are kept, so the program is ordered and pruned part way, the same at
// any machine's speed, and the note says how far it got.
TEST_CASE("pruning over its work budget keeps the undecided pairs, says so, and the program stays race-free") {
  npu_sim::GemmTiling t;
  t.m = 128, t.n = 128, t.k = 256, t.tm = 64, t.tn = 64, t.tk = 64, t.cores = 2;
  const npu::Program p = npu_sim::make_gemm_program(t, isa::npu_machine(davinci()));
  const npu_sim::SimResult reference = npu_sim::simulate(p, davinci(), random_inputs(p));
  const npu_sync::SyncResult full = npu_sync::insert_syncs(p, davinci(), {});
  npu_sync::SyncOptions none;  // no trace at all: the merged pairs
  none.max_trace_events = 0;
  const npu_sync::SyncResult merged = npu_sync::insert_syncs(p, davinci(), none);
  REQUIRE(full.note.empty());
  REQUIRE(full.check_events > 0);
  REQUIRE(merged.pairs > full.pairs + 2);
  MESSAGE("pairs: merged " << merged.pairs << ", pruned " << full.pairs << " after " << full.check_events << " events walked");

  npu_sync::SyncOptions half;
  half.max_check_events = full.check_events / 2;
  const npu_sync::SyncResult bounded = npu_sync::insert_syncs(p, davinci(), half);
  CHECK(bounded.note.find("implied pairs kept past ") != std::string::npos);
  CHECK(bounded.note.find(fmt::format("past the work budget of {}", half.max_check_events)) != std::string::npos);
  CHECK(bounded.check_events > half.max_check_events);
  CHECK(bounded.pairs > full.pairs);    // stopped part way ...
  CHECK(bounded.pairs < merged.pairs);  // ... after dropping some
  const npu_sim::SimResult sim = npu_sim::simulate(bounded.program, davinci(), random_inputs(p));
  CHECK(sim.record.races.empty());
  CHECK_FALSE(sim.record.deadlock);
  CHECK(same_outputs(p, reference, sim));
  // counted in events walked, so the same budget gives the same program
  CHECK(npu::print_program(npu_sync::insert_syncs(p, davinci(), half).program) == npu::print_program(bounded.program));

  npu_sync::SyncOptions zero;  // the first walks already pass it: nothing dropped
  zero.max_check_events = 0;
  const npu_sync::SyncResult unpruned = npu_sync::insert_syncs(p, davinci(), zero);
  CHECK(unpruned.note.find("implied pairs kept past 0 of ") != std::string::npos);
  CHECK(unpruned.pairs == merged.pairs);
}
