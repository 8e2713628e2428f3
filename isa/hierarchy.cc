#include "isa/hierarchy.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "isa/base/error.h"
#include "isa/base/file_io.h"
#include "isa/hierarchy_override.h"

namespace tessel::isa {

namespace {

constexpr std::array<std::string_view, kRoleCount> kRoleNames = {
#define TESSEL_X(e, name, doc) name,
    TESSEL_ROLES(TESSEL_X)
#undef TESSEL_X
};

constexpr std::array<std::string_view, 6> kNpuPipes = {"S", "V", "M", "MTE1", "MTE2", "MTE3"};

}  // namespace

std::string_view role_name(Role r) { return kRoleNames[static_cast<size_t>(r)]; }

std::optional<Role> parse_role(std::string_view name) {
  for (size_t i = 0; i < kRoleNames.size(); ++i)
    if (kRoleNames[i] == name) return static_cast<Role>(i);
  return std::nullopt;
}

std::string_view target_kind_name(TargetKind k) { return k == TargetKind::Npu ? "npu" : "gpu"; }

std::string_view implemented_layout(TargetKind kind, Role role) {
  switch (role) {
    case Role::Global: return "nd";
    case Role::Stage: return kind == TargetKind::Npu ? "nd" : "banked";
    case Role::OperandA: return kind == TargetKind::Npu ? "fractal_zz" : "fragment";
    case Role::OperandB: return kind == TargetKind::Npu ? "fractal_zn" : "fragment";
    case Role::Accumulator: return kind == TargetKind::Npu ? "fractal_nz" : "fragment";
    case Role::Vector: return "nd";
  }
  return "nd";
}

const std::vector<std::string>& gpu_feature_names() {
  static const std::vector<std::string> names = {"cp_async", "thread_block_clusters", "bulk_copy",
                                                 "programmatic_dependent_launch", "tensor_maps"};
  return names;
}

std::string_view unit_kind_name(UnitKind k) {
  switch (k) {
    case UnitKind::Matrix: return "matrix";
    case UnitKind::Vector: return "vector";
    case UnitKind::Scalar: return "scalar";
    case UnitKind::Copy: return "copy";
  }
  return "?";
}

const Level* Hierarchy::find_level(std::string_view n) const {
  for (const Level& l : levels)
    if (l.name == n) return &l;
  return nullptr;
}

const Unit* Hierarchy::find_unit(std::string_view n) const {
  for (const Unit& u : units)
    if (u.name == n) return &u;
  return nullptr;
}

const Level* Hierarchy::level_with_role(Role role) const {
  for (const Level& l : levels)
    if (l.role == role) return &l;
  return nullptr;
}

const Level& Hierarchy::level(Role role) const {
  const Level* l = level_with_role(role);
  TESSEL_CHECK(l != nullptr, "description '" + name + "' has no level with role " + std::string(role_name(role)) +
                                 " (validate_hierarchy should have rejected it)");
  return *l;
}

const TransferPath* Hierarchy::find_path(std::string_view from, std::string_view to) const {
  for (const TransferPath& p : paths)
    if (p.from == from && p.to == to) return &p;
  return nullptr;
}

std::vector<const Unit*> Hierarchy::units_of_kind(UnitKind k) const {
  std::vector<const Unit*> out;
  for (const Unit& u : units)
    if (u.kind == k) out.push_back(&u);
  return out;
}

uint64_t Hierarchy::peak_macs_per_cycle(DType a, DType acc) const {
  uint64_t best = 0;
  for (const Unit* u : units_of_kind(UnitKind::Matrix))
    for (const MatrixShape& s : u->shapes)
      if (s.a == a && s.acc == acc) best = std::max<uint64_t>(best, s.macs() * u->count / s.cycles);
  return best;
}

// ---------------------------------------------------------------------------------------------
// Parsing: every map is read through a Fields reader that remembers which keys were consumed, so
// an unknown key (a typo) is an error naming its line instead of being ignored.
namespace {

// Plausible ranges of the description's integers (the largest real part, times a wide margin).
constexpr uint64_t kMaxGlobalBytes = uint64_t(1) << 44;   // 16 TiB of device memory
constexpr uint64_t kMaxOnChipBytes = uint64_t(1) << 30;   // 1 GiB for any on-chip buffer or cache
constexpr uint64_t kMaxAlignmentBytes = uint64_t(1) << 20;
constexpr uint64_t kMaxCycles = 1000000;
constexpr uint64_t kMaxCount = 4096;
constexpr uint64_t kMaxL2Partitions = 64;  // two on A100, H100 and H200
constexpr uint64_t kMaxMaskBits = 128;  // the vector mask is two 64-bit halves (set_vector_mask hi, lo)
constexpr uint64_t kMaxRepeat = uint64_t(1) << 24;
constexpr uint64_t kMaxCores = 4096;

// Energies (pJ): above these a number is a unit slip (nJ for pJ, per bit for per byte); the largest
// published figures (off-chip DRAM at ~320 pJ per byte at 45 nm, Horowitz ISSCC 2014) sit well below.
constexpr double kMaxEnergyPerByte = 1000;         // level reads/writes, copy engines
constexpr double kMaxEnergyPerMac = 100;
constexpr double kMaxEnergyPerRepeat = 100000;
constexpr double kMaxEnergyPerInstruction = 10000;

uint64_t capacity_limit(Role role) { return role == Role::Global ? kMaxGlobalBytes : kMaxOnChipBytes; }

// The keys each kind of map may hold (the schema of isa/README.md); the parser reads nothing else.
const std::set<std::string> kTopKeys = {"name", "description", "kind", "clock_mhz", "cores", "levels", "units", "paths", "sync", "gpu"};
const std::set<std::string> kLevelKeys = {"name", "role", "capacity_bytes", "alignment_bytes", "granularity_bytes", "layout", "banks",
                                          "bank_width_bytes", "shared_bandwidth_bytes_per_cycle", "read_latency_cycles",
                                          "write_latency_cycles", "read_energy_pj_per_byte", "write_energy_pj_per_byte"};
const std::set<std::string> kShapeKeys = {"m", "n", "k", "a", "b", "acc", "cycles", "min_arch", "energy_pj_per_mac"};
const std::set<std::string> kUnitKeys = {"name", "kind", "pipe", "reads", "writes", "shapes", "dtypes", "bytes_per_repeat",
                                         "max_repeat", "mask_bits", "startup_cycles", "count", "conversions",
                                         "energy_pj_per_repeat", "energy_pj_per_instruction", "energy_pj_per_byte"};
const std::set<std::string> kConversionKeys = {"from", "to", "cycles_per_repeat"};
const std::set<std::string> kPathKeys = {"from", "to", "engine", "bandwidth_bytes_per_cycle", "latency_cycles", "transforms"};
const std::set<std::string> kSyncKeys = {"event_ids_per_pipe_pair", "queue_depth", "set_flag_cycles", "barrier_cycles", "scalar_cycles",
                                           "cross_core_barrier_cycles"};
const std::set<std::string> kGpuKeys = {"arch", "compute_capability", "warp_size", "max_threads_per_block", "registers_per_sm",
                                        "registers_per_block", "shared_bytes_per_block", "shared_bytes_per_block_optin",
                                        "shared_bytes_per_sm", "l2_cache_bytes", "l2_bandwidth_bytes_per_cycle", "l2_hit_latency_cycles",
                                        "l2_partitions", "warp_mma_f16_macs_per_cycle",
                                        "shared_bytes_reserved_per_block",
                                        "vector_access_bytes", "mma_sync_shape", "wgmma_shape", "warps_per_warpgroup",
                                        "cluster_max_blocks", "bulk_copy_alignment_bytes", "features"};

class Fields {
 public:
  // `known` lists every key this map may hold; anything else is reported before any other problem
  // (a misspelt key otherwise shows up as a confusing "required key is missing").
  Fields(const YAML::Node& node, std::string where, const std::string& file, std::set<std::string> known)
      : node_(node), where_(std::move(where)), file_(file), known_(std::move(known)) {
    if (!node.IsMap()) fail(node, where_.empty() ? "document" : where_, "expected a mapping of keys to values");
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (!it->first.IsScalar())
        fail(it->first, where_.empty() ? "document" : where_, "a key must be a plain name (got a sequence or mapping as a key)");
      const std::string key = it->first.Scalar();
      if (!known_.count(key)) {
        std::string list;
        for (const std::string& k : known_) list += (list.empty() ? "" : ", ") + k;
        fail(it->first, key_path(key), "unknown key (known keys here: " + list + ")");
      }
    }
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& reason) const {
    throw UserError(location(at) + ": " + key + ": " + reason);
  }

