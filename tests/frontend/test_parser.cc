// The front end: what tensor IR each language construct lowers to (domains, affine accesses,
// range inference, dtype promotion), and the cases where a rule must not fire.
#include <doctest/doctest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "compiler/frontend/frontend.h"
#include "isa/base/error.h"

using namespace tessel;
using frontend::parse_module;

namespace {

ir::Function one(const std::string& text) {
  frontend::Module m = parse_module(text, "t.tsl");
  REQUIRE(m.functions.size() == 1);
  return m.functions[0];
}

std::string rejection(const std::string& text) {
  try {
    parse_module(text, "t.tsl");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string workload(const std::string& name) { return std::string(TESSEL_SOURCE_DIR) + "/workloads/" + name; }

const ir::IndexVar& var(const ir::Statement& s, const std::string& name) {
  const ir::IndexVar* v = s.find_index(name);
  REQUIRE_MESSAGE(v, "no index " << name);
  return *v;
}

}  // namespace

TEST_CASE("matmul lowers to one Sum statement with m, n outside and k as the reduction") {
  const ir::Function f = one("def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n"
                             "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n");
  CHECK(f.name == "matmul");
  CHECK(f.params == std::vector<std::string>{"M", "K", "N"});
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].kind == ir::TensorKind::Input);
  CHECK(f.tensors[2].kind == ir::TensorKind::Output);
  CHECK(f.tensors[2].shape[1] == ir::AffineExpr::param("N"));
  REQUIRE(f.statements.size() == 1);
  const ir::Statement& s = f.statements[0];
  CHECK(s.name == "S0");
  CHECK(s.reduction == ir::Reduction::Sum);
  CHECK(s.init);
  CHECK(s.acc_type == DType::F32);
  REQUIRE(s.domain.size() == 3);
  CHECK(s.domain[0].name == "m");
  CHECK(s.domain[1].name == "n");
  CHECK(s.domain[2].name == "k");
  CHECK(s.domain[2].is_reduction);
  CHECK_FALSE(s.domain[0].is_reduction);
  CHECK(s.domain[2].lo == ir::AffineExpr::constant_of(0));
  CHECK(s.domain[2].hi == ir::AffineExpr::param("K"));
  CHECK(s.out_indices == std::vector<ir::AffineExpr>{ir::AffineExpr::index("m"), ir::AffineExpr::index("n")});
  CHECK(s.rhs->op == ir::Op::Mul);
  CHECK(s.rhs->type == DType::F32);
  const ir::Expr& a = *s.rhs->args[0]->args[0];
  CHECK(a.kind == ir::ExprKind::Access);
  CHECK(a.name == "A");
  CHECK(a.type == DType::F16);
  CHECK(ir::to_string(f).find("S0: C(m, n) +=! (f32(A(m, k)) * f32(B(k, n)))") != std::string::npos);
}

TEST_CASE("the padded convolution: a local with where-ranges, compound indices inferred from the output") {
  const frontend::Module m = frontend::load_module(workload("conv_seed.tsl"));
  const ir::Function& f = frontend::select_function(m, "conv2d_nhwc");
  const ir::Tensor* xp = f.find_tensor("Xp");
  REQUIRE(xp);
  CHECK(xp->kind == ir::TensorKind::Local);
  CHECK(xp->dtype == DType::F16);
  CHECK(xp->shape[1] == ir::AffineExpr::param("H") + ir::AffineExpr::constant_of(2));
  CHECK(f.tensors.back().name == "Xp");  // inputs, outputs, then locals
  const ir::Statement& pad = f.statements[0];
  CHECK(var(pad, "h").hi.to_string() == "H + 2");
  CHECK(pad.reduction == ir::Reduction::None);
  const ir::Statement& conv = f.statements[1];
  CHECK(conv.name == "S1");
  CHECK(var(conv, "p").hi == ir::AffineExpr::param("H"));  // from Y's dimension, not from p + r
  CHECK(var(conv, "r").hi == ir::AffineExpr::param("R"));
  CHECK(var(conv, "r").is_reduction);
  std::vector<std::string> order;
  for (const ir::IndexVar& v : conv.domain) order.push_back(v.name);
  CHECK(order == std::vector<std::string>{"n", "p", "q", "k", "r", "s", "c"});
  const ir::Expr& read = *conv.rhs->args[0]->args[0];
  CHECK(read.name == "Xp");
  CHECK(read.indices[1] == ir::AffineExpr::index("p") + ir::AffineExpr::index("r"));
}

TEST_CASE("strides are index arithmetic and shapes may be affine in the parameters") {
  const frontend::Module m = frontend::load_module(workload("conv2d.tsl"));
  const ir::Function& f = frontend::select_function(m, "conv2d_stride2");
  CHECK(f.tensors[0].shape[2].to_string() == "2*P + R - 2");
  const ir::Expr& read = *f.statements[0].rhs->args[0]->args[0];
  CHECK(read.indices[2].index_coeffs == std::map<std::string, int64_t>{{"p", 2}, {"r", 1}});
}

