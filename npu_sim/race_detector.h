// Happens-before race detection over the accesses of one run (DESIGN.md "Safety").
//
// Every pipe of every core has a vector clock. A pipe's own component counts its accesses (same-pipe
// program order); set_flag publishes a snapshot that the matching wait_flag joins; pipe_barrier ALL
// joins every pipe of the core; sync_all joins every pipe of every core. Two accesses to overlapping
// bytes, at least one a write, from different pipes race when the later one's clock has not seen the earlier one's epoch. Each racing
// instruction pair is reported once (with the number of times it was found).
//
// Memory stays bounded by the program, not by the run: an access that every pipe able to reach its
// buffer has seen is dropped (a core's local buffers: that core's pipes; GM: every core's). A GM
// access that its own core's pipes have all seen, but other cores have not (cores that never meet
// in a sync_all), is merged into a summary of its pipe: one set of byte ranges per instruction.
// Other cores learn a pipe's epoch only at sync_all, so a summary that spans no sync_all is either
// seen whole or not at all by any other core: checking it is exact (the same pairs are reported).
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
  void arrive_all(int core, Clock& joined);
  void join_all(int core, const Clock& joined);
  // What the detector holds: accesses kept one by one, plus byte ranges in summaries.
  size_t retained() const;

 private:
  struct Entry {
    int pipe_index;
    uint32_t epoch;
    int pc;
    bool write;
    std::vector<Interval> ranges;
    uint64_t lo, hi;
  };
  // Accesses of one pipe that every pipe of its core has seen, epochs [min_epoch, max_epoch], merged
  // per instruction (pc -> sorted, disjoint byte ranges); no sync_all published an epoch inside.
  struct Summary {
    uint32_t min_epoch = 0, max_epoch = 0;
    std::map<int, std::vector<Interval>> by_pc;
    uint64_t lo = UINT64_MAX, hi = 0;
  };
  // One pipe's accesses of a buffer, in its program order (ascending epochs), and the byte range
  // they span (a bound: only ever widened until a prune recomputes it); older ones in summaries.
  struct Entries {
    std::vector<Entry> list;
    uint64_t lo = UINT64_MAX, hi = 0;
    std::vector<Summary> summaries;  // GM only; oldest first
  };
  struct PipeHistory {
    Entries reads, writes;  // kept apart: a read only needs checking against writes
  };
  // Per pipe, so a check skips a pipe whose accesses lie elsewhere (a core's reads of the inputs
  // against another core's writes of the output) or that the checker has seen entirely, and
  // searches the rest from the first entry it has not seen: linear in the pipes, not the accesses.
  struct History {
    int core = -1;                     // the core whose local buffer this is; -1: GM (every core)
    std::map<int, PipeHistory> pipes;  // pipe index -> its accesses
    size_t size = 0;                   // entries in all
    size_t prune_limit = 64;           // not hardware: total size that triggers the next prune_ordered
  };
  int index(int core, npu::Pipe pipe) const { return core * npu::kPipeCount + static_cast<int>(pipe); }
  History& history(int core, npu::Buffer b);
  struct Earlier {
    int pipe_index, pc;
    bool write;
  };
  void report(const Earlier& earlier, int pipe_index, int pc, bool write, npu::Buffer buffer, int buffer_core,
              uint64_t begin, uint64_t end);
  // Whether every pipe that can access h's buffer (all but S) has seen epoch `epoch` of pipe `pipe_index`
  // (`core`: only that core's pipes; -1 every core's).
  bool seen_by(int core, int pipe_index, uint32_t epoch) const;
  void prune_ordered(History& h);
  void summarise(int pipe_index, Entries& es, Entry& e);

  int cores_;
  SimRecord& record_;
  std::vector<Clock> clocks_;
  std::vector<History> histories_;  // GM: one shared; others per core
  std::map<std::tuple<int, int, int, int>, size_t> race_index_;  // (pc1, pc2, buffer, core) -> record.races
  std::vector<std::vector<uint32_t>> published_;  // per pipe: its own epoch at each sync_all arrival of its core
};

}  // namespace tessel::npu_sim
