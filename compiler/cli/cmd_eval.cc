// tessel eval OP.tsl --shape M=..,N=.. [--def NAME] [--input A=a.npy ...] [--output C=c.npy ...]
//             [--seed S] [--save-inputs DIR] [--threads N]
// Runs the reference interpreter; inputs not given are random (deterministic in --seed).
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "compiler/cli/commands.h"
#include "compiler/cli/inputs.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "isa/base/error.h"

namespace tessel::cli {
namespace {

// "M=1024,N=16" -> sizes; names are checked against the operator's parameters.
interp::Sizes parse_shape(const std::string& text, const ir::Function& f) {
  interp::Sizes sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw UserError("--shape: expected NAME=VALUE, got '" + item + "'");
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || v < 0) throw UserError("--shape: '" + value + "' is not a non-negative integer (" + name + ")");
    bool known = false;
    for (const std::string& p : f.params) known |= p == name;
    if (!known) {
      std::string all;
      for (const std::string& p : f.params) all += (all.empty() ? "" : ", ") + p;
      throw UserError("--shape: '" + name + "' is not a size parameter of '" + f.name + "' (" + all + ")");
    }
    if (sizes.count(name)) throw UserError("--shape: '" + name + "' is given twice");
    sizes[name] = v;
  }
  sizes = ir::bind_sizes(f, sizes);
  for (const std::string& p : f.params)
    if (!sizes.count(p)) {
      std::string all;
      for (const std::string& q : f.params) all += (all.empty() ? "" : ",") + q + "=...";
      throw UserError("size parameter '" + p + "' of '" + f.name + "' has no value; pass --shape " + all);
    }
  return sizes;
}

std::string summary(const std::string& name, const NpyArray& a) {
  const int64_t n = a.element_count();
  double sum = 0, mn = INFINITY, mx = -INFINITY;
  int64_t nonfinite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = interp::element_as_double(a, i);
    if (!std::isfinite(v)) {
      ++nonfinite;
      continue;
    }
    sum += v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  std::ostringstream o;
  o << name << ": " << dtype_name(a.dtype) << a.shape_string() << "  min " << (n ? mn : 0) << "  max " << (n ? mx : 0)
    << "  mean " << (n ? sum / static_cast<double>(n) : 0) << "  sum " << sum;
  if (nonfinite) o << "  non-finite " << nonfinite;
  o << "\n  first:";
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) o << " " << interp::element_as_double(a, i);
  return o.str();
}

void add_eval_command(CLI::App& app, CommandContext& ctx) {
  struct Options {
    std::string file, def, shape, save_inputs;
    std::vector<std::string> inputs, outputs;
    uint64_t seed = 0;
    int threads = 0;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate an operator (.tsl) with the reference interpreter");
  cmd->add_option("file", opts->file, "operator definition (.tsl)")->required();
  cmd->add_option("--shape", opts->shape, "size parameters, e.g. M=1024,N=16,K=512");
  cmd->add_option("--def", opts->def, "the operator to evaluate when the file defines several");
  cmd->add_option("--input", opts->inputs, "NAME=FILE.npy for an input (others are random)");
  cmd->add_option("--output", opts->outputs, "NAME=FILE.npy: write an output");
  cmd->add_option("--seed", opts->seed, "seed of the random inputs (default 0)");
  cmd->add_option("--save-inputs", opts->save_inputs, "write every input as DIR/NAME.npy");
  cmd->add_option("--threads", opts->threads, "interpreter threads (default: all cores, at most 8)");
  cmd->callback([opts] {
    const frontend::Module m = frontend::load_module(opts->file);
    const ir::Function& f = frontend::select_function(m, opts->def);
    const interp::Sizes sizes = parse_shape(opts->shape, f);
    std::vector<std::pair<std::string, std::string>> outputs;
    for (const std::string& item : opts->outputs) {
      auto [name, path] = name_path(item, "--output");
      const ir::Tensor* t = f.find_tensor(name);
      if (!t || t->kind != ir::TensorKind::Output) throw UserError("--output: '" + name + "' is not an output of '" + f.name + "'");
      outputs.emplace_back(name, path);
    }
    const interp::Tensors inputs = operator_inputs(f, sizes, opts->inputs, opts->seed, "tessel eval");
    if (!opts->save_inputs.empty()) save_tensors(opts->save_inputs, inputs, "--save-inputs");
    if (opts->threads > 0) interp::set_thread_count(opts->threads);
    const auto start = std::chrono::steady_clock::now();
    const interp::Tensors result = interp::evaluate(f, sizes, inputs);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& [name, a] : result) std::cout << summary(name, a) << "\n";
    std::cout << "evaluated '" << f.name << "' in " << seconds << " s\n";
    for (const auto& [name, path] : outputs) write_npy(path, result.at(name));
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("eval", add_eval_command);

}  // namespace tessel::cli
