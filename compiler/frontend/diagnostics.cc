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
std::string printable(const std::string& line, size_t limit) {
  std::string out;
  for (size_t i = 0; i < line.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    out += (c == '\t' || (c >= 0x20 && c < 0x7f)) ? static_cast<char>(c) : '?';
  }
  if (line.size() > limit) out += "...";
  return out;
}

}  // namespace

void Source::error(const ir::SourceLoc& at, const std::string& message) const {
  std::string text = file_ + ":" + std::to_string(at.line) + ":" + std::to_string(at.col) + ": " + message;
  const std::string line = line_text(at.line);
  const size_t col = at.col > 0 ? static_cast<size_t>(at.col) : 1;
  const size_t limit = std::max<size_t>(200, col + 40);
  text += "\n  " + printable(line, limit) + "\n  ";
  for (size_t i = 0; i + 1 < col && i < limit; ++i) text += (i < line.size() && line[i] == '\t') ? '\t' : ' ';
  text += "^";
  throw UserError(text);
}

std::string line_col(const ir::SourceLoc& at) { return std::to_string(at.line) + ":" + std::to_string(at.col); }

}  // namespace tessel::frontend
