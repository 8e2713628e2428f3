// The NPU backend as the CLI runs it: kernel IR -> NPU program (compiler/emit_npu) -> syncs
// (compiler/npu_sync, naive or pruned) -> the simulator (npu_sim) -> outputs, cycles, utilization.
// Lives in the CLI because tessel_compiler must not depend on the simulator (DESIGN.md "Layout").
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compiler/emit_npu/emit_npu.h"
#include "compiler/kernel/roofline.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "isa/base/npy.h"
#include "isa/hierarchy.h"
#include "npu_sim/simulator.h"

namespace tessel::cli {

// Options of the NPU backend, set from `--sync` / `--trace` of tessel compile / run / bench.
struct NpuOptions {
  npu_sync::SyncMode sync = npu_sync::SyncMode::Pruned;
  std::string trace;          // Chrome trace path ("": none)
  bool timing_only = false;   // skip the arithmetic (bench of large shapes)
  bool detect_races = true;
};

struct NpuCompiled {
  emit_npu::NpuKernel kernel;
  npu_sync::SyncResult naive, pruned;  // both counted; `chosen` is the one run
  std::set<std::string> scalars;       // 0-d kernel tensors, bound as one element in the program
  kernel::NpuRoofline roofline;        // the operator's bound on the whole chip (compiler/kernel/roofline.h)
  const npu_sync::SyncResult& chosen(npu_sync::SyncMode m) const { return m == npu_sync::SyncMode::Naive ? naive : pruned; }
};
NpuCompiled compile_npu(const kernel::Kernel& k, const isa::Hierarchy& target);

struct NpuRunResult {
  std::map<std::string, NpyArray> outputs;  // empty in timing-only runs
  npu_sim::SimRecord record;
  nlohmann::json report;    // total_cycles, utilization per pipe, syncs_naive, syncs_pruned, races, ...
  std::string summary;      // one screen
  double cube_utilization = 0;       // mean over the cores used
  double cube_utilization_chip = 0;  // over every core of the chip
  double macs_per_cycle = 0, peak_macs_per_cycle = 0, chip_peak_macs_per_cycle = 0;
  double roofline_fraction = 0;      // roofline cycles / cycles
};
NpuRunResult run_npu(const NpuCompiled& c, const isa::Hierarchy& target, const std::map<std::string, NpyArray>& inputs,
                     const NpuOptions& options);

// Writers over a roofline and the cycles a run took: the report's "roofline" object (each bound in
// cycles, bytes, MACs, vector operations, the bound that binds, the fraction reached) and one line
// ("roofline 1476 cycles, cube bound (cube 1024, vector 0, scalar 0, GM 753, latency 452 on 32 cores):
// 44.6% of roofline").
nlohmann::json roofline_json(const kernel::NpuRoofline& r, uint64_t cycles);
std::string roofline_text(const kernel::NpuRoofline& r, uint64_t cycles);
// `tessel compile -o P.npu` records the operator's roofline in the program as one comment line
// (kRooflineComment followed by roofline_json); `tessel sim P.npu` reads it back (nullopt: none, or
// not readable: a hand-written or edited program).
inline constexpr const char* kRooflineComment = "# roofline ";
std::optional<kernel::NpuRoofline> recorded_roofline(const std::string& program_text);

// CLI glue: `--sync naive|pruned` and `--trace FILE` on a command, filling `options` (owned by the
// command, outliving the parse).
void add_npu_flags(CLI::App* cmd, NpuOptions& options);

// `tessel run` on an NPU description: compile the kernel, simulate, print the summary; returns the
// outputs and the report fields. `tessel compile -o OUT.npu`: the program text and a one-line count.
std::pair<std::map<std::string, NpyArray>, nlohmann::json> run_npu_backend(const kernel::Kernel& k, const isa::Hierarchy& target,
                                                                          const std::map<std::string, NpyArray>& inputs,
                                                                          const NpuOptions& options);
std::string compile_npu_text(const kernel::Kernel& k, const isa::Hierarchy& target, const NpuOptions& options,
                             std::string& report_line);

// `tessel bench npu`: the seed GEMM table, 1024^3 and 4096^3, the seed convolution, the AKG ops.
nlohmann::json run_npu_bench(const std::string& hierarchy_path, const isa::Overrides& overrides = {});

}  // namespace tessel::cli
