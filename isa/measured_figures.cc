#include "isa/measured_figures.h"

#include <cmath>
#include <iomanip>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::isa {
namespace {

bool has_feature(const Hierarchy& h, const std::string& f) {
  return h.gpu && std::find(h.gpu->features.begin(), h.gpu->features.end(), f) != h.gpu->features.end();
}

// The path from the stage level to an on-chip level the shared-memory figures are read from:
// stage -> vector (registers) where the description has it, else stage -> operand_a.
const TransferPath* stage_read_path(const Hierarchy& h) {
  const Level* stage = h.level_with_role(Role::Stage);
  if (!stage) return nullptr;
  for (Role r : {Role::Vector, Role::OperandA})
    if (const Level* to = h.level_with_role(r))
      if (const TransferPath* p = h.find_path(stage->name, to->name)) return p;
  return nullptr;
}

std::string tensor_id(const MatrixShape& s) {
  return "tensor." + std::string(dtype_name(s.a)) + "-" + std::string(dtype_name(s.acc));
}

}  // namespace

std::vector<Figure> described_figures(const Hierarchy& h) {
  if (h.kind != TargetKind::Gpu || !h.gpu)
    throw UserError(h.source_file + ": '" + h.name + "' is not a GPU description; --measure runs GPU microbenchmarks");
  std::vector<Figure> out;
  const Level& g = h.level(Role::Global);
  const double gbw = g.shared_bandwidth_bytes_per_cycle;
  out.push_back({"global.read_bandwidth", "global read bandwidth (chip)", "B/cycle", gbw, kBandwidthTolerance, FigureSite::GlobalBandwidth});
  out.push_back({"global.write_bandwidth", "global write bandwidth (chip)", "B/cycle", gbw, kBandwidthTolerance, FigureSite::None});
  out.push_back({"global.copy_bandwidth", "global copy bandwidth, read + write (chip)", "B/cycle", gbw, kBandwidthTolerance, FigureSite::None});
  out.push_back({"global.read_latency", "global read latency (pointer chase)", "cycles", double(g.read_latency_cycles), kLatencyTolerance,
                 FigureSite::GlobalReadLatency});
  out.push_back({"l2.bandwidth", "L2 read bandwidth (chip)", "B/cycle", h.gpu->l2_bandwidth_bytes_per_cycle, kBandwidthTolerance,
                 FigureSite::L2Bandwidth});
  out.push_back({"l2.hit_latency", "L2 hit latency (pointer chase)", "cycles", double(h.gpu->l2_hit_latency_cycles), kLatencyTolerance,
                 FigureSite::L2HitLatency});
  const TransferPath* sp = stage_read_path(h);
  out.push_back({"shared.bandwidth", "shared-memory read bandwidth (per SM)", "B/cycle/SM", sp ? sp->bandwidth_bytes_per_cycle : 0,
                 kBandwidthTolerance, FigureSite::StageBandwidth});
  out.push_back({"shared.latency", "shared-memory latency (pointer chase)", "cycles", sp ? double(sp->latency_cycles) : 0,
                 kLatencyTolerance, FigureSite::StageLatency});
  // global -> stage: the path of the engine that also feeds the operands (loads / cp.async), and
  // with bulk_copy the path of another engine (TMA)
  const Level* stage = h.level_with_role(Role::Stage);
  for (size_t i = 0; stage && i < h.paths.size(); ++i) {
    const TransferPath& p = h.paths[i];
    if (p.from != g.name || p.to != stage->name) continue;
    const bool operand_engine = sp && p.engine == sp->engine;
    if (operand_engine) {
      const bool cp_async = has_feature(h, "cp_async");
      out.push_back({cp_async ? "copy.cp_async" : "copy.load_store",
                     cp_async ? "global -> shared, cp.async (per SM)" : "global -> shared, load + store (per SM)", "B/cycle/SM",
                     p.bandwidth_bytes_per_cycle, kBandwidthTolerance, FigureSite::PathBandwidth, int(i)});
    } else if (has_feature(h, "bulk_copy")) {
      out.push_back({"copy.tma", "global -> shared, TMA (" + p.engine + ", per SM)", "B/cycle/SM", p.bandwidth_bytes_per_cycle,
                     kBandwidthTolerance, FigureSite::PathBandwidth, int(i)});
    }
  }
  for (size_t u = 0; u < h.units.size(); ++u) {
    const Unit& unit = h.units[u];
    if (unit.kind != UnitKind::Matrix) continue;
    for (size_t s = 0; s < unit.shapes.size(); ++s) {
      const MatrixShape& shape = unit.shapes[s];
      Figure f{tensor_id(shape),
               fmt::format("tensor cores {} -> {} (per SM)", dtype_name(shape.a), dtype_name(shape.acc)),
               "MAC/cycle/SM",
               double(shape.macs()) / std::max<uint32_t>(1, shape.cycles) * unit.count,
               kTensorRateTolerance,
               FigureSite::ShapeCycles};
      f.unit_index = int(u), f.shape_index = int(s), f.a = shape.a, f.acc = shape.acc;
      out.push_back(f);
    }
  }
  return out;
}

