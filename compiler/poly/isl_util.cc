#include "compiler/poly/isl_util.h"

#include <isl/version.h>

namespace tessel::poly {
std::string isl_version_string() {
  std::string v = isl_version();  // static string owned by isl, ends with a newline
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}
}  // namespace tessel::poly
