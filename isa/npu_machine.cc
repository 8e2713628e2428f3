#include "isa/npu_machine.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "isa/base/error.h"

namespace tessel::isa {
namespace {

void read_units(const Hierarchy& h, NpuMachine& m) {
  for (const Unit& u : h.units) {
    if (u.pipe == "M" && u.kind == UnitKind::Matrix) {
      m.cube_startup_cycles = u.startup_cycles;
      m.cube_unit = u.name;
      for (const MatrixShape& s : u.shapes) {
        CubeShape c{true, s.m, s.n, s.k, s.a, s.acc, std::max<uint32_t>(1, s.cycles), s.energy_pj_per_mac.value_or(0)};
        if (s.a == DType::F16 && s.acc == DType::F32) m.cube_f16 = c;
        if (s.a == DType::I8 && s.acc == DType::I32) m.cube_i8 = c;
        if (s.a == DType::BF16 && s.acc == DType::F32) m.cube_bf16 = c;
      }
    }
    if (u.pipe == "V" && u.kind == UnitKind::Vector) {
      m.vector_bytes_per_repeat = u.bytes_per_repeat;
      m.vector_max_repeat = u.max_repeat;
      m.vector_mask_bits = u.mask_bits;
      m.vector_startup_cycles = u.startup_cycles;
      m.vector_unit = u.name;
      m.vector_energy_pj_per_repeat = u.energy_pj_per_repeat.value_or(0);
      m.vector_conversions = u.conversions;
    }
    if (u.pipe == "S" && u.kind == UnitKind::Scalar) {
      m.scalar_unit = u.name;
      m.scalar_energy_pj_per_instruction = u.energy_pj_per_instruction.value_or(0);
    }
  }
}

}  // namespace

NpuMachine npu_machine(const Hierarchy& h) {
  const std::string at = h.source_file.empty() ? h.name : h.source_file;
  if (h.kind != TargetKind::Npu || !h.sync)
    throw UserError(fmt::format("{}: not an NPU description (kind: npu, with a sync section)", at));
  NpuMachine m;
  m.target_name = h.name;
  m.source = at;
  m.clock_mhz = h.clock_mhz;
  m.cores = static_cast<int>(h.cores);
  for (int b = 0; b < npu::kBufferCount; ++b) {
    const Level& level = h.level(npu::buffer_role(static_cast<npu::Buffer>(b)));
    // validate_hierarchy requires the energies of NPU levels and units (value_or: never read unset)
    // Capacity in whole alignment units and granules: a buffer placed from the end is then aligned
    // (a description variant's UB of 196,615 bytes had a vdup at UB[195079]: the simulator refused it).
    const uint32_t align = std::max<uint32_t>(1, level.alignment_bytes), gran = std::max<uint32_t>(1, level.granularity_bytes);
    const uint64_t unit = std::lcm<uint64_t>(align, gran);
    m.buffers[b] = {level.name, level.capacity_bytes / unit * unit, align, gran, level.read_energy_pj_per_byte.value_or(0),
                    level.write_energy_pj_per_byte.value_or(0)};
  }
  for (int from = 0; from < npu::kBufferCount; ++from)
    for (int to = 0; to < npu::kBufferCount; ++to) {
      const TransferPath* p = h.find_path(m.buffers[from].level_name, m.buffers[to].level_name);
      if (!p) continue;
      m.paths[from][to] = {true,
                           fmt::format("{}->{}", npu::buffer_name(static_cast<npu::Buffer>(from)),
                                       npu::buffer_name(static_cast<npu::Buffer>(to))),
                           p->bandwidth_bytes_per_cycle, p->latency_cycles, p->engine,
                           h.find_unit(p->engine)->energy_pj_per_byte.value_or(0)};
    }
  m.gm_shared_bandwidth_bytes_per_cycle = h.level(Role::Global).shared_bandwidth_bytes_per_cycle;
  read_units(h, m);
  if (!m.cube_f16.exists) throw UserError(at + ": an NPU description needs a cube shape f16 x f16 -> f32 on pipe M");
  if (m.vector_bytes_per_repeat == 0 || m.vector_mask_bits == 0)
    throw UserError(at + ": an NPU description needs a vector unit on pipe V with bytes_per_repeat and mask_bits");
  m.vector_block_bytes = m.buffer(npu::Buffer::UB).granularity_bytes;
  m.fractal_row_bytes = static_cast<uint32_t>(m.cube_f16.k0 * dtype_bytes(DType::F16));
  const NpuSync& s = *h.sync;
  m.event_ids_per_pipe_pair = s.event_ids_per_pipe_pair;
  m.queue_depth = std::max<uint32_t>(1, s.queue_depth);
  m.set_flag_cycles = s.set_flag_cycles;
  m.barrier_cycles = s.barrier_cycles;
  m.scalar_cycles = s.scalar_cycles;
  m.cross_core_barrier_cycles = s.cross_core_barrier_cycles;
  return m;
}

}  // namespace tessel::isa
