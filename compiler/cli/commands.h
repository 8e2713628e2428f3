// Subcommands of the `tessel` binary. Each cmd_*.cc registers one command with
// TESSEL_REGISTER_COMMAND; the registrar adds its options to the app and sets ctx.exit_code from
// its callback. User errors are reported by throwing tessel::UserError: main() prints them and
// exits with status 1. Commands of the CLI whose issue has not landed are listed in main.cc and
// say "not implemented yet" (status 2).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tessel::cli {

struct CommandContext {
  int exit_code = 0;
};

using CommandRegistrar = std::function<void(CLI::App& app, CommandContext& ctx)>;

struct RegisteredCommand {
  std::string name;
  CommandRegistrar add;
};

std::vector<RegisteredCommand>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, CommandRegistrar add) {
    command_registry().push_back({std::move(name), std::move(add)});
  }
};

}  // namespace tessel::cli

#define TESSEL_REGISTER_COMMAND(name, fn) \
  static const ::tessel::cli::CommandRegistration tessel_command_registration_##fn(name, fn)
