// tessel._tessel: the in-process part of the Python module (issue 18). It binds what is safe and
// quick to do inside the interpreter: loading a hierarchy description with overrides, its hash,
// and the description's tables. Everything that compiles or simulates runs in a child `tessel`
// process (python/tessel/__init__.py): SystemC allows one simulation per process, and a failing
// simulation must never take the interpreter down.
//
// Errors: tessel::UserError becomes tessel.UserError, InternalError tessel.InternalError (the
// classes of python/tessel/_errors.py), with the message the CLI prints after "tessel: error: ".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_override.h"
#include "isa/hierarchy_report.h"

namespace py = pybind11;
using namespace tessel;

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

py::dict shape_dict(const isa::MatrixShape& s) {
  py::dict d;
  d["m"] = s.m;
  d["n"] = s.n;
  d["k"] = s.k;
  d["a"] = std::string(dtype_name(s.a));
  d["b"] = std::string(dtype_name(s.b));
  d["acc"] = std::string(dtype_name(s.acc));
  d["cycles"] = s.cycles;
  if (!s.min_arch.empty()) d["min_arch"] = s.min_arch;
  if (s.energy_pj_per_mac) d["energy_pj_per_mac"] = *s.energy_pj_per_mac;
  return d;
}

py::dict level_dict(const isa::Level& l) {
  py::dict d;
  d["name"] = l.name;
  d["role"] = std::string(isa::role_name(l.role));
  d["capacity_bytes"] = l.capacity_bytes;
  d["alignment_bytes"] = l.alignment_bytes;
  d["granularity_bytes"] = l.granularity_bytes;
  d["layout"] = l.layout;
  d["banks"] = l.banks;
  d["bank_width_bytes"] = l.bank_width_bytes;
  d["shared_bandwidth_bytes_per_cycle"] = l.shared_bandwidth_bytes_per_cycle;
  d["read_latency_cycles"] = l.read_latency_cycles;
  d["write_latency_cycles"] = l.write_latency_cycles;
  if (l.read_energy_pj_per_byte) d["read_energy_pj_per_byte"] = *l.read_energy_pj_per_byte;
  if (l.write_energy_pj_per_byte) d["write_energy_pj_per_byte"] = *l.write_energy_pj_per_byte;
  return d;
}

py::dict unit_dict(const isa::Unit& u) {
  py::dict d;
  d["name"] = u.name;
  d["kind"] = std::string(isa::unit_kind_name(u.kind));
  d["pipe"] = u.pipe;
  d["reads"] = u.reads;
  d["writes"] = u.writes;
  py::list shapes;
  for (const auto& s : u.shapes) shapes.append(shape_dict(s));
  d["shapes"] = shapes;
  std::vector<std::string> dtypes;
  for (DType t : u.dtypes) dtypes.emplace_back(dtype_name(t));
  d["dtypes"] = dtypes;
  d["bytes_per_repeat"] = u.bytes_per_repeat;
  d["max_repeat"] = u.max_repeat;
  d["mask_bits"] = u.mask_bits;
  d["startup_cycles"] = u.startup_cycles;
  d["count"] = u.count;
  if (u.energy_pj_per_repeat) d["energy_pj_per_repeat"] = *u.energy_pj_per_repeat;
  if (u.energy_pj_per_instruction) d["energy_pj_per_instruction"] = *u.energy_pj_per_instruction;
  if (u.energy_pj_per_byte) d["energy_pj_per_byte"] = *u.energy_pj_per_byte;
  return d;
}

py::dict path_dict(const isa::TransferPath& p) {
  py::dict d;
  d["from"] = p.from;
  d["to"] = p.to;
  d["engine"] = p.engine;
  d["bandwidth_bytes_per_cycle"] = p.bandwidth_bytes_per_cycle;
  d["latency_cycles"] = p.latency_cycles;
  d["transforms"] = p.transforms;
  return d;
}

