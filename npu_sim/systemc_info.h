// Which SystemC kernel the simulator is linked against (for `tessel --version`).
#pragma once

#include <string>

namespace tessel::npu_sim {
std::string systemc_version();
}
