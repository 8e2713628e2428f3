// Folded records (SimOptions::fold_events, issue 17 item 2): one summed entry per core and
// instruction, so a run's memory is bounded by the program; every statistic equals the full
// record's, the trace and the CSV are refused, and a long loop keeps a record of a few entries.
#include <doctest/doctest.h>

#include "isa/base/error.h"
#include "npu_sim/report.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

TEST_CASE("a folded record gives the full record's cycles, per-pipe statistics, bytes, MACs and energy") {
  for (const char* name : {"gemm64.npu", "gemm64_double.npu", "conv_img2col.npu", "add_relu.npu"}) {
    CAPTURE(name);
    const npu::Program p = example(name);
    SimOptions full, folded;
    full.timing_only = folded.timing_only = true;
    folded.fold_events = true;
    const SimRecord a = simulate(p, davinci(), {}, full).record;
    const SimRecord b = simulate(p, davinci(), {}, folded).record;
    CHECK_FALSE(a.folded);
    CHECK(b.folded);
    CHECK(b.total_cycles == a.total_cycles);
    CHECK(b.executed == a.executed);
    CHECK(b.executed == a.instructions.size());
    CHECK(b.instructions.size() <= p.code.size() * size_t(p.cores) * npu::kPipeCount);
    CHECK(b.flags.empty());
    const auto sa = pipe_stats(a), sb = pipe_stats(b);
    for (int c = 0; c < a.cores; ++c)
      for (int q = 0; q < npu::kPipeCount; ++q) {
        CHECK(sb[c][q].busy_cycles == sa[c][q].busy_cycles);
        CHECK(sb[c][q].instructions == sa[c][q].instructions);
        CHECK(sb[c][q].stall_flag_cycles == sa[c][q].stall_flag_cycles);
        CHECK(sb[c][q].stall_barrier_cycles == sa[c][q].stall_barrier_cycles);
        CHECK(sb[c][q].stall_queue_cycles == sa[c][q].stall_queue_cycles);
      }
    CHECK(bytes_per_path(b) == bytes_per_path(a));
    CHECK(cube_macs(b, p) == cube_macs(a, p));
    CHECK(energy_report(b).total_pj == doctest::Approx(energy_report(a).total_pj));
    CHECK_THROWS_WITH_AS(chrome_trace_json(b), doctest::Contains("the trace needs every event"), UserError);
    CHECK_THROWS_WITH_AS(instruction_csv(b), doctest::Contains("the instruction CSV needs every event"), UserError);
  }
}

TEST_CASE("a folded long loop keeps one entry per instruction, and the instruction limit still stops a runaway") {
  // 3 instructions per iteration (add, add, endloop) x 400,000 iterations
  const std::string text = "mov r2, 0\nloop r1, 0, 400000, 1\nadd r2, r2, 1\nadd r2, r2, 2\nendloop\npipe_barrier ALL\n";
  const npu::Program p = npu::assemble_program(text, "long.npu");
  SimOptions o;
  o.timing_only = true;
  o.fold_events = true;
  o.max_recorded_events = uint64_t(1) << 40;
  const SimRecord r = simulate(p, davinci(), {}, o).record;
  CHECK(r.executed == 1 + 1 + 3 * 400000 + 1);
  CHECK(r.instructions.size() <= 2 * p.code.size());  // one entry per pc and pipe on one core
  o.max_recorded_events = 1000;
  CHECK_THROWS_WITH_AS(simulate(p, davinci(), {}, o), doctest::Contains("the run executed more than 1000 instructions"), UserError);
}
