// Flags shared by `tessel compile`, `run` and `tune` (defined in cmd_compile.cc): the operator,
// target, description overrides, sizes, tile spec and scheduler options that become a
// tessel::CompileOptions. `--set` alone (add_set_flag) serves the commands that load a description
// without compiling (check-hierarchy, bench, sim).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/pipeline.h"

namespace tessel::cli {

struct PipelineFlags {
  std::string file, def, target = "c", shape, tile, hierarchy, fusion = "max";
  std::vector<std::string> dump_after;
  std::vector<std::string> set;  // --set KEY=VALUE,... (isa/hierarchy_override.h)
  unsigned long max_operations = 2000000;
  bool no_tuned = false;  // --no-tuned: ignore the tuning database
  bool no_online_softmax = false;  // --no-online-softmax: softmaxes stay unfused (poly/online_softmax.h)
  bool no_collapse = false;  // --no-collapse: compile the statements' indices as written (poly::collapse_indices)
  std::string partition = "auto";  // --partition auto|one|split (compiler/poly/partition.h)
};

void add_pipeline_flags(CLI::App* cmd, PipelineFlags& f);
// `--target` (or another option naming a description) into `target`: "c", a path, or a shipped
// description's name (`sm90` for isa/targets/sm90.yaml; isa/shipped_descriptions.h).
CLI::Option* add_target_option(CLI::App* cmd, const std::string& name, std::string& target, const std::string& help);
// `--set KEY=VALUE[,KEY=VALUE...]` (repeatable) into `set`; isa::parse_overrides reads it.
void add_set_flag(CLI::App* cmd, std::vector<std::string>& set);
// The options for compiling `fn`; sizes from --shape plus those inferred (ir::bind_sizes).
CompileOptions to_compile_options(const PipelineFlags& f, const ir::Function& fn);
// {"kind": "policy"|"given"|"tuning_database", "database": FILE, "key": KEY, "cost": .., "unit": ..}
// (the last four for a tuned plan): what reports and the Python result carry.
nlohmann::json plan_source_json(const PlanSource& s);

}  // namespace tessel::cli
