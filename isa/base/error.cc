#include "isa/base/error.h"

namespace tessel {

void internal_error(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(std::string("internal error at ") + file + ":" + std::to_string(line) +
                      ": invariant `" + condition + "` violated: " + message);
}

}  // namespace tessel
