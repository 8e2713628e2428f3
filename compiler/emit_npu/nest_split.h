// Reductions combined across cores (the general vector lowering, nest.h): a reduction whose output
// is too small to give every core work (a sum over every element, statistics per channel or per
// group over the other axes) is split over the cores along a reduced index.
//
// Input: a kernel the general lowering takes, and the machine model. Analysis (plan_split): every
// statement that is an initialised Sum / Max / Min (not an f16 sum: it keeps the interpreter's
// order) over a reduced index of constant range starting at 0, whose output fills less than a vector repeat per core, is split along its first reduced
// index into K parts: the fewest that give min(K x outputs, cores) cores a share, then more while
// the partial alone, emitted, runs on more cores (choose_parts: an output along the lanes gives no
// cores). It is taken where the estimate of the reduction on the cores of the kernel as one phase,
// against the same on the split's cores (its reads at their GM bandwidth within the shared one,
// plus one vector repeat per `lanes used` elements: the widest read's last dimension up to a
// repeat), saves more than a cross-core barrier, a GM read and a GM write latency, and the partial
// runs on at least twice the cores.
// Phases: a partial runs alone; its combine opens the next phase with the statements after it
// whose outputs are no larger (statistics), and a larger statement opens another (the
// normalisation on its own cores).
// Rewriting: statement S: Y(o) op=! f(.., r, ..) becomes
//   Y_partial(kc, o) op=! f(.., kc * C + rc, ..)     kc in 0:K, rc in 0:C, C = extent / K
// then a sync_all, then the combine Y(o) op=! Y_partial(kc, o). Each phase is one run of the general lowering (its own cores, tiles and pipeline) over a
// function holding every tensor of the kernel plus the partials, every tensor a phase may hand to a
// later one stored in GM; the phases are bound to the same GM offsets (checked) and their code is
// concatenated, each phase's run by the cores it uses (a loop of one trip on core_id < cores_j),
// with a sync_all between phases: the partials (a kernel-internal GM scratch, `Y_partial`) written
// by any core are read after it by the combine. Output: NpuKernel, or nullopt where nothing is
// split (the kernel then runs as one phase, as before).
#pragma once

#include <optional>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

std::optional<NpuKernel> emit_split_reductions(const kernel::Kernel& kernel, const isa::Hierarchy& target);

}  // namespace tessel::emit_npu
