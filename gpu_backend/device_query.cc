#include "gpu_backend/device_query.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "gpu_backend/driver_api.h"
#include "gpu_backend/error.h"
#include "isa/base/error.h"

namespace tessel::gpu {
namespace {

int attribute(CUdevice dev, CUdevice_attribute attr, const char* what) {
  int value = 0;
  const CUresult r = driver().cuDeviceGetAttribute(&value, attr, dev);
  check_cu(r, what);
  return value;
}

std::string bytes_text(uint64_t b) {
  // The exact count, then the largest binary unit it reaches ("62914560 (60 MiB)", "150109880320 (139.8 GiB)").
  std::ostringstream o;
  o << b;
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  int u = -1;
  double v = double(b);
  while (u < 3 && v >= 1024) v /= 1024, ++u;
  if (u >= 0) {
    o << " (";
    if (v == std::floor(v))
      o << uint64_t(v);
    else
      o << std::fixed << std::setprecision(1) << v;
    o << " " << units[u] << ")";
  }
  return o.str();
}

}  // namespace

int device_count(std::string* why) {
  std::string reason;
  if (!driver_available(&reason)) {
    if (why) *why = reason;
    return 0;
  }
  int count = 0;
  if (driver().cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    if (why) *why = "the CUDA driver reports no GPU";
    return 0;
  }
  return count;
}

DeviceInfo query_device(int ordinal) {
  const DriverApi& api = driver();
  CUdevice dev = 0;
  TESSEL_CU(cuDeviceGet(&dev, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {0};
  TESSEL_CU(cuDeviceGetName(name, sizeof name, dev));
  info.name = name;
  size_t total = 0;
  TESSEL_CU(cuDeviceTotalMem(&total, dev));
  info.global_memory_bytes = total;
  TESSEL_CU(cuDriverGetVersion(&info.driver_version));
  (void)api;

  isa::GpuProperties& p = info.properties;
  p.compute_capability_major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  p.compute_capability_minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  p.arch = "sm_" + std::to_string(p.compute_capability_major) + std::to_string(p.compute_capability_minor);
  p.warp_size = attribute(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, "cuDeviceGetAttribute(WARP_SIZE)");
  p.max_threads_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "cuDeviceGetAttribute(MAX_THREADS_PER_BLOCK)");
  p.registers_per_sm = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, "cuDeviceGetAttribute(MAX_REGISTERS_PER_MULTIPROCESSOR)");
  p.registers_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, "cuDeviceGetAttribute(MAX_REGISTERS_PER_BLOCK)");
  p.shared_bytes_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK)");
  p.shared_bytes_per_block_optin = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  p.shared_bytes_per_sm = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)");
  p.l2_cache_bytes = attribute(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  info.sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  info.clock_mhz = attribute(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "cuDeviceGetAttribute(CLOCK_RATE)") / 1000.0;
  info.memory_clock_mhz = attribute(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "cuDeviceGetAttribute(MEMORY_CLOCK_RATE)") / 1000.0;
  info.memory_bus_width_bits = attribute(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "cuDeviceGetAttribute(GLOBAL_MEMORY_BUS_WIDTH)");
  return info;
}

void require_gpu_description(const isa::Hierarchy& h) {
  if (h.kind != isa::TargetKind::Gpu || !h.gpu)
    throw UserError(h.source_file + ": '" + h.name + "' is an " + std::string(isa::target_kind_name(h.kind)) +
                    " description; --device compares GPU descriptions (kind: gpu, with a gpu: section)");
}

