#include "compiler/cli/run_npu.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "compiler/emit_npu/compositions.h"
#include "isa/npu_machine.h"
#include "npu_sim/report.h"

namespace tessel::cli {

// A progress line on stderr once pruning has run for more than 2 s, then every second.
npu_sync::SyncProgress sync_progress() {
  using clock = std::chrono::steady_clock;
  auto started = std::make_shared<clock::time_point>(clock::now());
  auto shown = std::make_shared<clock::time_point>(clock::now());
  return [started, shown](int decided, int total) {
    const auto now = clock::now();
    if (now - *started < std::chrono::seconds(2) || (now - *shown < std::chrono::seconds(1) && decided < total)) return;
    *shown = now;
    std::cerr << fmt::format("tessel: pruning syncs: {}/{} candidate pairs decided ({:.1f} s)\n", decided, total,
                             std::chrono::duration<double>(now - *started).count());
  };
}

namespace {

std::string utilization_line(const std::string& over, const std::array<double, npu::kPipeCount>& u) {
  return fmt::format("  utilization  cube {:.1f}%  vector {:.1f}%  MTE1 {:.1f}%  MTE2 {:.1f}%  MTE3 {:.1f}%  scalar {:.1f}%  ({})\n",
                     100 * u[int(npu::Pipe::M)], 100 * u[int(npu::Pipe::V)], 100 * u[int(npu::Pipe::MTE1)],
                     100 * u[int(npu::Pipe::MTE2)], 100 * u[int(npu::Pipe::MTE3)], 100 * u[int(npu::Pipe::S)], over);
}

}  // namespace

nlohmann::json roofline_json(const kernel::NpuRoofline& r, uint64_t cycles) {
  nlohmann::json macs = nlohmann::json::object();
  for (const auto& [dtype, n] : r.work.contraction_macs) macs[std::string(dtype_name(dtype))] = n;
  return {{"cycles", r.cycles},
          {"binds", kernel::roofline_bound_name(r.binds)},
          {"fraction", r.fraction_of(cycles)},
          {"cores", r.cores},
          {"cube_cycles", r.cube_cycles},
          {"vector_cycles", r.vector_cycles},
          {"scalar_cycles", r.scalar_cycles},
          {"gm_cycles", r.gm_cycles},
          {"latency_cycles", r.latency_cycles},
          {"macs", r.work.macs()},
          {"macs_per_dtype", macs},
          {"cube_macs", r.cube_macs},
          {"vector_ops", r.vector_ops},
          {"vector_op_bytes", r.vector_op_bytes},
          {"gm_read_bytes", r.work.gm_read_bytes},
          {"gm_write_bytes", r.work.gm_write_bytes}};
}

std::string roofline_text(const kernel::NpuRoofline& r, uint64_t cycles) {
  return fmt::format("roofline     {:.0f} cycles, {} bound (cube {:.0f}, vector {:.0f}, scalar {:.0f}, GM {:.0f}, latency {:.0f} "
                     "on {} cores): {:.1f}% of roofline",
                     r.cycles, kernel::roofline_bound_name(r.binds), r.cube_cycles, r.vector_cycles, r.scalar_cycles,
                     r.gm_cycles, r.latency_cycles, r.cores, 100 * r.fraction_of(cycles));
}

std::optional<kernel::NpuRoofline> recorded_roofline(const std::string& program_text) {
  const size_t at = program_text.find(kRooflineComment);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + std::string(kRooflineComment).size();
  const nlohmann::json j = nlohmann::json::parse(program_text.substr(from, program_text.find('\n', from) - from), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  kernel::NpuRoofline r;
  try {
    r.cycles = j.at("cycles"), r.cube_cycles = j.at("cube_cycles"), r.vector_cycles = j.at("vector_cycles");
    r.scalar_cycles = j.at("scalar_cycles"), r.gm_cycles = j.at("gm_cycles"), r.latency_cycles = j.at("latency_cycles");
    r.cores = j.at("cores"), r.cube_macs = j.at("cube_macs"), r.vector_ops = j.at("vector_ops");
    r.vector_op_bytes = j.at("vector_op_bytes");
    r.work.gm_read_bytes = j.at("gm_read_bytes"), r.work.gm_write_bytes = j.at("gm_write_bytes");
    for (const auto& [name, macs] : j.at("macs_per_dtype").items())
      if (const auto t = parse_dtype(name)) r.work.contraction_macs[*t] = macs.get<uint64_t>();
    const std::string binds = j.at("binds");
    const auto bound = kernel::parse_roofline_bound(binds);
    if (!bound) return std::nullopt;
    r.binds = *bound;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return r;
}

// The program format refusing a program tessel emitted (npu::ProgramError) is tessel's fault, not
// the input's: an InternalError naming the operator and the instruction (exit 3).
template <typename F>
auto emitted(const kernel::Kernel& k, const isa::Hierarchy& target, F step) {
  try {
    return step();
  } catch (const npu::ProgramError& e) {
    throw InternalError("tessel bug: the NPU backend emitted a program the program format refuses for operator '" + k.name +
                        "' on " + target.name + ": " + e.what());
  }
}

NpuCompiled compile_npu(const kernel::Kernel& k, const isa::Hierarchy& target) {
  NpuCompiled c;
  c.kernel = emitted(k, target, [&] { return emit_npu::emit_npu(k, target); });
  if (k.function) c.roofline = kernel::npu_roofline(k, isa::npu_machine(target), emit_npu::vector_instructions);  // every pipeline kernel has one
  for (const auto& t : k.tensors)
    if (t.shape.empty()) c.scalars.insert(t.name);
  c.naive = emitted(k, target, [&] { return npu_sync::insert_syncs(c.kernel.program, target, {npu_sync::SyncMode::Naive, -1}); });
  c.pruned = emitted(k, target, [&] {
    return npu_sync::insert_syncs(c.kernel.program, target, {npu_sync::SyncMode::Pruned, -1, sync_progress()});
  });
  return c;
}

NpuRunResult run_npu(const NpuCompiled& c, const isa::Hierarchy& target, const std::map<std::string, NpyArray>& inputs,
                     const NpuOptions& options) {
  const npu_sync::SyncResult& s = c.chosen(options.sync);
  const npu::Program& p = s.program;
  std::map<std::string, NpyArray> bound;
  if (!options.timing_only)
    for (const auto& t : p.tensors)
      if (t.role == npu::TensorRole::In) {
        bound[t.name] = inputs.at(t.name);
        if (c.scalars.count(t.name)) bound[t.name].shape = t.shape;
      }
  // Per-instruction totals unless a trace needs every event: the figures below are the same, and the
  // record's memory is bounded by the program instead of growing by ~56 bytes per executed instruction.
  npu_sim::SimResult sim = npu_sim::simulate_emitted(
      p, target, bound,
      {options.timing_only, options.detect_races, 0, npu_sim::kGeneratedProgramMaxEvents, options.trace.empty()});
  NpuRunResult r;
  if (!options.timing_only)
    for (const auto& t : p.tensors)
      if (t.role == npu::TensorRole::Out) {
        r.outputs[t.name] = sim.tensor(p, t.name);
        if (c.scalars.count(t.name)) r.outputs[t.name].shape.clear();
      }
  const auto& rec = sim.record;
  const npu_sim::PipeUtilization utilization = npu_sim::pipe_utilization(rec);
  const auto& mean = utilization.cores_used;
  const auto& chip = utilization.chip;
  nlohmann::json util, util_chip;
  for (int q = 0; q < npu::kPipeCount; ++q) {
    util[std::string(npu::pipe_name(static_cast<npu::Pipe>(q)))] = mean[q];
    util_chip[std::string(npu::pipe_name(static_cast<npu::Pipe>(q)))] = chip[q];
  }
  r.cube_utilization = mean[static_cast<int>(npu::Pipe::M)];
  r.cube_utilization_chip = chip[static_cast<int>(npu::Pipe::M)];
  const double cycles = double(std::max<uint64_t>(1, rec.total_cycles));
  r.macs_per_cycle = double(c.kernel.macs) / cycles;
  r.peak_macs_per_cycle = double(target.peak_macs_per_cycle(DType::F16, DType::F32)) * p.cores;
  r.chip_peak_macs_per_cycle = double(target.peak_macs_per_cycle(DType::F16, DType::F32)) * target.cores;
  r.roofline_fraction = c.roofline.fraction_of(rec.total_cycles);
  r.report = {{"total_cycles", rec.total_cycles},
              {"utilization", util},
              {"utilization_chip", util_chip},
              {"cores", p.cores},
              {"chip_cores", target.cores},
              {"sync", npu_sync::sync_mode_name(options.sync)},
              {"syncs_naive", c.naive.sync_instructions},
              {"syncs_pruned", c.pruned.sync_instructions},
              {"sync_pairs_naive", c.naive.pairs},
              {"sync_pairs_pruned", c.pruned.pairs},
              {"barriers", s.barriers},
              {"dependences", s.dependences},
              {"sync_note", c.pruned.note},
              {"sync_check_events", c.pruned.check_events},
              {"races", rec.races.size()},
              {"deadlock", rec.deadlock ? *rec.deadlock : ""},
              {"macs", c.kernel.macs},
              {"macs_per_cycle", r.macs_per_cycle},
              {"peak_macs_per_cycle", r.peak_macs_per_cycle},
              {"chip_peak_macs_per_cycle", r.chip_peak_macs_per_cycle},
              {"roofline", roofline_json(c.roofline, rec.total_cycles)},
              {"mapping", c.kernel.notes},
              {"timing_only", options.timing_only}};
  std::ostringstream o;
  o << fmt::format("NPU {} ({}), {} core(s): {} cycles ({:.1f} us at {} MHz)\n", target.name, p.source_name, p.cores,
                   rec.total_cycles, cycles / target.clock_mhz, target.clock_mhz);
  o << "  " << roofline_text(c.roofline, rec.total_cycles) << "\n";
  o << utilization_line(fmt::format("over the {} core(s) used", p.cores), mean);
  o << utilization_line(fmt::format("over the chip's {} cores", target.cores), chip);
  o << fmt::format("  MACs/cycle   {:.0f} of peak {:.0f} on the cores used ({:.1f}%), {:.1f}% of the chip's {:.0f}\n",
                   r.macs_per_cycle, r.peak_macs_per_cycle,
                   r.peak_macs_per_cycle > 0 ? 100 * r.macs_per_cycle / r.peak_macs_per_cycle : 0.0,
                   r.chip_peak_macs_per_cycle > 0 ? 100 * r.macs_per_cycle / r.chip_peak_macs_per_cycle : 0.0,
                   r.chip_peak_macs_per_cycle);
  o << fmt::format("  syncs        {} ({}): naive {} -> pruned {} instructions ({} -> {} pairs, {} barrier fall-backs)\n",
                   s.sync_instructions, npu_sync::sync_mode_name(options.sync), c.naive.sync_instructions,
                   c.pruned.sync_instructions, c.naive.pairs, c.pruned.pairs, s.barriers);
  if (!c.pruned.note.empty()) o << "  pruning      " << c.pruned.note << "\n";
  const npu_sim::EnergyReport energy = npu_sim::energy_report(rec);
  r.report["energy"] = npu_sim::energy_json(energy);
  o << "  " << npu_sim::energy_text(energy) << "\n";
  for (const auto& n : c.kernel.notes) o << "  mapping      " << n << "\n";
  if (!rec.races.empty()) o << "  RACES        " << rec.races.size() << " (first: " << rec.races[0].first.text << " / " << rec.races[0].second.text << ")\n";
  if (rec.deadlock) o << "  DEADLOCK     " << *rec.deadlock << "\n";
  r.summary = o.str();
  if (!options.trace.empty()) npu_sim::write_text_file(options.trace, npu_sim::chrome_trace_json(rec).dump());
  r.record = std::move(sim.record);
  return r;
}

void add_npu_flags(CLI::App* cmd, NpuOptions& options) {
  cmd->add_option_function<std::string>(
         "--sync", [&options](const std::string& v) { options.sync = npu_sync::parse_sync_mode(v); },
         "NPU targets: sync insertion, naive or pruned (default pruned)")
      ->check(CLI::IsMember({"naive", "pruned"}));  // a misspelt mode is a usage error (exit 2), as --verify's
  cmd->add_option("--trace", options.trace, "NPU targets: write a Chrome trace (Perfetto) of the simulation");
}

std::pair<std::map<std::string, NpyArray>, nlohmann::json> run_npu_backend(const kernel::Kernel& k, const isa::Hierarchy& target,
                                                                          const std::map<std::string, NpyArray>& inputs,
                                                                          const NpuOptions& options) {
  const NpuCompiled c = compile_npu(k, target);
  NpuRunResult r = run_npu(c, target, inputs, options);
  std::cout << r.summary;
  return {std::move(r.outputs), std::move(r.report)};
}

std::string compile_npu_text(const kernel::Kernel& k, const isa::Hierarchy& target, const NpuOptions& options,
                             std::string& report_line) {
  const NpuCompiled c = compile_npu(k, target);
  const auto& s = c.chosen(options.sync);
  report_line = fmt::format("syncs ({}): {} instructions ({} pairs, {} barrier fall-backs); naive {} -> pruned {}",
                            npu_sync::sync_mode_name(options.sync), s.sync_instructions, s.pairs, s.barriers,
                            c.naive.sync_instructions, c.pruned.sync_instructions);
  if (!c.pruned.note.empty()) report_line += "; " + c.pruned.note;
  std::string text;
  for (const auto& n : c.kernel.notes) text += "# " + n + "\n";
  text += "# " + report_line + "\n";
  nlohmann::json roofline = roofline_json(c.roofline, 0);
  roofline.erase("fraction");  // of a run: `tessel sim` adds it
  text += std::string(kRooflineComment) + roofline.dump() + "\n";
  return text + npu::print_program(s.program);
}

}  // namespace tessel::cli