std::vector<FigureComparison> compare_figures(const std::vector<Figure>& figures, const std::vector<Measurement>& measurements) {
  std::vector<FigureComparison> rows;
  for (const Figure& f : figures) {
    FigureComparison r{f, {f.id, std::nullopt, "", "not measured"}, Verdict::NotMeasured, 0};
    for (const Measurement& m : measurements)
      if (m.id == f.id) r.measured = m;
    if (!r.measured.value) {
      r.verdict = Verdict::NotMeasured;
    } else if (f.described <= 0) {
      r.verdict = Verdict::NotDescribed;
    } else {
      r.ratio = *r.measured.value / f.described;
      r.verdict = std::abs(r.ratio - 1) <= f.tolerance ? Verdict::Agrees : Verdict::Mismatch;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

int count_figure_mismatches(const std::vector<FigureComparison>& rows) {
  int n = 0;
  for (const auto& r : rows) n += r.verdict == Verdict::Mismatch;
  return n;
}

namespace {

std::string number_text(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return fmt::format("{}", int64_t(v));
  return fmt::format("{:.4g}", v);
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::Agrees: return "agrees";
    case Verdict::Mismatch: return "MISMATCH";
    case Verdict::NotDescribed: return "not described";
    case Verdict::NotMeasured: return "not measured";
  }
  return "";
}

}  // namespace

std::string format_figure_table(const Hierarchy& h, const std::string& device_name, const std::vector<FigureComparison>& rows) {
  std::ostringstream o;
  o << "measured on " << device_name << " against " << h.source_file << " (clock " << number_text(h.clock_mhz)
    << " MHz for per-cycle bandwidths)\n";
  size_t w = 6;
  for (const auto& r : rows) w = std::max(w, r.figure.label.size());
  o << fmt::format("{:<{}}  {:>12}  {:>12}  {:>6}  {:>5}  {}\n", "figure", w, "described", "measured", "ratio", "tol", "unit / verdict");
  for (const auto& r : rows) {
    const std::string described = r.figure.described > 0 ? number_text(r.figure.described) : "-";
    const std::string measured = r.measured.value ? fmt::format("{:.4g}", *r.measured.value) : "-";
    const std::string ratio = r.ratio > 0 ? fmt::format("{:.2f}", r.ratio) : "-";
    o << fmt::format("{:<{}}  {:>12}  {:>12}  {:>6}  {:>4.0f}%  {} {}", r.figure.label, w, described, measured, ratio,
                     r.figure.tolerance * 100, r.figure.unit, verdict_text(r.verdict));
    if (!r.measured.value && !r.measured.error.empty()) o << " (" << r.measured.error << ")";
    o << "\n";
    if (!r.measured.detail.empty()) o << fmt::format("{:<{}}    {}\n", "", w, r.measured.detail);
  }
  o << "\n";
  const int mismatches = count_figure_mismatches(rows);
  for (const auto& r : rows)
    if (r.verdict == Verdict::Mismatch)
      o << fmt::format("mismatch: {}: {} says {} {}, measured {:.4g} {} ({:+.0f} %, tolerance {:.0f} %)\n", r.figure.label,
                       h.source_file, number_text(r.figure.described), r.figure.unit, *r.measured.value, r.figure.unit,
                       (r.ratio - 1) * 100, r.figure.tolerance * 100);
  int measured = 0;
  for (const auto& r : rows) measured += r.measured.value.has_value();
  if (mismatches == 0)
    o << h.source_file << " agrees with " << device_name << " on every measured figure (" << measured << " of " << rows.size()
      << " measured)\n";
  else
    o << mismatches << " measured figure" << (mismatches == 1 ? " of " : "s of ") << h.source_file
      << (mismatches == 1 ? " is" : " are") << " beyond tolerance on " << device_name << "\n";
  return o.str();
}

// ---- the measured variant: the description's text with values replaced in place ----
namespace {

struct TextLines {
  std::vector<std::string> lines;
  explicit TextLines(const std::string& text) {
    std::string line;
    std::istringstream in(text);
    while (std::getline(in, line)) lines.push_back(line);
  }
  std::string join() const {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

// The value of `key` on `line` ("key: 13.9" in a block map or inside a flow map) replaced by
// `value`; false when the line has no such key.
bool replace_value(std::string& line, const std::string& key, const std::string& value) {
  const std::regex re("(^|[\\s{,])" + key + ":\\s*([^,}#\\s]+)");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return false;
  line.replace(size_t(m.position(2)), size_t(m.length(2)), value);
  return true;
}

// `line` with its trailing comment replaced by `comment` (block keys) or `comment` put before the
// old one (flow maps, whose comment describes the whole path or shape).
void set_comment(std::string& line, const std::string& comment, bool keep_old) {
  const size_t hash = line.find(" #");
  std::string old;
  if (hash != std::string::npos) {
    old = line.substr(line.find_first_not_of(' ', hash + 1) + 1);
    line.erase(hash);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  line += "   # " + comment;
  if (keep_old && !old.empty()) line += ";" + old;
}

int indent_of(const std::string& line) { return int(line.find_first_not_of(' ')); }

// The first line at or after `from` (0-based) whose key is `key`, within the block that starts at
// `from` (lines indented at least as deep); -1 when there is none.
int find_key_line(const TextLines& t, int from, const std::string& key) {
  if (from < 0 || from >= int(t.lines.size())) return -1;
  const int base = indent_of(t.lines[size_t(from)]);
  const std::regex re("^\\s*(- )?" + key + ":");
  for (int i = from; i < int(t.lines.size()); ++i) {
    const std::string& l = t.lines[size_t(i)];
    if (i > from && !l.empty() && l.find_first_not_of(' ') != std::string::npos && l[size_t(indent_of(l))] != '#' &&
        indent_of(l) < base)
      break;
    if (i > from && indent_of(l) == base - 2 && l.compare(size_t(indent_of(l)), 2, "- ") == 0) break;  // next list item
    if (std::regex_search(l, re)) return i;
  }
  return -1;
}

int top_key_line(const TextLines& t, const std::string& key) {
  for (int i = 0; i < int(t.lines.size()); ++i)
    if (t.lines[size_t(i)].rfind(key + ":", 0) == 0) return i;
  return -1;
}

// integers for counts of cycles; one decimal for bandwidths (two below 10 B/cycle)
std::string rounded(double v, bool integer) {
  if (integer) return std::to_string(int64_t(std::llround(v)));
  return v >= 10 ? fmt::format("{:.1f}", v) : fmt::format("{:.2f}", v);
}

}  // namespace

std::string write_measured_description(const std::string& original_text, const Hierarchy& h,
                                       const std::vector<FigureComparison>& rows, const std::string& device_name,
                                       const std::string& date) {
  TextLines t(original_text);
  const std::string cite = "measured on " + device_name + " " + date;
  const auto fail = [&](const std::string& what) {
    throw UserError(h.source_file + ": --write-measured: cannot find " + what + " in the description's text");
  };
  // block key `key` within the block at line `from`: value and comment
  const auto set_block = [&](int from, const std::string& key, const std::string& value, const std::string& was) {
    const int at = find_key_line(t, from, key);
    if (at < 0) fail(key);
    std::string& line = t.lines[size_t(at)];
    replace_value(line, key, value);
    set_comment(line, cite + " (described " + was + ")", false);
  };
  const auto set_flow = [&](int line_no, const std::string& key, const std::string& value, const std::string& was) {
    if (line_no < 0 || line_no >= int(t.lines.size()) || !replace_value(t.lines[size_t(line_no)], key, value))
      fail(key + " on line " + std::to_string(line_no + 1));
    set_comment(t.lines[size_t(line_no)], cite + ": " + key + " was " + was, true);
  };
  const int gpu_line = top_key_line(t, "gpu");
  const Level& global = h.level(Role::Global);
  const Level* stage = h.level_with_role(Role::Stage);
  for (const auto& r : rows) {
    if (!r.measured.value) continue;
    const double v = *r.measured.value;
    const Figure& f = r.figure;
    const std::string was = f.described > 0 ? number_text(f.described) : "nothing";
    switch (f.site) {
      case FigureSite::GlobalBandwidth:
        set_block(global.mark.line - 1, "shared_bandwidth_bytes_per_cycle", rounded(v, false), was);
        break;
      case FigureSite::GlobalReadLatency:
        set_block(global.mark.line - 1, "read_latency_cycles", rounded(v, true), was);
        break;
      case FigureSite::L2Bandwidth:
      case FigureSite::L2HitLatency: {
        const bool bw = f.site == FigureSite::L2Bandwidth;
        const std::string key = bw ? "l2_bandwidth_bytes_per_cycle" : "l2_hit_latency_cycles";
        if (gpu_line < 0) fail("the gpu section");
        if (find_key_line(t, gpu_line + 1, key) < 0) {  // not described: add it under l2_cache_bytes
          const int l2 = find_key_line(t, gpu_line + 1, "l2_cache_bytes");
          if (l2 < 0) fail("gpu.l2_cache_bytes");
          t.lines.insert(t.lines.begin() + l2 + 1, std::string(size_t(indent_of(t.lines[size_t(l2)])), ' ') + key + ": 0");
        }
        set_block(gpu_line + 1, key, rounded(v, !bw), was);
        break;
      }
      case FigureSite::StageBandwidth:
      case FigureSite::StageLatency: {
        const bool bw = f.site == FigureSite::StageBandwidth;
        for (const TransferPath& p : h.paths) {
          const bool touches_stage = stage && (p.from == stage->name || p.to == stage->name);
          const bool on_chip = p.from != global.name && p.to != global.name;
          if (!touches_stage || !on_chip) continue;
          set_flow(p.mark.line - 1, bw ? "bandwidth_bytes_per_cycle" : "latency_cycles", rounded(v, !bw),
                   bw ? number_text(p.bandwidth_bytes_per_cycle) : std::to_string(p.latency_cycles));
        }
        break;
      }
      case FigureSite::PathBandwidth:
        set_flow(h.paths[size_t(f.path)].mark.line - 1, "bandwidth_bytes_per_cycle", rounded(v, false), was);
        break;
      case FigureSite::ShapeCycles: {
        const Unit& u = h.units[size_t(f.unit_index)];
        const MatrixShape& s = u.shapes[size_t(f.shape_index)];
        // MAC/cycle/SM -> cycles one shape occupies one of the SM's units
        const double cycles = std::max(1.0, std::round(double(s.macs()) * u.count / v));
        set_flow(s.mark.line - 1, "cycles", rounded(cycles, true), std::to_string(s.cycles));
        break;
      }
      case FigureSite::None:
        break;
    }
  }
  const int name_line = top_key_line(t, "name");
  if (name_line < 0) fail("name");
  t.lines[size_t(name_line)] = "name: " + h.name + "-measured";
  const std::string header = "# Measured variant of " + h.source_file + ": " + cite +
                             " by `tessel check-hierarchy --device --measure --write-measured`.\n"
                             "# Values marked \"" + cite + "\" replace the cited ones (bandwidths per cycle at clock_mhz);\n"
                             "# every other value is the original's.\n";
  return header + t.join();
}

}  // namespace tessel::isa
