#include "compiler/kernel/gpu_roofline.h"

#include <algorithm>
#include <array>

#include "isa/base/error.h"

namespace tessel::kernel {
namespace {

// Multiply-accumulates per SM cycle of the matrix unit's fastest shape for operand dtype `a`
// (any accumulator); 0 when no shape takes it.
double matrix_macs_per_cycle(const isa::Hierarchy& h, DType a) {
  double best = 0;
  for (const isa::Unit* u : h.units_of_kind(isa::UnitKind::Matrix))
    for (const isa::MatrixShape& s : u->shapes)
      if (s.a == a && s.b == a && s.cycles > 0) best = std::max(best, double(s.macs()) * u->count / s.cycles);
  return best;
}

const isa::Unit* first_unit(const isa::Hierarchy& h, isa::UnitKind kind) {
  const auto units = h.units_of_kind(kind);
  return units.empty() ? nullptr : units.front();
}

// Bytes over a bandwidth; no bandwidth in the description means no bound from it.
double transfer_cycles(double bytes, double bytes_per_cycle) { return bytes_per_cycle > 0 ? bytes / bytes_per_cycle : 0; }

// Splits the contractions between the tensor cores (a shape for their dtype), the CUDA cores (one
// fused multiply-add per MAC at the accumulator's width) and, under --tf32 without a TF32 rate,
// nowhere.
void place_contractions(const KernelWork& w, const isa::Hierarchy& h, bool tf32, GpuRoofline& r) {
  const double sms = double(std::max(1, r.sms));
  for (const auto& [dtype, macs] : w.contraction_macs) {
    const double per_cycle = matrix_macs_per_cycle(h, dtype);
    if (per_cycle > 0) {
      r.tensor_core_macs += macs;
      r.tensor_core_cycles += double(macs) / (sms * per_cycle);
    } else if (tf32 && dtype == DType::F32) {
      r.unpriced_macs += macs;
    } else {
      r.cuda_core_macs += macs;
      r.cuda_core_op_bytes += double(macs) * std::max(4, dtype_bytes(dtype));
    }
  }
}

}  // namespace

const char* gpu_roofline_bound_name(GpuRooflineBound b) {
  static constexpr const char* kNames[] = {
#define TESSEL_X(e, s) s,
      TESSEL_GPU_ROOFLINE_BOUNDS(TESSEL_X)
#undef TESSEL_X
  };
  return kNames[static_cast<size_t>(b)];
}

std::optional<GpuRooflineBound> parse_gpu_roofline_bound(const std::string& name) {
  for (int b = 0; b <= static_cast<int>(GpuRooflineBound::Latency); ++b)
    if (name == gpu_roofline_bound_name(static_cast<GpuRooflineBound>(b))) return static_cast<GpuRooflineBound>(b);
  return std::nullopt;
}

double GpuRoofline::fraction_of_microseconds(double measured_us) const {
  return measured_us > 0 ? microseconds() / measured_us : 0.0;
}

GpuRoofline gpu_roofline(const KernelWork& w, const isa::Hierarchy& h, bool tf32) {
  TESSEL_CHECK(h.kind == isa::TargetKind::Gpu, "gpu_roofline: description '" + h.name + "' is not a GPU description");
  GpuRoofline r;
  r.work = w;
  r.sms = int(h.cores);
  r.clock_mhz = h.clock_mhz;
  r.cuda_core_op_bytes = w.vector_op_bytes;
  place_contractions(w, h, tf32, r);
  const isa::Unit* matrix = first_unit(h, isa::UnitKind::Matrix);
  const isa::Unit* vector = first_unit(h, isa::UnitKind::Vector);
  const double sms = double(std::max(1, r.sms));
  r.cuda_core_cycles = transfer_cycles(r.cuda_core_op_bytes, vector ? sms * vector->bytes_per_repeat : 0);
  const isa::Level& global = h.level(isa::Role::Global);
  r.dram_cycles = transfer_cycles(double(w.gm_read_bytes + w.gm_write_bytes), global.shared_bandwidth_bytes_per_cycle);
  r.latency_cycles = double(global.read_latency_cycles) + double(global.write_latency_cycles);
  if (r.tensor_core_macs && matrix) r.latency_cycles += matrix->startup_cycles;
  if (r.cuda_core_op_bytes > 0 && vector) r.latency_cycles += vector->startup_cycles;
  const std::array<std::pair<double, GpuRooflineBound>, 3> throughput = {
      {{r.tensor_core_cycles, GpuRooflineBound::TensorCore},
       {r.cuda_core_cycles, GpuRooflineBound::CudaCore},
       {r.dram_cycles, GpuRooflineBound::Dram}}};
  const auto widest = *std::max_element(throughput.begin(), throughput.end(),
                                        [](const auto& a, const auto& b) { return a.first < b.first; });
  r.cycles = widest.first + r.latency_cycles;
  r.binds = r.latency_cycles > widest.first ? GpuRooflineBound::Latency : widest.second;
  return r;
}

}  // namespace tessel::kernel
