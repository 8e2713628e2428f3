// What one NPU instruction does, independent of time: which bytes it reads and writes (its
// footprint, for bounds checks and the race detector: the exact side of the one footprint
// definition, isa/npu_footprint.h), what it costs (occupancy and latency from the isa::NpuMachine,
// isa/README.md "Timing"), and its effect on the buffers (bit-exact arithmetic).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "isa/npu_program.h"
#include "isa/npu_machine.h"

namespace tessel::npu_sim {

// An instruction as the scalar pipe dispatched it: every register operand already read, plus a
// snapshot of the special registers (vector mask, img2col geometry) at dispatch time.
struct IssuedInstruction {
  int pc = 0;
  int core = 0;
  const npu::Instruction* instr = nullptr;
  std::array<int64_t, npu::kMaxOperands> value{};  // integer value of each operand (address: byte offset)
  double scalar = 0;                               // the value of an 'f' operand
  uint64_t mask_hi = ~0ull, mask_lo = ~0ull;
  std::array<int64_t, 12> fmatrix{};  // H, W, pads t/b/l/r, stride h/w, kernel h/w, dilation h/w
};

struct Interval {
  uint64_t begin = 0, end = 0;  // bytes [begin, end)
};

struct Access {
  npu::Buffer buffer = npu::Buffer::GM;
  bool write = false;
  std::vector<Interval> ranges;  // sorted by begin, adjacent ranges merged
  uint64_t lo = 0, hi = 0;       // hull
};

struct InstructionCost {
  uint64_t occupancy_cycles = 0;  // how long the instruction holds its pipe
  uint64_t latency_cycles = 0;    // after the occupancy, until its results are visible
  uint64_t bytes = 0;             // bytes written to the destination (copies)
  uint64_t gm_bytes = 0;          // GM bytes moved: the GM granules (granularity_bytes) the copy touches
  int path_from = -1, path_to = -1;
  bool uses_gm = false;           // competes for the shared GM bandwidth
  uint64_t macs = 0;              // cube: multiply-accumulates
  bool i8 = false;                // cube: the i8 shape (else f16)
  uint64_t repeats = 0;           // vector: repeats
};

// Cycle arithmetic saturates at kSaturatedCycles instead of wrapping (a tiny bandwidth can make a
// transfer last longer than 64 bits of cycles); the simulator stops any run that reaches
// --max-cycles, which is far below it, so a saturated count is always reported as that limit.
inline constexpr uint64_t kSaturatedCycles = uint64_t(1) << 62;
uint64_t cycles_for(uint64_t bytes, double bytes_per_cycle);  // ceil(bytes / rate), saturating
inline uint64_t add_cycles(uint64_t a, uint64_t b) { return a >= kSaturatedCycles - std::min(b, kSaturatedCycles) ? kSaturatedCycles : a + b; }

// Raised for an instruction the machine cannot execute (out of range, misaligned, bad count); the
// simulator turns it into a UserError naming the instruction.
struct InstructionFault {
  std::string reason;
};

// The bytes of one core's view of memory: GM (shared) and the core's own buffers. In timing-only
// runs the bases are null and only the sizes (what an address may reach) are set.
struct MemoryView {
  std::array<uint8_t*, npu::kBufferCount> base{};
  std::array<uint64_t, npu::kBufferCount> size{};
};

// The footprint and cost of a compute or copy instruction (not sync, not scalar): one Access per
// access of the instruction table's access column, in its order. Throws InstructionFault when an
// access leaves its buffer, starts misaligned or breaks an operand rule.
void describe_instruction(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem,
                          std::vector<Access>& accesses, InstructionCost& cost);

// The value `ld` reads (after describe_instruction accepted it): the i32 at its GM address, 0 in
// timing-only runs (no bytes; a data-dependent address then reads row 0 of whatever it indexes).
int64_t scalar_load(const IssuedInstruction& in, const MemoryView& mem);

// Applies the instruction's effect. Call after describe_instruction accepted it.
void execute_instruction(const isa::NpuMachine& m, const IssuedInstruction& in, const MemoryView& mem);

}  // namespace tessel::npu_sim
