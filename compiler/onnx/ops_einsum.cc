// Einsum: one statement over the equation's letters. Each letter of the output (explicit after
// "->", else numpy's implicit form: the ellipsis dimensions, then the letters used once, sorted) is
// an output index; every other letter is a reduction index r0..; a letter repeated within one
// operand reads its diagonal (the same index twice). "..." stands for the leading dimensions an
// operand has beyond its letters, aligned right across operands (numpy broadcasting: a dimension
// of size 1 reads index 0). The statement is `+=!` of the operands' product when some letter is
// summed, else `=`.
#include <algorithm>
#include <cctype>
#include <set>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using Strings = std::vector<std::string>;

struct Term {
  std::string letters;  // the letters in order, the ellipsis marked '.'
  bool ellipsis = false;
};

Term parse_term(const Context& c, const std::string& text) {
  Term t;
  for (size_t k = 0; k < text.size(); ++k) {
    const char ch = text[k];
    if (ch == '.') {
      if (t.ellipsis || text.compare(k, 3, "...") != 0) c.malformed("Einsum equation: a '.' outside one '...'");
      t.ellipsis = true;
      t.letters += '.';
      k += 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch))) {
      t.letters += ch;
    } else if (ch != ' ') {
      c.malformed(std::string("Einsum equation: unexpected '") + ch + "'");
    }
  }
  return t;
}

void translate_einsum(Context& c) {
  std::string eq = c.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  std::vector<Term> ins;
  const std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    ins.push_back(parse_term(c, lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (int(ins.size()) != c.node().input_size()) c.malformed("Einsum equation names " + std::to_string(ins.size()) + " operands");
  // each operand's ellipsis width; letter sizes
  size_t ell = 0;
  std::vector<size_t> widths;
  std::map<char, int64_t> size;
  std::map<char, int> uses;
  for (size_t o = 0; o < ins.size(); ++o) {
    const Value& v = c.input(int(o));
    c.dtype(v);
    const size_t named = ins[o].letters.size() - (ins[o].ellipsis ? 1 : 0);
    if (v.shape.size() < named || (!ins[o].ellipsis && v.shape.size() != named))
      c.malformed("Einsum operand " + std::to_string(o) + " has rank " + std::to_string(v.shape.size()));
    widths.push_back(v.shape.size() - named);
    ell = std::max(ell, widths.back());
    size_t d = 0;
    for (char ch : ins[o].letters) {
      if (ch == '.') {
        d += widths.back();
        continue;
      }
      const int64_t n = v.shape[d++];
      if (size.count(ch) && size[ch] != n && size[ch] != 1 && n != 1) c.malformed(std::string("Einsum letter '") + ch + "' has two sizes");
      size[ch] = std::max(size.count(ch) ? size[ch] : 1, n);
      ++uses[ch];
    }
  }
  Term out;
  if (arrow != std::string::npos) {
    out = parse_term(c, eq.substr(arrow + 2));
  } else {
    out.letters = ell ? "." : "";
    out.ellipsis = ell > 0;
    for (const auto& [ch, n] : uses)
      if (n == 1) out.letters += ch;
  }
  // index names: output positions i0.. (the ellipsis dimensions included), the rest r0..
  if (ell > 0 && !out.ellipsis) c.unsupported("an Einsum output without the operands' '...' dimensions");
  std::map<char, std::string> name;
  Strings ell_names;
  int pos = 0, ell_at = 0;
  for (char ch : out.letters) {
    if (ch == '.') {
      ell_at = pos;
      for (size_t e = 0; e < ell; ++e) ell_names.push_back(index(pos++));
    } else {
      if (!size.count(ch)) c.malformed(std::string("Einsum output letter '") + ch + "' names no operand dimension");
      name[ch] = index(pos++);
    }
  }
  const Value y = output_value(c, 0);
  if (y.shape.size() != size_t(pos)) c.malformed("Einsum output rank differs from the equation's");
  std::vector<IndexRange> ranges = ranges_of(y.shape);
  int red = 0;
  for (const auto& [ch, n] : size)
    if (!name.count(ch)) {
      name[ch] = reduction(red);
      ranges.push_back({reduction(red++), 0, n});
    }
  Strings factors;
  for (size_t o = 0; o < ins.size(); ++o) {
    const Value& v = c.input(int(o));
    Strings idx;
    size_t d = 0;
    for (char ch : ins[o].letters) {
      if (ch == '.') {  // right-aligned against the output's ellipsis
        for (size_t e = 0; e < widths[o]; ++e, ++d) {
          const size_t at = ell - widths[o] + e;
          idx.push_back(v.shape[d] == 1 && y.shape[size_t(ell_at) + at] != 1 ? "0" : ell_names[at]);
        }
        continue;
      }
      idx.push_back(v.shape[d] == 1 && size[ch] != 1 ? "0" : name[ch]);
      ++d;
    }
    factors.push_back(c.read(v, idx));
  }
  c.emit({y.tsl, indices(y.shape.size()), red ? "+=!" : "=", join(factors, " * "), ranges});
}

}  // namespace

void add_einsum_ops(std::map<std::string, Translator>& t) { t["Einsum"] = translate_einsum; }

}  // namespace tessel::onnx_import
