// Microbenchmarks of a GPU's memory levels, copy engines and tensor cores (issue 19 item 1), for
// `tessel check-hierarchy DESC.yaml --device --measure`.
//
// One benchmark per figure id of isa::described_figures (isa/measured_figures.h); kernels are CUDA
// C compiled with NVRTC (compile_to_cubin), launched through the driver API, timed with events
// (chip-wide bandwidths, converted to bytes per cycle at the description's clock) or with the
// SM's clock64 (per-SM rates and latencies: one block per SM, held alone there by its dynamic
// shared memory):
//   global.read/write/copy_bandwidth  grid-stride 16-byte loads (ld.global.cg) / stores over 1 GiB
//   global.read_latency, l2.hit_latency  one thread chasing a random cyclic permutation of 128-byte
//                                        lines (ld.global.cg) over 256 MiB / a quarter of the L2
//   l2.bandwidth                       repeated ld.global.cg over a quarter of the L2
//   shared.bandwidth, shared.latency   16-byte conflict-free loads / a dependent chase in shared
//   copy.cp_async (copy.load_store)    cp.async.cg 16 B (sm_80+; load + st.shared before) from 1 GiB
//   copy.tma                           cp.async.bulk.tensor.2d with mbarrier completion, the tensor
//                                      map from cuTensorMapEncodeTiled (sm_90)
//   tensor.<a>-<acc>                   the best of WMMA m16n16k16 (every dtype), mma.sync
//                                      (m16n8k16 f16/bf16, m16n8k32 s8; sm_80+) and wgmma m64n256k16
//                                      (f16/bf16) / m64n256k32 (s8) from shared descriptors (sm_90a);
//                                      the detail names each path's rate.
// A benchmark that fails (NVRTC, launch, a feature the driver lacks) gives a Measurement with the
// error, never an exception; the other figures are still measured. The wgmma paths and the TMA
// copy run last: a kernel that faults leaves the context unusable for what follows it.
#pragma once

#include <vector>

#include "gpu_backend/device_query.h"
#include "isa/measured_figures.h"

namespace tessel::gpu {

// Measures every figure of `figures` on the current device (Context::get()). Throws GpuError only
// when there is no device.
std::vector<isa::Measurement> run_microbenchmarks(const isa::Hierarchy& h, const std::vector<isa::Figure>& figures);

}  // namespace tessel::gpu
