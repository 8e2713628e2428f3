// Error kinds shared by every tessel library.
//
// UserError: the user's input is wrong (a file, a flag, a shape). The message names the place
// (file, key or file:line:col) and says how to fix it. The CLI prints it and exits with status 1.
// InternalError: an invariant of tessel itself broke; the message names the invariant and the pass
// that should have established it. Raised through TESSEL_CHECK.
#pragma once

#include <stdexcept>
#include <string>

namespace tessel {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

[[noreturn]] void internal_error(const char* file, int line, const char* condition,
                                 const std::string& message);

}  // namespace tessel

#define TESSEL_CHECK(cond, msg)                                              \
  do {                                                                       \
    if (!(cond)) ::tessel::internal_error(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
