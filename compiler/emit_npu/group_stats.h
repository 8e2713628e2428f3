// Group statistics kernels on the vector unit (README "Group statistics"): group norm over
// X[N, I, G, E] — statistics per (n, g) over (i, e). Every statement is one of
//   full:    F(n, i, g, e) = expr(full values at (n, i, g, e), per-group values at (n, g),
//            parameters at (g, e), constants)
//   group:   V(n, g) = expr(per-group values, constants)
//   reduce:  V(n, g) +=! expr(as full)   (a sum over i and e from 0)
// all f32, E dividing one repeat of f32 lanes in whole blocks, every output full. A core takes whole
// groups (group j on core j mod cores): the group's I x E values come into UB once (in chunks, so
// the first sums start on the first chunk), every statement runs on them there in program order
// (a full result overwrites the full value its statement reads last), per-group values are one
// repeat each, read with repeat stride 0, subexpressions of per-group values alone are computed
// once per group, and only the outputs go back to GM: X read once, Y written once, no barrier.
// Sums are folded pairwise within a chunk, then across chunks and lanes (reassociated, within the
// f32 sum tolerance). Part of compiler/emit_npu: emit_npu() tries it before the vector templates.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// "" when emit_group_stats maps the kernel, else why not (never throws).
std::string why_not_group_stats(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
NpuKernel emit_group_stats(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