TEST_CASE("a where clause resolves what would otherwise be a range conflict") {
  const std::string base = "def f(f16[M, K] A, f16[N, K] B) -> (f32[M] C) {\n  C(m) +=! f32(A(m, k)) * f32(B(m, k))";
  CHECK(rejection(base + "\n}\n").find("t.tsl:2:33: conflicting ranges for index 'm'") == 0);
  const ir::Function f = one(base + " where m in 0:M\n}\n");
  CHECK(var(f.statements[0], "m").hi == ir::AffineExpr::param("M"));
}

TEST_CASE("equal ranges from several tensors are not a conflict") {
  const ir::Function f = one("def f(f32[M, K] A, f32[M, K] B) -> (f32[M] C) {\n C(m) +=! A(m, k) * B(m, k)\n}\n");
  CHECK(var(f.statements[0], "k").hi == ir::AffineExpr::param("K"));
}

TEST_CASE("promotion: literals, size parameters and index values take the type of the other operand") {
  const ir::Function f = one("def f(f16[N] A, i32[N] I) -> (f16[N] Y, f32[N] Z, i32[N] J) {\n"
                             "  Y(i) = A(i) * 2 + 0.5\n"
                             "  Z(i) = f32(A(i)) / f32(N)\n"
                             "  J(i) = select(i == I(i), I(i) + N, -1)\n}\n");
  const ir::Expr& y = *f.statements[0].rhs;
  CHECK(y.type == DType::F16);
  CHECK(y.args[1]->kind == ir::ExprKind::Constant);
  CHECK(y.args[1]->type == DType::F16);
  const ir::Expr& cast_n = *f.statements[1].rhs->args[1];
  CHECK(cast_n.op == ir::Op::Cast);
  CHECK(cast_n.args[0]->kind == ir::ExprKind::SizeParam);
  CHECK(cast_n.args[0]->type == DType::I32);
  const ir::Expr& sel = *f.statements[2].rhs;
  CHECK(sel.op == ir::Op::Select);
  CHECK(sel.args[0]->args[0]->kind == ir::ExprKind::IndexValue);
  CHECK(sel.args[2]->type == DType::I32);
}

TEST_CASE("promotion never mixes two dtypes implicitly, in either order, and not across a store") {
  CHECK(rejection("def f(f16[N] A, f32[N] B) -> (f32[N] Y) {\n Y(i) = f32(A(i)) + B(i) * A(i)\n}\n")
            .find("type mismatch: f32 * f16") != std::string::npos);
  CHECK(rejection("def f(f16[N] A) -> (f32[N] Y) {\n Y(i) = A(i)\n}\n").find("cannot be stored in f32 tensor 'Y'") !=
        std::string::npos);
  CHECK(rejection("def f(i8[N] A) -> (i32[N] Y) {\n Y(i) = A(i)\n}\n").find("t.tsl:2:9: type mismatch") == 0);
  // ... while a cast always works, and a condition can be cast to a number.
  CHECK(rejection("def f(f16[N] A) -> (i32[N] Y) {\n Y(i) = i32(A(i) > 0) + i32(A(i))\n}\n") == "");
}

TEST_CASE("a new local takes the dtype of its right-hand side, a literal-only one is i32 or f32") {
  const ir::Function f = one("def f(f16[N] A) -> (f32[N] Y) {\n"
                             "  T(i) = A(i) * A(i)\n  Z(i) = 1 where i in 0:N\n  R(i) = 1.5 where i in 0:N\n"
                             "  Y(i) = f32(T(i)) + f32(Z(i)) + R(i)\n}\n");
  CHECK(f.find_tensor("T")->dtype == DType::F16);
  CHECK(f.find_tensor("Z")->dtype == DType::I32);
  CHECK(f.find_tensor("R")->dtype == DType::F32);
  CHECK(f.find_tensor("Z")->shape == std::vector<ir::AffineExpr>{ir::AffineExpr::param("N")});
}

TEST_CASE("reduction operators: +=!, max=!, min=!, and += after an earlier write") {
  const ir::Function f = one("def f(f32[M, K] A) -> (f32[M] S, f32[M] X, f32[M] N) {\n"
                             "  S(m) +=! A(m, k)\n  S(m) += A(m, k) * 2\n  X(m) max=! A(m, k)\n  N(m)min=!A(m, k)\n}\n");
  REQUIRE(f.statements.size() == 4);
  CHECK(f.statements[0].init);
  CHECK(f.statements[1].reduction == ir::Reduction::Sum);
  CHECK_FALSE(f.statements[1].init);
  CHECK(f.statements[2].reduction == ir::Reduction::Max);
  CHECK(f.statements[3].reduction == ir::Reduction::Min);
  CHECK(f.statements[3].name == "S3");
}

