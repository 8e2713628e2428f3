// Helpers of the description tests: a shipped target's text, one textual mutation of it, and the
// message a description is rejected with.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "isa/base/error.h"
#include "isa/hierarchy.h"

namespace tessel::isa::testing {

inline std::string target_path(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/isa/targets/" + name; }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Parses `text` and returns the UserError message ("" when it parsed).
inline std::string rejection(const std::string& text) {
  try {
    parse_hierarchy(text, "t.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// `text` with the first `from` replaced by `to` (the anchor must be there).
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "mutation anchor not found: " << from);
  return text.replace(at, from.size(), to);
}

}  // namespace tessel::isa::testing