py::dict gpu_dict(const isa::GpuProperties& g) {
  py::dict d;
  d["arch"] = g.arch;
  d["compute_capability"] = std::to_string(g.compute_capability_major) + "." + std::to_string(g.compute_capability_minor);
  d["warp_size"] = g.warp_size;
  d["max_threads_per_block"] = g.max_threads_per_block;
  d["registers_per_sm"] = g.registers_per_sm;
  d["registers_per_block"] = g.registers_per_block;
  d["shared_bytes_per_block"] = g.shared_bytes_per_block;
  d["shared_bytes_per_block_optin"] = g.shared_bytes_per_block_optin;
  d["shared_bytes_per_sm"] = g.shared_bytes_per_sm;
  d["l2_cache_bytes"] = g.l2_cache_bytes;
  d["shared_bytes_reserved_per_block"] = g.shared_bytes_reserved_per_block;
  d["vector_access_bytes"] = g.vector_access_bytes;
  if (g.mma_sync_shape) d["mma_sync_shape"] = shape_dict(*g.mma_sync_shape);
  if (g.wgmma_shape) d["wgmma_shape"] = shape_dict(*g.wgmma_shape);
  d["warps_per_warpgroup"] = g.warps_per_warpgroup;
  d["cluster_max_blocks"] = g.cluster_max_blocks;
  d["bulk_copy_alignment_bytes"] = g.bulk_copy_alignment_bytes;
  d["features"] = g.features;
  return d;
}

// The typed description as a dict with the schema's keys (isa/README.md), plus its identity.
py::dict description_dict(const isa::Hierarchy& h) {
  py::dict d;
  d["name"] = h.name;
  d["description"] = h.description;
  d["kind"] = std::string(isa::target_kind_name(h.kind));
  d["clock_mhz"] = h.clock_mhz;
  d["cores"] = h.cores;
  py::list levels, units, paths;
  for (const auto& l : h.levels) levels.append(level_dict(l));
  for (const auto& u : h.units) units.append(unit_dict(u));
  for (const auto& p : h.paths) paths.append(path_dict(p));
  d["levels"] = levels;
  d["units"] = units;
  d["paths"] = paths;
  if (h.sync) {
    py::dict s;
    s["event_ids_per_pipe_pair"] = h.sync->event_ids_per_pipe_pair;
    s["queue_depth"] = h.sync->queue_depth;
    s["set_flag_cycles"] = h.sync->set_flag_cycles;
    s["barrier_cycles"] = h.sync->barrier_cycles;
    s["scalar_cycles"] = h.sync->scalar_cycles;
    d["sync"] = s;
  }
  if (h.gpu) d["gpu"] = gpu_dict(*h.gpu);
  d["source_file"] = h.source_file;
  d["description_hash"] = h.description_hash;
  d["overrides"] = h.overrides;
  return d;
}

isa::Hierarchy load(const std::string& path, const Pairs& overrides) {
  return isa::load_hierarchy(path, isa::parse_overrides(overrides));
}

// Raises the Python class `name` of tessel._errors with `message`.
void raise_as(const char* name, const char* message) {
  py::object cls = py::module_::import("tessel._errors").attr(name);
  PyErr_SetString(cls.ptr(), message);
}

}  // namespace

PYBIND11_MODULE(_tessel, m) {
  m.doc() = "tessel's in-process bindings: hierarchy descriptions, overrides and hashes";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UserError& e) {
      raise_as("UserError", e.what());
    } catch (const InternalError& e) {
      raise_as("InternalError", e.what());
    }
  });
  m.def(
      "load_description", [](const std::string& path, const Pairs& overrides) { return description_dict(load(path, overrides)); },
      py::arg("path"), py::arg("overrides") = Pairs{},
      "Parse and validate a description with overrides applied; the description as a dict");
  m.def(
      "describe", [](const std::string& path, const Pairs& overrides) { return isa::describe_hierarchy(load(path, overrides)); },
      py::arg("path"), py::arg("overrides") = Pairs{}, "The tables `tessel check-hierarchy` prints");
  m.def(
      "canonical_overrides", [](const Pairs& overrides) { return isa::parse_overrides(overrides).text(); }, py::arg("overrides"),
      "Overrides in canonical form (sorted by key, sizes expanded): the text --set takes");
  m.def(
      "parse_overrides_text",
      [](const std::string& text) {
        Pairs out;
        for (const auto& o : isa::parse_overrides(text).items) out.emplace_back(o.key, o.value);
        return out;
      },
      py::arg("text"), "KEY=VALUE,... as (key, value) pairs, sorted, sizes expanded");
}
