// The NPU machine model: every number the NPU compiler, the sync pass, the tuner's model and the
// simulator use, derived once from a validated NPU hierarchy description (isa/targets/*.yaml) —
// buffer capacities and alignments, transfer paths, cube shapes per dtype, vector geometry per
// dtype, sync costs. Nothing here is a hardware constant: each number is looked up by role, pipe
// and unit kind, and a derived number (lanes of a dtype, bytes of a fractal) is a function of them.
//
// Input: a Hierarchy that passed validate_hierarchy. Output: NpuMachine (a value; cheap to copy).
// Errors: UserError naming the description when it is not an NPU or lacks the f16 cube shape or a
// vector unit with bytes_per_repeat and mask_bits (what every NPU user needs). The simulator's own
// extra requirement (a shared GM bandwidth) is checked by the simulator.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "isa/base/dtype.h"
#include "isa/hierarchy.h"
#include "isa/npu_isa.h"

namespace tessel::isa {

struct NpuBufferSpec {
  std::string level_name;  // the YAML level with the buffer's role
  uint64_t capacity_bytes = 0;
  uint32_t alignment_bytes = 1;    // start addresses are multiples of this
  uint32_t granularity_bytes = 1;  // smallest access unit
  double read_energy_pj_per_byte = 0, write_energy_pj_per_byte = 0;
};

struct NpuPathSpec {
  bool exists = false;
  std::string name;  // "GM->L1"
  double bandwidth_bytes_per_cycle = 0;  // per core
  uint32_t latency_cycles = 0;
  std::string engine;                    // the unit that moves the data ("mte2")
  double engine_energy_pj_per_byte = 0;  // the engine's own energy per byte moved
};

struct CubeShape {  // one fractal step of the cube: C[m0,n0] += A[m0,k0] * B[k0,n0]
  bool exists = false;
  int m0 = 0, n0 = 0, k0 = 0;
  DType a = DType::F16, acc = DType::F32;
  uint32_t cycles = 1;
  double energy_pj_per_mac = 0;
  int64_t a_fractal_bytes() const { return int64_t(m0) * k0 * dtype_bytes(a); }   // one L0A fractal
  int64_t b_fractal_bytes() const { return int64_t(k0) * n0 * dtype_bytes(a); }   // one L0B fractal
  int64_t acc_fractal_elements() const { return int64_t(m0) * n0; }
  int64_t acc_fractal_bytes() const { return acc_fractal_elements() * dtype_bytes(acc); }  // one L0C fractal
};

struct NpuMachine {
  std::string target_name;
  std::string source;  // the description's file (for messages)
  double clock_mhz = 0;
  int cores = 0;
  std::array<NpuBufferSpec, npu::kBufferCount> buffers;
  std::array<std::array<NpuPathSpec, npu::kBufferCount>, npu::kBufferCount> paths;  // [from][to]
  double gm_shared_bandwidth_bytes_per_cycle = 0;  // shared by every core and by MTE2/MTE3
  CubeShape cube_f16, cube_i8;
  CubeShape cube_bf16;  // bf16 x bf16 -> f32, where the description lists it (exists: false otherwise)
  uint32_t cube_startup_cycles = 0;
  uint32_t vector_bytes_per_repeat = 0, vector_max_repeat = 0, vector_mask_bits = 0, vector_startup_cycles = 0;
  uint32_t vector_block_bytes = 0;  // one block of a vector operand: the UB access granularity
  uint32_t fractal_row_bytes = 0;   // bytes of one fractal row: cube k0 x f16 size (C0 of the NZ layout)
  uint32_t event_ids_per_pipe_pair = 0, queue_depth = 0, set_flag_cycles = 0, barrier_cycles = 0,
           scalar_cycles = 0;
  uint32_t cross_core_barrier_cycles = 0;  // sync_all: last arrival -> every core resumes
  // Energy per operation of the units (pJ; per level and per path engine: in buffers / paths).
  std::string cube_unit = "cube", vector_unit = "vector", scalar_unit = "scalar";  // the units' names
  double vector_energy_pj_per_repeat = 0, scalar_energy_pj_per_instruction = 0;
  std::vector<VectorConversion> vector_conversions;  // vconv between a listed pair (the unit's `conversions`)

  const NpuPathSpec& path(npu::Buffer from, npu::Buffer to) const {
    return paths[static_cast<size_t>(from)][static_cast<size_t>(to)];
  }
  const NpuBufferSpec& buffer(npu::Buffer b) const { return buffers[static_cast<size_t>(b)]; }
  int64_t capacity(npu::Buffer b) const { return static_cast<int64_t>(buffer(b).capacity_bytes); }
  int64_t alignment(npu::Buffer b) const { return buffer(b).alignment_bytes; }
  // The access unit: where a program places tensors and chunks so that no burst straddles units
  // (GM needs no start alignment, but its bursts move whole granules).
  int64_t granularity(npu::Buffer b) const { return buffer(b).granularity_bytes; }
  int64_t operand_alignment() const {  // a buffer that may sit in L0A or L0B
    return std::max(alignment(npu::Buffer::L0A), alignment(npu::Buffer::L0B));
  }
  // The cube's shape for an operand dtype (a 16-bit float operand: f16 or bf16, each its own shape).
  const CubeShape& cube(DType operand) const {
    return operand == DType::I8 ? cube_i8 : operand == DType::BF16 ? cube_bf16 : cube_f16;
  }
  uint32_t fractal_rows() const { return static_cast<uint32_t>(cube_f16.m0); }
  uint32_t fractal_bytes() const { return fractal_rows() * fractal_row_bytes; }  // one L0A/L0B f16 fractal
  // Vector geometry per element type: elements one repeat covers (lanes) and one block holds.
  int64_t vector_lanes(DType t) const { return vector_bytes_per_repeat / dtype_bytes(t); }
  int64_t vector_lanes(int element_bytes) const { return vector_bytes_per_repeat / element_bytes; }
  int64_t block_elements(DType t) const { return vector_block_bytes / dtype_bytes(t); }
  int64_t blocks_per_repeat() const { return vector_bytes_per_repeat / vector_block_bytes; }
  // The description's conversion from `from` to `to` (its cycles per repeat), or nullptr: a vconv
  // touching a type outside the vector unit's dtypes runs only as a listed conversion.
  const VectorConversion* conversion(DType from, DType to) const {
    for (const VectorConversion& c : vector_conversions)
      if (c.from == from && c.to == to) return &c;
    return nullptr;
  }
};

NpuMachine npu_machine(const Hierarchy& h);

}  // namespace tessel::isa
