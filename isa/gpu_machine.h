// The GPU machine model: every hardware number the CUDA emitter and the GPU tile policy use.
//
// Input: a validated GPU description (isa/hierarchy.h, isa/targets/sm*.yaml). Output: a plain value
// (no references into the description) holding the SM count, warp size, shared-memory budgets,
// banking, the widest access, the matrix shapes (WMMA fragment, mma.sync, wgmma) and which
// architecture features the emitter may use. Built once per compilation (GpuMachine::from) and
// passed by value or const reference; nothing here is mutable state.
//
// Where a caller knows only an architecture name (a device's `sm_90`), stock_gpu_machine finds the
// description of that architecture among isa/targets/*.yaml of the source tree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "isa/hierarchy.h"

namespace tessel::isa {

// The `gpu.features` a description may list, in the order of gpu_feature_names() (isa/hierarchy.h).
enum class GpuFeature : uint8_t {
  CpAsync,                      // cp.async global -> shared copies (zero fill, commit / wait groups)
  ThreadBlockClusters,          // __cluster_dims__, distributed shared memory (mapa, ld.shared::cluster)
  BulkCopy,                     // cp.async.bulk completing on mbarrier transaction counts
  ProgrammaticDependentLaunch,  // griddepcontrol.wait / launch_dependents
  TensorMaps,                   // TMA: cp.async.bulk.tensor through tensor maps (cuTensorMapEncodeTiled), setmaxnreg
};

// m x n x k of one matrix instruction (elements).
struct GpuMmaShape {
  int m = 0, n = 0, k = 0;
};

struct GpuMachine {
  std::string name;              // description name ("sm90")
  std::string arch;              // "sm_90"
  int compute_capability = 0;    // 10 * major + minor (90)
  uint32_t sm_count = 0;         // the description's `cores`
  uint32_t warp_size = 0;
  uint32_t max_threads_per_block = 0;
  uint32_t registers_per_sm = 0;
  uint64_t shared_bytes_per_block_optin = 0;     // dynamic shared memory one block may request
  uint64_t shared_bytes_per_sm = 0;
  uint64_t shared_bytes_reserved_per_block = 0;  // kept by the SM for each resident block
  uint32_t shared_banks = 0, shared_bank_width_bytes = 0;
  uint32_t vector_access_bytes = 0;              // widest access of one thread (128-bit loads, cp.async)
  GpuMmaShape wmma;                              // WMMA fragment (the tensor unit's f16 -> f32 shape)
  std::optional<GpuMmaShape> mma_sync;           // ldmatrix + mma.sync; absent: WMMA only
  std::optional<GpuMmaShape> wgmma;              // warpgroup MMA, n = the largest N; absent: none
  uint32_t warps_per_warpgroup = 0;
  uint32_t bulk_copy_alignment_bytes = 0;        // cp.async.bulk addresses and sizes
  uint32_t cluster_max_blocks = 0;               // portable thread-block cluster size
  std::vector<MatrixShape> tensor_shapes;        // every shape of the matrix unit (dtypes, min_arch)
  std::vector<GpuFeature> features;

  bool has(GpuFeature f) const;
  uint32_t threads_per_warpgroup() const { return warps_per_warpgroup * warp_size; }

  // The machine of a GPU description; InternalError for an NPU description (validation keeps a
  // GPU description's gpu section and stage level present).
  static GpuMachine from(const Hierarchy& h);
};

// The machine of the description among TESSEL_SOURCE_DIR/isa/targets/*.yaml whose gpu.arch is
// `arch` (loaded once per arch); UserError naming the architectures there when none matches.
GpuMachine stock_gpu_machine(const std::string& arch);

}  // namespace tessel::isa
