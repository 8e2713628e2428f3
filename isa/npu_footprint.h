// What an NPU instruction reads and writes: the one footprint definition behind the simulator's
// exact accesses (npu_sim/semantics.cc: bounds checks, race detector, peak occupancy) and the sync
// pass's intervals (compiler/npu_sync/footprint.cc). The accesses come from the instruction table's
// access column (isa/npu_isa.def): per access, its address operand, read or write, and a formula
// family (npu::Extent) over operands; this file holds the formulas, with the machine's numbers.
//
// Input: an instruction, an OperandValues that says what its value operands are, the NpuMachine.
// Output: one AccessPattern per access, in the table's order: the buffer, read or write, and the
// bytes relative to the address operand's byte offset, as a two-level strided pattern
//   for o < outer_count, i < inner_count: [o * outer_stride + i * inner_stride, + piece_bytes).
// Contract: given exact values (the simulator) the pattern is exactly the bytes the instruction
// touches. Every formula is non-decreasing in every value operand (counts, strides, sizes), so
// given upper bounds of non-negative ranges (the sync pass) span() bounds the hull of every
// instance: the two sides cannot drift apart. The table's access order is the order the simulator
// reports them in.
// Rules: each family checks the operand rules its formula assumes (positive counts, non-negative
// strides, fractal multiples, repeat within max_repeat, img2col geometry set). A broken rule goes
// to OperandValues::reject: the simulator faults there; the sync pass, whose values are bounds and
// not instances, carries on, and an access that cannot be bounded at all is marked `unbounded`.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "isa/npu_machine.h"
#include "isa/npu_program.h"

namespace tessel::isa {

using WideInt = __int128;  // pattern arithmetic never overflows, whatever the operands say

// Where operand values come from: exact values, or bounds of what they may be.
class OperandValues {
 public:
  virtual ~OperandValues() = default;
  virtual int64_t value(int operand) const = 0;  // a value operand: exact, or an upper bound
  virtual int64_t fmatrix(int field) const = 0;  // set_fmatrix's operands (H, W, pads, strides, kernel, dilation)
  virtual bool known_nonzero(int operand) const = 0;    // a ReadUnlessSet access's flag is set for sure
  virtual void reject(const std::string& rule) const = 0;  // an operand rule broke (see the header)
};

struct AccessPattern {
  npu::Buffer buffer = npu::Buffer::GM;
  bool write = false;
  int address_operand = -1;
  WideInt outer_count = 1, outer_stride = 0, inner_count = 1, inner_stride = 0, piece_bytes = 0;
  bool unbounded = false;  // no bound could be given (bounds only): the whole buffer

  // Bytes from the address to the end of the last piece (the hull, for non-negative strides).
  WideInt span() const { return (outer_count - 1) * outer_stride + (inner_count - 1) * inner_stride + piece_bytes; }
  WideInt bytes() const { return outer_count * inner_count * piece_bytes; }  // pieces do not overlap
  template <class F>  // f(offset, bytes) for every piece, outer-major
  void for_each_piece(F&& f) const {
    for (WideInt o = 0; o < outer_count; ++o)
      for (WideInt i = 0; i < inner_count; ++i) f(o * outer_stride + i * inner_stride, piece_bytes);
  }
};

struct Footprint {
  int count = 0;
  std::array<AccessPattern, npu::kMaxAccesses> access;
};

// The instruction's accesses (none for scalar and sync instructions). A ReadUnlessSet access is
// left out when its flag is known to be non-zero.
Footprint footprint(const NpuMachine& m, const npu::Instruction& in, const OperandValues& values);

}  // namespace tessel::isa