  std::string location(const YAML::Node& at) const {
    const YAML::Mark m = at.Mark();
    if (m.is_null()) return file_;
    return file_ + ":" + std::to_string(m.line + 1);
  }

  SourceMark mark() const {
    const YAML::Mark m = node_.Mark();
    return m.is_null() ? SourceMark{} : SourceMark{m.line + 1, m.column + 1};
  }

  std::string key_path(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }

  bool has(const std::string& key) { return static_cast<bool>(node_[key]); }

  YAML::Node get(const std::string& key, bool required) {
    TESSEL_CHECK(known_.count(key), "hierarchy parser reads key '" + key + "' missing from its known-key list");
    YAML::Node v = node_[key];
    if (!v && required) fail(node_, key_path(key), "required key is missing");
    return v;
  }

  template <typename T>
  T scalar(const std::string& key, bool required, T fallback = T{}) {
    YAML::Node v = get(key, required);
    if (!v) return fallback;
    if (!v.IsScalar()) fail(v, key_path(key), "expected a single value");
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail(v, key_path(key), "cannot read '" + v.Scalar() + "' as " + type_word<T>());
    }
  }

  // Sizes: integers in 0..max, the plausible range of the key (a number outside it is a typo or a
  // unit slip, and would otherwise wrap, narrow or exhaust memory later). Reading "-4" as unsigned
  // would wrap, so read signed first; T is the field's type and max must fit it (no narrowing).
  template <typename T = uint64_t>
  T count(const std::string& key, bool required, T fallback, uint64_t max) {
    static_assert(std::is_unsigned_v<T>);
    TESSEL_CHECK(max <= std::numeric_limits<T>::max(), "hierarchy parser: plausible range of '" + key + "' exceeds its type");
    YAML::Node v = get(key, required);
    if (!v) return fallback;
    const long long x = scalar_of<long long>(v, key);
    if (x < 0) fail(v, key_path(key), "must not be negative (got " + std::to_string(x) + ")");
    if (static_cast<unsigned long long>(x) > max)
      fail(v, key_path(key), "got " + std::to_string(x) + ", outside the plausible range 0.." + std::to_string(max));
    return static_cast<T>(x);
  }

  // Finite numbers only: `.inf` or `.nan` would pass a "positive" check and poison every time.
  double number(const std::string& key, bool required, double fallback = 0) {
    YAML::Node v = get(key, required);
    if (!v) return fallback;
    const double x = scalar_of<double>(v, key);
    if (!std::isfinite(x)) fail(v, key_path(key), "must be a finite number (got " + v.Scalar() + ")");
    return x;
  }

  // A rate that may be left out but, when given, must be positive (0 would divide by zero later).
  double positive_number(const std::string& key) {
    const double x = number(key, false);
    if (has(key) && !(x > 0)) fail(node_[key], key_path(key), "must be positive (got " + node_[key].Scalar() + ")");
    return x;
  }

  // An energy in pJ: positive and at most `max` (absent: nullopt; whether it is required is the
  // validator's business, which knows the target kind).
  std::optional<double> energy(const std::string& key, double max) {
    YAML::Node v = get(key, false);
    if (!v) return std::nullopt;
    const double x = scalar_of<double>(v, key);
    if (!(x > 0) || x > max)
      fail(v, key_path(key), "got " + v.Scalar() + " pJ, outside the plausible range (0, " + fmt_number(max) + "]");
    return x;
  }

  std::vector<std::string> names(const std::string& key) {
    YAML::Node v = get(key, false);
    std::vector<std::string> out;
    if (!v) return out;
    if (!v.IsSequence()) fail(v, key_path(key), "expected a list such as [L0A, L0B]");
    for (const YAML::Node& item : v) {
      if (!item.IsScalar()) fail(item, key_path(key), "expected a list of names");
      out.push_back(item.Scalar());
    }
    return out;
  }

  DType dtype(const std::string& key, bool required, DType fallback) {
    YAML::Node v = get(key, required);
    if (!v) return fallback;
    return dtype_of(v, key);
  }

  DType dtype_of(const YAML::Node& v, const std::string& key) const {
    if (!v.IsScalar()) fail(v, key_path(key), "expected a dtype");
    auto t = parse_dtype(v.Scalar());
    if (!t) fail(v, key_path(key), "unknown dtype '" + v.Scalar() + "' (expected f16, bf16, f32, i8, u8 or i32)");
    return *t;
  }

  const std::string& file() const { return file_; }
  const std::string& where() const { return where_; }

 private:
  template <typename T>
  T scalar_of(const YAML::Node& v, const std::string& key) const {
    if (!v.IsScalar()) fail(v, key_path(key), "expected a single value");
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail(v, key_path(key), "cannot read '" + v.Scalar() + "' as a number");
    }
  }

  static std::string fmt_number(double x) {
    std::ostringstream os;
    os << x;
    return os.str();
  }

  template <typename T>
  static std::string type_word() {
    if constexpr (std::is_same_v<T, std::string>) return "text";
    else if constexpr (std::is_same_v<T, bool>) return "true/false";
    else return "a number";
  }

  YAML::Node node_;
  std::string where_;
  std::string file_;
  std::set<std::string> known_;
};

