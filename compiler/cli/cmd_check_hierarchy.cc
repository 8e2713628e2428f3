// tessel check-hierarchy A.yaml [B.yaml] [--device [--measure [--write-measured OUT.yaml]]]
//
// --device compares a GPU description's properties with GPU 0 (exit 1 on a mismatch, naming a
// description beside it that agrees with the device, if one does). --measure (one description)
// also runs the microbenchmarks (gpu_backend/microbench.h) and compares each measured figure with
// the description's within its tolerance (isa/measured_figures.h); a figure beyond tolerance is a
// "mismatch:" line with both values and makes the exit status 1, like a property mismatch (the
// table is printed either way). --write-measured OUT.yaml then saves the measured variant, checked
// by the same parser before it is written, whatever the exit status.
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>

#include "compiler/cli/commands.h"
#include "compiler/cli/pipeline_flags.h"
#include "isa/base/error.h"
#include "isa/base/file_io.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_report.h"
#include "isa/measured_figures.h"
#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/device_query.h"
#include "gpu_backend/microbench.h"
#endif

namespace tessel::cli {
namespace {

struct Options {
  std::vector<std::string> files;
  bool device = false, measure = false;
  std::string write_measured;
  std::vector<std::string> set;  // --set overrides (isa/hierarchy_override.h)
};

std::string today() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

std::string read_description_text(const std::string& path) {
  return read_bounded_file(path, "hierarchy description (read again for --write-measured)", kMaxDescriptionBytes);
}

#ifdef TESSEL_HAVE_CUDA
// The GPU descriptions beside `file` (its directory) whose every checked property agrees with the
// device: what to use instead of a description that does not (issue 17 item 16).
std::vector<std::string> agreeing_descriptions(const std::string& file, const gpu::DeviceInfo& device) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path dir = fs::path(file).parent_path().empty() ? fs::path(".") : fs::path(file).parent_path();
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".yaml" || fs::equivalent(e.path(), file, ec)) continue;
    try {
      const isa::Hierarchy other = isa::load_hierarchy(e.path().string());
      if (other.kind == isa::TargetKind::Gpu && gpu::count_mismatches(gpu::compare_with_device(other, device)) == 0)
        out.push_back(e.path().string());
    } catch (const UserError&) {  // not a valid description: not a candidate
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int measure(const isa::Hierarchy& h, const gpu::DeviceInfo& device, const std::string& write_to) {
  const std::vector<isa::Figure> figures = isa::described_figures(h);
  std::cout << "\nmicrobenchmarks on " << device.name << " (" << figures.size() << " figures)...\n" << std::flush;
  const auto rows = isa::compare_figures(figures, gpu::run_microbenchmarks(h, figures));
  std::cout << "\n" << isa::format_figure_table(h, device.name, rows);
  if (!write_to.empty()) {
    const std::string text = isa::write_measured_description(read_description_text(h.source_file), h, rows, device.name, today());
    try {
      isa::parse_hierarchy(text, write_to);
    } catch (const UserError& e) {
      throw InternalError(std::string("the measured variant of ") + h.source_file + " does not validate: " + e.what());
    }
    write_file(write_to, text, "--write-measured");
    std::cout << "wrote " << write_to << " (the measured variant of " << h.source_file << "; it validates)\n";
  }
  return isa::count_figure_mismatches(rows);
}
#endif

// --device (and --measure): exit status 0 when every checked property (and measured figure)
// agrees, 1 on a mismatch, 2 when there is no GPU or tessel was built without the GPU backend.
int compare_with_device(const std::vector<isa::Hierarchy>& hs, const Options& o) {
#ifdef TESSEL_HAVE_CUDA
  for (const isa::Hierarchy& h : hs) gpu::require_gpu_description(h);
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::cerr << "tessel check-hierarchy --device: no GPU to compare with: " << why << "\n";
    return 2;
  }
  const gpu::DeviceInfo device = gpu::query_device(0);
  int mismatches = 0;
  for (size_t i = 0; i < hs.size(); ++i) {
    const auto rows = gpu::compare_with_device(hs[i], device);
    std::cout << "\n" << gpu::format_device_comparison(hs[i], device, rows);
    const int m = gpu::count_mismatches(rows);
    if (m)
      for (const auto& other : agreeing_descriptions(o.files[i], device))
        std::cout << "note: " << other << " agrees with " << device.name << " on every checked property\n";
    mismatches += m;
  }
  if (o.measure) mismatches += measure(hs[0], device, o.write_measured);
  return mismatches ? 1 : 0;
#else
  (void)hs, (void)o;
  std::cerr << "tessel check-hierarchy --device: the GPU backend was not built (the CUDA toolkit was not found at "
               "configure time)\n";
  return 2;
#endif
}

void add_check_hierarchy_command(CLI::App& app, CommandContext& ctx) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "check-hierarchy", "Validate memory hierarchy descriptions; with two, compare them role by role");
  cmd->add_option("files", opts->files, "one or two hierarchy descriptions (isa/targets/*.yaml)")
      ->required()
      ->expected(1, 2);
  auto* device = cmd->add_flag("--device", opts->device, "compare a GPU description with the GPU present on this machine");
  auto* measure = cmd->add_flag("--measure", opts->measure,
                                "with --device: run microbenchmarks (bandwidths, latencies, copy engines, tensor cores) and "
                                "compare each measured figure with the description's within its tolerance")
                      ->needs(device);
  cmd->add_option("--write-measured", opts->write_measured,
                  "with --measure: write the description with the measured figures (a measured variant) to this file")
      ->needs(measure);
  add_set_flag(cmd, opts->set);
  cmd->callback([opts, &ctx] {
    if (opts->measure && opts->files.size() != 1)
      throw CLI::ValidationError("--measure", "measures against one description (got " + std::to_string(opts->files.size()) + ")");
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
    if (opts->device) ctx.exit_code = compare_with_device(hs, *opts);
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("check-hierarchy", add_check_hierarchy_command);

}  // namespace tessel::cli
