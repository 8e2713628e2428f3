// The cycle-approximate SystemC model of the NPU (DESIGN.md "The NPU model", isa/README.md).
//
// Per core one SC_THREAD per pipe: S runs the program (loops, registers) and dispatches every other
// instruction into the bounded in-order queue of its pipe; each pipe thread waits once per
// instruction for its occupancy. Flags, barriers, the shared GM bandwidth and the happens-before
// race detector live here; what happened is written into a SimRecord.
//
// Runs may follow each other in one process (not concurrently: SystemC has one kernel per process): each run spawns its own threads and SystemC's time
// simply goes on (cycles are counted from the run's start).
#pragma once

#include <map>
#include <string>

#include "isa/base/error.h"
#include "isa/base/npy.h"
#include "isa/hierarchy.h"
#include "isa/npu_program.h"
#include "npu_sim/record.h"

namespace tessel::npu_sim {

// A run's length is bounded twice: in cycles of the scalar pipe, and in executed instructions (the
// record keeps one event per executed instruction, so this bounds its memory: ~56 bytes each).
inline constexpr uint64_t kDefaultMaxCycles = 10'000'000'000;       // 10 s of a 1 GHz device
inline constexpr uint64_t kMaxCyclesLimit = 1'000'000'000'000'000;  // SystemC time stays far from wrapping
inline constexpr uint64_t kDefaultMaxRecordedEvents = uint64_t(1) << 23;  // ~0.5 GB of record
// Programs tessel generated (`run`, `tune`, `bench npu`) end by construction; their budget only
// keeps a run that large from exhausting memory (the ResNet-50 conv+bn+relu seed shape of
// `tessel bench npu` records about 2^24.6 events, 1.4 GB).
inline constexpr uint64_t kGeneratedProgramMaxEvents = uint64_t(1) << 26;  // ~3.8 GB of record

// A run stopped by one of the bounds above (--max-cycles, the instruction limit): the program may be
// right but too long for them, unlike every other UserError of the simulator, which says that the
// program is malformed or faults (for a program tessel emitted, a tessel bug: compiler/cli/run_npu.cc).
class RunLimit : public UserError {
 public:
  using UserError::UserError;
};

struct SimOptions {
  bool timing_only = false;  // skip the arithmetic (and buffer contents); timing and checks stay
  bool detect_races = true;
  // A run whose scalar pipe passes this cycle stops with a UserError naming the instruction; at most
  // kMaxCyclesLimit; 0 means kDefaultMaxCycles (callers that brace-initialise this with 0 stay bounded).
  uint64_t max_cycles = kDefaultMaxCycles;
  // A run that executes more instructions (and stalls) than this stops with a UserError naming the instruction.
  uint64_t max_recorded_events = kDefaultMaxRecordedEvents;
  // Keep per-instruction totals instead of every event (SimRecord::folded): the record's memory is
  // bounded by the program (cores x instructions), so max_recorded_events then limits only the
  // instructions executed (a runaway loop still stops), not memory.
  bool fold_events = false;
};

// GM's bytes, mapped as zero pages that the kernel backs only when they are first touched: a program
// that declares a large tensor and touches little of it costs what it touches, not what it declares.
class GmBytes {
 public:
  GmBytes() = default;
  GmBytes(GmBytes&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  GmBytes& operator=(GmBytes&& o) noexcept;
  GmBytes(const GmBytes&) = delete;
  GmBytes& operator=(const GmBytes&) = delete;
  ~GmBytes();
  void allocate(uint64_t bytes);  // zero-filled (untouched); UserError when the mapping is refused
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const uint8_t* begin() const { return data_; }
  const uint8_t* end() const { return data_ + size_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

struct SimResult {
  SimRecord record;
  GmBytes gm;  // final GM bytes (empty in timing-only runs)
  // The final contents of a declared tensor. Throws UserError for an unknown name or a timing-only run.
  NpyArray tensor(const npu::Program& program, const std::string& name) const;
};

// Runs `program` on the machine `target` describes. `inputs` binds tensors by name; every tensor
// with role `in` must be bound (except in timing-only runs), with its declared dtype and shape.
// Throws UserError for bad bindings and for an instruction the machine cannot execute (naming it).
// A deadlock or races do not throw: they are in the record.
SimResult simulate(const npu::Program& program, const isa::Hierarchy& target,
                   const std::map<std::string, NpyArray>& inputs, const SimOptions& options = {});

// simulate() for a program tessel emitted (`tessel run`, `bench npu`): its refusal by the simulator
// (malformed, misaligned, out of range, a fault) is tessel's fault, so every UserError but RunLimit
// becomes an InternalError "tessel bug: the simulator refused the program tessel emitted for
// operator 'NAME' on TARGET: <the simulator's message, naming the instruction>" (exit 3).
SimResult simulate_emitted(const npu::Program& program, const isa::Hierarchy& target,
                           const std::map<std::string, NpyArray>& inputs, const SimOptions& options);

}  // namespace tessel::npu_sim
