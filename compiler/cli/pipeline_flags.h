// Flags shared by `tessel compile` and `tessel run` (defined in cmd_compile.cc): the operator,
// target, sizes, tile spec and scheduler options that become a tessel::CompileOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "compiler/pipeline.h"

namespace tessel::cli {

struct PipelineFlags {
  std::string file, def, target = "c", shape, tile, hierarchy, fusion = "max";
  std::vector<std::string> dump_after;
  unsigned long max_operations = 2000000;
};

void add_pipeline_flags(CLI::App* cmd, PipelineFlags& f);
// The options for compiling `fn`; sizes from --shape plus those inferred (ir::bind_sizes).
CompileOptions to_compile_options(const PipelineFlags& f, const ir::Function& fn);

}  // namespace tessel::cli
