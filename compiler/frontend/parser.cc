#include "compiler/frontend/parser.h"

#include "compiler/frontend/frontend.h"
#include "compiler/frontend/lexer.h"

namespace tessel::frontend {

namespace {

using ast::Expr;
using ast::ExprKind;
using ast::ExprPtr;

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::End: return "end of file";
    case Tok::Ident: return "'" + t.text + "'";
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(const Source& src) : src_(src), toks_(lex(src)) {}

  ast::File file() {
    ast::File f;
    while (peek().kind != Tok::End) f.defs.push_back(def());
    return f;
  }

 private:
  const Source& src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int nesting_ = 0;  // recursion depth of the expression parser

  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is(const char* punct) const { return peek().kind == Tok::Punct && peek().text == punct; }
  bool is_word(const char* word) const { return peek().kind == Tok::Ident && peek().text == word; }
  [[noreturn]] void fail(const std::string& expected) const {
    src_.error(peek().loc, "expected " + expected + ", found " + describe(peek()));
  }
  const Token& expect(const char* punct, const std::string& what) {
    if (!is(punct)) fail(what);
    return next();
  }
  // A closing bracket; the message points back at the one it closes.
  void close(const char* punct, const ir::SourceLoc& opened, const std::string& alternatives = "") {
    if (is(punct)) {
      next();
      return;
    }
    std::string what = alternatives.empty() ? "" : alternatives + " or ";
    fail(what + "'" + punct + "' to close the '" + opening(punct) + "' at " + line_col(opened));
  }
  static std::string opening(const char* closing) {
    const std::string c = closing;
    return c == ")" ? "(" : c == "]" ? "[" : "{";
  }
  std::string name(const std::string& what) {
    if (peek().kind != Tok::Ident) fail(what);
    return next().text;
  }

  ast::Def def() {
    if (!is_word("def")) fail("'def' to start an operator definition");
    next();
    ast::Def d;
    d.loc = peek().loc;
    d.name = name("the operator's name after 'def'");
    const ir::SourceLoc open = expect("(", "'(' to start the input tensors of '" + d.name + "'").loc;
    if (!is(")")) {
      d.inputs.push_back(tensor());
      while (is(",")) {
        next();
        d.inputs.push_back(tensor());
      }
    }
    close(")", open, "','");
    expect("->", "'->' and the output tensors of '" + d.name + "'");
    const ir::SourceLoc open_out = expect("(", "'(' to start the output tensors of '" + d.name + "'").loc;
    d.outputs.push_back(tensor());
    while (is(",")) {
      next();
      d.outputs.push_back(tensor());
    }
    close(")", open_out, "','");
    const ir::SourceLoc open_body = expect("{", "'{' to start the body of '" + d.name + "'").loc;
    while (!is("}")) {
      if (peek().kind == Tok::End)
        src_.error(peek().loc, "expected '}' to close the body of '" + d.name + "' opened at " + line_col(open_body) +
                                   ", found end of file");
      if (is_word("def"))
        src_.error(peek().loc, "expected '}' to close the body of '" + d.name + "' opened at " + line_col(open_body) +
                                   " before the next 'def'");
      d.statements.push_back(statement());
    }
    next();
    return d;
  }

  ast::TensorDecl tensor() {
    ast::TensorDecl t;
    t.dtype_loc = peek().loc;
    t.dtype = name("a tensor declaration such as 'f16[M, K] A'");
    const ir::SourceLoc open = expect("[", "'[' and the dimensions of the tensor after '" + t.dtype + "'").loc;
    if (!is("]")) {
      t.dims.push_back(expr());
      while (is(",")) {
        next();
        t.dims.push_back(expr());
      }
    }
    close("]", open, "','");
    t.loc = peek().loc;
    t.name = name("the tensor's name after its dimensions");
    return t;
  }

  ast::Statement statement() {
    ast::Statement s;
    s.loc = peek().loc;
    if (peek().kind != Tok::Ident) fail("a statement such as 'C(m, n) +=! A(m, k) * B(k, n)' or '}'");
    s.tensor = next().text;
    const ir::SourceLoc open = expect("(", "'(' and the indices of '" + s.tensor + "'").loc;
    if (!is(")")) {
      while (true) {
        if (peek().kind != Tok::Ident)
          fail("an index name on the left-hand side (left-hand indices are plain names; use a 'where' clause or "
               "index arithmetic on the right)");
        s.lhs.push_back({peek().text, peek().loc});
        next();
        if (!is(",")) break;
        next();
      }
    }
    close(")", open, "','");
    s.op_loc = peek().loc;
    if (is("=")) {
      next();
      s.op = "=";
    } else if (is("+=") || is("*=")) {
      s.op = next().text;
      bang(s.op);
    } else if ((is_word("max") || is_word("min")) && peek(1).kind == Tok::Punct && peek(1).text == "=") {
      s.op = next().text;
      next();
      s.op += "=";
      bang(s.op);
    } else {
      fail("'=', '+=!', '+=', '*=!', '*=', 'max=!' or 'min=!' after '" + s.tensor + "(...)'");
    }
    s.rhs = expr();
    if (is_word("where")) {
      next();
      while (true) {
        ast::Range r;
        r.loc = peek().loc;
        r.index = name("an index name after 'where' (as in 'where h in 0:H+2')");
        if (!is_word("in")) fail("'in' after '" + r.index + "' (as in 'where " + r.index + " in 0:N')");
        next();
        r.lo = expr();
        expect(":", "':' between the bounds of '" + r.index + "' (as in 'where " + r.index + " in 0:N')");
        r.hi = expr();
        s.where.push_back(r);
        if (!is(",")) break;
        next();
      }
    }
    return s;
  }