std::string indexed(const std::string& list, size_t i) { return list + "[" + std::to_string(i) + "]"; }

YAML::Node sequence(Fields& f, const std::string& key, bool required) {
  YAML::Node v = f.get(key, required);
  if (v && !v.IsSequence()) f.fail(v, f.key_path(key), "expected a list");
  return v;
}

// Messages about cross-references name the element by its own name and source line.
[[noreturn]] void reject(const std::string& file, const SourceMark& mark, const std::string& what,
                         const std::string& reason) {
  std::string where = file;
  if (mark.line > 0) where += ":" + std::to_string(mark.line);
  throw UserError(where + ": " + what + ": " + reason);
}

Level parse_level(const YAML::Node& node, const std::string& where, const std::string& file) {
  Fields f(node, where, file, kLevelKeys);
  Level l;
  l.mark = f.mark();
  l.name = f.scalar<std::string>("name", true);
  const std::string role = f.scalar<std::string>("role", true);
  auto r = parse_role(role);
  if (!r)
    f.fail(node["role"], f.key_path("role"),
           "unknown role '" + role + "' (expected global, stage, operand_a, operand_b, accumulator or vector)");
  l.role = *r;
  l.capacity_bytes = f.count<uint64_t>("capacity_bytes", true, 0, capacity_limit(l.role));
  l.alignment_bytes = f.count<uint32_t>("alignment_bytes", false, 1, kMaxAlignmentBytes);
  l.granularity_bytes = f.count<uint32_t>("granularity_bytes", false, 1, kMaxAlignmentBytes);
  l.layout = f.scalar<std::string>("layout", false, "");  // absent: the role's own (parse_tree fills it in)
  l.banks = f.count<uint32_t>("banks", false, 0, kMaxCount);
  l.bank_width_bytes = f.count<uint32_t>("bank_width_bytes", false, 0, kMaxAlignmentBytes);
  l.shared_bandwidth_bytes_per_cycle = f.positive_number("shared_bandwidth_bytes_per_cycle");
  l.read_latency_cycles = f.count<uint32_t>("read_latency_cycles", false, 0, kMaxCycles);
  l.write_latency_cycles = f.count<uint32_t>("write_latency_cycles", false, 0, kMaxCycles);
  l.read_energy_pj_per_byte = f.energy("read_energy_pj_per_byte", kMaxEnergyPerByte);
  l.write_energy_pj_per_byte = f.energy("write_energy_pj_per_byte", kMaxEnergyPerByte);
  return l;
}

MatrixShape parse_shape(const YAML::Node& node, const std::string& where, const std::string& file) {
  Fields f(node, where, file, kShapeKeys);
  MatrixShape s;
  s.mark = f.mark();
  auto dim = [&](const char* key) {
    YAML::Node v = f.get(key, true);
    const double x = f.number(key, true);
    if (!(x > 0) || x != std::floor(x))
      f.fail(v, f.key_path(key), "matrix shape dimension must be a positive integer (got " + v.Scalar() + ")");
    return static_cast<int>(x);
  };
  s.m = dim("m");
  s.n = dim("n");
  s.k = dim("k");
  s.a = f.dtype("a", true, DType::F16);
  s.b = f.dtype("b", true, DType::F16);
  s.acc = f.dtype("acc", true, DType::F32);
  s.cycles = f.count<uint32_t>("cycles", false, 1, kMaxCycles);
  s.min_arch = f.scalar<std::string>("min_arch", false);
  s.energy_pj_per_mac = f.energy("energy_pj_per_mac", kMaxEnergyPerMac);
  return s;
}

Unit parse_unit(const YAML::Node& node, const std::string& where, const std::string& file) {
  Fields f(node, where, file, kUnitKeys);
  Unit u;
  u.mark = f.mark();
  u.name = f.scalar<std::string>("name", true);
  const std::string kind = f.scalar<std::string>("kind", true);
  if (kind == "matrix") u.kind = UnitKind::Matrix;
  else if (kind == "vector") u.kind = UnitKind::Vector;
  else if (kind == "scalar") u.kind = UnitKind::Scalar;
  else if (kind == "copy") u.kind = UnitKind::Copy;
  else f.fail(node["kind"], f.key_path("kind"), "unknown unit kind '" + kind + "' (expected matrix, vector, scalar or copy)");
  u.pipe = f.scalar<std::string>("pipe", false);
  u.reads = f.names("reads");
  u.writes = f.names("writes");
  if (YAML::Node shapes = sequence(f, "shapes", false))
    for (size_t i = 0; i < shapes.size(); ++i)
      u.shapes.push_back(parse_shape(shapes[i], f.key_path(indexed("shapes", i)), file));
  if (YAML::Node dts = sequence(f, "dtypes", false))
    for (size_t i = 0; i < dts.size(); ++i) u.dtypes.push_back(f.dtype_of(dts[i], indexed("dtypes", i)));
  if (YAML::Node cs = sequence(f, "conversions", false))
    for (size_t i = 0; i < cs.size(); ++i) {
      Fields c(cs[i], f.key_path(indexed("conversions", i)), file, kConversionKeys);
      const VectorConversion v{c.dtype("from", true, DType::F32), c.dtype("to", true, DType::F32),
                               c.count<uint32_t>("cycles_per_repeat", true, 1, kMaxCycles)};
      if (v.from == v.to) c.fail(cs[i], c.key_path("to"), "a conversion needs two different dtypes");
      if (v.cycles_per_repeat == 0) c.fail(cs[i], c.key_path("cycles_per_repeat"), "must be at least 1 (got 0)");
      u.conversions.push_back(v);
    }
  u.bytes_per_repeat = f.count<uint32_t>("bytes_per_repeat", false, 0, kMaxAlignmentBytes);
  u.max_repeat = f.count<uint32_t>("max_repeat", false, 0, kMaxRepeat);
  u.mask_bits = f.count<uint32_t>("mask_bits", false, 0, kMaxMaskBits);
  if (f.has("mask_bits") && u.mask_bits == 0) f.fail(node["mask_bits"], f.key_path("mask_bits"), "must be at least 1 (got 0)");
  u.startup_cycles = f.count<uint32_t>("startup_cycles", false, 0, kMaxCycles);
  u.count = f.count<uint32_t>("count", false, 1, kMaxCount);
  u.energy_pj_per_repeat = f.energy("energy_pj_per_repeat", kMaxEnergyPerRepeat);
  u.energy_pj_per_instruction = f.energy("energy_pj_per_instruction", kMaxEnergyPerInstruction);
  u.energy_pj_per_byte = f.energy("energy_pj_per_byte", kMaxEnergyPerByte);
  return u;
}

