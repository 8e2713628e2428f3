// TensorCore code shape of the CUDA emitter (see emit_cuda.h): one WMMA kernel for an identified
// contraction (contraction.h) with a tile configuration. Takes the contraction and the kernel the
// contraction came from (tensor order = parameter order); gives kernel text and its launch.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"

namespace tessel::emit_cuda {

// Why `cfg` cannot be used for `c` on `arch` ("" when it can).
std::string config_obstacle(const Contraction& c, const TcConfig& cfg, const std::string& arch);

// Configurations worth measuring for `c`, best guess first (the default of emit_cuda). `sm_count`
// (the description's `cores`) sizes split-K across blocks for problems with fewer output tiles
// than SMs; 0 leaves K unsplit across blocks.
std::vector<TcConfig> tc_candidates(const Contraction& c, const std::string& arch, int sm_count = 0);

// Global scratch bytes a configuration needs (split-K counters and partial tiles; 0 without).
uint64_t tc_scratch_bytes(const Contraction& c, const TcConfig& cfg);

// Appends the kernel to `os`; `explain` receives the mapping decisions.
// `sm_count` only feeds the explanation of a split-K configuration.
Launch emit_tensor_core(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const std::string& arch,
                        std::ostringstream& os, std::vector<std::string>& explain, int sm_count = 0,
                        std::vector<Launch>* before = nullptr,  // launches that must run first (output zeroing)
                        bool pdl = false,                       // griddepcontrol (CudaOptions::pdl), sm_90+
                        int pdl_prefetch = 0);                  // with pdl: 1 = A's, 2 = B's prologue copies before the wait

}  // namespace tessel::emit_cuda