  void bang(std::string& op) {
    if (is("!") && !peek().space_before) {
      next();
      op += "!";
    }
  }

  // --- expressions ---------------------------------------------------------------------------

  ExprPtr make(ExprKind kind, const ir::SourceLoc& loc, std::string op, std::vector<ExprPtr> args) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->loc = loc;
    e->op = std::move(op);
    int depth = 0;
    for (const ExprPtr& a : args) depth = std::max(depth, a->depth);
    e->depth = depth + 1;
    e->args = std::move(args);
    if (e->depth > kMaxExpressionDepth)
      src_.error(loc, "expression nested too deeply (more than " + std::to_string(kMaxExpressionDepth) +
                          " levels); split it into several statements");
    return e;
  }

  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, const ir::SourceLoc& at) : p(parser) {
      if (++p.nesting_ > kMaxExpressionDepth)
        p.src_.error(at, "expression nested too deeply (more than " + std::to_string(kMaxExpressionDepth) +
                             " levels); split it into several statements");
    }
    ~DepthGuard() { --p.nesting_; }
  };

  ExprPtr expr() {
    DepthGuard guard(*this, peek().loc);
    return binary(0);
  }

  static int precedence(const Token& t) {
    if (t.kind != Tok::Punct) return -1;
    const std::string& s = t.text;
    if (s == "||") return 0;
    if (s == "&&") return 1;
    if (s == "==" || s == "!=" || s == "<" || s == "<=" || s == ">" || s == ">=") return 2;
    if (s == "+" || s == "-") return 3;
    if (s == "*" || s == "/" || s == "%") return 4;
    return -1;
  }

  ExprPtr binary(int min_prec) {
    ExprPtr lhs = unary();
    while (true) {
      const int prec = precedence(peek());
      if (prec < min_prec) return lhs;
      const Token& op = next();
      const std::string spelling = op.text;
      const ir::SourceLoc loc = op.loc;
      ExprPtr rhs = binary(prec + 1);
      if (prec == 2 && precedence(peek()) == 2)
        src_.error(peek().loc, "comparisons do not chain; write 'a < b && b < c'");
      lhs = make(ExprKind::Binary, loc, spelling, {lhs, rhs});
    }
  }

  ExprPtr unary() {
    DepthGuard guard(*this, peek().loc);
    if (is("-") || is("!")) {
      const Token& op = next();
      const std::string spelling = op.text;
      const ir::SourceLoc loc = op.loc;
      return make(ExprKind::Unary, loc, spelling, {unary()});
    }
    return primary();
  }

  ExprPtr primary() {
    const Token& t = peek();
    if (t.kind == Tok::Int || t.kind == Tok::Real) {
      next();
      ExprPtr e = make(t.kind == Tok::Int ? ExprKind::Int : ExprKind::Real, t.loc, "", {});
      auto* m = const_cast<Expr*>(e.get());
      m->int_value = t.int_value;
      m->real_value = t.real_value;
      return e;
    }
    if (t.kind == Tok::Ident) {
      const std::string n = t.text;
      const ir::SourceLoc loc = t.loc;
      next();
      if (!is("(")) {
        ExprPtr e = make(ExprKind::Name, loc, "", {});
        const_cast<Expr*>(e.get())->name = n;
        return e;
      }
      const ir::SourceLoc open = next().loc;
      std::vector<ExprPtr> args;
      if (!is(")")) {
        args.push_back(expr());
        while (is(",")) {
          next();
          args.push_back(expr());
        }
      }
      close(")", open, "','");
      ExprPtr e = make(ExprKind::Call, loc, "", std::move(args));
      auto* m = const_cast<Expr*>(e.get());
      m->name = n;
      m->name_loc = loc;
      return e;
    }
    if (is("(")) {
      const ir::SourceLoc open = next().loc;
      ExprPtr e = expr();
      close(")", open);
      return e;
    }
    fail("an expression (a number, a name, a tensor access or '(')");
  }
};

}  // namespace

ast::File parse_file(const Source& src) { return Parser(src).file(); }

}  // namespace tessel::frontend
