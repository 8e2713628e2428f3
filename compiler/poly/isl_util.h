// The isl boundary: helpers over isl's C API that isl/cpp.h lacks, each saying who owns what.
#pragma once

#include <string>

namespace tessel::poly {
// The version string of the linked isl library.
std::string isl_version_string();
}  // namespace tessel::poly
