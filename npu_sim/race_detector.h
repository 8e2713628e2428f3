// Happens-before race detection over the accesses of one run (DESIGN.md "Safety").
//
// Every pipe of every core has a vector clock. A pipe's own component counts its accesses (same-pipe
// program order); set_flag publishes a snapshot that the matching wait_flag joins; pipe_barrier ALL
// joins every pipe of the core; sync_all joins every pipe of every core. Two accesses to overlapping
// bytes, at least one a write, from different pipes race when the later one's clock has not seen the earlier one's epoch. Each racing
// instruction pair is reported once (with its number of dynamic occurrences).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "npu_sim/record.h"
#include "npu_sim/semantics.h"

namespace tessel::npu_sim {

class RaceDetector {
 public:
  using Clock = std::vector<uint32_t>;

  RaceDetector(int cores, SimRecord& record);

  // Checks the accesses of the instruction at `pc` that pipe (core, pipe) starts now, reports
  // races into the record and remembers the accesses (taking their ranges: `accesses` is spent).
  void on_accesses(int core, npu::Pipe pipe, int pc, std::vector<Access>& accesses);
  const Clock& clock(int core, npu::Pipe pipe) const { return clocks_[index(core, pipe)]; }
  void join(int core, npu::Pipe pipe, const Clock& other);
  // pipe_barrier ALL on `core`: every pipe of the core has seen everything the core did.
  void barrier_all(int core);
  // sync_all: `joined` takes the clocks of `core`'s pipes (call after barrier_all); once every core
  // arrived, join_all gives each pipe of each core the joined clock of all of them.
  void arrive_all(int core, Clock& joined) const;
  void join_all(int core, const Clock& joined);

 private:
  struct Entry {
    int pipe_index;
    uint32_t epoch;
    int pc;
    bool write;
    std::vector<Interval> ranges;
    uint64_t lo, hi;
  };
  // One pipe's accesses of a buffer, in its program order (ascending epochs), and the byte range
  // they span (a bound: only ever widened until a prune recomputes it).
  struct Entries {
    std::vector<Entry> list;
    uint64_t lo = UINT64_MAX, hi = 0;
  };
  struct PipeHistory {
    Entries reads, writes;  // kept apart: a read only needs checking against writes
  };
  // Per pipe, so a check skips a pipe whose accesses lie elsewhere (a core's reads of the inputs
  // against another core's writes of the output) or that the checker has seen entirely, and
  // searches the rest from the first entry it has not seen: linear in the pipes, not the accesses.
  struct History {
    std::map<int, PipeHistory> pipes;  // pipe index -> its accesses
    size_t size = 0;                   // entries in all
    size_t prune_limit = 64;           // not hardware: total size that triggers the next prune_ordered
  };
  int index(int core, npu::Pipe pipe) const { return core * npu::kPipeCount + static_cast<int>(pipe); }
  History& history(int core, npu::Buffer b);
  void report(const Entry& earlier, int pipe_index, int pc, bool write, npu::Buffer buffer, int buffer_core,
              uint64_t begin, uint64_t end);
  void prune_ordered(History& h);

  int cores_;
  SimRecord& record_;
  std::vector<Clock> clocks_;
  std::vector<History> histories_;  // GM: one shared; others per core
  std::map<std::tuple<int, int, int, int>, size_t> race_index_;  // (pc1, pc2, buffer, core) -> record.races
};

}  // namespace tessel::npu_sim
