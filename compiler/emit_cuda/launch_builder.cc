#include "compiler/emit_cuda/launch_builder.h"

#include <algorithm>

#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/emit_cuda/epilogue.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"

namespace tessel::emit_cuda {

namespace {

// Policy: 2 blocks per SM need <= 128 registers per thread, so at most 64 accumulators each.
constexpr int kMaxAccumulatorsForTwoBlocks = 64;

}  // namespace

int min_blocks_per_sm(const TcKernel& t) {
  if (!t.wg || t.cfg.tma_ws()) return 1;  // the persistent kernel: one block per SM
  // one block's prologue and epilogue overlap the other's main loop when both fit in an SM
  const int accumulators_per_thread = (t.cfg.wm / t.m.wgmma->m) * t.cfg.bn / 2;
  const bool fits_twice = 2 * (t.smem + int64_t(t.m.shared_bytes_reserved_per_block)) <= int64_t(t.m.shared_bytes_per_sm);
  return accumulators_per_thread <= kMaxAccumulatorsForTwoBlocks && fits_twice ? 2 : 1;
}

void emit_kernel_signature(const TcKernel& t) {
  const TcConfig& cfg = t.cfg;
  t.os << "extern \"C\" __global__ void " << (cfg.reduce == SplitKReduce::cluster ? "__cluster_dims__(1, " + S(cfg.k_blocks) + ", 1) " : "")
       << (cfg.schedule == WsSchedule::multicast ? "__cluster_dims__(2, 1, 1) " : "") << "__launch_bounds__("
       << t.threads << (t.wg ? ", " + S(min_blocks_per_sm(t)) : "") << ") " << t.name << "(" << kernel_parameters(t.k)
       << (cfg.tma_ws() ? ", const __grid_constant__ tessel_tmap tmap_a_, const __grid_constant__ tessel_tmap tmap_b_" : "")
       << (cfg.tma_ws() && cfg.store == OutputStore::tma ? ", const __grid_constant__ tessel_tmap tmap_c_" : "") << ") {\n";
}

Launch main_launch(const TcKernel& t) {
  Launch l;
  l.kernel = t.name;
  const auto grid = tile_schedule(t).grid();  // the same description as the kernel's tile coordinates
  std::copy(grid.begin(), grid.end(), l.grid);
  l.block = unsigned(t.threads);
  l.dynamic_shared_bytes = uint32_t(t.smem);
  if (t.cfg.tma_ws()) {  // persistent: one block per SM walks the work units; the operands' tensor maps
    l.tensor_maps = {t.ta.map, t.tb.map};
    if (t.cfg.store == OutputStore::tma) l.tensor_maps.push_back(output_store_map(t));  // the output's, for the TMA stores
  }
  return l;
}

Launch zero_output_launch(const TcKernel& t, const std::string& kernel) {
  const int64_t total = t.M * t.N * t.c.size_batch();
  Launch z;
  z.kernel = kernel;
  z.grid[0] = unsigned(std::min<int64_t>((total + kZeroKernelThreads - 1) / kZeroKernelThreads, kZeroKernelMaxBlocks));
  z.block = kZeroKernelThreads;
  return z;
}

}  // namespace tessel::emit_cuda
