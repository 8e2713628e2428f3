// Writers over a GPU roofline (compiler/kernel/gpu_roofline.h) and the time a run took, the GPU
// twins of run_npu.h's roofline_json / roofline_text (the model computes, these only print):
//   gpu_roofline_text: `compile --explain`'s bound line, worded as the NPU's ("  bound: roofline
//     255192 cycles (139.45 us), tensor-core bound (tensor-core 254200, CUDA-core 0, DRAM 73343,
//     latency 992 on 132 SMs)"), plus a note for f32 MACs under --tf32 the description cannot price;
//   gpu_roofline_json: the report's "roofline" object, with the NPU's field names where the
//     quantity is the same (cycles, binds, fraction, cores, latency_cycles, macs, macs_per_dtype,
//     gm_read_bytes, gm_write_bytes) and the GPU's bounds beside them (tensor_core_cycles,
//     cuda_core_cycles, dram_cycles), plus microseconds and clock_mhz. `measured_us` 0: no
//     fraction (a compile, not a run).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "compiler/kernel/gpu_roofline.h"

namespace tessel::cli {

// Each line starts with `prefix` ("  kernel 0 matmul: " for one kernel of a program).
std::string gpu_roofline_text(const kernel::GpuRoofline& r, const std::string& prefix = "  ");
nlohmann::json gpu_roofline_json(const kernel::GpuRoofline& r, double measured_us);

}  // namespace tessel::cli
