// NPU mapping of a gather along a table's outer axis written as a one-hot sum (how tessel import
// writes ONNX Gather with data indices, compiler/onnx/ops_index.cc):
//   Y(p.., q..) +=! select(I(p..) == r0 [|| I(p..) == r0 - D], X(r0, q..), 0),  r0 in 0:D
// Each row p of Y is row I(p) of X (with the second test, I(p) + D for I(p) < 0), or zeros where
// no r0 matches. Instead of the one-hot sum's N x D x row-length work (every core reading the whole
// table), the scalar unit reads I(p) from GM (`ld`), the row's address is computed from it, and one
// DMA brings X's row into UB and one writes it to Y: rows are spread over the cores (row p on core
// p mod cores), two UB slots alternate so a row's DMA in overlaps the previous row's DMA out. An
// index that selects no row fetches row 0 and a 0/1-trip loop zeroes it before it is written.
// Rows longer than half of UB move in pieces. Bit-exact (bytes are moved, never computed).
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when the kernel is that gather, else the UserError text saying why not; never throws.
std::string why_not_gather(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// For that gather: "" when emit_gather maps it, else why it does not fit (a row in too many UB
// pieces); "" for another kernel. Never throws.
std::string why_not_gather_fit(const kernel::Kernel& kernel, const isa::Hierarchy& target);
NpuKernel emit_gather(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
