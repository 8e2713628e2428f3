// tessel check-hierarchy A.yaml [B.yaml] [--device]
#include <iostream>

#include "compiler/cli/commands.h"
#include "compiler/cli/pipeline_flags.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_report.h"
#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/device_query.h"
#endif

namespace tessel::cli {
namespace {

// --device: each description against GPU 0. Exit status 0 when every checked property agrees, 1 on a
// mismatch, 2 when there is no GPU or tessel was built without the GPU backend.
int compare_with_device(const std::vector<isa::Hierarchy>& hs) {
#ifdef TESSEL_HAVE_CUDA
  for (const isa::Hierarchy& h : hs) gpu::require_gpu_description(h);
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::cerr << "tessel check-hierarchy --device: no GPU to compare with: " << why << "\n";
    return 2;
  }
  const gpu::DeviceInfo device = gpu::query_device(0);
  int mismatches = 0;
  for (const isa::Hierarchy& h : hs) {
    const auto rows = gpu::compare_with_device(h, device);
    std::cout << "\n" << gpu::format_device_comparison(h, device, rows);
    mismatches += gpu::count_mismatches(rows);
  }
  return mismatches ? 1 : 0;
#else
  (void)hs;
  std::cerr << "tessel check-hierarchy --device: the GPU backend was not built (the CUDA toolkit was not found at "
               "configure time)\n";
  return 2;
#endif
}

void add_check_hierarchy_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    std::vector<std::string> files;
    bool device = false;
    std::vector<std::string> set;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "check-hierarchy", "Validate memory hierarchy descriptions; with two, compare them role by role");
  cmd->add_option("files", opts->files, "one or two hierarchy descriptions (isa/targets/*.yaml)")
      ->required()
      ->expected(1, 2);
  cmd->add_flag("--device", opts->device, "compare a GPU description with the GPU present on this machine");
  add_set_flag(cmd, opts->set);
  cmd->callback([opts, &ctx] {
    std::vector<isa::Hierarchy> hs;
    const isa::Overrides overrides = isa::parse_overrides(opts->set);
    for (const std::string& f : opts->files) {
      hs.push_back(isa::load_hierarchy(f, overrides));
      if (opts->files.size() == 1) std::cout << isa::describe_hierarchy(hs.back());
      std::cout << f << ": valid " << isa::target_kind_name(hs.back().kind) << " description '" << hs.back().name
                << "', hash " << hs.back().description_hash
                << (overrides.empty() ? "" : " (--set " + overrides.text() + ")") << "\n";
    }
    if (hs.size() == 2) {
      std::cout << "\n" << isa::format_comparison(hs[0], hs[1], isa::compare_hierarchies(hs[0], hs[1]));
    }
    if (opts->device) ctx.exit_code = compare_with_device(hs);
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("check-hierarchy", add_check_hierarchy_command);

}  // namespace tessel::cli
