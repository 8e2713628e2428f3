// Writers over a SimRecord (npu_sim/record.h): the JSON report, the Chrome trace (Perfetto) and the
// per-instruction CSV. Statistics are derived here from the recorded events, never kept elsewhere.
#pragma once

#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "npu_sim/record.h"

namespace tessel::npu_sim {

struct PipeStats {
  uint64_t busy_cycles = 0;           // sum of occupancies
  uint64_t stall_flag_cycles = 0;     // waiting in wait_flag
  uint64_t stall_barrier_cycles = 0;  // waiting in pipe_barrier
  uint64_t stall_queue_cycles = 0;    // S only: waiting for room in a full pipe queue
  uint64_t stall_cores_cycles = 0;    // S only: in sync_all, waiting for the other cores
  uint64_t instructions = 0;
  double utilization = 0;             // busy_cycles / total_cycles
};

// [core][pipe]
std::vector<std::array<PipeStats, npu::kPipeCount>> pipe_stats(const SimRecord& record);
// Busy share of each pipe two ways: the mean over the cores the program used (what a mapping makes
// of its cores) and over every core of the chip (the same busy cycles over machine cores x total
// cycles), so a mapping on fewer cores never looks busier than a faster one on the whole chip.
struct PipeUtilization {
  std::array<double, npu::kPipeCount> cores_used{}, chip{};
};
PipeUtilization pipe_utilization(const SimRecord& record);
// "GM->L1" -> bytes written through that path, over every core.
std::map<std::string, uint64_t> bytes_per_path(const SimRecord& record);
// Multiply-accumulates the cube executed (from the recorded mmad instructions).
uint64_t cube_macs(const SimRecord& record, const npu::Program& program);

// Energy from the counted events and the description's prices (isa/README.md "Energy"), in pJ:
// per buffer, its bytes read and written times its read / write energy per byte; per unit, the
// cube's MACs per dtype times that shape's energy per MAC, the vector unit's repeats times its
// energy per repeat, the scalar unit's instructions (every event on pipe S: its own work and each
// instruction it issues) times its energy per instruction, and each path engine's bytes moved
// (bytes_per_path) times its energy per byte (the vector unit also engines L0C -> UB).
struct LevelEnergy {
  std::string level;  // the description's level name
  uint64_t bytes_read = 0, bytes_written = 0;
  double pj = 0;
};
struct UnitEnergy {
  std::string unit;  // the description's unit name
  uint64_t macs = 0, repeats = 0, instructions = 0, bytes_moved = 0;
  double pj = 0;
};
struct EnergyReport {
  std::vector<LevelEnergy> levels;  // in buffer order (GM, L1, L0A, L0B, L0C, UB)
  std::vector<UnitEnergy> units;    // cube, vector, scalar, then the copy engines by name
  double levels_pj = 0, units_pj = 0, total_pj = 0;
  uint64_t macs = 0;                // every core's cube MACs
  double pj_per_mac() const { return macs ? total_pj / double(macs) : 0.0; }
};
EnergyReport energy_report(const SimRecord& record);
nlohmann::json energy_json(const EnergyReport& energy);
// One line for `tessel sim`: total, pJ/MAC, the levels and units.
std::string energy_text(const EnergyReport& energy);

nlohmann::json report_json(const SimRecord& record);
nlohmann::json chrome_trace_json(const SimRecord& record);
std::string instruction_csv(const SimRecord& record);

// Writes `text` to `path`; throws UserError when the file cannot be written.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace tessel::npu_sim
