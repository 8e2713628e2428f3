#include "npu_sim/systemc_info.h"

#include <systemc>

namespace tessel::npu_sim {
std::string systemc_version() { return std::string("SystemC ") + sc_core::sc_release(); }
}  // namespace tessel::npu_sim
