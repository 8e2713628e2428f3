// tessel check OP.tsl [--def NAME]: parse and check an operator and print its tensor IR.
#include <iostream>

#include "compiler/cli/commands.h"
#include "compiler/frontend/frontend.h"

namespace tessel::cli {
namespace {

void add_check_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    std::string file;
    std::string def;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("check", "Parse and check an operator (.tsl) and print its tensor IR");
  cmd->add_option("file", opts->file, "operator definition (.tsl)")->required();
  cmd->add_option("--def", opts->def, "the operator to print (default: every def of the file)");
  cmd->callback([opts] {
    const frontend::Module m = frontend::load_module(opts->file);
    if (!opts->def.empty()) {
      std::cout << ir::to_string(frontend::select_function(m, opts->def));
      return;
    }
    for (size_t i = 0; i < m.functions.size(); ++i) std::cout << (i ? "\n" : "") << ir::to_string(m.functions[i]);
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("check", add_check_command);

}  // namespace tessel::cli
