// The simulated machine, derived once from a hierarchy description: buffer capacities, transfer
// paths, cube shapes, vector geometry and sync numbers. Nothing here is a hardware constant; every
// number comes from the YAML (isa/targets/*.yaml), looked up by role, pipe and unit kind.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "isa/hierarchy.h"
#include "isa/npu_isa.h"

namespace tessel::npu_sim {

struct BufferSpec {
  std::string level_name;  // the YAML level with the buffer's role
  uint64_t capacity_bytes = 0;
  uint32_t alignment_bytes = 1;
};

struct PathSpec {
  bool exists = false;
  std::string name;  // "GM->L1"
  double bandwidth_bytes_per_cycle = 0;
  uint32_t latency_cycles = 0;
};

struct CubeShape {  // one fractal step of the cube: C[m0,n0] += A[m0,k0] * B[k0,n0]
  bool exists = false;
  int m0 = 0, n0 = 0, k0 = 0;
  uint32_t cycles = 1;
};

struct Machine {
  std::string target_name;
  double clock_mhz = 0;
  int cores = 0;
  std::array<BufferSpec, npu::kBufferCount> buffers;
  std::array<std::array<PathSpec, npu::kBufferCount>, npu::kBufferCount> paths;  // [from][to]
  double gm_shared_bandwidth_bytes_per_cycle = 0;  // shared by every core and by MTE2/MTE3
  CubeShape cube_f16, cube_i8;
  uint32_t cube_startup_cycles = 0;
  uint32_t vector_bytes_per_repeat = 0, vector_max_repeat = 0, vector_mask_bits = 0, vector_startup_cycles = 0;
  uint32_t vector_block_bytes = 0;  // one block of a vector operand: the UB access granularity
  uint32_t fractal_row_bytes = 0;   // bytes of one fractal row: cube k0 x f16 size (C0 of the NZ layout)
  uint32_t event_ids_per_pipe_pair = 0, queue_depth = 0, set_flag_cycles = 0, barrier_cycles = 0,
           scalar_cycles = 0;

  const PathSpec& path(npu::Buffer from, npu::Buffer to) const {
    return paths[static_cast<size_t>(from)][static_cast<size_t>(to)];
  }
  const BufferSpec& buffer(npu::Buffer b) const { return buffers[static_cast<size_t>(b)]; }
  const CubeShape& cube(DType operand) const { return operand == DType::I8 ? cube_i8 : cube_f16; }
  uint32_t fractal_rows() const { return static_cast<uint32_t>(cube_f16.m0); }
  uint32_t fractal_bytes() const { return fractal_rows() * fractal_row_bytes; }  // one L0A/L0B fractal
};

// Throws UserError when the description is not an NPU or lacks what the simulator needs.
Machine machine_from_hierarchy(const isa::Hierarchy& h);

}  // namespace tessel::npu_sim
