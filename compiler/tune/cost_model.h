// Cost models (issue 8): rank tile configurations of one problem without measuring them. One
// implementation per file, chosen by name (STYLE.md 9):
//   analytic  (analytic_model.cc): from the hierarchy description alone;
//   learned   (learned_model.cc): XGBoost rank:pairwise on configuration features, fitted on
//             measurements (unavailable when tessel was built without libxgboost).
// Lower predictions mean faster configurations; only the order matters to the strategies.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/tune/fit_check.h"

namespace tessel::tune {

struct Measured {
  const ConfigInfo* config = nullptr;
  double cost = 0;  // cycles (simulator) or seconds (GPU)
};

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  // Re-fits on every measurement so far (a model that learns nothing ignores it).
  virtual void fit(const Problem& problem, const std::vector<Measured>& measured) { (void)problem, (void)measured; }
  // False until fit() had enough data (strategies then fall back to the analytic order).
  virtual bool ready() const { return true; }
  virtual double predict(const Problem& problem, const ConfigInfo& config) const = 0;
};

// "analytic" or "learned"; UserError naming the known models otherwise (or why learned is unavailable).
std::unique_ptr<CostModel> make_cost_model(const std::string& name);
std::vector<std::string> cost_model_names();

// The analytic model's breakdown (cycles per core), for --predict and the tests.
struct AnalyticBreakdown {
  double compute_cycles = 0;               // matrix-unit (or vector) cycles per core
  std::map<std::string, double> engine_cycles;  // per copy engine: bytes over bandwidth + issue
  double latency_cycles = 0;               // exposed latencies
  double shared_global_cycles = 0;         // all cores' global traffic over the shared bandwidth
  double total = 0;
  int64_t tiles = 0, cores_used = 0;
  // Busy cycles of the busiest core per NPU pipe (M, V, MTE1, MTE2, MTE3: the pipe of each engine and
  // unit): every byte it moves over its path's bandwidth, every fragment or repeat it computes. What
  // scripts/pipe_correlation.py compares with the simulator's per-pipe busy cycles.
  std::map<std::string, double> pipe_busy_cycles;
  // Energy of the whole run over every core (pJ), from the description's energies (isa/README.md
  // "Energy"): per level its bytes read and written, per unit its operations and bytes moved.
  std::map<std::string, double> level_energy_pj, unit_energy_pj;
  double energy_pj = 0;
  double macs = 0;  // multiply-accumulates the matrix unit executes (padded to its shape)
  // Bytes per level over the whole kernel (issue 19 item 2, compared with ncu's counters):
  //   global_bytes: every stage tile's loads from and stores to the global level (on a GPU, the
  //                 L2's traffic: each of them passes the L2);
  //   dram_bytes:   what reaches the memory behind the L2 while the kernel runs: every input read
  //                 once when inputs and outputs fit the L2 (gpu.l2_cache_bytes; the outputs stay
  //                 there, written back after the kernel), otherwise every input and output once
  //                 and the repeated reads missing in the proportion of the footprint the L2 cannot
  //                 hold; without an L2 in the description, global_bytes;
  //   stage_bytes:  bytes written into and read out of the stage level (shared memory) by
  //                 instructions (on a GPU what smsp__sass_data_bytes_mem_shared counts: not wgmma's
  //                 operand reads through matrix descriptors; the SIMT walk's buffers, all in shared);
  //   l2_fabric_bytes: on a GPU whose L2 is split into gpu.l2_partitions partitions, the part of
  //                 global_bytes homed in a partition other than the requesting SM's: looked up in
  //                 the SM's own partition and again, after the L2 fabric, in its home partition
  //                 ((partitions - 1) / partitions of it, addresses spread evenly over them). The
  //                 L2's lookups (ncu's lts__t_bytes) are global_bytes + l2_fabric_bytes; those of
  //                 the SMs' requests alone (lts__t_sectors_srcunit_tex) are global_bytes.
  double global_bytes = 0, dram_bytes = 0, stage_bytes = 0, l2_fabric_bytes = 0;
};
AnalyticBreakdown analytic_breakdown(const Problem& problem, const ConfigInfo& config);
// The breakdown of the mapping the target chooses itself when given no tile spec, where that
// mapping ignores the default tile: the GPU register row kernel (Problem::gpu_row_kernel); nullopt
// otherwise (the default tile spec is then an ordinary configuration, priced by analytic_breakdown).
std::optional<AnalyticBreakdown> default_mapping_breakdown(const Problem& problem);

// Per-configuration features (learned model, --dump-space): log2 tile sizes, tile counts,
// per-level occupancy, and the analytic breakdown.
std::vector<double> config_features(const Problem& problem, const ConfigInfo& config);

}  // namespace tessel::tune
