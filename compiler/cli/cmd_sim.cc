// tessel sim PROGRAM.npu --target T.yaml [--input NAME=a.npy ...] [--output NAME=c.npy ...]
//            [--report r.json] [--trace t.json] [--csv instr.csv] [--timing-only] [--no-race-check]
//            [--set KEY=VALUE,...] [--save-outputs DIR] [--max-cycles N] [--max-instructions N] | --emit-binary P.npubin | --disassemble   (PROGRAM may be binary)
#include <fmt/format.h>

#include <iostream>

#include "compiler/cli/commands.h"
#include "compiler/cli/inputs.h"
#include "compiler/cli/pipeline_flags.h"
#include "compiler/cli/run_npu.h"
#include "isa/base/error.h"
#include "isa/base/file_io.h"
#include "isa/base/npy.h"
#include "isa/hierarchy.h"
#include "isa/npu_program.h"
#include "isa/shipped_descriptions.h"
#include "npu_sim/report.h"
#include "npu_sim/simulator.h"

namespace tessel::cli {
namespace {

std::pair<std::string, std::string> split_binding(const std::string& flag, const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw UserError(fmt::format("{} {}: expected NAME=FILE.npy", flag, text));
  return {text.substr(0, eq), text.substr(eq + 1)};
}

struct SimFlags {
  std::string program;
  std::string target = isa::shipped_description_path("davinci-910");
  std::vector<std::string> inputs, outputs;
  std::string report, trace, csv, save_outputs;
  bool timing_only = false;
  bool no_races = false;
  int64_t max_cycles = static_cast<int64_t>(npu_sim::kDefaultMaxCycles);  // signed: "-1" is an error, not 2^64-1
  int64_t max_instructions = static_cast<int64_t>(npu_sim::kDefaultMaxRecordedEvents);
  std::string emit_binary;
  bool disassemble = false;
  std::vector<std::string> set;
};

void add_sim_options(CLI::App* cmd, SimFlags& o) {
  cmd->add_option("program", o.program, "NPU assembly program (.npu)")->required();
  add_target_option(cmd, "--target", o.target, "NPU hierarchy description or a shipped one's name (default: isa/targets/davinci-910.yaml)");
  add_set_flag(cmd, o.set);
  cmd->add_option("--input", o.inputs, "NAME=FILE.npy: bind an input tensor")->take_all();
  cmd->add_option("--output", o.outputs, "NAME=FILE.npy: write a tensor after the run")->take_all();
  cmd->add_option("--save-outputs", o.save_outputs, "write every output tensor of the program as DIR/NAME.npy");
  cmd->add_option("--report", o.report, "write the JSON report here");
  cmd->add_option("--trace", o.trace, "write a Chrome trace (Perfetto) here");
  cmd->add_option("--csv", o.csv, "write one CSV row per executed instruction here");
  cmd->add_flag("--timing-only", o.timing_only, "skip the arithmetic (no --output)");
  cmd->add_flag("--no-race-check", o.no_races, "skip the happens-before race detector");
  cmd->add_option("--max-cycles", o.max_cycles,
                  fmt::format("stop with an error once the scalar pipe passes this cycle (default {})", npu_sim::kDefaultMaxCycles));
  cmd->add_option("--max-instructions", o.max_instructions,
                  fmt::format("stop with an error after this many executed instructions, which bounds the record's "
                              "memory (default {})", npu_sim::kDefaultMaxRecordedEvents));
  cmd->add_option("--emit-binary", o.emit_binary, "write the program's binary form here and exit");
  cmd->add_flag("--disassemble", o.disassemble, "print the program as .npu text (the input may be binary) and exit");
}

// --input NAME=FILE.npy each, checked against the program's declaration from the .npy header
// before the data is allocated.
std::map<std::string, NpyArray> read_sim_inputs(const npu::Program& program, const std::vector<std::string>& bindings) {
  std::map<std::string, NpyArray> inputs;
  for (const std::string& b : bindings) {
    auto [name, file] = split_binding("--input", b);
    if (inputs.count(name)) throw UserError("--input " + name + " is given twice");
    const npu::TensorBinding* t = program.find_tensor(name);
    inputs[name] = read_npy(file, [&](const NpyArray& header) {
      if (t && (header.dtype != t->dtype || header.shape != t->shape)) {
        NpyArray declared;
        declared.shape = t->shape;
        throw UserError(fmt::format("--input {}: the .npy holds {} {}, the program declares {} {}", name, dtype_name(header.dtype),
                                    header.shape_string(), dtype_name(t->dtype), declared.shape_string()));
      }
    });
  }
  return inputs;
}

// --output NAME=FILE.npy each, naming a tensor the program declares (a run that computes data).
std::vector<std::pair<std::string, std::string>> sim_output_bindings(const npu::Program& program, const SimFlags& o) {
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const std::string& b : o.outputs) {
    outputs.push_back(split_binding("--output", b));
    const npu::TensorBinding* t = program.find_tensor(outputs.back().first);
    if (!t) throw UserError(fmt::format("--output {}: {} declares no tensor '{}'", b, program.source_name, outputs.back().first));
    if (o.timing_only) throw UserError("--output " + b + ": a --timing-only run computes no data");
  }
  return outputs;
}

npu_sim::SimOptions sim_options(const SimFlags& o) {
  npu_sim::SimOptions options;
  options.timing_only = o.timing_only;
  options.detect_races = !o.no_races;
  options.max_cycles = static_cast<uint64_t>(o.max_cycles);
  options.max_recorded_events = static_cast<uint64_t>(o.max_instructions);
  // a timing-only run that writes no trace or CSV keeps per-instruction totals: its memory is
  // bounded by the program, not by how long it runs (issue 17 item 2)
  options.fold_events = o.timing_only && o.trace.empty() && o.csv.empty();
  return options;
}

// The files a run writes: --output tensors, --save-outputs, --report (with the roofline the
// program records, where it does), --trace and --csv.
void write_sim_files(const SimFlags& o, const npu::Program& program, const isa::Hierarchy& target,
                     const npu_sim::SimResult& result, const std::vector<std::pair<std::string, std::string>>& outputs,
                     const std::optional<kernel::NpuRoofline>& roofline) {
  const npu_sim::SimRecord& r = result.record;
  for (const auto& [name, file] : outputs) write_npy(file, result.tensor(program, name));
  if (!o.save_outputs.empty()) {
    if (o.timing_only) throw UserError("--save-outputs " + o.save_outputs + ": a --timing-only run computes no data");
    std::map<std::string, NpyArray> all;
    for (const npu::TensorBinding& t : program.tensors)
      if (t.role == npu::TensorRole::Out) all[t.name] = result.tensor(program, t.name);
    save_tensors(o.save_outputs, all, "--save-outputs");
  }
  if (!o.report.empty()) {
    nlohmann::json report = npu_sim::report_json(r);
    if (roofline) report["roofline"] = roofline_json(*roofline, r.total_cycles);
    report["description_hash"] = target.description_hash;
    report["overrides"] = target.overrides;
    npu_sim::write_text_file(o.report, report.dump(2) + "\n");
  }
  if (!o.trace.empty()) npu_sim::write_text_file(o.trace, npu_sim::chrome_trace_json(r).dump() + "\n");
  if (!o.csv.empty()) npu_sim::write_text_file(o.csv, npu_sim::instruction_csv(r));
}

// The run's summary on stdout (cycles, roofline, utilization, energy) and its races on stderr.
void print_sim_summary(const npu::Program& program, const npu_sim::SimRecord& r,
                       const std::optional<kernel::NpuRoofline>& roofline) {
  std::cout << fmt::format("{}: {} cycles on {} core(s) of {} ({} instructions, {:.3f} s wall)\n", program.source_name,
                           r.total_cycles, r.cores, r.machine.target_name, r.executed, r.wall_seconds);
  if (roofline) std::cout << roofline_text(*roofline, r.total_cycles) << "\n";
  const npu_sim::PipeUtilization util = npu_sim::pipe_utilization(r);
  std::cout << fmt::format("cube utilization {:.1f}% of the {} core(s) used, {:.1f}% of the chip's {}; vector {:.1f}% / {:.1f}%\n",
                           100 * util.cores_used[int(npu::Pipe::M)], r.cores, 100 * util.chip[int(npu::Pipe::M)],
                           r.machine.cores, 100 * util.cores_used[int(npu::Pipe::V)], 100 * util.chip[int(npu::Pipe::V)]);
  std::cout << npu_sim::energy_text(npu_sim::energy_report(r)) << "\n";
  for (const npu_sim::Race& race : r.races)
    std::cerr << fmt::format("race on {}[{}, {}): {} pc {} '{}' ({}) and {} pc {} '{}' ({}), {} time(s)\n",
                             npu::buffer_name(race.buffer), race.second.begin, race.second.end,
                             npu::pipe_name(race.first.pipe), race.first.pc, race.first.text,
                             race.first.write ? "write" : "read", npu::pipe_name(race.second.pipe), race.second.pc,
                             race.second.text, race.second.write ? "write" : "read", race.occurrences);
}

// `tessel sim`: disassemble / encode, or simulate and report. Returns false when the run deadlocked.
bool run_sim(const SimFlags& o) {
  if (o.max_cycles < 1 || static_cast<uint64_t>(o.max_cycles) > npu_sim::kMaxCyclesLimit)
    throw UserError(fmt::format("--max-cycles {}: must be in 1..{}", o.max_cycles, npu_sim::kMaxCyclesLimit));
  if (o.max_instructions < 1)
    throw UserError(fmt::format("--max-instructions {}: must be at least 1", o.max_instructions));
  const npu::Program program = npu::load_program(o.program);
  if (!o.emit_binary.empty() || o.disassemble) {
    if (o.disassemble) std::cout << npu::print_program(program);
    if (!o.emit_binary.empty()) {
      const std::vector<uint8_t> bytes = npu::encode_program(program);
      npu_sim::write_text_file(o.emit_binary, std::string(bytes.begin(), bytes.end()));
    }
    return true;
  }
  const isa::Hierarchy target = isa::load_hierarchy(o.target, isa::parse_overrides(o.set));
  const std::map<std::string, NpyArray> inputs = read_sim_inputs(program, o.inputs);
  const auto outputs = sim_output_bindings(program, o);
  const npu_sim::SimResult result = npu_sim::simulate(program, target, inputs, sim_options(o));
  // the operator's roofline, where `tessel compile` recorded it in the program (a text program)
  const std::optional<kernel::NpuRoofline> roofline =
      recorded_roofline(read_bounded_file(o.program, "the program", kMaxProgramBytes));
  write_sim_files(o, program, target, result, outputs, roofline);
  print_sim_summary(program, result.record, roofline);
  if (result.record.deadlock) {
    std::cerr << "tessel: error: " << *result.record.deadlock << "\n";
    return false;
  }
  return true;
}

void add_sim_command(CLI::App& app, CommandContext& ctx) {
  auto opts = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand("sim", "Run an NPU program (.npu) on the SystemC simulator");
  add_sim_options(cmd, *opts);
  cmd->callback([opts, &ctx] {
    if (!run_sim(*opts)) ctx.exit_code = 1;
  });
}

}  // namespace

TESSEL_REGISTER_COMMAND("sim", add_sim_command);

}  // namespace tessel::cli
