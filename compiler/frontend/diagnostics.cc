#include "compiler/frontend/diagnostics.h"

#include "isa/base/error.h"

namespace tessel::frontend {

Source::Source(std::string text, std::string file_name) : text_(std::move(text)), file_(std::move(file_name)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i)
    if (text_[i] == '\n') line_starts_.push_back(i + 1);
}

std::string Source::line_text(int line) const {
  if (line < 1 || static_cast<size_t>(line) > line_starts_.size()) return "";
  const size_t begin = line_starts_[line - 1];
  size_t end = text_.find('\n', begin);
  if (end == std::string::npos) end = text_.size();
  return text_.substr(begin, end - begin);
}

namespace {

// Control and non-ASCII bytes are shown as '?' so that a caret under binary input stays aligned.
std::string printable(const std::string& line, size_t from, size_t count) {
  std::string out;
  for (size_t i = from; i < line.size() && i < from + count; ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    out += (c == '\t' || (c >= 0x20 && c < 0x7f)) ? static_cast<char>(c) : '?';
  }
  return out;
}

}  // namespace

void Source::error(const ir::SourceLoc& at, const std::string& message) const {
  std::string text = file_ + ":" + std::to_string(at.line) + ":" + std::to_string(at.col) + ": " + message;
  const std::string line = line_text(at.line);
  const size_t col = at.col > 0 ? static_cast<size_t>(at.col) : 1;
  // at most kWindow characters of the line, around the column (a 1 MB line is not echoed whole)
  constexpr size_t kWindow = 160, kBefore = 80;
  const size_t from = col > kBefore + 1 ? col - 1 - kBefore : 0;
  const std::string lead = from > 0 ? "..." : "";
  text += "\n  " + lead + printable(line, from, kWindow) + (line.size() > from + kWindow ? "..." : "") + "\n  " +
          std::string(lead.size(), ' ');
  for (size_t i = from; i + 1 < col && i < from + kWindow; ++i) text += (i < line.size() && line[i] == '\t') ? '\t' : ' ';
  text += "^";
  throw UserError(text);
}

std::string line_col(const ir::SourceLoc& at) { return std::to_string(at.line) + ":" + std::to_string(at.col); }

}  // namespace tessel::frontend
