// Memory plan (pass "memory_plan", after the partition): the tensors that pass from one kernel of a
// program to a later one (intermediates: written by one kernel, read by another, not outputs of
// the def) share one arena in the outermost memory, a buffer's bytes reused once its last reader
// has run.
//
// Liveness is by kernel: a tensor is live from the kernel that writes it to the last kernel that
// reads it, both included. Offsets are assigned largest buffer first, each at the lowest offset
// (a multiple of `alignment_bytes`) that overlaps no buffer already placed whose live range meets
// its own — the greedy-by-size heuristic of TFLite's and TVM's static planners. The plan reports
// the arena's size (`arena_bytes`) beside the largest set of intermediates live at one kernel
// (`peak_live_bytes`, a lower bound for any plan) and the bytes without reuse (`total_bytes`).
// The def's inputs and outputs are the caller's and are not in the arena.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "compiler/poly/partition.h"

namespace tessel::program {

struct ArenaSlot {
  std::string tensor;
  int64_t bytes = 0;
  int64_t offset = 0;  // from the arena's start, a multiple of the alignment
  int first = 0;       // the kernel that writes it
  int last = 0;        // the last kernel that reads it
};

struct MemoryPlan {
  std::vector<ArenaSlot> slots;  // by offset
  int64_t arena_bytes = 0;
  int64_t peak_live_bytes = 0;
  int64_t total_bytes = 0;
  int64_t alignment_bytes = 1;
  const ArenaSlot* find(const std::string& tensor) const;
  std::string to_string() const;  // one line per slot and a summary line
};

MemoryPlan plan_memory(const ir::Function& f, const poly::ProgramPartition& p, const std::map<std::string, int64_t>& sizes,
                       int64_t alignment_bytes);

}  // namespace tessel::program
