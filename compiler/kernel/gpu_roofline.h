// Roofline of a kernel on a GPU (analysis; rewrites nothing): the fewest SM cycles the GPU
// description allows for the operator, whatever the plan, and which bound sets them. The GPU twin
// of npu_roofline (compiler/kernel/roofline.h), over the same work: count_work's KernelWork (MACs
// per operand dtype, element operations and their bytes, each tensor read and written once).
// `tessel compile --explain` prints it for CUDA targets beside the chosen plan.
//
// Input: KernelWork and a validated GPU description (isa/hierarchy.h: the numbers the analytic
// cost model reads too; isa/targets/sm*.yaml cite their sources). Output: GpuRoofline. Bounds in
// cycles of the description's clock_mhz, each over every SM of the chip (`cores`):
//   - tensor-core = sum over operand dtypes with a shape on the matrix unit of
//     MACs / (SMs x peak_macs_per_cycle(dtype, its accumulator)): the unit's peak (count x
//     m n k / cycles of its fastest shape), which on Hopper only wgmma reaches;
//   - CUDA-core = (element-operation bytes + contraction bytes the CUDA cores run) / (SMs x the
//     vector unit's bytes_per_repeat): one repeat a cycle, so 4-byte operations go at the FP32
//     lane count and 2-byte ones at twice it (half2). A contraction with no matrix shape for its
//     dtype (f32: TF32 is not f32; i8 on sm_70) is one fused multiply-add per MAC at the
//     accumulator's width (at least 4 bytes), i.e. MACs / (SMs x FP32 lanes) for f32;
//   - DRAM = (read + written bytes) / the global level's shared_bandwidth_bytes_per_cycle;
//   - latency = the global level's read latency + the start-up of each unit the work uses (matrix,
//     vector) + its write latency: the first byte in, the last byte out. The descriptions carry no
//     kernel launch overhead, so none is added.
//   roofline cycles = max(tensor-core, CUDA-core, DRAM) + latency; microseconds = cycles /
//   clock_mhz. The bound that binds is the largest of the three, or `latency` when larger.
// With `tf32` (the --tf32 flag: f32 contractions run on the tensor cores with TF32 inputs) the f32
// MACs go to the tensor cores at the rate of an f32 shape of the matrix unit; the descriptions list
// none (no TF32 rate), so those MACs are left out of every bound and counted in unpriced_macs —
// the roofline stays a lower bound, and the caller says they are not priced.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/kernel/roofline.h"
#include "isa/hierarchy.h"

namespace tessel::kernel {

// X(enumerator, name)
#define TESSEL_GPU_ROOFLINE_BOUNDS(X) \
  X(TensorCore, "tensor-core")        \
  X(CudaCore, "CUDA-core")            \
  X(Dram, "DRAM")                     \
  X(Latency, "latency")

enum class GpuRooflineBound : uint8_t {
#define TESSEL_X(e, s) e,
  TESSEL_GPU_ROOFLINE_BOUNDS(TESSEL_X)
#undef TESSEL_X
};
const char* gpu_roofline_bound_name(GpuRooflineBound b);
std::optional<GpuRooflineBound> parse_gpu_roofline_bound(const std::string& name);

struct GpuRoofline {
  KernelWork work;
  uint64_t tensor_core_macs = 0;   // MACs a matrix shape of their dtype takes
  uint64_t cuda_core_macs = 0;     // MACs the CUDA cores run as fused multiply-adds
  uint64_t unpriced_macs = 0;      // f32 MACs under --tf32 where the description has no TF32 rate
  double cuda_core_op_bytes = 0;   // element operations' bytes + the CUDA-core MACs' bytes
  int sms = 0;                     // the chip's
  double clock_mhz = 0;
  double tensor_core_cycles = 0, cuda_core_cycles = 0, dram_cycles = 0, latency_cycles = 0;
  double cycles = 0;               // max(tensor-core, CUDA-core, DRAM) + latency
  GpuRooflineBound binds = GpuRooflineBound::Latency;

  double microseconds() const { return clock_mhz > 0 ? cycles / clock_mhz : 0.0; }
  // roofline time / measured time: 1 is the roofline, 0.5 twice as slow
  double fraction_of_microseconds(double measured_us) const;
};

// InternalError for an NPU description (validation keeps a GPU description's units and levels).
GpuRoofline gpu_roofline(const KernelWork& work, const isa::Hierarchy& gpu, bool tf32 = false);
inline GpuRoofline gpu_roofline(const Kernel& k, const isa::Hierarchy& gpu, bool tf32 = false) {
  return gpu_roofline(count_work(k), gpu, tf32);
}

}  // namespace tessel::kernel
