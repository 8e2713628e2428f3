#include "compiler/frontend/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace tessel::frontend {

namespace {

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }

constexpr const char* kTwoCharPuncts[] = {"->", "+=", "*=", "==", "!=", "<=", ">=", "&&", "||"};
constexpr const char kOneCharPuncts[] = "()[]{},:=+-*/%<>!";

std::string describe_char(unsigned char c) {
  if (c >= 0x21 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  static const char* hex = "0123456789abcdef";
  return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
}

}  // namespace

std::vector<Token> lex(const Source& src) {
  const std::string& s = src.text();
  std::vector<Token> out;
  size_t i = 0;
  int line = 1, col = 1;
  bool space = false;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < s.size(); ++k, ++i) {
      if (s[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
  };
  while (i < s.size()) {
    const char c = s[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance(1);
      space = true;
      continue;
    }
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') advance(1);
      space = true;
      continue;
    }
    Token t;
    t.loc = src.loc(line, col);
    t.space_before = space;
    space = false;
    const size_t start = i;
    if (ident_start(c)) {
      while (i < s.size() && ident_char(s[i])) advance(1);
      t.kind = Tok::Ident;
      t.text = s.substr(start, i - start);
    } else if (digit(c) || (c == '.' && i + 1 < s.size() && digit(s[i + 1]))) {
      bool real = false;
      while (i < s.size() && digit(s[i])) advance(1);
      if (i < s.size() && s[i] == '.') {
        real = true;
        advance(1);
        while (i < s.size() && digit(s[i])) advance(1);
      }
      if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
        if (j < s.size() && digit(s[j])) {
          real = true;
          advance(j - i);
          while (i < s.size() && digit(s[i])) advance(1);
        }
      }
      if (i < s.size() && ident_char(s[i]))
        src.error(src.loc(line, col), "unexpected " + describe_char(s[i]) + " after the number '" +
                                          s.substr(start, i - start) + "'; expected an operator or ')'");
      t.text = s.substr(start, i - start);
      errno = 0;
      if (real) {
        t.kind = Tok::Real;
        t.real_value = std::strtod(t.text.c_str(), nullptr);
        if (errno == ERANGE) src.error(t.loc, "the number '" + t.text + "' is out of range");
      } else {
        t.kind = Tok::Int;
        t.int_value = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE || t.int_value > (int64_t{1} << 53))
          src.error(t.loc, "the integer '" + t.text + "' is too large (at most 2^53)");
        t.real_value = static_cast<double>(t.int_value);
      }
    } else {
      t.kind = Tok::Punct;
      for (const char* p : kTwoCharPuncts)
        if (i + 1 < s.size() && s[i] == p[0] && s[i + 1] == p[1]) t.text = p;
      if (t.text.empty()) {
        for (const char* p = kOneCharPuncts; *p; ++p)
          if (c == *p) t.text = std::string(1, c);
      }
      if (t.text.empty()) {
        if (c == '&' || c == '|')
          src.error(t.loc, std::string("unexpected '") + c + "'; did you mean '" + c + c + "'?");
        src.error(t.loc, "unexpected " + describe_char(static_cast<unsigned char>(c)) +
                             "; expected a name, a number or an operator");
      }
      advance(t.text.size());
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.kind = Tok::End;
  end.loc = src.loc(line, col);
  end.space_before = true;
  out.push_back(end);
  return out;
}

}  // namespace tessel::frontend
