// The pipeline's fit failure as a value (compiler/pipeline.h runs the passes; defined in pipeline.cc).
//
// compile() throws a UserError where no default tile of a def fits the target's levels (the tile
// pass's default, shrunk up to 12 times by promotion's overflow reports, still overflows a level
// that limits the mapping: the cube's operand levels on the NPU). A caller that has another way to
// map such a def (compiler/program: `--partition auto` cuts it into kernels of their own) asks
// compile_unless_no_tile_fits instead and decides on the answer; every other error still throws.
#pragma once

#include <memory>
#include <string>

#include "compiler/pipeline.h"

namespace tessel {

// Either a compilation (no_tile_fits empty) or no compilation and why no tile fits:
// "<def>: no tile fits <target>: the default tile, shrunk to <spec>, still does not fit: <overflow>; ...".
struct CompileFit {
  std::unique_ptr<Compilation> compilation;
  std::string no_tile_fits;
};
CompileFit compile_unless_no_tile_fits(const ir::Function& f, const CompileOptions& options);

}  // namespace tessel
