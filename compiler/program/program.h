// A program: a def compiled as a sequence of kernels (compile_program). The def is partitioned
// along its dependence graph (compiler/poly/partition.h), each group is cut out as a Function of
// its own and compiled by the one-kernel pipeline (compiler/pipeline.h, its own isl context and
// schedule), and the tensors passed between kernels get a memory plan (memory_plan.h). A def the
// partition keeps whole compiles exactly as `compile` does (one kernel, the def itself).
//
// A kernel with quasi-affine accesses (`/`, `%` in indices) is scheduled without isl
// fusion (isl's ILP over them can run for minutes without
// reaching the operation quota); its statements are still grouped by the post-tiling fusion.
// Zero-padding statements are folded into their readers first (compiler/poly/fold_padding.h), so a
// padded convolution stays one kernel and no padded copy is materialised between kernels.
// Sizes are bound once for the whole def (ir::bind_sizes) and each kernel gets the ones it uses.
// A user tile spec or GPU plan names one kernel's loops, so it is refused for a def that compiles
// to several kernels (the error says which and how to keep one kernel: --partition one).
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/poly/partition.h"
#include "compiler/program/memory_plan.h"

namespace tessel::program {

struct ProgramCompilation {
  const ir::Function* def = nullptr;          // what the user wrote: the outputs and the reference
  std::optional<ir::Function> folded;          // the def with zero-padding statements folded (poly::fold_padding)
  const ir::Function* partitioned = nullptr;  // what the partition cut: `folded` or the def
  poly::ProgramPartition partition;
  std::vector<std::unique_ptr<ir::Function>> functions;  // the kernels' functions (each Compilation points at one)
  std::vector<std::unique_ptr<Compilation>> kernels;     // in execution order
  std::map<std::string, int64_t> sizes;                  // the def's, all bound
  MemoryPlan memory;
  // the online-softmax rewrite over the def, one line per softmax it found: where it applied, or
  // why not (the target cannot lower it, --no-online-softmax, --partition one)
  std::vector<std::string> online_softmax;
  std::string partition_note;  // non-empty: `auto` cut a def it would keep whole, and why
  double partition_ms = 0;
  double total_ms = 0;      // wall time: partition, every kernel's passes, the memory plan
  double total_cpu_ms = 0;  // the kernels' thread CPU time
  bool single() const { return kernels.size() == 1; }
};

std::unique_ptr<ProgramCompilation> compile_program(const ir::Function& f, const CompileOptions& options,
                                                    poly::PartitionMode mode);

// Kernel `g` as the user wrote it, for the reference interpreter: the def's own statements of that
// group, with the zero-padding statements fold_padding removed put back in every group that reads
// them (the interpreter cannot read the shifted accesses of the folded function outside a tensor).
// Its outputs include those of the compiled kernel (`kernels[g]->function`), which it computes
// from the same inputs; what `tessel run` checks a program's kernels one by one with.
ir::Function reference_kernel_function(const ProgramCompilation& p, size_t g);

// --explain's section: the groups, why each statement went where, the memory plan.
std::string explain_program(const ProgramCompilation& p);

}  // namespace tessel::program
