// NPU emitter: kernel IR (compiler/kernel/kernel_ir.h) -> an NPU program (isa/npu_program.h)
// WITHOUT synchronisation; the sync pass (compiler/npu_sync/sync_insertion.h) runs after it.
//
// Mapping (DESIGN.md "The NPU model"), driven by the buffers' roles and the description's numbers:
//   matmul fragments: GM -(MTE2, dma_in_nz)-> L1 stage tile (NZ) -(MTE1, load2d)-> L0A (ZZ) / L0B (ZN)
//   -> cube mmad accumulating in L0C -(V, mov_l0c)-> UB -(MTE3, dma_out)-> GM.
//   Tile sizes come from the kernel's buffers (stage tile = L1 boxes and the accumulator box,
//   operand tile = L0A / L0B boxes), rounded up to the cube's fractal; output tiles (the kernel's
//   parallel_cores loops) are spread over min(cores, tiles) cores; L1, L0A/L0B and UB are
//   double-buffered (ping-pong halves, unrolled statically so every buffer address is a constant and
//   the sync pass sees the halves apart) when both halves fit the level's capacity.
//   Tails (sizes not multiples of 16 or of the tile): reads of whole fractals run past a row or a
//   tensor's end into finite data or zero guard tensors, which only meet zero rows of B or land in
//   rows/columns of C that are never written back; the write-back clips every burst to the tensor.
// Programs this emitter cannot map raise UserError naming the kernel and the reason; so does every
// function that uses floor division or modulo ('/', '%') in an index, range or shape
// (ir::division_use), which no mapping reads yet.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "isa/hierarchy.h"
#include "isa/npu_program.h"

namespace tessel::emit_npu {

struct NpuKernel {
  npu::Program program;            // no syncs yet
  std::vector<std::string> notes;  // the mapping decisions, one line each (tiles, cores, buffering)
  uint64_t macs = 0;               // useful multiply-accumulates (the operator's, not the padding's)
};

NpuKernel emit_npu(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
