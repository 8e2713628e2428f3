// Reductions combined across cores (compiler/emit_npu/nest_split.h): a reduction whose output is
// too small to give every core work is split along a reduced index, each core's partial written
// to a GM scratch tensor, a sync_all, then combined; the statements after it run in phases of
// their own cores. Every output against the interpreter, element by element (f32 sums within the
// reassociation tolerance), naive and pruned syncs, race-free, on davinci-910 and davinci-310; the
// cores used and the sync_all count of the program; and where the split must not fire.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_npu/nest.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

int barriers(const Case& c) {
  int n = 0;
  for (const auto& i : c.kernel.program.code) n += i.opcode == npu::Opcode::SyncAll;
  return n;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// 1024 x 1024 f32 on davinci-910: 32 cores of 128 KiB each at 87 B/cycle = 1,507 cycles of transfer
// (the shared 2,784 B/cycle is 32 x 87), + 300 GM latency, + the barrier's 450, + the combine's GM
// read (300) and write (150) latencies and a few vector instructions: ~2,800; bound 4,000. On one
// core the reads alone take 4 MiB / 87 = 48,200 cycles (66,435 before the split).
TEST_CASE("a sum over every element is split over every core with one sync_all (davinci-910)") {
  auto c = compile_case("reduction_cores.tsl", "sum_all", "M=1024,N=1024");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 32);
  CHECK(barriers(*c) == 1);
  CHECK(has(n, "reductions split over cores: Y along m_n over 32 cores (32768 each)"));
  const uint64_t cycles = verified_cycles(*c, false, false, run_any);
  MESSAGE("sum over 1024 x 1024 f32 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 4000);
}

TEST_CASE("a max over every element combines with max (davinci-910, exact)") {
  auto c = compile_case("reduction_cores.tsl", "max_all", "M=512,N=1024");
  CHECK(c->kernel.program.cores == 32);
  CHECK(barriers(*c) == 1);
  const Run pruned = run_any(*c, npu_sync::SyncMode::Pruned);
  CHECK(pruned.verification.verified);
  CHECK(pruned.verification.max_abs_err == 0);
  CHECK(pruned.sim.record.races.empty());
}

TEST_CASE("batch-norm training statistics per channel split over the pixels: every phase on 32 cores") {
  auto c = compile_case("reduction_cores.tsl", "bn_train_nhwc", "N=4,H=14,W=14,C=128");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 32);
  // Sum's partial | its combine and Mean | D | SqSum's partial | its combine | Y
  CHECK(barriers(*c) == 5);
  CHECK(has(n, "reductions split over cores: Sum along n_h_w"));
  verified_cycles(*c, false, false, run_any);
}

// (2, 1024, 8, 32) f32: as one phase the 16 (n, g) pairs take 16 cores, each 1,024 rows of 32 lanes
// (half a repeat); split in two along i, the partials take 32.
TEST_CASE("group norm statistics per (n, g) split along i: the partials on 32 cores") {
  auto c = compile_case("reduction_cores.tsl", "group_norm_nige", "N=2,I=1024,G=8,E=32");
  c->kernel = emit_npu::emit_nest(c->compilation->kernel, c->compilation->hierarchy);  // the general lowering (group_stats.cc takes it first)
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 32);
  CHECK(barriers(*c) >= 2);
  CHECK(has(n, "Sum along i over 2 cores"));
  CHECK(has(n, "phase 0: general vector lowering on 32 core(s)"));
  verified_cycles(*c, false, false, run_any);
}

// davinci-310: 2 cores sharing 95 B/cycle of GM. One core: 512 KiB at 87 B/cycle = 6,026 cycles of
// reads plus 2,048 vector repeats; two: 5,519 + 1,024; the saving (1,531) beats the barrier and the
// combine's latencies (900): split in two.
TEST_CASE("on davinci-310 a sum over every element takes both cores") {
  auto c = compile_case("reduction_cores.tsl", "sum_all", "M=256,N=512", "", true, kTarget310);
  CHECK(c->kernel.program.cores == 2);
  CHECK(barriers(*c) == 1);
  verified_cycles(*c, false, false, run_any);
}

TEST_CASE("no split where it cannot pay or the output already gives every core work") {
  auto tiny = compile_case("reduction_cores.tsl", "sum_all", "M=5,N=7");  // the barrier costs more than the reads
  CHECK(barriers(*tiny) == 0);
  verified_cycles(*tiny, false, false, run_any);
  auto rows = compile_case("reduction_cores.tsl", "sum_rows", "M=4096,N=64");  // 4,096 outputs: 2 repeats per core
  CHECK(barriers(*rows) == 0);
  verified_cycles(*rows, false, false, run_any);
  // an f16 sum accumulates in the interpreter's order: no partials (they would reassociate it)
  auto f16 = compile_case("reduction_cores.tsl", "sum_all_f16", "M=512,N=512", "", false);
  CHECK(barriers(*f16) == 0);
  CHECK(f16->kernel.program.cores == 1);
}

// An f16 sum rounds after every step (compiler/README.md, interpreter semantics), so its value
// depends on the order: a tree over the lanes, or a tile's rows folded into its first row before
// the accumulator, differs from the interpreter's order by more than the f16 tolerance on long sums
// (512 x 512: -492.75 against the interpreter's -499; the exact sum is -491.875). The lanes stay
// off the reductions (none with no output dimension: an element per row), every row goes straight
// into the accumulator: bit for bit on both chips, naive and pruned, however many tiles.
TEST_CASE("f16 sums add in the interpreter's order: a full sum, long rows and long columns, exact") {
  const std::pair<const char*, const char*> cases[] = {{"sum_all_f16", "M=64,N=256"},  {"sum_all_f16", "M=5,N=7"},
                                                       {"sum_rows_f16", "M=8,N=2048"}, {"sum_rows_f16", "M=1,N=1000"},
                                                       {"sum_cols_f16", "M=2048,N=16"}, {"sum_cols_f16", "M=700,N=40"}};
  for (const std::string& target : {kTarget, kTarget310})
    for (const auto& [def, shape] : cases) {
      CAPTURE(target);
      CAPTURE(def);
      CAPTURE(shape);
      auto c = compile_case("reduction_cores.tsl", def, shape, "", true, target);
      verified_cycles(*c, true, false, run_any);
    }
}

// T is computed by the row pipeline (kept in UB, a temporary is the kernel's own) in the phase
// before Y's partials, which read its diagonal from GM: a phase stores its temporaries (on
// davinci-910 T was never written: Y[0] 14 against -151.69, program_fuzz seed 302 program 113).
TEST_CASE("a split reduction's phase reads a local the phase before computed in its row pipeline") {
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto c = compile_case("../tests/emit_npu/data/stored_results.tsl", "sum_reads_local_diagonal", "M=22", "", true, target);
    if (target == kTarget) CHECK(barriers(*c) == 2);  // T | Y's partials | their combine
    verified_cycles(*c, false, false, run_any);
  }
}
