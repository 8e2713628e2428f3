// Program partition (pass "partition", the first step of compile_program, before any isl work):
// a def of many statements (a model layer, a whole network) is cut into kernels along its
// statement dependence graph, so each kernel is scheduled by isl on its own and compile time grows
// with the program instead of with one ILP over every statement.
//
// Takes a tensor-IR Function; gives groups of its statements (each becomes one kernel) and, per
// statement, the reason it started a group or joined one (what `--explain` prints). Nothing is
// rewritten here; kernel_function() cuts one group out as a Function of its own: tensors written
// in the group and read by a later group (or outputs of the def) are its outputs, tensors it
// reads from outside are its inputs, the rest stay locals.
//
// Algorithm:
//   1. The dependence graph (Boost.Graph): an edge from the statement that writes a tensor to
//      every later statement that reads or writes it. Statements that write the same tensor
//      (an init `=` then `+=` updates) get edges both ways, so strongly connected components
//      keep them together: a tensor is written by one kernel.
//   2. The components in program order are units. A unit with a contraction (a sum over indices
//      of a product of two different tensor reads: a GEMM, a convolution, a batched matmul)
//      anchors a group.
//   3. A unit joins the current group when
//        - the group is anchored by a contraction, and the unit is element-wise (no reduction),
//          reads a tensor the group writes, and iterates over exactly the anchor's output space
//          (same number of points per dimension): an epilogue (bias, activation, residual, scale),
//          which the cube and tensor-core templates carry out in the contraction's tile; or
//        - the group has no contraction, the unit has none either, the unit reads a tensor the
//          group writes (a chain: softmax, layer norm), and the group stays under
//          kMaxVectorStatements statements;
//      otherwise it starts a new group.
//   4. Statement sets given as `fused` (a softmax fused into its context contraction,
//      compiler/poly/online_softmax.h) are one unit, placed where their last statement is (every
//      tensor they read is written before it, what they write is read only after it), and one
//      kernel of their own that nothing joins.
// Mode Auto cuts only a def with two or more contraction units or more than kMaxOneKernelStatements
// statements (a single operator with its epilogue, or softmax, stays one kernel as before);
// One never cuts; Split always applies the rules.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

enum class PartitionMode { Auto, One, Split };
// "auto", "one", "split"; UserError otherwise (names `flag`)
PartitionMode parse_partition_mode(const std::string& text, const std::string& flag);

inline constexpr int kMaxVectorStatements = 8;
inline constexpr int kMaxOneKernelStatements = 12;

struct KernelGroup {
  std::vector<int> statements;  // indices into Function::statements, program order
  int anchor = -1;              // the contraction statement, -1: an element-wise / row group
  std::string name;             // "<def>_k<i>": the kernel's function name
  bool fused = false;           // one of the `fused` statement sets (an online softmax)
};

struct ProgramPartition {
  std::vector<KernelGroup> groups;
  std::vector<std::string> decisions;  // one line per statement: which group and why
  int contraction_units = 0;
  bool cut() const { return groups.size() > 1; }
};

// A statement that sums a product of two tensor reads over at least one reduction index (not the
// square of one read: a sum of squares is a row reduction).
bool is_contraction(const ir::Statement& s);

ProgramPartition partition_program(const ir::Function& f, PartitionMode mode,
                                   const std::vector<std::vector<int>>& fused = {});

// Group `g` of `p` as a Function of its own (see the header comment); `f` is the partitioned def.
ir::Function kernel_function(const ir::Function& f, const ProgramPartition& p, size_t g);

// For each tensor, the groups that write and read it: producer (-1: a def input) and the last group
// that reads it (-1: none). What the memory plan and the runners use.
struct TensorUse {
  int producer = -1;
  int last_reader = -1;
};
std::map<std::string, TensorUse> tensor_uses(const ir::Function& f, const ProgramPartition& p);

std::string to_string(const ProgramPartition& p, const ir::Function& f);

}  // namespace tessel::poly
