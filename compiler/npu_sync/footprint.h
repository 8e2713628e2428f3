// Static footprints of an NPU program: for every instruction, the byte ranges of each buffer it may
// read or write over all of its dynamic instances, and for every loop its trip count where it is
// known. Input: a validated npu::Program (isa/npu_program.h), usually straight from the NPU emitter.
// Used by the sync pass (compiler/npu_sync/sync_insertion.h) to find pairs of instructions on
// different pipes that may touch the same bytes.
//
// Registers are tracked as integer intervals (abstract interpretation of mov/add/sub/mul/div/shl and
// loop headers, with widening to "unknown" for registers that grow inside loops). An address whose
// base register is unknown covers its whole buffer, so the analysis is conservative: it may report
// a conflict that never happens, never miss one. What each instruction touches is the one footprint
// definition the simulator uses too (isa/npu_footprint.h), evaluated at the upper bounds of its
// operands' ranges; sizes come from the machine model (isa/npu_machine.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "isa/hierarchy.h"
#include "isa/npu_program.h"

namespace tessel::npu_sync {

struct ByteRange {
  npu::Buffer buffer = npu::Buffer::GM;
  bool write = false;
  int64_t begin = 0, end = 0;  // [begin, end) bytes; the hull over every dynamic instance
};

struct StaticFootprints {
  std::vector<std::vector<ByteRange>> accesses;   // per instruction index (empty: scalar / sync)
  std::vector<std::optional<int64_t>> trip_count;  // per `loop` index: iterations when known
  std::vector<int64_t> min_trip_count;             // per `loop` index: iterations it runs at least (0: may run none)
};

StaticFootprints analyse_footprints(const npu::Program& program, const isa::Hierarchy& target);

// True when two instructions' footprints overlap in some buffer with at least one of them writing.
bool conflict(const std::vector<ByteRange>& a, const std::vector<ByteRange>& b);

}  // namespace tessel::npu_sync
