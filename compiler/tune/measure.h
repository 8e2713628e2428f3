// Measurement drivers (issue 8): run configurations on the simulator or the GPU and report their
// cost. One implementation per file, chosen by the target's kind:
//   measure_npu_sim.cc: compile -> NPU program -> syncs -> the simulator in timing-only mode,
//                       in forked worker processes (SystemC has one kernel per process, so runs
//                       cannot share one: each measurement gets a fresh child), `jobs` at a time;
//   measure_gpu.cc:     compile -> CUDA -> time on the device, one at a time;
//   measure_replay.cc:  costs looked up in an earlier log of the same problem (strategy studies).
// tessel_compiler does not link the simulator or the CUDA runtime (DESIGN.md "Layout"): the
// `tessel` binary (or a test) passes the function that runs a program or a compilation.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/tune/tuning_log.h"
#include "isa/npu_program.h"

namespace tessel::tune {

struct Measurement {
  std::string key;       // tile spec text
  bool ok = false;
  double cost = 0;       // cycles (NPU) or seconds (GPU)
  std::string unit;      // "cycles" / "s"
  std::string error;     // when !ok
  double wall_s = 0;     // compile + run
  // Simulator only: busy cycles per pipe of the busiest core ("M", "V", "MTE1", ...) and the run's
  // energy (npu_sim/report.h), logged beside the analytic model's prediction of each.
  std::map<std::string, double> pipe_busy_cycles;
  double energy_pj = 0;
};

class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual std::string name() const = 0;
  virtual std::string unit() const = 0;
  // One result per spec, in order. Never throws for a failing configuration (ok = false). An empty
  // spec (no axes) compiles without a tile: the target's own tile policy, key "default".
  virtual std::vector<Measurement> measure(const std::vector<tile::TileSpec>& specs) = 0;
  // Called with each result as it lands (spec index, result), before measure returns: the
  // tuner's progress line moves per measured trial, not per batch.
  std::function<void(size_t, const Measurement&)> on_result;

 protected:
  void landed(size_t index, const Measurement& m) const {
    if (on_result) on_result(index, m);
  }
};

// What a timing-only simulation of a program gives the tuner. The binary passes a function over
// npu_sim::simulate and its report.
struct SimSummary {
  uint64_t cycles = 0;
  std::map<std::string, double> pipe_busy_cycles;  // per pipe, the busiest core
  double energy_pj = 0;
};
using SimulateFn = std::function<SimSummary(const npu::Program&, const isa::Hierarchy&)>;
// Seconds per run of a compilation on the GPU (the binary passes run_on_gpu).
using GpuTimeFn = std::function<double(const Compilation&)>;

// A measurement running longer than `timeout_s` (> 0) is killed and reported as failed.
std::unique_ptr<Measurer> make_npu_sim_measurer(const ir::Function& f, const CompileOptions& base, SimulateFn simulate,
                                                int jobs, double timeout_s = 0);
std::unique_ptr<Measurer> make_gpu_measurer(const ir::Function& f, const CompileOptions& base, GpuTimeFn time);
std::unique_ptr<Measurer> make_replay_measurer(const std::string& log, const ProblemKey& problem);

}  // namespace tessel::tune