std::vector<PropertyComparison> compare_with_device(const isa::Hierarchy& h, const DeviceInfo& d) {
  require_gpu_description(h);
  const isa::GpuProperties& w = *h.gpu;
  const isa::GpuProperties& m = d.properties;
  std::vector<PropertyComparison> rows;
  const auto add = [&](std::string property, std::string described, std::string measured, bool must_match) {
    rows.push_back({std::move(property), described, measured, must_match, described == measured});
  };
  const auto num = [](uint64_t v) { return std::to_string(v); };
  add("architecture", w.arch, m.arch, true);
  add("compute capability", std::to_string(w.compute_capability_major) + "." + std::to_string(w.compute_capability_minor),
      std::to_string(m.compute_capability_major) + "." + std::to_string(m.compute_capability_minor), true);
  add("SM count (cores)", num(h.cores), num(d.sm_count), true);
  add("warp size", num(w.warp_size), num(m.warp_size), true);
  add("max threads per block", num(w.max_threads_per_block), num(m.max_threads_per_block), true);
  add("registers per SM", num(w.registers_per_sm), num(m.registers_per_sm), true);
  add("registers per block", num(w.registers_per_block), num(m.registers_per_block), true);
  add("shared bytes per block", bytes_text(w.shared_bytes_per_block), bytes_text(m.shared_bytes_per_block), true);
  add("shared bytes per block (opt-in)", bytes_text(w.shared_bytes_per_block_optin), bytes_text(m.shared_bytes_per_block_optin), true);
  add("shared bytes per SM", bytes_text(w.shared_bytes_per_sm), bytes_text(m.shared_bytes_per_sm), true);
  if (const isa::Level* stage = h.level_with_role(isa::Role::Stage))
    add("stage level '" + stage->name + "' capacity vs shared per SM", bytes_text(stage->capacity_bytes),
        bytes_text(m.shared_bytes_per_sm), true);
  add("L2 cache bytes", bytes_text(w.l2_cache_bytes), bytes_text(m.l2_cache_bytes), true);
  // Information only: clocks vary with boost and power state; memory size differs between parts
  // that share an SM array (H100 80 GB, H200 141 GB).
  std::ostringstream clk_w, clk_m;
  clk_w << h.clock_mhz << " MHz";
  clk_m << d.clock_mhz << " MHz";
  add("clock (information)", clk_w.str(), clk_m.str(), false);
  if (const isa::Level* global = h.level_with_role(isa::Role::Global))
    add("global memory (information)", bytes_text(global->capacity_bytes), bytes_text(d.global_memory_bytes), false);
  return rows;
}

int count_mismatches(const std::vector<PropertyComparison>& rows) {
  int n = 0;
  for (const auto& r : rows) n += r.must_match && !r.matches;
  return n;
}

std::string format_device_comparison(const isa::Hierarchy& h, const DeviceInfo& d,
                                     const std::vector<PropertyComparison>& rows) {
  std::ostringstream o;
  o << "device " << d.ordinal << ": " << d.name << " (" << d.properties.arch << ", " << d.sm_count << " SMs, "
    << d.clock_mhz << " MHz, driver " << d.driver_version / 1000 << "." << (d.driver_version % 1000) / 10 << ")\n";
  size_t w0 = 8, w1 = 11;
  for (const auto& r : rows) w0 = std::max(w0, r.property.size()), w1 = std::max(w1, r.described.size());
  const std::string desc_head = h.name + " (description)";
  w1 = std::max(w1, desc_head.size());
  o << std::left << std::setw(int(w0) + 2) << "property" << std::setw(int(w1) + 2) << desc_head << "device\n";
  int mismatches = 0;
  for (const auto& r : rows) {
    o << std::left << std::setw(int(w0) + 2) << r.property << std::setw(int(w1) + 2) << r.described << r.measured;
    if (!r.matches) o << (r.must_match ? "   <-- MISMATCH" : "   (differs; not checked)");
    o << "\n";
    if (r.must_match && !r.matches) ++mismatches;
  }
  o << "\n";
  for (const auto& r : rows)
    if (r.must_match && !r.matches)
      o << "mismatch: " << r.property << ": " << h.source_file << " says " << r.described << ", the device reports "
        << r.measured << "\n";
  if (mismatches == 0)
    o << h.source_file << " agrees with " << d.name << " on every checked property\n";
  else
    o << mismatches << (mismatches == 1 ? " property of " : " properties of ") << h.source_file
      << (mismatches == 1 ? " differs from " : " differ from ")
      << d.name << "\n";
  return o.str();
}

}  // namespace tessel::gpu
