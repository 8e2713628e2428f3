// Lexer of .tsl: identifiers, integer and real literals, punctuation; `#` starts a comment that
// runs to the end of the line. Newlines are white space (statements need no separator).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/frontend/diagnostics.h"

namespace tessel::frontend {

enum class Tok : uint8_t { Ident, Int, Real, Punct, End };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // identifier, punctuation or literal spelling
  int64_t int_value = 0;
  double real_value = 0;
  ir::SourceLoc loc;
  bool space_before = false;  // white space or a comment separates it from the previous token
};

// Throws (through src.error) on a character that starts no token or an out-of-range literal.
std::vector<Token> lex(const Source& src);

}  // namespace tessel::frontend
