// The CUDA toolkit tessel_gpu was built with (for `tessel --version`).
#pragma once

#include <string>

namespace tessel::gpu {
std::string nvrtc_version();
}
