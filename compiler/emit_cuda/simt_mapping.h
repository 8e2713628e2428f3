// The SIMT walk's per-group mapping decisions (emit_simt.h), from the kernel IR and the machine
// model: how many threads a group's blocks have, which of its boxes need no staging in shared
// memory, and whether its index arithmetic fits 32 bits. Takes a kernel (and one top-level group of its body); gives plain values the walk carries
// out. Run by emit_simt for each group; tests call them directly.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

// Threads of a SIMT block unless a group has fewer block tiles than SMs.
constexpr unsigned kSimtThreads = 256;

// Threads of a group's blocks: kSimtThreads, or, where the group has fewer block tiles (`blocks`)
// than the machine has SMs (a tile's work then decides the time), doubled up to the machine's
// block limit while each thread keeps at least 4 elements of the group's largest buffer.
unsigned simt_block_threads(const kernel::Kernel& k, const isa::GpuMachine& m, const std::set<int>& buffers, int64_t blocks);

// Boxes of a group that are not staged in shared memory.
//   in:  copy-in boxes of an input (or of a temporary an earlier kernel wrote and this group does
//        not) filled only by copies from global memory and read only by compute statements, each
//        read walking the tensor's contiguous last dim with the index the block's threads take
//        innermost (the statement's last output index, or its last reduction index), so a warp's
//        reads coalesce: the statements read the tensor itself. A box read across the threads'
//        order (a transpose's input) keeps its coalescing copy.
//   out: copy-out boxes only copied out, written only by element-wise statements (no reduction:
//        no init, no read-back) whose output's last index is one bare index, and read by nothing:
//        the statements write the tensor itself.
struct SimtDirectBuffers {
  std::set<int> in, out;
};
SimtDirectBuffers simt_direct_buffers(const kernel::Kernel& k, const kernel::NodePtr& group);

// The grid of a group: its perfectly nested ParallelCores loops with constant bounds that carry
// no dependence, their trip counts and the number of block tiles. Tile t's loop values: the last
// loop fastest (t = sum over d of iteration_d x the trips of the loops after d).
struct GridLoops {
  std::vector<const kernel::Node*> loops;
  std::vector<int64_t> trips;
  int64_t blocks = 1;
};
GridLoops grid_loops(const kernel::Node& root);

// The buffers a group's nodes read or write (copies, compute bindings, matmul fragments).
std::set<int> simt_buffers_used(const kernel::Node& group);

// Whether every index value of the kernel fits 32-bit arithmetic with room to spare: tensor and
// buffer element counts and sizes below 2^30 (linear offsets, loop bounds and tile origins are
// bounded by them). 64-bit division and remainder are long instruction sequences on the GPU.
bool simt_narrow_indices(const kernel::Kernel& k);

// The index lists of tensor `t`'s reads in `e`.
void reads_of(const ir::Expr& e, const std::string& t, std::vector<const std::vector<ir::AffineExpr>*>& out);

}  // namespace tessel::emit_cuda
