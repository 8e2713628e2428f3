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

// Configurations worth measuring for `c`, best guess first (the default of emit_cuda).
std::vector<TcConfig> tc_candidates(const Contraction& c, const std::string& arch);

// Appends the kernel to `os`; `explain` receives the mapping decisions.
Launch emit_tensor_core(const kernel::Kernel& k, const Contraction& c, const TcConfig& cfg, const std::string& arch,
                        std::ostringstream& os, std::vector<std::string>& explain);

}  // namespace tessel::emit_cuda
