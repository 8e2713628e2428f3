// Source text and user-facing errors of the front end: "file:line:col: message", the source line,
// and a caret under the column.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::frontend {

class Source {
 public:
  Source(std::string text, std::string file_name);
  const std::string& text() const { return text_; }
  const std::string& file() const { return file_; }
  ir::SourceLoc loc(int line, int col) const { return {file_, line, col}; }
  // The text of 1-based line `line`, without its newline.
  std::string line_text(int line) const;
  [[noreturn]] void error(const ir::SourceLoc& at, const std::string& message) const;

 private:
  std::string text_;
  std::string file_;
  std::vector<size_t> line_starts_;
};

// "3:14" (what messages use to point at a second place in the same file).
std::string line_col(const ir::SourceLoc& at);

}  // namespace tessel::frontend
