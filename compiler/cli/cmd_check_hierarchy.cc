// tessel check-hierarchy A.yaml [B.yaml] [--device]
#include <iostream>

#include "compiler/cli/commands.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_report.h"

namespace tessel::cli {
namespace {

void add_check_hierarchy_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    std::vector<std::string> files;
    bool device = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "check-hierarchy", "Validate memory hierarchy descriptions; with two, compare them role by role");
  cmd->add_option("files", opts->files, "one or two hierarchy descriptions (isa/targets/*.yaml)")
      ->required()
      ->expected(1, 2);
  cmd->add_flag("--device", opts->device, "compare a GPU description with the GPU present on this machine");
  cmd->callback([opts, &ctx] {
    std::vector<isa::Hierarchy> hs;
    for (const std::string& f : opts->files) {
      hs.push_back(isa::load_hierarchy(f));
      if (opts->files.size() == 1) std::cout << isa::describe_hierarchy(hs.back());
      std::cout << f << ": valid " << isa::target_kind_name(hs.back().kind) << " description '" << hs.back().name
                << "'\n";
    }
    if (hs.size() == 2) {
      std::cout << "\n" << isa::format_comparison(hs[0], hs[1], isa::compare_hierarchies(hs[0], hs[1]));
    }
    if (opts->device) {
      std::cerr << "tessel check-hierarchy --device: not implemented yet (GPU backend issue)\n";
      ctx.exit_code = 2;
    }
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("check-hierarchy", add_check_hierarchy_command);

}  // namespace tessel::cli