TEST_CASE("product reductions: *=! starts from 1 and *= accumulates after an earlier write") {
  const ir::Function f = one("def f(f32[M, K] A) -> (f32[M] P, f32[] Q) {\n"
                             "  P(m) *=! A(m, k)\n  P(m) *= A(m, k) + 1\n  Q()*=!A(m, k)\n}\n");
  REQUIRE(f.statements.size() == 3);
  CHECK(f.statements[0].reduction == ir::Reduction::Prod);
  CHECK(f.statements[0].init);
  CHECK(f.statements[1].reduction == ir::Reduction::Prod);
  CHECK_FALSE(f.statements[1].init);
  CHECK(f.statements[2].reduction == ir::Reduction::Prod);
  CHECK(var(f.statements[2], "k").is_reduction);
  const std::string text = ir::to_string(f);
  CHECK(text.find("P(m) *=! A(m, k)") != std::string::npos);
  CHECK(text.find("P(m) *= ") != std::string::npos);
  // `*` followed by `=` is the operator only on the left of a statement; inside an expression it is a syntax error
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) *= A(m)\n}\n").find("'*=' accumulates into the existing value of 'Y'") !=
        std::string::npos);
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n  Y(m) = A(m) *= 2\n}\n") != "");
}

TEST_CASE("comments, blank lines and free layout, bf16 and scalar (0-d) tensors") {
  const ir::Function f = one("# a comment\n\ndef f(bf16[N] A,   # trailing comment\n f32[] s)\n -> (f32[] T) {\n"
                             "  T() +=! f32(A(i)) * s()\n}\n");
  CHECK(f.tensors[0].dtype == DType::BF16);
  CHECK(f.tensors[1].shape.empty());
  CHECK(f.statements[0].out_indices.empty());
}

TEST_CASE("select_function: the only def, a def by name, or a clear error") {
  const frontend::Module one_def = frontend::load_module(workload("matmul.tsl"));
  CHECK(frontend::select_function(one_def, "").name == "matmul");
  const frontend::Module bert = frontend::load_module(workload("bert.tsl"));
  CHECK(frontend::select_function(bert, "softmax").name == "softmax");
  CHECK_THROWS_WITH_AS(frontend::select_function(bert, ""), doctest::Contains("choose one with --def NAME"), UserError);
  CHECK_THROWS_WITH_AS(frontend::select_function(bert, "gelu"),
                       doctest::Contains("no operator named 'gelu'; the file defines matmul_bias_gelu, softmax, layer_norm"),
                       UserError);
  CHECK_THROWS_WITH_AS(frontend::load_module("/nonexistent.tsl"), "/nonexistent.tsl: cannot open operator file",
                       UserError);
}

TEST_CASE("an error shows the source line and a caret under the column") {
  const std::string msg = rejection("def f(f32[M] A) -> (f32[M] Y) {\n\tY(m) = B(m)\n}\n");
  CHECK(msg == "t.tsl:2:9: unknown tensor or function 'B'; tensors: A, Y; functions: select, min, max, abs, exp, log, "
               "sqrt, rsqrt, tanh, erf, pow, floor, ceil, round, sign, sin, cos, tan, asin, acos, atan, sinh, cosh, "
               "asinh, acosh, atanh, sigmoid and the casts f16, bf16, f32, f64, i8, u8, i32\n  \tY(m) = B(m)\n  \t       ^");
}

TEST_CASE("nesting up to the limit parses, beyond it is an error, not a crash") {
  auto nested = [](int depth) {
    return "def f(f32[M] A) -> (f32[M] Y) {\n Y(m) = " + std::string(depth, '(') + "A(m)" + std::string(depth, ')') +
           "\n}\n";
  };
  CHECK(rejection(nested(100)) == "");
  CHECK(rejection(nested(100000)).find("expression nested too deeply") != std::string::npos);
  std::string chain = "def f(f32[M] A) -> (f32[M] Y) {\n Y(m) = A(m)";
  for (int i = 0; i < 100000; ++i) chain += "-A(m)";
  CHECK(rejection(chain + "\n}\n").find("expression nested too deeply") != std::string::npos);
  CHECK(rejection("def f(f32[M] A) -> (f32[M] Y) {\n Y(m) = " + std::string(100000, '-') + "A(m)\n}\n")
            .find("expression nested too deeply") != std::string::npos);
}

TEST_CASE("mutated workloads are rejected with a UserError or accepted, never anything else") {
  // A deterministic, bounded stand-in for the libFuzzer run (scripts/fuzz.sh) that CI also does.
  std::vector<std::string> corpus;
  for (const char* w : {"matmul.tsl", "conv_seed.tsl", "bert.tsl", "batch_norm.tsl", "one_hot.tsl"}) {
    std::ifstream in(workload(w));
    std::stringstream s;
    s << in.rdbuf();
    corpus.push_back(s.str());
  }
  std::mt19937 rng(7);
  const std::string alphabet = "()[]{},:=+-*/%<>!&|#.0123456789 \n\tabcdefmnkMNK_\x01\xff";
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = corpus[iter % corpus.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text.erase(at, 1 + rng() % 8); break;
        case 1: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: text[at] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    try {
      const frontend::Module m = parse_module(text, "fuzz.tsl");
      for (const ir::Function& f : m.functions) (void)ir::to_string(f);
      ++accepted;
    } catch (const UserError& e) {
      const std::string msg = e.what();
      CHECK(msg.rfind("fuzz.tsl:", 0) == 0);
      ++rejected;
    }
  }
  CHECK(rejected > 1000);
  CHECK(accepted > 10);
}
