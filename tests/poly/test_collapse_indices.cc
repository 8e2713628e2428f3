// poly::collapse_indices: which index pairs collapse (and which must not), the reshaped tensors,
// and the interpreter on the rewritten function against the original element by element.
#include <doctest/doctest.h>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "tests/poly/poly_test_util.h"
#include "compiler/interp/interpreter.h"
#include "compiler/poly/collapse_indices.h"

using namespace tessel;

namespace {

using Case = test::OneDef;
Case load(const std::string& src) { return test::load_one_def(src); }

std::vector<int64_t> shape_of(const ir::Function& f, const std::string& t, const std::map<std::string, int64_t>& sizes) {
  std::vector<int64_t> d;
  for (const auto& e : f.find_tensor(t)->shape) d.push_back(e.evaluate({}, sizes));
  return d;
}

std::vector<std::string> domain_of(const ir::Statement& s) {
  std::vector<std::string> d;
  for (const auto& iv : s.domain) d.push_back(iv.name);
  return d;
}

// The rewritten function computes the same outputs (reshaped) on the same inputs (reshaped).
void check_same(const ir::Function& f, const poly::CollapsedFunction& g, const std::map<std::string, int64_t>& sizes) {
  const auto inputs = interp::random_inputs(f, sizes, 3);
  auto reshaped = inputs;
  for (auto& [n, a] : reshaped)
    if (g.collapsed_shapes.count(n)) a.shape = g.collapsed_shapes.at(n);
  const auto expected = interp::evaluate(f, sizes, inputs);
  auto got = interp::evaluate(g.function, sizes, reshaped);
  for (auto& [n, a] : got)
    if (g.original_shapes.count(n)) a.shape = g.original_shapes.at(n);
  const emit_c::Verification v = emit_c::verify(expected, got, emit_c::reassociated_sum_tolerance(f, sizes));
  CHECK_MESSAGE(v.verified, v.first_mismatch);
}

}  // namespace

TEST_CASE("collapse_indices: a batched GEMM with a shared weight becomes one GEMM over b_m") {
  Case c = load("def bg(f32[B, M, K] A, f32[K, N] W) -> (f32[B, M, N] C) {\n  C(b, m, n) +=! A(b, m, k) * W(k, n)\n}\n");
  const std::map<std::string, int64_t> sizes{{"B", 3}, {"M", 5}, {"K", 7}, {"N", 4}};
  auto g = poly::collapse_indices(*c.f, sizes);
  REQUIRE(g);
  CHECK(domain_of(g->function.statements[0]) == std::vector<std::string>{"b_m", "n", "k"});
  CHECK(shape_of(g->function, "A", sizes) == std::vector<int64_t>{15, 7});
  CHECK(shape_of(g->function, "C", sizes) == std::vector<int64_t>{15, 4});
  CHECK(shape_of(g->function, "W", sizes) == std::vector<int64_t>{7, 4});
  CHECK(g->original_shapes.at("C") == std::vector<int64_t>{3, 5, 4});
  CHECK_FALSE(g->original_shapes.count("W"));
  CHECK(g->removed_indices.at("S0") == std::vector<std::string>{"b", "m"});
  check_same(*c.f, *g, sizes);
}

TEST_CASE("collapse_indices: a 1x1 NHWC convolution collapses n, h, w in two steps") {
  Case c = load("def c1(f32[N, H, W, C] X, f32[C, K] F) -> (f32[N, H, W, K] Y) {\n"
                "  Y(n, h, w, k) +=! X(n, h, w, c) * F(c, k)\n}\n");
  const std::map<std::string, int64_t> sizes{{"N", 2}, {"H", 3}, {"W", 5}, {"C", 4}, {"K", 6}};
  auto g = poly::collapse_indices(*c.f, sizes);
  REQUIRE(g);
  CHECK(g->steps.size() == 2);
  CHECK(shape_of(g->function, "X", sizes) == std::vector<int64_t>{30, 4});
  CHECK(shape_of(g->function, "Y", sizes) == std::vector<int64_t>{30, 6});
  CHECK(domain_of(g->function.statements[0]).size() == 3);
  check_same(*c.f, *g, sizes);
}

