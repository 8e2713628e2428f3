// Kernel IR construction (pass "kernel"): generates the AST of the tiled schedule with isl's
// ast_build and turns it into the kernel IR loop tree. Loops get their kind from the schedule
// dimension they iterate (TiledProgram::dim_kind) and `parallel` from the dependences
// (compiler/poly/parallelism.h); marker statements become Let bindings of tile
// origins followed by the copies promotion planned; statements become Compute nodes bound to their
// group's buffers; fragments become Matmul nodes. Runs after promote.
#pragma once

#include <string>

#include "compiler/kernel/kernel_ir.h"
#include "compiler/poly/dependences.h"
#include "compiler/poly/promotion.h"
#include "compiler/poly/scop.h"
#include "compiler/poly/tiling.h"
#include "isa/hierarchy.h"

namespace tessel::poly {

kernel::Kernel build_kernel(const Scop& scop, const Dependences& deps, const TiledProgram& tiled,
                            const Promotion& promotion, const isa::Hierarchy& h);

}  // namespace tessel::poly
