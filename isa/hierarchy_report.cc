#include "isa/hierarchy_report.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessel::isa {

std::string format_bytes(uint64_t bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t v = bytes;
  while (u < 4 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{} {}", v, units[u]);
}

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out.empty() ? "-" : out;
}

std::string shape_text(const MatrixShape& s) {
  return fmt::format("{}x{}x{} {}*{}->{}", s.m, s.n, s.k, dtype_name(s.a), dtype_name(s.b), dtype_name(s.acc));
}

std::string level_cell(const Level* l) {
  return l ? fmt::format("{} ({}, {})", l->name, format_bytes(l->capacity_bytes), l->layout) : "-";
}

}  // namespace

std::string describe_hierarchy(const Hierarchy& h) {
  std::string out = fmt::format("{} ({}): {}\n  {} cores, clock {} MHz\n\n", h.name, target_kind_name(h.kind),
                                h.description, h.cores, h.clock_mhz);
  out += fmt::format("  {:<10} {:<12} {:>12} {:>6} {:>6}  {:<12} {}\n", "level", "role", "capacity", "align", "gran",
                     "layout", "read by / written by");
  for (const Level& l : h.levels) {
    std::vector<std::string> readers, writers;
    for (const Unit& u : h.units) {
      if (std::count(u.reads.begin(), u.reads.end(), l.name)) readers.push_back(u.name);
      if (std::count(u.writes.begin(), u.writes.end(), l.name)) writers.push_back(u.name);
    }
    out += fmt::format("  {:<10} {:<12} {:>12} {:>6} {:>6}  {:<12} {} / {}\n", l.name, role_name(l.role),
                       format_bytes(l.capacity_bytes), l.alignment_bytes, l.granularity_bytes, l.layout,
                       join(readers), join(writers));
  }
  out += fmt::format("\n  {:<12} {:<7} {:<5} {:>5}  {}\n", "unit", "kind", "pipe", "count", "capability");
  for (const Unit& u : h.units) {
    std::string cap;
    if (u.kind == UnitKind::Matrix) {
      std::vector<std::string> shapes;
      for (const MatrixShape& s : u.shapes)
        shapes.push_back(shape_text(s) + fmt::format(" /{}c", s.cycles) + (s.min_arch.empty() ? "" : " " + s.min_arch));
      cap = join(shapes, "; ");
    } else if (u.kind == UnitKind::Vector) {
      cap = fmt::format("{} B/repeat, <= {} repeats, mask {} bits, start-up {} cycles", u.bytes_per_repeat,
                        u.max_repeat, u.mask_bits, u.startup_cycles);
    }
    out += fmt::format("  {:<12} {:<7} {:<5} {:>5}  {}\n", u.name, unit_kind_name(u.kind), u.pipe.empty() ? "-" : u.pipe,
                       u.count, cap);
  }
  out += fmt::format("\n  {:<22} {:<12} {:>10} {:>8}  {}\n", "path", "engine", "B/cycle", "latency", "transforms");
  for (const TransferPath& p : h.paths)
    out += fmt::format("  {:<22} {:<12} {:>10} {:>8}  {}\n", p.from + " -> " + p.to, p.engine,
                       p.bandwidth_bytes_per_cycle, p.latency_cycles, join(p.transforms));
  const Level& g = h.level(Role::Global);
  out += fmt::format("\n  global bandwidth shared by all cores: {} B/cycle; latency read {} / write {} cycles\n",
                     g.shared_bandwidth_bytes_per_cycle, g.read_latency_cycles, g.write_latency_cycles);
  if (h.sync)
    out += fmt::format("  sync: {} event ids per pipe pair, queue depth {}, cross-core barrier {} cycles\n",
                       h.sync->event_ids_per_pipe_pair, h.sync->queue_depth, h.sync->cross_core_barrier_cycles);
  if (h.gpu)
    out += fmt::format("  gpu: {} (cc {}.{}), warp {}, {} threads/block, {} regs/SM, shared {} per block ({} opt-in), "
                       "{} per SM, L2 {}\n",
                       h.gpu->arch, h.gpu->compute_capability_major, h.gpu->compute_capability_minor, h.gpu->warp_size,
                       h.gpu->max_threads_per_block, h.gpu->registers_per_sm, format_bytes(h.gpu->shared_bytes_per_block),
                       format_bytes(h.gpu->shared_bytes_per_block_optin), format_bytes(h.gpu->shared_bytes_per_sm),
                       format_bytes(h.gpu->l2_cache_bytes));
  return out;
}

std::set<std::string> hierarchy_features(const Hierarchy& h) {
  std::set<std::string> f;
  for (const TransferPath& p : h.paths)
    for (const std::string& t : p.transforms) f.insert("transform " + t);
  for (const Unit& u : h.units) {
    f.insert("unit kind " + std::string(unit_kind_name(u.kind)));
    for (const MatrixShape& s : u.shapes) {
      f.insert("matrix " + shape_text(s));
      f.insert("matrix dtype " + std::string(dtype_name(s.a)));
    }
    for (DType t : u.dtypes) f.insert(std::string(unit_kind_name(u.kind)) + " dtype " + std::string(dtype_name(t)));
  }
  if (h.sync) f.insert("explicit sync flags between pipes");
  if (h.gpu) f.insert("warp-level SIMT execution");
  for (const Level& l : h.levels)
    if (l.banks) f.insert("banked " + std::string(role_name(l.role)) + " level");
  return f;
}

HierarchyComparison compare_hierarchies(const Hierarchy& a, const Hierarchy& b) {
  HierarchyComparison c;
  c.table = fmt::format("  {:<12} {:<34} {:<34}\n", "role", a.name, b.name);
  for (int r = 0; r < kRoleCount; ++r) {
    const Role role = static_cast<Role>(r);
    c.table += fmt::format("  {:<12} {:<34} {:<34}\n", role_name(role), level_cell(a.level_with_role(role)),
                           level_cell(b.level_with_role(role)));
  }
  c.table += fmt::format("  {:<12} {:<34} {:<34}\n", "cores", a.cores, b.cores);
  c.table += fmt::format("  {:<12} {:<34} {:<34}\n", "clock MHz", a.clock_mhz, b.clock_mhz);
  c.table += fmt::format("  {:<12} {:<34} {:<34}\n", "peak f16 MAC",
                         fmt::format("{}/cycle/core", a.peak_macs_per_cycle(DType::F16, DType::F32)),
                         fmt::format("{}/cycle/core", b.peak_macs_per_cycle(DType::F16, DType::F32)));
  const auto fa = hierarchy_features(a), fb = hierarchy_features(b);
  std::set_difference(fa.begin(), fa.end(), fb.begin(), fb.end(), std::inserter(c.only_in_first, c.only_in_first.end()));
  std::set_difference(fb.begin(), fb.end(), fa.begin(), fa.end(), std::inserter(c.only_in_second, c.only_in_second.end()));
  return c;
}

std::string format_comparison(const Hierarchy& a, const Hierarchy& b, const HierarchyComparison& c) {
  std::string out = "role-by-role correspondence:\n" + c.table;
  auto list = [&](const Hierarchy& x, const Hierarchy& y, const std::set<std::string>& only) {
    out += fmt::format("\n{} offers what {} lacks:\n", x.name, y.name);
    if (only.empty()) out += "  (nothing)\n";
    for (const std::string& s : only) out += "  + " + s + "\n";
  };
  list(a, b, c.only_in_first);
  list(b, a, c.only_in_second);
  return out;
}

}  // namespace tessel::isa