TransferPath parse_path(const YAML::Node& node, const std::string& where, const std::string& file) {
  Fields f(node, where, file, kPathKeys);
  TransferPath p;
  p.mark = f.mark();
  p.from = f.scalar<std::string>("from", true);
  p.to = f.scalar<std::string>("to", true);
  p.engine = f.scalar<std::string>("engine", true);
  p.bandwidth_bytes_per_cycle = f.number("bandwidth_bytes_per_cycle", true);
  p.latency_cycles = f.count<uint32_t>("latency_cycles", true, 0, kMaxCycles);
  p.transforms = f.names("transforms");
  return p;
}

NpuSync parse_sync(const YAML::Node& node, const std::string& file) {
  Fields f(node, "sync", file, kSyncKeys);
  NpuSync s;
  s.event_ids_per_pipe_pair = f.count<uint32_t>("event_ids_per_pipe_pair", true, 0, kMaxCount);
  s.queue_depth = f.count<uint32_t>("queue_depth", true, 0, kMaxCount);
  s.set_flag_cycles = f.count<uint32_t>("set_flag_cycles", false, 1, kMaxCycles);
  s.barrier_cycles = f.count<uint32_t>("barrier_cycles", false, 1, kMaxCycles);
  s.scalar_cycles = f.count<uint32_t>("scalar_cycles", false, 1, kMaxCycles);
  s.cross_core_barrier_cycles = f.count<uint32_t>("cross_core_barrier_cycles", false, 1, kMaxCycles);
  if (s.event_ids_per_pipe_pair == 0) f.fail(node["event_ids_per_pipe_pair"], "sync.event_ids_per_pipe_pair", "must be at least 1");
  if (s.queue_depth == 0) f.fail(node["queue_depth"], "sync.queue_depth", "must be at least 1");
  return s;
}

