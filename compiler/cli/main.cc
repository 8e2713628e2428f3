// tessel: compile tensor operators for a DaVinci-like NPU (simulated) and NVIDIA TensorCores.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "compiler/cli/commands.h"
#include "compiler/cli/run_gpu.h"
#include "compiler/poly/isl_util.h"
#include "isa/base/error.h"
#include "npu_sim/systemc_info.h"
#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_info.h"
#endif

namespace tessel::cli {

std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> registry;
  return registry;
}

}  // namespace tessel::cli

namespace {

std::string version_text() {
  std::string v = std::string("tessel ") + TESSEL_VERSION + "\n  " + tessel::poly::isl_version_string() + "\n  " +
                  tessel::npu_sim::systemc_version();
#ifdef TESSEL_HAVE_CUDA
  v += "\n  NVRTC " + tessel::gpu::nvrtc_version() + " (GPU backend built)";
#else
  v += "\n  GPU backend not built (CUDA toolkit was not found at configure time)";
#endif
  return v;
}

// The whole command set of the CLI; those without a registered implementation say so.
constexpr std::pair<const char*, const char*> kCommands[] = {
    {"compile", "Compile an operator (.tsl) for a target description"},
    {"sim", "Run an NPU program (.npu) on the SystemC simulator"},
    {"run", "Compile, execute and verify an operator against the reference interpreter"},
    {"tune", "Search tile sizes for an operator on a target"},
    {"check-hierarchy", "Validate memory hierarchy descriptions; with two, compare them role by role"},
    {"check", "Parse and check an operator (.tsl) and print its tensor IR"},
    {"bench", "Run a benchmark suite and write a table and JSON"},
};

void add_pending_command(CLI::App& app, tessel::cli::CommandContext& ctx, const char* name, const char* help) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->allow_extras();
  cmd->callback([name = std::string(name), &ctx] {
    std::cerr << "tessel " << name << ": not implemented yet\n";
    ctx.exit_code = 2;
  });
}

// Standard output is a data channel (reports, `tune --propose`, the Dask driver's records): a
// command whose output could not be written failed, whatever it computed. "" when every byte of
// std::cout and stdout reached the file, else the reason.
std::string stdout_failure() {
  errno = 0;
  std::cout.flush();
  const bool ok = static_cast<bool>(std::cout) && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (ok) return "";
  // errno is the reason only when the last flush failed; a larger output failed on an earlier write,
  // whose errno is gone by now
  return errno ? std::strerror(errno) : "an earlier write of the output failed";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessel: a polyhedral tensor compiler for a DaVinci-like NPU and NVIDIA TensorCores"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  tessel::cli::CommandContext ctx;
  auto& registry = tessel::cli::command_registry();
  for (const auto& [name, help] : kCommands) {
    auto it = std::find_if(registry.begin(), registry.end(), [&](const auto& c) { return c.name == name; });
    if (it == registry.end()) add_pending_command(app, ctx, name, help);
  }
  for (const auto& command : registry) command.add(app, ctx);
  bool known_command = argc < 2 || argv[1][0] == '-';
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) known_command |= sub->get_name() == argv[1];
  if (!known_command) {
    std::string known;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
      known += (known.empty() ? "" : ", ") + sub->get_name();
    std::cerr << "tessel: unknown command '" << argv[1] << "' (commands: " << known << "; tessel --help)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;  // usage errors: status 2
  } catch (const tessel::cli::NoGpu& e) {  // a missing GPU: status 2, like a usage error
    std::cerr << "tessel: error: " << e.what() << "\n";
    return 2;
  } catch (const tessel::UserError& e) {
    std::cerr << "tessel: error: " << e.what() << "\n";
    return 1;
  } catch (const tessel::InternalError& e) {
    std::cerr << "tessel: " << e.what() << "\n(this is a bug in tessel, not in your input)\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "tessel: unexpected failure: " << e.what() << "\n";
    return 3;
  }
  if (const std::string why = stdout_failure(); !why.empty()) {
    std::cerr << "tessel: error: cannot write to standard output (" << why << ")\n";
    return ctx.exit_code != 0 ? ctx.exit_code : 1;
  }
  return ctx.exit_code;
}
