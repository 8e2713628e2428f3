// The memory-bound table of `tessel bench gpu` (issue 15, item 6), its half that needs no GPU: the
// bytes a kernel must move, and the table and JSON written over measured rows. bench_gpu.cc
// measures (compile, verify against the reference interpreter, CUDA-graph timing, the copy);
// these functions only format what it measured, so tests check them with made-up timings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::cli {

// Bytes a kernel cannot avoid moving through global memory: every input tensor read once and
// every output written once, from the kernel IR's global tensors. Temporaries (locals materialised
// in global memory between fused groups) are excluded: a better schedule keeps them on chip, so
// their traffic counts against the kernel's achieved bandwidth, not towards it.
uint64_t bytes_moved_once(const kernel::Kernel& k);

// "M=4096,N=768": a suite entry's size bindings, in name order.
std::string shape_text(const std::map<std::string, int64_t>& sizes);

// A device-to-device copy measured in the same process: `bytes` per call, each read and written.
struct CopyReference {
  uint64_t bytes = 0;
  double graph_us = 0;  // per copy, CUDA-graph harness
  double bytes_per_second() const { return graph_us > 0 ? 2.0 * double(bytes) / (graph_us * 1e-6) : 0; }
};

struct MemoryBoundRow {
  std::string name;    // the suite entry, "softmax_4096x768"
  std::string kernel;  // its def, "softmax"
  std::map<std::string, int64_t> shape;
  uint64_t bytes_moved = 0;  // bytes_moved_once
  double graph_us = 0;       // per call, CUDA-graph harness; 0: not timed (see error)
  bool verified = false;     // against the reference interpreter
  double max_abs_err = 0;
  int64_t mismatches = 0;
  std::string first_mismatch;
  size_t launches = 0;
  std::vector<std::string> notes;  // arch differences, spills
  std::string error;               // compile or run failure

  double bytes_per_second() const { return graph_us > 0 ? double(bytes_moved) / (graph_us * 1e-6) : 0; }
  double fraction_of_copy(const CopyReference& copy) const {
    const double c = copy.bytes_per_second();
    return c > 0 ? bytes_per_second() / c : 0;
  }
};

struct MemoryBoundTable {
  std::string device;
  uint64_t l2_cache_bytes = 0;  // the device's; inputs are not rotated, so smaller problems run L2-warm
  CopyReference copy;
  std::vector<MemoryBoundRow> rows;
};

// Fixed-width text: a header (the copy's bandwidth, column names), then one line per row.
std::string memory_bound_header(const MemoryBoundTable& t);
std::string memory_bound_line(const MemoryBoundTable& t, const MemoryBoundRow& row);
std::string memory_bound_text(const MemoryBoundTable& t);  // header + every line

// {"copy": {bytes, graph_us, bytes_per_s}, "l2_cache_bytes", "rows": [...]}: the copy recorded once.
nlohmann::json memory_bound_json(const MemoryBoundTable& t);

}  // namespace tessel::cli
