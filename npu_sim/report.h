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
  uint64_t instructions = 0;
  double utilization = 0;             // busy_cycles / total_cycles
};

// [core][pipe]
std::vector<std::array<PipeStats, npu::kPipeCount>> pipe_stats(const SimRecord& record);
// "GM->L1" -> bytes written through that path, over every core.
std::map<std::string, uint64_t> bytes_per_path(const SimRecord& record);
// Multiply-accumulates the cube executed (from the recorded mmad instructions).
uint64_t cube_macs(const SimRecord& record, const npu::Program& program);

nlohmann::json report_json(const SimRecord& record);
nlohmann::json chrome_trace_json(const SimRecord& record);
std::string instruction_csv(const SimRecord& record);

// Writes `text` to `path`; throws UserError when the file cannot be written.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace tessel::npu_sim
