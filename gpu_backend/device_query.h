// What the GPU present on this machine says about itself, in the terms of isa::GpuProperties, and
// the comparison of a hierarchy description with it (`tessel check-hierarchy --device`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "isa/hierarchy.h"

namespace tessel::gpu {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;                 // "NVIDIA H100 80GB HBM3"
  isa::GpuProperties properties;    // arch "sm_90", compute capability, sizes, as the device reports
  uint32_t sm_count = 0;
  double clock_mhz = 0;             // the driver's "typical" SM clock
  double memory_clock_mhz = 0;
  uint32_t memory_bus_width_bits = 0;
  uint64_t global_memory_bytes = 0;
  int driver_version = 0;           // 13000 = CUDA 13.0
};

// Number of CUDA devices; 0 when there is no driver or no GPU (never throws). *why says why 0.
int device_count(std::string* why = nullptr);

// Throws GpuError when the device cannot be queried.
DeviceInfo query_device(int ordinal = 0);

// One property compared between a description and the device.
struct PropertyComparison {
  std::string property;     // "SM count", "shared bytes per block (opt-in)"
  std::string described;    // as written in the description
  std::string measured;     // as the device reports
  bool must_match = true;   // false: shown for information (clock, global memory size)
  bool matches = true;
};

// Throws UserError naming the file when `h` is not a GPU description (kind: gpu, with a gpu: section).
void require_gpu_description(const isa::Hierarchy& h);

// Every GPU property of the description against the device. Throws UserError when the description
// is not a GPU description.
std::vector<PropertyComparison> compare_with_device(const isa::Hierarchy& h, const DeviceInfo& device);

// Rows that must match and do not.
int count_mismatches(const std::vector<PropertyComparison>& rows);

// A side-by-side table followed by one line per mismatch ("mismatch: L2 cache bytes: ...").
std::string format_device_comparison(const isa::Hierarchy& h, const DeviceInfo& device,
                                     const std::vector<PropertyComparison>& rows);

}  // namespace tessel::gpu
