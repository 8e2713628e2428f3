#include "compiler/cli/gpu_roofline_writers.h"

#include <fmt/format.h>

namespace tessel::cli {

std::string gpu_roofline_text(const kernel::GpuRoofline& r, const std::string& prefix) {
  std::string text = prefix + fmt::format(
      "bound: roofline {:.0f} cycles ({:.2f} us), {} bound (tensor-core {:.0f}, CUDA-core {:.0f}, DRAM {:.0f}, latency {:.0f} "
      "on {} SMs)\n",
      r.cycles, r.microseconds(), kernel::gpu_roofline_bound_name(r.binds), r.tensor_core_cycles, r.cuda_core_cycles,
      r.dram_cycles, r.latency_cycles, r.sms);
  if (r.unpriced_macs)
    text += prefix + fmt::format("bound: {} f32 MACs on the TF32 tensor cores not priced (the description has no TF32 rate)\n",
                        r.unpriced_macs);
  return text;
}

nlohmann::json gpu_roofline_json(const kernel::GpuRoofline& r, double measured_us) {
  nlohmann::json macs = nlohmann::json::object();
  for (const auto& [dtype, n] : r.work.contraction_macs) macs[std::string(dtype_name(dtype))] = n;
  nlohmann::json j = {{"cycles", r.cycles},
                      {"microseconds", r.microseconds()},
                      {"clock_mhz", r.clock_mhz},
                      {"binds", kernel::gpu_roofline_bound_name(r.binds)},
                      {"cores", r.sms},
                      {"tensor_core_cycles", r.tensor_core_cycles},
                      {"cuda_core_cycles", r.cuda_core_cycles},
                      {"dram_cycles", r.dram_cycles},
                      {"latency_cycles", r.latency_cycles},
                      {"macs", r.work.macs()},
                      {"macs_per_dtype", macs},
                      {"tensor_core_macs", r.tensor_core_macs},
                      {"cuda_core_macs", r.cuda_core_macs},
                      {"unpriced_macs", r.unpriced_macs},
                      {"vector_ops", r.work.vector_ops},
                      {"cuda_core_op_bytes", r.cuda_core_op_bytes},
                      {"gm_read_bytes", r.work.gm_read_bytes},
                      {"gm_write_bytes", r.work.gm_write_bytes}};
  if (measured_us > 0) j["fraction"] = r.fraction_of_microseconds(measured_us);
  return j;
}

}  // namespace tessel::cli
