// npu_sim::pipe_utilization: each pipe's busy share over the cores a program used and over every
// core of the chip, from the recorded events (npu_sim/report.h).
#include <doctest/doctest.h>

#include "npu_sim/report.h"

using namespace tessel;

namespace {

// A record of `used` cores on a chip of `chip` cores, each core's cube busy `busy` cycles of `total`.
npu_sim::SimRecord cube_record(int used, int chip, uint64_t busy, uint64_t total) {
  npu_sim::SimRecord r;
  r.machine.cores = chip;
  r.cores = used;
  r.total_cycles = total;
  for (int c = 0; c < used; ++c) {
    npu_sim::InstructionEvent e;
    e.core = c;
    e.pipe = npu::Pipe::M;
    e.start = 0;
    e.end = busy;
    r.instructions.push_back(e);
  }
  return r;
}

}  // namespace

TEST_CASE("pipe utilization: the mean over the cores used and the share of the whole chip") {
  // 8 of 32 cores, each cube busy 600 of 1,000 cycles: 60% of the cores used, 8 x 600 / (32 x 1,000) = 15% of the chip
  const npu_sim::PipeUtilization eight = npu_sim::pipe_utilization(cube_record(8, 32, 600, 1000));
  CHECK(eight.cores_used[int(npu::Pipe::M)] == doctest::Approx(0.6));
  CHECK(eight.chip[int(npu::Pipe::M)] == doctest::Approx(0.15));
  CHECK(eight.chip[int(npu::Pipe::V)] == 0);
  // the same work on 32 cores in a quarter of the time: 32 x 150 busy of 250 -> 60% both ways
  const npu_sim::PipeUtilization all = npu_sim::pipe_utilization(cube_record(32, 32, 150, 250));
  CHECK(all.cores_used[int(npu::Pipe::M)] == doctest::Approx(0.6));
  CHECK(all.chip[int(npu::Pipe::M)] == doctest::Approx(0.6));
  // the slower 8-core run must not look busier on the chip
  CHECK(eight.chip[int(npu::Pipe::M)] < all.chip[int(npu::Pipe::M)]);
}

TEST_CASE("pipe utilization of an empty run is zero, not a division by zero") {
  const npu_sim::PipeUtilization u = npu_sim::pipe_utilization(cube_record(2, 32, 0, 0));
  CHECK(u.cores_used[int(npu::Pipe::M)] == 0);
  CHECK(u.chip[int(npu::Pipe::M)] == 0);
}

TEST_CASE("the JSON report carries both utilizations and the chip's cores") {
  const nlohmann::json j = npu_sim::report_json(cube_record(8, 32, 600, 1000));
  CHECK(j["chip_cores"] == 32);
  CHECK(j["utilization_cores_used"]["M"].get<double>() == doctest::Approx(0.6));
  CHECK(j["utilization_chip"]["M"].get<double>() == doctest::Approx(0.15));
}
