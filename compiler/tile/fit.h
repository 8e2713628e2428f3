// A fit report: why a tile does not fit the target, as data (level, bytes needed, capacity, what
// the bytes are), so that the pipeline, `--explain`, the tuner and the benches can ask whether a
// configuration fits without catching an exception. `message()` is the user-facing text; a caller
// that must reject the configuration throws UserError(message()).
#pragma once

#include <cstdint>
#include <string>

#include "isa/hierarchy.h"

namespace tessel::tile {

struct FitFailure {
  isa::Role role = isa::Role::Global;
  std::string level;           // the description's level name ("L0B")
  std::string target;          // the description's name
  int64_t bytes_needed = 0;
  int64_t capacity_bytes = 0;
  std::string parts;           // what the bytes are ("2 x 1 kernel position x 16 input channels ...")
  bool double_buffered = false;
  // "level L (role) of TARGET needs N bytes (parts) but its capacity is C bytes"
  std::string what() const;
  // "kernel K: tile T does not fit: <what>; use smaller sizes in --tile" (kernel empty: "tile does
  // not fit: <what>; ...")
  std::string message(const std::string& kernel = "", const std::string& tile = "") const;
};

}  // namespace tessel::tile
