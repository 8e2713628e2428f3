#include "npu_sim/machine.h"

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::npu_sim {

Machine machine_from_hierarchy(const isa::Hierarchy& h) {
  const std::string at = h.source_file.empty() ? h.name : h.source_file;
  if (h.kind != isa::TargetKind::Npu || !h.sync)
    throw UserError(fmt::format("{}: the NPU simulator needs an NPU description (kind: npu, with a sync section)", at));
  Machine m;
  m.target_name = h.name;
  m.clock_mhz = h.clock_mhz;
  m.cores = static_cast<int>(h.cores);
  for (int b = 0; b < npu::kBufferCount; ++b) {
    const npu::Buffer buffer = static_cast<npu::Buffer>(b);
    const isa::Level& level = h.level(npu::buffer_role(buffer));
    m.buffers[b] = {level.name, level.capacity_bytes, std::max<uint32_t>(1, level.alignment_bytes)};
  }
  for (int from = 0; from < npu::kBufferCount; ++from)
    for (int to = 0; to < npu::kBufferCount; ++to) {
      const isa::TransferPath* p = h.find_path(m.buffers[from].level_name, m.buffers[to].level_name);
      if (!p) continue;
      m.paths[from][to] = {true,
                           fmt::format("{}->{}", npu::buffer_name(static_cast<npu::Buffer>(from)),
                                       npu::buffer_name(static_cast<npu::Buffer>(to))),
                           p->bandwidth_bytes_per_cycle, p->latency_cycles};
    }
  m.gm_shared_bandwidth_bytes_per_cycle = h.level(isa::Role::Global).shared_bandwidth_bytes_per_cycle;
  for (const isa::Unit& u : h.units) {
    if (u.pipe == "M" && u.kind == isa::UnitKind::Matrix) {
      m.cube_startup_cycles = u.startup_cycles;
      for (const isa::MatrixShape& s : u.shapes) {
        CubeShape c{true, s.m, s.n, s.k, std::max<uint32_t>(1, s.cycles)};
        if (s.a == DType::F16 && s.acc == DType::F32) m.cube_f16 = c;
        if (s.a == DType::I8 && s.acc == DType::I32) m.cube_i8 = c;
      }
    }
    if (u.pipe == "V" && u.kind == isa::UnitKind::Vector) {
      m.vector_bytes_per_repeat = u.bytes_per_repeat;
      m.vector_max_repeat = u.max_repeat;
      m.vector_mask_bits = u.mask_bits;
      m.vector_startup_cycles = u.startup_cycles;
    }
  }
  if (!m.cube_f16.exists)
    throw UserError(at + ": the NPU simulator needs a cube shape f16 x f16 -> f32 on pipe M");
  if (m.vector_bytes_per_repeat == 0 || m.vector_mask_bits == 0)
    throw UserError(at + ": the NPU simulator needs a vector unit on pipe V with bytes_per_repeat and mask_bits");
  m.vector_block_bytes = std::max<uint32_t>(1, h.level(isa::Role::Vector).granularity_bytes);
  m.fractal_row_bytes = static_cast<uint32_t>(m.cube_f16.k0 * 2);
  const isa::NpuSync& s = *h.sync;
  m.event_ids_per_pipe_pair = s.event_ids_per_pipe_pair;
  m.queue_depth = std::max<uint32_t>(1, s.queue_depth);
  m.set_flag_cycles = s.set_flag_cycles;
  m.barrier_cycles = s.barrier_cycles;
  m.scalar_cycles = s.scalar_cycles;
  if (m.gm_shared_bandwidth_bytes_per_cycle <= 0)
    throw UserError(at + ": the global level needs shared_bandwidth_bytes_per_cycle for the simulator");
  return m;
}

}  // namespace tessel::npu_sim
