#include <filesystem>
#include "compiler/frontend/frontend.h"

#include <fstream>
#include <sstream>

#include "compiler/frontend/lower.h"
#include "compiler/frontend/parser.h"
#include "isa/base/error.h"
#include "isa/base/file_io.h"

namespace tessel::frontend {

Module parse_module(const std::string& text, const std::string& file_name) {
  const Source src(text, file_name);
  const ast::File file = parse_file(src);
  Module m;
  for (const ast::Def& d : file.defs) {
    for (const ir::Function& other : m.functions)
      if (other.name == d.name)
        src.error(d.loc, "operator '" + d.name + "' is defined twice (first at " + line_col(other.loc) + ")");
    m.functions.push_back(lower_def(src, d));
  }
  if (m.functions.empty())
    src.error(src.loc(1, 1), "expected at least one operator definition ('def name(...) -> (...) { ... }')");
  return m;
}

Module load_module(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw UserError(path + ": is a directory, not an operator file (.tsl)");
  return parse_module(read_bounded_file(path, "operator file", kMaxOperatorBytes), path);
}

const ir::Function& select_function(const Module& m, const std::string& name) {
  std::string names;
  for (const ir::Function& f : m.functions) names += (names.empty() ? "" : ", ") + f.name;
  if (name.empty()) {
    if (m.functions.size() == 1) return m.functions[0];
    const std::string file = m.functions.empty() ? "" : m.functions[0].loc.file + ": ";
    throw UserError(file + "the file defines several operators (" + names + "); choose one with --def NAME");
  }
  for (const ir::Function& f : m.functions)
    if (f.name == name) return f;
  const std::string file = m.functions.empty() ? "" : m.functions[0].loc.file + ": ";
  throw UserError(file + "no operator named '" + name + "'; the file defines " + names);
}

}  // namespace tessel::frontend