GpuProperties parse_gpu(const YAML::Node& node, const std::string& file) {
  Fields f(node, "gpu", file, kGpuKeys);
  GpuProperties g;
  g.arch = f.scalar<std::string>("arch", true);
  const std::string cc = f.scalar<std::string>("compute_capability", true);
  const size_t dot = cc.find('.');
  try {
    if (dot == std::string::npos) throw std::invalid_argument(cc);
    g.compute_capability_major = std::stoi(cc.substr(0, dot));
    g.compute_capability_minor = std::stoi(cc.substr(dot + 1));
  } catch (const std::logic_error&) {
    f.fail(node["compute_capability"], "gpu.compute_capability", "expected MAJOR.MINOR such as 9.0 (got '" + cc + "')");
  }
  const std::string expected_arch = "sm_" + std::to_string(g.compute_capability_major) + std::to_string(g.compute_capability_minor);
  if (g.arch != expected_arch)
    f.fail(node["arch"], "gpu.arch", "'" + g.arch + "' does not match compute_capability " + cc + " (expected " + expected_arch + ")");
  g.warp_size = f.count<uint32_t>("warp_size", true, 0, kMaxCount);
  g.max_threads_per_block = f.count<uint32_t>("max_threads_per_block", true, 0, kMaxRepeat);
  g.registers_per_sm = f.count<uint32_t>("registers_per_sm", true, 0, kMaxRepeat);
  g.registers_per_block = f.count<uint32_t>("registers_per_block", true, 0, kMaxRepeat);
  g.shared_bytes_per_block = f.count<uint64_t>("shared_bytes_per_block", true, 0, kMaxOnChipBytes);
  g.shared_bytes_per_block_optin = f.count<uint64_t>("shared_bytes_per_block_optin", true, 0, kMaxOnChipBytes);
  g.shared_bytes_per_sm = f.count<uint64_t>("shared_bytes_per_sm", true, 0, kMaxOnChipBytes);
  g.l2_cache_bytes = f.count<uint64_t>("l2_cache_bytes", true, 0, kMaxOnChipBytes);
  g.l2_bandwidth_bytes_per_cycle = f.number("l2_bandwidth_bytes_per_cycle", false);
  if (!(g.l2_bandwidth_bytes_per_cycle >= 0 && g.l2_bandwidth_bytes_per_cycle <= 1e6))
    f.fail(node["l2_bandwidth_bytes_per_cycle"], "gpu.l2_bandwidth_bytes_per_cycle", "must be between 0 and 1e6");
  g.l2_hit_latency_cycles = f.count<uint32_t>("l2_hit_latency_cycles", false, 0, kMaxCycles);
  g.l2_partitions = f.count<uint32_t>("l2_partitions", false, 0, kMaxL2Partitions);
  if (g.l2_partitions > 1 && g.l2_cache_bytes % g.l2_partitions != 0)
    f.fail(node["l2_partitions"], "gpu.l2_partitions",
           "must divide l2_cache_bytes (" + std::to_string(g.l2_cache_bytes) + "): each partition holds an equal share");
  g.warp_mma_f16_macs_per_cycle = f.number("warp_mma_f16_macs_per_cycle", false);
  if (!(g.warp_mma_f16_macs_per_cycle >= 0 && g.warp_mma_f16_macs_per_cycle <= 1e6))
    f.fail(node["warp_mma_f16_macs_per_cycle"], "gpu.warp_mma_f16_macs_per_cycle", "must be between 0 and 1e6");
  for (const char* key : {"warp_size", "max_threads_per_block", "registers_per_sm", "shared_bytes_per_sm"})
    if (f.count<uint64_t>(key, true, 0, kMaxOnChipBytes) == 0) f.fail(node[key], std::string("gpu.") + key, "must be positive");
  g.shared_bytes_reserved_per_block = f.count<uint64_t>("shared_bytes_reserved_per_block", true, 0, kMaxOnChipBytes);
  g.vector_access_bytes = f.count<uint32_t>("vector_access_bytes", true, 0, kMaxAlignmentBytes);
  if (g.vector_access_bytes == 0 || (g.vector_access_bytes & (g.vector_access_bytes - 1)))
    f.fail(node["vector_access_bytes"], "gpu.vector_access_bytes", "must be a power of two");
  if (f.get("mma_sync_shape", false)) g.mma_sync_shape = parse_shape(node["mma_sync_shape"], "gpu.mma_sync_shape", file);
  if (f.get("wgmma_shape", false)) g.wgmma_shape = parse_shape(node["wgmma_shape"], "gpu.wgmma_shape", file);
  g.warps_per_warpgroup = f.count<uint32_t>("warps_per_warpgroup", false, 0, kMaxCount);
  if (g.wgmma_shape && g.warps_per_warpgroup == 0)
    f.fail(node["wgmma_shape"], "gpu.warps_per_warpgroup", "a description with wgmma_shape needs warps_per_warpgroup");
  g.bulk_copy_alignment_bytes = f.count<uint32_t>("bulk_copy_alignment_bytes", false, 0, kMaxAlignmentBytes);
  g.cluster_max_blocks = f.count<uint32_t>("cluster_max_blocks", false, 0, kMaxCount);
  g.features = f.names("features");
  if (std::find(g.features.begin(), g.features.end(), "bulk_copy") != g.features.end() && g.bulk_copy_alignment_bytes == 0)
    f.fail(node["features"], "gpu.bulk_copy_alignment_bytes", "a description with the bulk_copy feature needs bulk_copy_alignment_bytes");
  if (std::find(g.features.begin(), g.features.end(), "thread_block_clusters") != g.features.end() && g.cluster_max_blocks < 2)
    f.fail(node["features"], "gpu.cluster_max_blocks", "a description with the thread_block_clusters feature needs cluster_max_blocks >= 2");
  const auto& known = gpu_feature_names();
  for (size_t i = 0; i < g.features.size(); ++i) {
    if (std::find(known.begin(), known.end(), g.features[i]) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    f.fail(node["features"][i], "gpu.features", "unknown feature '" + g.features[i] + "' (expected one of " + list + ")");
  }
  return g;
}

// Records where the document it is given starts and ignores the rest of its events.
class DocumentStart : public YAML::EventHandler {
 public:
  YAML::Mark mark;
  void OnDocumentStart(const YAML::Mark& m) override { mark = m; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// One description per file: a second YAML document would be ignored silently. The parser is asked
// for two documents at most (YAML::LoadAll loops without end on some malformed input after the
// first document, as scripts/fuzz.sh found).
void check_single_document(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStart first, second;
  bool has_second = false;
  try {
    parser.HandleNextDocument(first);
    has_second = parser.HandleNextDocument(second);
  } catch (const YAML::ParserException& e) {  // the first document parsed; a later one does not
    throw UserError(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                    ": invalid YAML: " + e.msg);
  }
  if (has_second) {
    const YAML::Mark& m = second.mark;
    throw UserError(file + (m.is_null() ? "" : ":" + std::to_string(m.line + 1)) +
                    ": a second YAML document; a hierarchy description is one document (remove the '---' and what follows)");
  }
}

// A key given twice in one mapping: YAML keeps both and a lookup reads the first, so the second
// would be ignored silently.
void check_unique_keys(const YAML::Node& node, const std::string& file) {
  if (node.IsSequence()) {
    for (const YAML::Node& item : node) check_unique_keys(item, file);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> seen;  // key -> line
  for (auto it = node.begin(); it != node.end(); ++it) {
    const int line = it->first.Mark().line + 1;
    if (it->first.IsScalar()) {
      const auto [prev, fresh] = seen.emplace(it->first.Scalar(), line);
      if (!fresh)
        throw UserError(file + ":" + std::to_string(line) + ": " + it->first.Scalar() + ": key given twice (first on line " +
                        std::to_string(prev->second) + ")");
    }
    check_unique_keys(it->second, file);
  }
}

Hierarchy parse_tree(const YAML::Node& root, const std::string& file) {
  Fields f(root, "", file, kTopKeys);
  Hierarchy h;
  h.source_file = file;
  h.name = f.scalar<std::string>("name", true);
  h.description = f.scalar<std::string>("description", false);
  const std::string kind = f.scalar<std::string>("kind", true);
  if (kind == "npu") h.kind = TargetKind::Npu;
  else if (kind == "gpu") h.kind = TargetKind::Gpu;
  else f.fail(root["kind"], "kind", "unknown target kind '" + kind + "' (expected npu or gpu)");
  h.clock_mhz = f.number("clock_mhz", true);
  if (!(h.clock_mhz > 0)) f.fail(root["clock_mhz"], "clock_mhz", "must be positive");
  h.cores = f.count<uint32_t>("cores", true, 0, kMaxCores);
  if (h.cores == 0) f.fail(root["cores"], "cores", "must be at least 1");

  YAML::Node levels = sequence(f, "levels", true);
  for (size_t i = 0; i < levels.size(); ++i) h.levels.push_back(parse_level(levels[i], indexed("levels", i), file));
  YAML::Node units = sequence(f, "units", true);
  for (size_t i = 0; i < units.size(); ++i) h.units.push_back(parse_unit(units[i], indexed("units", i), file));
  YAML::Node paths = sequence(f, "paths", true);
  for (size_t i = 0; i < paths.size(); ++i) h.paths.push_back(parse_path(paths[i], indexed("paths", i), file));
  if (YAML::Node s = f.get("sync", false)) h.sync = parse_sync(s, file);
  if (YAML::Node g = f.get("gpu", false)) h.gpu = parse_gpu(g, file);
  for (Level& l : h.levels)
    if (l.layout.empty()) l.layout = std::string(implemented_layout(h.kind, l.role));
  validate_hierarchy(h);
  return h;
}

}  // namespace

const std::set<std::string>& hierarchy_schema_keys(std::string_view section) {
  static const std::map<std::string_view, const std::set<std::string>*> sections = {
      {"top", &kTopKeys},   {"level", &kLevelKeys}, {"unit", &kUnitKeys}, {"path", &kPathKeys},
      {"sync", &kSyncKeys}, {"gpu", &kGpuKeys},     {"shape", &kShapeKeys}};
  auto it = sections.find(section);
  TESSEL_CHECK(it != sections.end(), "hierarchy_schema_keys: no section '" + std::string(section) + "'");
  return *it->second;
}

Hierarchy parse_hierarchy(const std::string& text, const std::string& file, const Overrides& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw UserError(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                    ": invalid YAML: " + e.msg);
  }
  if (!root || root.IsNull()) throw UserError(file + ": empty hierarchy description");
  check_single_document(text, file);
  check_unique_keys(root, file);
  if (!root.IsMap()) parse_tree(root, file);  // the parser's own message for a document that is not a map
  apply_overrides(root, overrides, file);
  const std::string hash = description_hash(root);
  Hierarchy h;
  try {
    h = parse_tree(root, file);
  } catch (const UserError& e) {
    if (overrides.empty()) throw;
    throw UserError(std::string(e.what()) + " (in the variant with --set " + overrides.text() + ")");
  }
  h.description_hash = hash;
  h.overrides = overrides.text();
  return h;
}

Hierarchy load_hierarchy(const std::string& path, const Overrides& overrides) {
  return parse_hierarchy(read_bounded_file(path, "hierarchy description", kMaxDescriptionBytes), path, overrides);
}

// ---------------------------------------------------------------------------------------------
// Validation: structure beyond what a single key can say.
namespace {

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

void validate_levels(const Hierarchy& h) {
  const std::string& file = h.source_file;
  if (h.levels.empty()) reject(file, {}, "levels", "a description needs at least one level");
  std::map<std::string, const Level*> by_name;
  std::map<Role, const Level*> by_role;
  for (const Level& l : h.levels) {
    const std::string what = "level '" + l.name + "'";
    if (l.name.empty()) reject(file, l.mark, "levels", "a level has an empty name");
    if (!by_name.emplace(l.name, &l).second) reject(file, l.mark, what, "defined twice");
    if (l.capacity_bytes == 0) reject(file, l.mark, what + " capacity_bytes", "capacity must be positive (got 0)");
    if (!is_power_of_two(l.alignment_bytes))
      reject(file, l.mark, what + " alignment_bytes", "must be a power of two (got " + std::to_string(l.alignment_bytes) + ")");
    if (l.granularity_bytes == 0) reject(file, l.mark, what + " granularity_bytes", "must be positive");
    if (l.shared_bandwidth_bytes_per_cycle < 0) reject(file, l.mark, what + " shared_bandwidth_bytes_per_cycle", "must not be negative");
    auto [it, fresh] = by_role.emplace(l.role, &l);
    if (!fresh)
      reject(file, l.mark, what, "role " + std::string(role_name(l.role)) + " is already carried by level '" +
                                     it->second->name + "'; each role names exactly one level");
  }
  for (int r = 0; r < kRoleCount; ++r)
    if (!by_role.count(static_cast<Role>(r)))
      reject(file, {}, "levels", "missing role '" + std::string(role_name(static_cast<Role>(r))) +
                                     "': the scheduling core needs a level for each of global, stage, operand_a, "
                                     "operand_b, accumulator, vector");
  if (h.kind == TargetKind::Npu)
    if (auto g = by_role.find(Role::Global); g != by_role.end() && !(g->second->shared_bandwidth_bytes_per_cycle > 0))
      reject(file, g->second->mark, "level '" + g->second->name + "' shared_bandwidth_bytes_per_cycle",
             "required for an NPU description (its cores share the global memory's bandwidth)");
}

void check_level_names(const Hierarchy& h, const Unit& u, const std::vector<std::string>& names, const char* key) {
  for (const std::string& n : names)
    if (!h.find_level(n))
      reject(h.source_file, u.mark, "unit '" + u.name + "' " + key, "names undefined level '" + n + "'");
}

void validate_units(const Hierarchy& h) {
  const std::string& file = h.source_file;
  std::set<std::string> names;
  for (const Unit& u : h.units) {
    const std::string what = "unit '" + u.name + "'";
    if (!names.insert(u.name).second) reject(file, u.mark, what, "defined twice");
    check_level_names(h, u, u.reads, "reads");
    check_level_names(h, u, u.writes, "writes");
    if (u.count == 0) reject(file, u.mark, what + " count", "must be at least 1");
    if (u.kind == UnitKind::Matrix) {
      if (u.shapes.empty()) reject(file, u.mark, what, "a matrix unit needs at least one entry in shapes");
      for (const MatrixShape& s : u.shapes)
        if (s.cycles == 0) reject(file, s.mark, what + " shape cycles", "must be at least 1");
    } else if (!u.shapes.empty()) {
      reject(file, u.mark, what, "only matrix units have shapes");
    }
    if (!u.conversions.empty() && u.kind != UnitKind::Vector)
      reject(file, u.mark, what, "only vector units have conversions (vconv)");
    if (u.kind == UnitKind::Vector && (u.bytes_per_repeat == 0 || u.max_repeat == 0))
      reject(file, u.mark, what, "a vector unit needs positive bytes_per_repeat and max_repeat");
    if (h.kind == TargetKind::Npu &&
        std::find(kNpuPipes.begin(), kNpuPipes.end(), u.pipe) == kNpuPipes.end())
      reject(file, u.mark, what + " pipe", "NPU units need a pipe among S, V, M, MTE1, MTE2, MTE3 (got '" + u.pipe + "')");
  }
  if (h.units_of_kind(UnitKind::Matrix).empty()) reject(file, {}, "units", "a description needs a matrix unit");
  if (h.kind == TargetKind::Npu)
    for (std::string_view pipe : kNpuPipes)
      if (std::none_of(h.units.begin(), h.units.end(), [&](const Unit& u) { return u.pipe == pipe; }))
        reject(file, {}, "units", "no unit runs on NPU pipe " + std::string(pipe));
}

void validate_paths(const Hierarchy& h) {
  const std::string& file = h.source_file;
  for (const TransferPath& p : h.paths) {
    const std::string what = "path " + p.from + " -> " + p.to;
    if (!h.find_level(p.from)) reject(file, p.mark, what, "'from' names undefined level '" + p.from + "'");
    if (!h.find_level(p.to)) reject(file, p.mark, what, "'to' names undefined level '" + p.to + "'");
    if (p.from == p.to) reject(file, p.mark, what, "a path must join two different levels");
    const Unit* engine = h.find_unit(p.engine);
    if (!engine) reject(file, p.mark, what + " engine", "names undefined unit '" + p.engine + "'");
    if (!(p.bandwidth_bytes_per_cycle > 0)) reject(file, p.mark, what + " bandwidth_bytes_per_cycle", "must be positive");
    auto lists = [](const std::vector<std::string>& v, const std::string& n) {
      return v.empty() || std::find(v.begin(), v.end(), n) != v.end();
    };
    if (!lists(engine->reads, p.from))
      reject(file, p.mark, what, "engine '" + engine->name + "' cannot read level '" + p.from + "' (not in its reads)");
    if (!lists(engine->writes, p.to))
      reject(file, p.mark, what, "engine '" + engine->name + "' cannot write level '" + p.to + "' (not in its writes)");
  }
}

// Data flows along paths and through units (a unit that reads a filled level fills what it writes).
std::set<std::string> filled_from_global(const Hierarchy& h) {
  std::set<std::string> filled = {h.level(Role::Global).name};
  for (bool grew = true; grew;) {
    grew = false;
    for (const TransferPath& p : h.paths)
      if (filled.count(p.from) && filled.insert(p.to).second) grew = true;
    for (const Unit& u : h.units) {
      if (u.kind == UnitKind::Copy) continue;
      const bool fed = std::any_of(u.reads.begin(), u.reads.end(), [&](const std::string& r) { return filled.count(r) > 0; });
      if (fed)
        for (const std::string& w : u.writes)
          if (filled.insert(w).second) grew = true;
    }
  }
  return filled;
}

std::set<std::string> drains_to_global(const Hierarchy& h) {
  std::set<std::string> drains = {h.level(Role::Global).name};
  for (bool grew = true; grew;) {
    grew = false;
    for (const TransferPath& p : h.paths)
      if (drains.count(p.to) && drains.insert(p.from).second) grew = true;
    for (const Unit& u : h.units) {
      if (u.kind == UnitKind::Copy) continue;
      const bool drained = std::any_of(u.writes.begin(), u.writes.end(), [&](const std::string& w) { return drains.count(w) > 0; });
      if (drained)
        for (const std::string& r : u.reads)
          if (drains.insert(r).second) grew = true;
    }
  }
  return drains;
}

void validate_reachability(const Hierarchy& h) {
  const std::string& file = h.source_file;
  const std::set<std::string> filled = filled_from_global(h);
  for (const Level& l : h.levels)
    if (!filled.count(l.name))
      reject(file, l.mark, "level '" + l.name + "'",
             "no transfer path reaches it from the global level '" + h.level(Role::Global).name + "'");
  for (const Unit& u : h.units)
    for (const std::string& r : u.reads)
      if (!filled.count(r))
        reject(file, u.mark, "unit '" + u.name + "'", "reads level '" + r + "' that it cannot reach: nothing brings data there");
  const std::set<std::string> drains = drains_to_global(h);
  for (Role r : {Role::Accumulator, Role::Vector}) {
    const Level& l = h.level(r);
    if (!drains.count(l.name))
      reject(file, l.mark, "level '" + l.name + "'", "results in this " + std::string(role_name(r)) +
                                                        " level cannot reach the global level: add a transfer path out of it");
  }
}

// Energy keys belong to the kind of unit that performs the operation they price; an NPU description
// prices every level and operation (the simulator's report and the analytic model need them all).
void validate_energy(const Hierarchy& h) {
  const std::string& file = h.source_file;
  const bool npu = h.kind == TargetKind::Npu;
  auto engines_a_path = [&](const Unit& u) {
    return std::any_of(h.paths.begin(), h.paths.end(), [&](const TransferPath& p) { return p.engine == u.name; });
  };
  for (const Unit& u : h.units) {
    const std::string what = "unit '" + u.name + "'";
    if (u.energy_pj_per_repeat && u.kind != UnitKind::Vector)
      reject(file, u.mark, what + " energy_pj_per_repeat", "only vector units have repeats");
    if (u.energy_pj_per_instruction && u.kind != UnitKind::Scalar)
      reject(file, u.mark, what + " energy_pj_per_instruction", "only scalar units price instructions");
    if (u.energy_pj_per_byte && !engines_a_path(u))
      reject(file, u.mark, what + " energy_pj_per_byte", "the unit is the engine of no transfer path");
    if (!npu) continue;
    if (u.kind == UnitKind::Vector && !u.energy_pj_per_repeat)
      reject(file, u.mark, what, "an NPU vector unit needs energy_pj_per_repeat");
    if (u.kind == UnitKind::Scalar && !u.energy_pj_per_instruction)
      reject(file, u.mark, what, "an NPU scalar unit needs energy_pj_per_instruction");
    if (engines_a_path(u) && !u.energy_pj_per_byte)
      reject(file, u.mark, what, "an NPU unit that moves data along a path needs energy_pj_per_byte");
    for (const MatrixShape& s : u.shapes)
      if (!s.energy_pj_per_mac)
        reject(file, s.mark, what + " shape " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k),
               "an NPU matrix shape needs energy_pj_per_mac");
  }
  if (!npu) return;
  for (const Level& l : h.levels)
    if (!l.read_energy_pj_per_byte || !l.write_energy_pj_per_byte)
      reject(file, l.mark, "level '" + l.name + "'",
             "an NPU level needs read_energy_pj_per_byte and write_energy_pj_per_byte");
}


std::string level_key(const Level& l, const std::string& field) { return l.name + "." + field; }

// Layouts are not read by any backend: each role has the one its backend implements. Another value
// would be accepted with no effect (but a different description hash), so it is refused.
void validate_layouts(const Hierarchy& h) {
  static const std::set<std::string> known = {"nd", "fractal_zz", "fractal_zn", "fractal_nz", "fragment", "banked"};
  for (const Level& l : h.levels) {
    if (l.layout.empty()) continue;  // built in code without one: the role's own
    const std::string what = "level '" + l.name + "' layout";
    if (!known.count(l.layout))
      reject(h.source_file, l.mark, what, "unknown layout '" + l.layout + "' (expected nd, fractal_zz, fractal_zn, fractal_nz, fragment or banked)");
    const std::string_view want = implemented_layout(h.kind, l.role);
    if (l.layout != want)
      reject(h.source_file, l.mark, what,
             "'" + l.layout + "' is not implemented for role " + std::string(role_name(l.role)) + " on " +
                 std::string(target_kind_name(h.kind)) + " targets; the " + std::string(target_kind_name(h.kind)) +
                 " backend lays this level out as '" + std::string(want) + "' (leave the key out or write that)");
  }
}

// Bandwidths within the plausible range (hierarchy.h): every cycle count derived from them stays
// far inside 64 bits.
void validate_bandwidths(const Hierarchy& h) {
  auto check = [&](double bw, const SourceMark& mark, const std::string& what) {
    if (bw > 0 && (bw < kMinBandwidthBytesPerCycle || bw > kMaxBandwidthBytesPerCycle)) {
      std::ostringstream os;
      os << "got " << bw << " bytes/cycle, outside the plausible range 1/1024.." << uint64_t(kMaxBandwidthBytesPerCycle)
         << " (2^30); cycle counts derived from it would leave 64 bits or mean nothing";
      reject(h.source_file, mark, what, os.str());
    }
  };
  for (const TransferPath& p : h.paths) check(p.bandwidth_bytes_per_cycle, p.mark, "path " + p.from + " -> " + p.to + " bandwidth_bytes_per_cycle");
  for (const Level& l : h.levels)
    check(l.shared_bandwidth_bytes_per_cycle, l.mark, "level '" + l.name + "' shared_bandwidth_bytes_per_cycle");
}

// What the NPU compiler and simulator rely on (isa/README.md, "What the validator checks"):
// the vector unit's geometry, where buffers may start, and the least each on-chip level must hold.
void validate_npu_rules(const Hierarchy& h) {
  const std::string& file = h.source_file;
  const Level& gm = h.level(Role::Global);
  const Level& ub = h.level(Role::Vector);
  if (gm.alignment_bytes != 1)
    reject(file, gm.mark, "level '" + gm.name + "' alignment_bytes",
           "must be 1 on an NPU (got " + std::to_string(gm.alignment_bytes) +
               "): the compiler addresses global tensors at element offsets (a row of i8 may start at any byte)");
  if (!is_power_of_two(gm.granularity_bytes) || gm.granularity_bytes < 4 || gm.granularity_bytes > 512)
    reject(file, gm.mark, "level '" + gm.name + "' granularity_bytes",
           "got " + std::to_string(gm.granularity_bytes) +
               "; an NPU's global granule must be a power of two between 4 (the widest element, f32 / i32) and 512: the "
               "compiler places tensors and pads rows on whole granules, and beyond 512 bytes that padding runs away");
  // Where the compiler places buffers: on-chip levels at multiples of one fractal row (stage, vector),
  // one operand fractal (L0A, L0B) or one accumulator fractal (L0C); an alignment must divide that.
  uint64_t row = 32, a_frac = 0, b_frac = 0, c_frac = 0;
  for (const Unit* u : h.units_of_kind(UnitKind::Matrix))
    for (const MatrixShape& s : u->shapes) {
      if (s.a == DType::F16 && s.acc == DType::F32) row = uint64_t(s.k) * dtype_bytes(DType::F16);
      a_frac = std::max<uint64_t>(a_frac, uint64_t(s.m) * s.k * dtype_bytes(s.a));
      b_frac = std::max<uint64_t>(b_frac, uint64_t(s.k) * s.n * dtype_bytes(s.b));
      c_frac = std::max<uint64_t>(c_frac, uint64_t(s.m) * s.n * dtype_bytes(s.acc));
    }
  for (const Level& l : h.levels) {
    if (l.role == Role::Global) continue;
    const uint64_t placed = l.role == Role::OperandA ? a_frac : l.role == Role::OperandB ? b_frac : l.role == Role::Accumulator ? c_frac : row;
    if (placed > 0 && placed % l.alignment_bytes != 0)
      reject(file, l.mark, "level '" + l.name + "' alignment_bytes",
             "got " + std::to_string(l.alignment_bytes) + "; the compiler places " + std::string(role_name(l.role)) +
                 " buffers at multiples of " + std::to_string(placed) + " bytes (" +
                 (l.role == Role::Accumulator ? "one accumulator fractal" : l.role == Role::OperandA || l.role == Role::OperandB ? "one operand fractal" : "one fractal row") +
                 "), so the alignment must divide that");
    if (l.granularity_bytes % l.alignment_bytes != 0)
      reject(file, l.mark, "level '" + l.name + "' granularity_bytes and alignment_bytes",
             "granularity " + std::to_string(l.granularity_bytes) + " must be a multiple of the alignment " +
                 std::to_string(l.alignment_bytes) + ": the compiler places buffers on whole granules, so an alignment that does not divide them would not be honoured");
  }
  // The vector unit: operands are blocks of UB's granularity; a repeat is bytes_per_repeat bytes.
  const Unit* vector = nullptr;
  for (const Unit& u : h.units)
    if (u.kind == UnitKind::Vector && u.pipe == "V") vector = &u;
  if (!vector) reject(file, {}, "units", "an NPU description needs a vector unit on pipe V");
  const uint32_t block = ub.granularity_bytes, bpr = vector->bytes_per_repeat;
  const std::string vu = "unit '" + vector->name + "' ";
  if (!is_power_of_two(block) || block < 4 || row % block != 0)
    reject(file, ub.mark, "level '" + ub.name + "' granularity_bytes",
           "the vector unit's block must be a power of two of at least 4 bytes that divides one fractal row (" + std::to_string(row) +
               " bytes) (got " + std::to_string(block) +
               "): vector operands are whole blocks of whole f32 elements, and fractal rows (img2col, accumulators) land in UB as whole blocks");
  const MatrixShape* f16 = nullptr;
  for (const Unit* u : h.units_of_kind(UnitKind::Matrix))
    for (const MatrixShape& s : u->shapes)
      if (s.a == DType::F16 && s.acc == DType::F32) f16 = &s;
  const uint32_t acc_row = f16 ? uint32_t(f16->n) * 4 : 64;  // one accumulator fractal row of f32
  if (!is_power_of_two(bpr) || bpr < 2 * block || bpr < acc_row)
    reject(file, vector->mark, vu + "bytes_per_repeat",
           "got " + std::to_string(bpr) + "; a repeat must be a power of two of at least two vector blocks (2 x " + level_key(ub, "granularity_bytes") +
               " = " + std::to_string(2 * block) + ") and one f32 accumulator row (" + std::to_string(acc_row) +
               "): casts write half a repeat in whole blocks, and accumulator rows move as repeats");
  if (vector->mask_bits * 2 < bpr)
    reject(file, vector->mark, vu + "mask_bits",
           "got " + std::to_string(vector->mask_bits) + "; every f16 lane of a repeat needs its own mask bit (bytes_per_repeat " +
               std::to_string(bpr) + " / 2 = " + std::to_string(bpr / 2) + ")");
  if (vector->max_repeat < block)
    reject(file, vector->mark, vu + "max_repeat",
           "got " + std::to_string(vector->max_repeat) + "; the compiler walks rows in runs of whole blocks of the narrowest type, so one instruction must take at least " +
               std::to_string(block) + " repeats (the i8 elements of a block, " + level_key(ub, "granularity_bytes") + ")");
  // The least each on-chip level must hold: two of the cube's fractals (double buffering), two
  // accumulator fractals, 16 repeats of the vector unit.
  auto at_least = [&](Role r, uint64_t least, const std::string& why) {
    const Level& l = h.level(r);
    if (l.capacity_bytes < least)
      reject(file, l.mark, "level '" + l.name + "' capacity_bytes",
             "got " + std::to_string(l.capacity_bytes) + ", less than the " + std::to_string(least) + " bytes the compiler needs at least (" + why + ")");
  };
  at_least(Role::OperandA, 2 * a_frac, "two left-operand fractals, double buffered");
  at_least(Role::OperandB, 2 * b_frac, "two right-operand fractals, double buffered");
  at_least(Role::Accumulator, 2 * c_frac, "two accumulator fractals");
  at_least(Role::Stage, 2 * (a_frac + b_frac), "a fractal of each operand, double buffered");
  at_least(Role::Vector, 16 * uint64_t(bpr), "16 repeats of the vector unit");
}

}  // namespace

void validate_hierarchy(const Hierarchy& h) {
  const std::string& file = h.source_file;
  validate_levels(h);
  validate_units(h);
  validate_paths(h);
  validate_reachability(h);
  validate_energy(h);
  if (h.kind == TargetKind::Npu && !h.sync)
    reject(file, {}, "sync", "an NPU description needs a sync section (event_ids_per_pipe_pair, queue_depth)");
  if (h.kind == TargetKind::Gpu && !h.gpu)
    reject(file, {}, "gpu", "a GPU description needs a gpu section (arch, compute_capability, ...)");
  if (h.kind == TargetKind::Npu && h.gpu) reject(file, {}, "gpu", "an NPU description cannot have a gpu section");
  if (h.kind == TargetKind::Gpu && h.sync) reject(file, {}, "sync", "a GPU description cannot have an NPU sync section");
  validate_layouts(h);
  validate_bandwidths(h);
  if (h.kind == TargetKind::Npu) validate_npu_rules(h);
}

}  // namespace tessel::isa
