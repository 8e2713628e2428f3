#include "compiler/tile/fit.h"

#include <fmt/format.h>

namespace tessel::tile {

std::string FitFailure::message(const std::string& kernel, const std::string& tile, const std::string& target) const {
  return fmt::format("kernel {}: tile {} does not fit: level {} ({}) of {} needs {} bytes ({}{}) but its capacity is {} "
                     "bytes; use smaller sizes in --tile",
                     kernel, tile, level, isa::role_name(role), target, bytes_needed, parts,
                     double_buffered ? "; double buffering reserves half the level" : "", capacity_bytes);
}

}  // namespace tessel::tile
