// build_ast keeps each AST by the parameter-free schedule's isl text (compiler/poly/isl_util.cc):
// an identical kernel compiled again (ResNet-50's repeated blocks) gets the same loop tree from
// any isl context, and a schedule that differs in a size, a statement name or a dimension gets
// its own.
#include <doctest/doctest.h>

#include "compiler/poly/isl_util.h"

using namespace tessel;

namespace {

std::string text(const poly::AstNode& a, int depth = 0) {
  const std::string pad(size_t(depth) * 2, ' ');
  switch (a.kind) {
    case poly::AstNode::Kind::For: {
      std::string s = pad + "for " + a.iterator + " = " + a.init.to_string() + "; " + a.cond.to_string() + "; +" +
                      a.inc.to_string() + "\n";
      for (const auto& c : a.children) s += text(c, depth + 1);
      return s;
    }
    case poly::AstNode::Kind::If: {
      std::string s = pad + "if " + a.if_cond.to_string() + "\n";
      for (const auto& c : a.children) s += text(c, depth + 1);
      for (const auto& c : a.else_children) s += pad + "else\n" + text(c, depth + 1);
      return s;
    }
    case poly::AstNode::Kind::Block: {
      std::string s;
      for (const auto& c : a.children) s += text(c, depth);
      return s;
    }
    case poly::AstNode::Kind::User: {
      std::string s = pad + a.user_name + "(";
      for (size_t i = 0; i < a.user_args.size(); ++i) s += (i ? ", " : "") + a.user_args[i].to_string();
      return s + ")\n";
    }
  }
  return {};
}

// A 2-D tiled loop nest over [N, M] (tiles of 16 rows), as the tile pass writes one.
const char* kTiled =
    "[N, M] -> { S0[i, j] -> [o0, i, j] : (o0) mod 16 = 0 and 0 <= i < N and 0 <= j < M and o0 <= i < o0 + 16 }";

std::string ast_of(const std::string& schedule, const std::string& context) {
  poly::IslContext isl;  // a fresh context each time, as each kernel of a program has its own
  return text(poly::build_ast(isl::union_map(isl.ctx(), schedule), isl::set(isl.ctx(), context)));
}

}  // namespace

TEST_CASE("build_ast: the same schedule in another isl context gives the same loop tree") {
  const std::string first = ast_of(kTiled, "[N, M] -> { : N = 40 and M = 24 }");
  const std::string again = ast_of(kTiled, "[N, M] -> { : N = 40 and M = 24 }");
  CHECK(first == again);
  // the loop nest as isl writes it: tiles of 16 rows, the last one cut at row 39
  CHECK(first.find("for c0 = 0; (c0 <= 39); +16") != std::string::npos);
  CHECK(first.find("S0(c1, c2)") != std::string::npos);
}

TEST_CASE("build_ast: another size, statement name or schedule gets its own tree, not the one kept") {
  const std::string n40 = ast_of(kTiled, "[N, M] -> { : N = 40 and M = 24 }");
  const std::string n72 = ast_of(kTiled, "[N, M] -> { : N = 72 and M = 24 }");
  CHECK(n40 != n72);
  CHECK(n72.find("(c0 <= 71)") != std::string::npos);
  const std::string renamed = ast_of(
      "[N, M] -> { S1[i, j] -> [o0, i, j] : (o0) mod 16 = 0 and 0 <= i < N and 0 <= j < M and o0 <= i < o0 + 16 }",
      "[N, M] -> { : N = 40 and M = 24 }");
  CHECK(renamed.find("S1(c1, c2)") != std::string::npos);
  CHECK(renamed.find("S0(") == std::string::npos);
  const std::string untiled = ast_of("[N, M] -> { S0[i, j] -> [i, j] : 0 <= i < N and 0 <= j < M }",
                                     "[N, M] -> { : N = 40 and M = 24 }");
  CHECK(untiled != n40);
  CHECK(untiled.find("+16") == std::string::npos);
  // and the first tree is still what it was
  CHECK(ast_of(kTiled, "[N, M] -> { : N = 40 and M = 24 }") == n40);
}
