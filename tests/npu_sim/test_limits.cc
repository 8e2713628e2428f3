// Cycle arithmetic saturates instead of wrapping, and GM costs what a run touches (issue 31 items 2
// and 5): a transfer over a bandwidth far below any plausible one (the validator refuses it; here
// it is set in code past the validator) stops the run at --max-cycles, never reports fewer cycles;
// a 6 GiB scratch tensor does not allocate 6 GB.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include "npu_sim/semantics.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

TEST_CASE("cycles_for and add_cycles saturate at kSaturatedCycles") {
  CHECK(cycles_for(8192, 87) == 95);
  CHECK(cycles_for(8192, 1e-20) == kSaturatedCycles);
  CHECK(cycles_for(1, 0) == kSaturatedCycles);  // infinity
  CHECK(add_cycles(kSaturatedCycles - 1, 5) == kSaturatedCycles);
  CHECK(add_cycles(3, 4) == 7);
  CHECK(add_cycles(uint64_t(-1), uint64_t(-1)) == kSaturatedCycles);
}

TEST_CASE("a transfer slower than --max-cycles stops the run as a run limit (RunLimit), for GM paths and the shared GM bandwidth") {
  const npu::Program p = npu::assemble_program(".tensor G f16 [64, 64] at GM+0 inout\ndma_in UB[0], GM[0], 1, 8192, 0, 0\npipe_barrier ALL\n", "slow.npu");
  SimOptions o;
  o.timing_only = true;
  for (int which = 0; which < 2; ++which) {
    isa::Hierarchy h = davinci();
    if (which == 0)
      for (isa::TransferPath& path : h.paths) path.bandwidth_bytes_per_cycle = 1e-20;
    else
      for (isa::Level& l : h.levels) l.shared_bandwidth_bytes_per_cycle = l.shared_bandwidth_bytes_per_cycle > 0 ? 1e-20 : 0;
    CAPTURE(which);
    CHECK_THROWS_WITH_AS(simulate(p, h, {}, o), doctest::Contains("slow.npu:2:1: 'dma_in UB[0], GM[0], 1, 8192, 0, 0' on core 0: the run passed --max-cycles 10000000000"), RunLimit);
  }
  // a slow but plausible bandwidth: exact cycles, more than the stock description's
  isa::Hierarchy h = davinci();
  for (isa::TransferPath& path : h.paths) path.bandwidth_bytes_per_cycle = 1.0 / 1024;
  const SimResult slow = simulate(p, h, {}, o), stock = simulate(p, davinci(), {}, o);
  CHECK(slow.record.total_cycles > 8192 * 1024);
  CHECK(slow.record.total_cycles > stock.record.total_cycles);
}

TEST_CASE("a 6 GiB scratch tensor costs the pages a run touches, not 6 GB") {
  const npu::Program p = npu::load_program(std::string(TESSEL_SOURCE_DIR) + "/tests/cli/npu/huge_scratch.npu");
  const SimResult r = simulate(p, davinci(), {}, {});
  CHECK(r.gm.size() == uint64_t(6) << 30);
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  CHECK(u.ru_maxrss < 2 * 1024 * 1024);  // KiB: well below the 6 GiB declared
}

TEST_CASE("a program tessel emitted that the simulator refuses is a tessel bug (InternalError, exit 3), a run limit stays a user error") {
  // issue 31 item 3: such refusals used to exit 1 ("your input was wrong")
  const npu::Program bad = npu::assemble_program(".tensor G f16 [64, 64] at GM+0 inout\ndma_in UB[1], GM[0], 1, 64, 0, 0\npipe_barrier ALL\n", "relu.npu");
  CHECK_THROWS_WITH_AS(simulate_emitted(bad, davinci(), {}, {}),
                       doctest::Contains("tessel bug: the simulator refused the program tessel emitted for operator 'relu' on davinci-910: "
                                         "relu.npu:2:1: 'dma_in UB[1], GM[0], 1, 64, 0, 0' on core 0: operand 1 address UB[1] is not aligned"),
                       InternalError);
  CHECK_THROWS_AS(simulate(bad, davinci(), {}, {}), UserError);  // `tessel sim` of a user's program: exit 1
  const npu::Program long_run = npu::assemble_program(".tensor G f16 [64, 64] at GM+0 inout\ndma_in UB[0], GM[0], 1, 8192, 0, 0\npipe_barrier ALL\n", "relu.npu");
  SimOptions o;
  o.max_cycles = 50;
  CHECK_THROWS_AS(simulate_emitted(long_run, davinci(), {}, o), RunLimit);
}
