#include "npu_sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "isa/base/error.h"
#include "isa/base/file_io.h"

namespace tessel::npu_sim {
namespace {

using nlohmann::json;

std::string pipe_str(npu::Pipe p) { return std::string(npu::pipe_name(p)); }

std::string mnemonic_of(const SimRecord& r, int pc) {
  const std::string& text = r.instruction_text[pc];
  return text.substr(0, text.find(' '));
}

json access_json(const SimRecord& r, const RaceAccess& a) {
  return {{"core", a.core},
          {"pipe", pipe_str(a.pipe)},
          {"pc", a.pc},
          {"line", r.instruction_line[a.pc]},
          {"instruction", a.text},
          {"access", a.write ? "write" : "read"},
          {"begin", a.begin},
          {"end", a.end}};
}

// The trace and the CSV list every event: a folded record has only totals.
void require_events(const SimRecord& r, const char* what) {
  if (r.folded)
    throw UserError(std::string(what) + " needs every event, but this run kept per-instruction totals only (a folded "
                    "record: --timing-only without --trace / --csv)");
}

}  // namespace

std::vector<std::array<PipeStats, npu::kPipeCount>> pipe_stats(const SimRecord& r) {
  std::vector<std::array<PipeStats, npu::kPipeCount>> stats(r.cores);
  for (const InstructionEvent& e : r.instructions) {
    PipeStats& s = stats[e.core][static_cast<size_t>(e.pipe)];
    s.busy_cycles += e.end - e.start;
    s.instructions += e.count;
  }
  for (const StallEvent& e : r.stalls) {
    PipeStats& s = stats[e.core][static_cast<size_t>(e.pipe)];
    const uint64_t d = e.end - e.start;
    if (e.kind == StallKind::Flag) s.stall_flag_cycles += d;
    if (e.kind == StallKind::Barrier) s.stall_barrier_cycles += d;
    if (e.kind == StallKind::QueueFull) s.stall_queue_cycles += d;
    if (e.kind == StallKind::Cores) s.stall_cores_cycles += d;
  }
  for (auto& core : stats)
    for (PipeStats& s : core) s.utilization = r.total_cycles ? double(s.busy_cycles) / double(r.total_cycles) : 0.0;
  return stats;
}

PipeUtilization pipe_utilization(const SimRecord& r) {
  PipeUtilization u;
  const auto stats = pipe_stats(r);
  const double cycles = double(r.total_cycles), chip_cores = double(std::max(r.machine.cores, r.cores));
  if (stats.empty() || cycles == 0) return u;
  for (const auto& core : stats)
    for (int p = 0; p < npu::kPipeCount; ++p) {
      u.cores_used[p] += core[p].utilization / double(stats.size());
      u.chip[p] += double(core[p].busy_cycles) / (cycles * chip_cores);
    }
  return u;
}

std::map<std::string, uint64_t> bytes_per_path(const SimRecord& r) {
  std::map<std::string, uint64_t> bytes;
  for (const InstructionEvent& e : r.instructions)
    if (e.path_from >= 0) bytes[r.machine.paths[e.path_from][e.path_to].name] += e.bytes;
  return bytes;
}

uint64_t cube_macs(const SimRecord& r, const npu::Program& program) {
  uint64_t macs = 0;
  for (const InstructionEvent& e : r.instructions) {
    if (e.pipe != npu::Pipe::M) continue;
    const npu::Instruction& instr = program.code[e.pc];
    if (instr.opcode != npu::Opcode::Mmad) continue;
    // The shape comes from the occupancy: fractals x cycles per fractal x MACs per fractal.
    const isa::CubeShape& s = r.machine.cube(instr.operands[0].dtype);
    macs += (e.end - e.start) / s.cycles * uint64_t(s.m0) * s.n0 * s.k0;
  }
  return macs;
}

EnergyReport energy_report(const SimRecord& r) {
  const isa::NpuMachine& m = r.machine;
  EnergyReport e;
  for (int b = 0; b < npu::kBufferCount; ++b) {
    const isa::NpuBufferSpec& spec = m.buffers[b];
    LevelEnergy l{spec.level_name};
    for (const auto& core : r.traffic) l.bytes_read += core[b].bytes_read, l.bytes_written += core[b].bytes_written;
    l.pj = double(l.bytes_read) * spec.read_energy_pj_per_byte + double(l.bytes_written) * spec.write_energy_pj_per_byte;
    e.levels_pj += l.pj;
    e.levels.push_back(l);
  }
  UnitEnergy cube{m.cube_unit}, vector{m.vector_unit}, scalar{m.scalar_unit};
  for (const InstructionEvent& ev : r.instructions) {
    if (ev.op_kind == OpKind::MacF16) cube.macs += ev.ops, cube.pj += double(ev.ops) * m.cube_f16.energy_pj_per_mac;
    if (ev.op_kind == OpKind::MacI8) cube.macs += ev.ops, cube.pj += double(ev.ops) * m.cube_i8.energy_pj_per_mac;
    if (ev.op_kind == OpKind::VectorRepeat) vector.repeats += ev.ops;
    if (ev.pipe == npu::Pipe::S) scalar.instructions += ev.count;
  }
  vector.pj = double(vector.repeats) * m.vector_energy_pj_per_repeat;
  scalar.pj = double(scalar.instructions) * m.scalar_energy_pj_per_instruction;
  e.units = {cube, vector, scalar};
  for (int from = 0; from < npu::kBufferCount; ++from)
    for (int to = 0; to < npu::kBufferCount; ++to) {
      const isa::NpuPathSpec& p = m.paths[from][to];
      if (!p.exists) continue;
      auto it = std::find_if(e.units.begin(), e.units.end(), [&](const UnitEnergy& u) { return u.unit == p.engine; });
      if (it == e.units.end()) it = e.units.insert(e.units.end(), UnitEnergy{p.engine});
    }
  for (const InstructionEvent& ev : r.instructions) {
    if (ev.path_from < 0) continue;
    const isa::NpuPathSpec& p = m.paths[ev.path_from][ev.path_to];
    auto it = std::find_if(e.units.begin(), e.units.end(), [&](const UnitEnergy& u) { return u.unit == p.engine; });
    it->bytes_moved += ev.bytes;
    it->pj += double(ev.bytes) * p.engine_energy_pj_per_byte;
  }
  for (const UnitEnergy& u : e.units) e.units_pj += u.pj;
  e.total_pj = e.levels_pj + e.units_pj;
  e.macs = cube.macs;
  return e;
}

json energy_json(const EnergyReport& e) {
  json levels = json::object(), units = json::object();
  for (const LevelEnergy& l : e.levels)
    levels[l.level] = {{"bytes_read", l.bytes_read}, {"bytes_written", l.bytes_written}, {"pj", l.pj}};
  for (const UnitEnergy& u : e.units) {
    json uj = {{"pj", u.pj}};
    if (u.macs) uj["macs"] = u.macs;
    if (u.repeats) uj["repeats"] = u.repeats;
    if (u.instructions) uj["instructions"] = u.instructions;
    if (u.bytes_moved) uj["bytes_moved"] = u.bytes_moved;
    units[u.unit] = uj;
  }
  return {{"levels", levels},   {"units", units},       {"levels_pj", e.levels_pj}, {"units_pj", e.units_pj},
          {"total_pj", e.total_pj}, {"macs", e.macs}, {"pj_per_mac", e.pj_per_mac()}};
}

std::string energy_text(const EnergyReport& e) {
  std::string out = fmt::format("energy: {:.4g} nJ", e.total_pj / 1000);
  if (e.macs) out += fmt::format(" ({:.3f} pJ/MAC)", e.pj_per_mac());
  out += fmt::format("; levels {:.4g} nJ:", e.levels_pj / 1000);
  for (const LevelEnergy& l : e.levels)
    if (l.pj > 0) out += fmt::format(" {} {:.4g}", l.level, l.pj / 1000);
  out += fmt::format("; units {:.4g} nJ:", e.units_pj / 1000);
  for (const UnitEnergy& u : e.units)
    if (u.pj > 0) out += fmt::format(" {} {:.4g}", u.unit, u.pj / 1000);
  return out;
}

json report_json(const SimRecord& r) {
  json j;
  j["program"] = r.program_name;
  j["target"] = r.machine.target_name;
  j["clock_mhz"] = r.machine.clock_mhz;
  j["cores"] = r.cores;
  j["timing_only"] = r.timing_only;
  j["total_cycles"] = r.total_cycles;
  j["wall_seconds"] = r.wall_seconds;
  j["units"] = {{"cycles", "core clock cycles from the start of the run"},
                {"bytes", "bytes written to the destination of a transfer"},
                {"utilization", "busy_cycles / total_cycles (utilization_chip: over every core of the chip)"},
                {"peak_bytes", "highest byte offset + 1 any instruction touched in the buffer"},
                {"pj", "picojoules: counted events times the description's energy per access / operation"}};
  const auto stats = pipe_stats(r);
  json cores = json::array();
  for (int c = 0; c < r.cores; ++c) {
    json pipes = json::object();
    for (int p = 0; p < npu::kPipeCount; ++p) {
      const PipeStats& s = stats[c][p];
      json pj = {{"busy_cycles", s.busy_cycles},
                 {"stall_flag_cycles", s.stall_flag_cycles},
                 {"stall_barrier_cycles", s.stall_barrier_cycles},
                 {"utilization", s.utilization},
                 {"instructions", s.instructions}};
      if (p == 0) pj["stall_queue_cycles"] = s.stall_queue_cycles, pj["stall_cores_cycles"] = s.stall_cores_cycles;
      pipes[pipe_str(static_cast<npu::Pipe>(p))] = pj;
    }
    json peak = json::object();
    for (int b = 1; b < npu::kBufferCount; ++b)
      peak[std::string(npu::buffer_name(static_cast<npu::Buffer>(b)))] = r.peak_bytes.empty() ? 0 : r.peak_bytes[c][b];
    cores.push_back({{"core", c}, {"pipes", pipes}, {"peak_bytes", peak}});
  }
  j["per_core"] = cores;
  const PipeUtilization util = pipe_utilization(r);
  json used = json::object(), chip = json::object();
  for (int p = 0; p < npu::kPipeCount; ++p) {
    used[pipe_str(static_cast<npu::Pipe>(p))] = util.cores_used[p];
    chip[pipe_str(static_cast<npu::Pipe>(p))] = util.chip[p];
  }
  j["chip_cores"] = r.machine.cores;
  j["utilization_cores_used"] = used;
  j["utilization_chip"] = chip;
  json paths = json::object();
  for (const auto& [name, bytes] : bytes_per_path(r)) paths[name] = bytes;
  j["bytes_per_path"] = paths;
  json peak = json::object();
  for (int b = 0; b < npu::kBufferCount; ++b) {
    uint64_t m = 0;
    for (const auto& core : r.peak_bytes) m = std::max(m, core[b]);
    peak[std::string(npu::buffer_name(static_cast<npu::Buffer>(b)))] = {
        {"peak_bytes", m}, {"capacity_bytes", r.machine.buffers[b].capacity_bytes}};
  }
  j["peak_occupancy"] = peak;
  json races = json::array();
  for (const Race& race : r.races)
    races.push_back({{"buffer", std::string(npu::buffer_name(race.buffer))},
                     {"buffer_core", race.buffer_core},
                     {"first", access_json(r, race.first)},
                     {"second", access_json(r, race.second)},
                     {"occurrences", race.occurrences}});
  j["races"] = races;
  j["energy"] = energy_json(energy_report(r));
  j["deadlock"] = r.deadlock ? json(*r.deadlock) : json(nullptr);
  return j;
}

json chrome_trace_json(const SimRecord& r) {
  require_events(r, "the trace");
  json events = json::array();
  for (int c = 0; c < r.cores; ++c) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", c}, {"args", {{"name", fmt::format("core {}", c)}}}});
    for (int p = 0; p < npu::kPipeCount; ++p) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", c}, {"tid", p},
                        {"args", {{"name", pipe_str(static_cast<npu::Pipe>(p))}}}});
      events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", c}, {"tid", p}, {"args", {{"sort_index", p}}}});
    }
  }
  // Timestamps are cycles: one trace microsecond is one cycle, so slices are exact integers.
  for (const InstructionEvent& e : r.instructions) {
    json args = {{"pc", e.pc}, {"instruction", r.instruction_text[e.pc]}, {"completion", e.completion}};
    if (e.bytes) args["bytes"] = e.bytes;
    events.push_back({{"name", mnemonic_of(r, e.pc)}, {"cat", "instruction"}, {"ph", "X"}, {"pid", e.core},
                      {"tid", static_cast<int>(e.pipe)}, {"ts", e.start}, {"dur", e.end - e.start}, {"args", args}});
  }
  for (const StallEvent& s : r.stalls) {
    const char* kind = s.kind == StallKind::Flag      ? "stall: flag"
                       : s.kind == StallKind::Barrier ? "stall: barrier"
                       : s.kind == StallKind::Cores   ? "stall: other cores (sync_all)"
                                                      : "stall: queue full";
    events.push_back({{"name", kind}, {"cat", "stall"}, {"ph", "X"}, {"pid", s.core}, {"tid", static_cast<int>(s.pipe)},
                      {"ts", s.start}, {"dur", s.end - s.start},
                      {"args", {{"pc", s.pc}, {"instruction", r.instruction_text[s.pc]}}}});
  }
  for (size_t i = 0; i < r.flags.size(); ++i) {
    const FlagEvent& f = r.flags[i];
    const std::string name = fmt::format("flag {}->{} #{}", pipe_str(f.src), pipe_str(f.dst), f.event_id);
    if (f.wait_pc < 0) {
      events.push_back({{"name", name + " (never waited)"}, {"cat", "flag"}, {"ph", "i"}, {"s", "t"}, {"pid", f.core},
                        {"tid", static_cast<int>(f.src)}, {"ts", f.set_time}});
      continue;
    }
    events.push_back({{"name", name}, {"cat", "flag"}, {"ph", "s"}, {"id", i}, {"pid", f.core},
                      {"tid", static_cast<int>(f.src)}, {"ts", f.set_time}});
    events.push_back({{"name", name}, {"cat", "flag"}, {"ph", "f"}, {"bp", "e"}, {"id", i}, {"pid", f.core},
                      {"tid", static_cast<int>(f.dst)}, {"ts", f.wait_time}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ns"},
          {"otherData", {{"program", r.program_name}, {"target", r.machine.target_name},
                         {"time_unit", "1 trace microsecond = 1 core cycle"}, {"total_cycles", r.total_cycles}}}};
}

std::string instruction_csv(const SimRecord& r) {
  require_events(r, "the instruction CSV");
  std::string out = "core,pipe,pc,line,instruction,start_cycle,end_cycle,completion_cycle,bytes,path\n";
  for (const InstructionEvent& e : r.instructions) {
    std::string text = r.instruction_text[e.pc];
    out += fmt::format("{},{},{},{},\"{}\",{},{},{},{},{}\n", e.core, pipe_str(e.pipe), e.pc, r.instruction_line[e.pc],
                       text, e.start, e.end, e.completion, e.bytes,
                       e.path_from >= 0 ? r.machine.paths[e.path_from][e.path_to].name : "");
  }
  return out;
}

void write_text_file(const std::string& path, const std::string& text) { write_file(path, text); }

}  // namespace tessel::npu_sim
