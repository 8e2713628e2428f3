#include "compiler/tile/fit.h"

#include <fmt/format.h>

namespace tessel::tile {

std::string FitFailure::what() const {
  return fmt::format("level {} ({}) of {} needs {} bytes ({}{}) but its capacity is {} bytes", level, isa::role_name(role), target,
                     bytes_needed, parts, double_buffered ? "; double buffering reserves half the level" : "", capacity_bytes);
}

std::string FitFailure::message(const std::string& kernel, const std::string& tile) const {
  const std::string who = kernel.empty() ? "tile" : fmt::format("kernel {}: tile {}", kernel, tile);
  return fmt::format("{} does not fit: {}; use smaller sizes in --tile", who, what());
}

}  // namespace tessel::tile