TEST_CASE("collapse_indices: reduced pairs collapse, a pair split by a broadcast does not") {
  Case c = load("def gp(f32[N, H, W, C] X, f32[C] s) -> (f32[N, C] Y) {\n"
                "  S(n, c) +=! X(n, h, w, c)\n  Y(n, c) = S(n, c) * s(c)\n}\n");
  const std::map<std::string, int64_t> sizes{{"N", 2}, {"H", 3}, {"W", 4}, {"C", 5}};
  auto g = poly::collapse_indices(*c.f, sizes);
  REQUIRE(g);
  CHECK(shape_of(g->function, "X", sizes) == std::vector<int64_t>{2, 12, 5});  // h, w reduced together
  CHECK(shape_of(g->function, "Y", sizes) == std::vector<int64_t>{2, 5});      // n, c: c also indexes s alone
  check_same(*c.f, *g, sizes);
}

TEST_CASE("collapse_indices: shifted, strided, transposed or partial uses keep the indices") {
  const std::map<std::string, int64_t> sizes{{"M", 6}, {"N", 5}, {"K", 4}, {"B", 2}};
  // a 3x3 convolution's shifted reads, a transposed write, a partial range, an index used as a value,
  // a GEMM, a true batched GEMM (b is followed by k in B)
  for (const char* src : {
           "def t(f32[M, N] X) -> (f32[N, M] Y) {\n  Y(n, m) = X(m, n)\n}\n",
           "def p(f32[M, N] X) -> (f32[M, N] Y) {\n  Y(m, n) = X(m, n) where n in 1:N\n}\n",
           "def v(f32[M, N] X) -> (f32[M, N] Y) {\n  Y(m, n) = X(m, n) * f32(n)\n}\n",
           "def g(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n",
           "def bb(f32[B, M, K] A, f32[B, K, N] W) -> (f32[B, M, N] C) {\n  C(b, m, n) +=! A(b, m, k) * W(b, k, n)\n}\n",
           "def s(f32[M, N] X) -> (f32[M, N] Y) {\n  Y(m, n) = X(m, 0) + X(m, n)\n}\n",
       }) {
    CAPTURE(src);
    Case c = load(src);
    CHECK_FALSE(poly::collapse_indices(*c.f, sizes).has_value());
  }
}

TEST_CASE("collapse_indices: element-wise N-D chains and row programs become 1-D and 2-D") {
  Case c = load("def sm(f32[B, H, S, T] X) -> (f32[B, H, S, T] Y) {\n"
                "  Mx(b, h, s) max=! X(b, h, s, t)\n"
                "  E(b, h, s, t) = exp(X(b, h, s, t) - Mx(b, h, s))\n"
                "  Z(b, h, s) +=! E(b, h, s, t)\n"
                "  Y(b, h, s, t) = E(b, h, s, t) / Z(b, h, s)\n}\n");
  const std::map<std::string, int64_t> sizes{{"B", 2}, {"H", 3}, {"S", 4}, {"T", 5}};
  auto g = poly::collapse_indices(*c.f, sizes);
  REQUIRE(g);
  CHECK(shape_of(g->function, "X", sizes) == std::vector<int64_t>{24, 5});  // rows b_h_s, lanes t
  CHECK(shape_of(g->function, "Mx", sizes) == std::vector<int64_t>{24});
  check_same(*c.f, *g, sizes);
  Case e = load("def ew(f32[A, B, C] X, f32[A, B, C] Z) -> (f32[A, B, C] Y) {\n  Y(a, b, c) = X(a, b, c) * Z(a, b, c) + 1.0\n}\n");
  auto ge = poly::collapse_indices(*e.f, {{"A", 3}, {"B", 4}, {"C", 5}});
  REQUIRE(ge);
  CHECK(shape_of(ge->function, "Y", {{"A", 3}, {"B", 4}, {"C", 5}}) == std::vector<int64_t>{60});
  check_same(*e.f, *ge, {{"A", 3}, {"B", 4}, {"C", 5}});
}
