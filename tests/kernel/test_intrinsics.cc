// Target-neutral matmul matching: which input is A / B, row- or column-major from the access
// order, img2col views of convolutions, and the cases where the match must not fire.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "compiler/poly/intrinsics.h"

using namespace tessel;

namespace {
poly::MatmulMatch match(const std::string& text) {
  static const isa::Hierarchy h = load_target_hierarchy("c", "");
  static std::vector<std::unique_ptr<frontend::Module>> keep;
  keep.push_back(std::make_unique<frontend::Module>(frontend::parse_module(text, "t.tsl")));
  const ir::Function& f = keep.back()->functions.at(0);
  return poly::match_matmul(f.statements.at(f.statements.size() - 1), f, h);
}
}  // namespace

TEST_CASE("matmul: A is the input indexed by C's row axis, row-major when k is its last index") {
  auto m = match("def f(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n");
  REQUIRE(m.matched);
  CHECK(m.a == "A");
  CHECK(m.b == "B");
  CHECK(m.a_layout == kernel::Layout::RowMajor);
  CHECK(m.b_layout == kernel::Layout::RowMajor);
  CHECK(m.unit_m == 16);
  CHECK(m.unit_k == 16);
  CHECK_FALSE(m.img2col);
}

TEST_CASE("matmul: operands written in the other order and transposed layouts are identified") {
  auto m = match("def f(f16[K, M] P, f16[N, K] Q) -> (f32[M, N] C) {\n C(i, j) +=! f32(Q(j, r)) * f32(P(r, i))\n}\n");
  REQUIRE(m.matched);
  CHECK(m.a == "P");  // indexed by the row axis i
  CHECK(m.b == "Q");
  CHECK(m.a_layout == kernel::Layout::ColMajor);  // P is [k][m]
  CHECK(m.b_layout == kernel::Layout::ColMajor);  // Q is [n][k]
  CHECK(m.m == "i");
  CHECK(m.n == "j");
  CHECK(m.k == "r");
}

TEST_CASE("matmul: int8 inputs use the cube's i8 shape") {
  auto m = match("def f(i8[M, K] A, i8[K, N] B) -> (i32[M, N] C) {\n C(m, n) +=! i32(A(m, k)) * i32(B(k, n))\n}\n");
  REQUIRE(m.matched);
  CHECK(m.in_type == DType::I8);
  CHECK(m.acc_type == DType::I32);
  CHECK(m.unit_k == 32);
}

TEST_CASE("convolution: the input becomes an img2col view (m = output column, k = input channel)") {
  auto m = match(
      "def f(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H - R + 1, W - S + 1, K] Y) {\n"
      " Y(n, p, q, k) +=! f32(X(n, p + r, q + s, c)) * f32(Wt(r, s, c, k))\n}\n");
  REQUIRE(m.matched);
  CHECK(m.img2col);
  CHECK(m.a == "X");
  CHECK(m.m == "q");
  CHECK(m.n == "k");
  CHECK(m.k == "c");
  CHECK(m.other_axes == std::vector<std::string>{"n", "p", "r", "s"});
}

TEST_CASE("no match: f32 inputs (no f32 matrix shape), no product, no reduction, depthwise") {
  auto f32 = match("def f(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {\n C(m, n) +=! A(m, k) * B(k, n)\n}\n");
  CHECK_FALSE(f32.matched);
  CHECK(f32.why_not.find("f32->f32") != std::string::npos);
  auto sum = match("def f(f16[M, K] A) -> (f32[M] C) {\n C(m) +=! f32(A(m, k))\n}\n");
  CHECK_FALSE(sum.matched);
  auto ew = match("def f(f16[M, N] A, f16[M, N] B) -> (f16[M, N] C) {\n C(m, n) = A(m, n) * B(m, n)\n}\n");
  CHECK_FALSE(ew.matched);
  auto dw = match(
      "def f(f16[N, H, W, C] X, f16[R, S, C] Wt) -> (f32[N, H - R + 1, W - S + 1, C] Y) {\n"
      " Y(n, p, q, c) +=! f32(X(n, p + r, q + s, c)) * f32(Wt(r, s, c))\n}\n");
  CHECK_FALSE(dw.matched);
}
