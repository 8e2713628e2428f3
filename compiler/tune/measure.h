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
};

class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual std::string name() const = 0;
  virtual std::string unit() const = 0;
  // One result per spec, in order. Never throws for a failing configuration (ok = false). An empty
  // spec (no axes) compiles without a tile: the target's own tile policy, key "default".
  virtual std::vector<Measurement> measure(const std::vector<tile::TileSpec>& specs) = 0;
};

// Total cycles of a program on a target (timing-only). The binary passes npu_sim::simulate.
using SimulateFn = std::function<uint64_t(const npu::Program&, const isa::Hierarchy&)>;
// Seconds per run of a compilation on the GPU (the binary passes run_on_gpu).
using GpuTimeFn = std::function<double(const Compilation&)>;

// A measurement running longer than `timeout_s` (> 0) is killed and reported as failed.
std::unique_ptr<Measurer> make_npu_sim_measurer(const ir::Function& f, const CompileOptions& base, SimulateFn simulate,
                                                int jobs, double timeout_s = 0);
std::unique_ptr<Measurer> make_gpu_measurer(const ir::Function& f, const CompileOptions& base, GpuTimeFn time);
std::unique_ptr<Measurer> make_replay_measurer(const std::string& log, const ProblemKey& problem);

}  // namespace tessel::tune
