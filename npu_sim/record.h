// What a simulation run records, once: every executed instruction, every stall, every flag hand-off,
// every race and the deadlock (if any). The JSON report, the Chrome trace and the CSV are writers
// over this record (npu_sim/report.h); nothing else keeps statistics (STYLE.md 8).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "isa/npu_program.h"
#include "isa/npu_machine.h"

namespace tessel::npu_sim {

// What an instruction's `ops` count (the operations its unit's energy is priced by).
enum class OpKind : uint8_t { None, MacF16, MacI8, VectorRepeat };

// One executed instruction on one pipe. Cycles count from the start of the run. In a folded record
// (SimRecord::folded) one entry per core, instruction and pipe sums all its executions: `count` of them,
// `end - start` their busy cycles (start 0), bytes and ops summed, completion the last one.
struct InstructionEvent {
  int core = 0;
  npu::Pipe pipe = npu::Pipe::S;
  OpKind op_kind = OpKind::None;
  int pc = 0;
  uint64_t start = 0;       // the pipe starts it
  uint64_t end = 0;         // the pipe is free again (start + occupancy)
  uint64_t completion = 0;  // its results are visible (end + latency)
  uint64_t bytes = 0;       // copies: bytes written to the destination
  int path_from = -1, path_to = -1;  // copies: buffers of the transfer path
  uint64_t ops = 0;         // cube: multiply-accumulates; vector: repeats (op_kind says which)
  uint64_t count = 1;       // executions (folded records)
};

// Bytes one core's instructions read from and wrote into one buffer: the exact footprints (a
// copy's source and destination, a cube's L0A/L0B/L0C operands, a vector op's UB operands).
struct BufferTraffic {
  uint64_t bytes_read = 0, bytes_written = 0;
};

// Cores: S in sync_all, waiting for the other cores of the launch (its own pipes already drained).
enum class StallKind : uint8_t { Flag, Barrier, QueueFull, Cores };

struct StallEvent {
  int core = 0;
  npu::Pipe pipe = npu::Pipe::S;
  int pc = 0;  // the instruction that waited
  StallKind kind = StallKind::Flag;
  uint64_t start = 0, end = 0;
  uint64_t count = 1;  // stalls summed (folded records: one entry per core, instruction and kind)
};

// One set_flag -> wait_flag hand-off (a flow arrow in the trace). wait_time is 0 while unmatched.
struct FlagEvent {
  int core = 0;
  npu::Pipe src = npu::Pipe::S, dst = npu::Pipe::S;
  int event_id = 0;
  int set_pc = 0, wait_pc = -1;
  uint64_t set_time = 0;        // set_flag executes
  uint64_t available_time = 0;  // every earlier instruction of the source pipe completed
  uint64_t wait_time = 0;       // the wait_flag consumed it
};

struct RaceAccess {
  int core = 0;
  npu::Pipe pipe = npu::Pipe::S;
  int pc = 0;
  std::string text;  // the instruction as printed
  bool write = false;
  uint64_t begin = 0, end = 0;  // the overlapping bytes
};

struct Race {
  npu::Buffer buffer = npu::Buffer::GM;
  int buffer_core = 0;  // whose buffer (GM: -1)
  RaceAccess first, second;  // first: the earlier access
  uint64_t occurrences = 1;  // dynamic instances of this instruction pair
};

struct SimRecord {
  std::string program_name;
  std::vector<std::string> instruction_text;  // per pc
  std::vector<int> instruction_line;          // per pc (0: built in C++)
  isa::NpuMachine machine;
  int cores = 1;
  bool timing_only = false;
  // Folded (SimOptions::fold_events): `instructions` and `stalls` hold one summed entry per core,
  // instruction and pipe (and stall kind), `flags` is empty, so the record's size is bounded by the program,
  // not by the run's length; every statistic of report.h is the same, the trace and the CSV (which
  // need every event) are refused.
  bool folded = false;
  uint64_t executed = 0;  // instructions executed (every record)
  uint64_t total_cycles = 0;
  std::vector<InstructionEvent> instructions;
  std::vector<StallEvent> stalls;
  std::vector<FlagEvent> flags;
  std::vector<Race> races;
  std::optional<std::string> deadlock;
  // Highest byte offset + 1 each core touched in each buffer (GM: shared, counted on core 0).
  std::vector<std::array<uint64_t, npu::kBufferCount>> peak_bytes;
  std::vector<std::array<BufferTraffic, npu::kBufferCount>> traffic;  // [core][buffer] (GM: each core's own)
  double wall_seconds = 0;
};

}  // namespace tessel::npu_sim
