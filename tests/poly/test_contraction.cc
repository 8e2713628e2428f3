// The one contraction matcher (compiler/poly/contraction.h): dims by role (batch, M, N, K), which
// operand is A / B and its strides, padding producers inlined into the loads, element-wise
// epilogues; the result recorded in the kernel by the pipeline; and the cases where it must not
// match, each with its reason. Most cases run the matcher on a bare kernel over the tensor IR as
// written (no padding folded), so the rule itself is what is checked.
#include <doctest/doctest.h>

#include "compiler/poly/contraction.h"
#include "tests/poly/poly_test_util.h"

using namespace tessel;

namespace {

struct Matched {
  std::unique_ptr<frontend::Module> module;
  std::optional<kernel::Contraction> c;
  std::string why;
};

// The matcher on a kernel with no global tensors: shapes come from the function at `sizes`.
Matched identify(const std::string& text, std::map<std::string, int64_t> sizes) {
  Matched r;
  r.module = std::make_unique<frontend::Module>(frontend::parse_module(text, "t.tsl"));
  kernel::Kernel k;
  k.name = "t";
  k.function = &r.module->functions.at(0);
  k.sizes = std::move(sizes);
  r.c = poly::identify_contraction(k, &r.why);
  return r;
}

std::vector<std::string> vars(const std::vector<kernel::ContractionDim>& dims) {
  std::vector<std::string> v;
  for (const auto& d : dims) v.push_back(d.var + "=" + std::to_string(d.extent));
  return v;
}

using Strides = std::map<std::string, int64_t>;
using Names = std::vector<std::string>;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("plain GEMM: M from A, N from B, K shared, row-major strides, fragments stored straight") {
  auto r = identify(test::kMatmul, {{"M", 64}, {"N", 32}, {"K", 48}});
  REQUIRE_MESSAGE(r.c, r.why);
  CHECK(r.why.empty());
  CHECK(vars(r.c->m) == Names{"m=64"});
  CHECK(vars(r.c->n) == Names{"n=32"});
  CHECK(vars(r.c->k) == Names{"k=48"});
  CHECK(r.c->batch.empty());
  CHECK(r.c->a.tensor == "A");
  CHECK(r.c->b.tensor == "B");
  CHECK(r.c->a.coeff == Strides{{"m", 48}, {"k", 1}});
  CHECK(r.c->b.coeff == Strides{{"k", 32}, {"n", 1}});
  CHECK_FALSE(r.c->swapped);
  CHECK(r.c->in_type == DType::F16);
  CHECK(r.c->acc_type == DType::F32);
  CHECK(r.c->plain_output);
  CHECK(r.c->epilogue.empty());
  CHECK(r.c->size_m() * r.c->size_n() * r.c->size_k() == 64 * 32 * 48);
}

TEST_CASE("transposed B and factors written in the other order: B is the operand with the innermost output index") {
  auto t = identify("def f(f16[M, K] A, f16[N, K] B) -> (f32[M, N] C) {\n C(m, n) +=! f32(A(m, k)) * f32(B(n, k))\n}\n",
                    {{"M", 8}, {"N", 4}, {"K", 16}});
  REQUIRE_MESSAGE(t.c, t.why);
  CHECK(t.c->b.tensor == "B");
  CHECK(t.c->b.coeff == Strides{{"n", 16}, {"k", 1}});  // [n][k]: column-major B
  CHECK_FALSE(t.c->swapped);
  auto s = identify("def f(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n C(m, n) +=! f32(B(k, n)) * f32(A(m, k))\n}\n",
                    {{"M", 8}, {"N", 4}, {"K", 16}});
  REQUIRE_MESSAGE(s.c, s.why);
  CHECK(s.c->a.tensor == "A");
  CHECK(s.c->b.tensor == "B");
  CHECK(s.c->swapped);  // A is the product's right factor
}

TEST_CASE("batched: an output index read by both operands is a batch dim") {
  auto r = identify("def f(f16[B, M, K] X, f16[B, K, N] Y) -> (f32[B, M, N] Z) {\n Z(b, m, n) +=! f32(X(b, m, k)) * f32(Y(b, k, n))\n}\n",
                    {{"B", 3}, {"M", 4}, {"N", 5}, {"K", 6}});
  REQUIRE_MESSAGE(r.c, r.why);
  CHECK(vars(r.c->batch) == Names{"b=3"});
  CHECK(vars(r.c->m) == Names{"m=4"});
  CHECK(vars(r.c->n) == Names{"n=5"});
  CHECK(r.c->a.coeff == Strides{{"b", 24}, {"m", 6}, {"k", 1}});
  CHECK(r.c->plain_output);
}

TEST_CASE("convolution: the padding producer is inlined, the operand reads X through its guard (im2col view)") {
  const char* conv =
      "def conv(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H, W, K] Y) {\n"
      "  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0)\n"
      "      where h in 0:H+2, w in 0:W+2\n"
      "  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k))\n"
      "}\n";
  auto r = identify(conv, {{"N", 2}, {"H", 5}, {"W", 6}, {"C", 3}, {"K", 4}, {"R", 3}, {"S", 3}});
  REQUIRE_MESSAGE(r.c, r.why);
  CHECK(r.c->anchor == 1);
  CHECK(r.c->inlined == std::vector<int>{0});
  CHECK(r.c->a.tensor == "X");
  REQUIRE(r.c->a.producer != nullptr);
  CHECK(r.c->a.producer->output == "Xp");
  CHECK(r.c->a.guard != nullptr);
  REQUIRE(r.c->a.indices.size() == 4);
  CHECK(r.c->a.indices[1].to_string() == "p + r - 1");  // X's row: the producer's h - 1 at h = p + r
  CHECK(vars(r.c->m) == Names{"n=2", "p=5", "q=6"});
  CHECK(vars(r.c->n) == Names{"k=4"});
  CHECK(vars(r.c->k) == Names{"r=3", "s=3", "c=3"});  // A's memory order, outer to inner
  CHECK(r.c->b.tensor == "Wt");
  CHECK(r.c->plain_output);
}

TEST_CASE("epilogue: element-wise statements after the contraction, a bias over N included") {
  auto r = identify(test::kMatmulBiasRelu, {{"M", 7}, {"N", 5}, {"K", 9}});
  REQUIRE_MESSAGE(r.c, r.why);
  CHECK(r.c->anchor == 0);
  CHECK(r.c->epilogue == std::vector<int>{1});
  CHECK_FALSE(r.c->plain_output);
}

TEST_CASE("no match, with the reason: no product, matrix-vector, broadcast, two contractions, reductions after, mixed dtypes") {
  struct Case {
    const char* text;
    std::map<std::string, int64_t> sizes;
    const char* reason;
  };
  const Case cases[] = {
      {"def f(f32[N] X) -> (f32[N] Y) {\n Y(n) = max(X(n), 0)\n}\n", {{"N", 4}}, "no reduction statement of the form"},
      {"def f(f16[M, K] A, f16[K] x) -> (f32[M] y) {\n y(m) +=! f32(A(m, k)) * f32(x(k))\n}\n", {{"M", 4}, {"K", 3}},
       "no M or no N index"},
      {"def f(f16[M, K] A, f16[K] x) -> (f32[M, N] C) {\n C(m, n) +=! f32(A(m, k)) * f32(x(k)) where n in 0:N\n}\n",
       {{"M", 4}, {"K", 3}, {"N", 2}}, "read by neither operand (broadcast)"},
      {"def f(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C, f32[M, N] D) {\n C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
       " D(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n",
       {{"M", 4}, {"K", 3}, {"N", 2}}, "more than one reduction statement"},
      {"def f(f16[M, K] A, f16[K, N] B) -> (f32[M] S) {\n C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n S(m) +=! C(m, n)\n}\n",
       {{"M", 4}, {"K", 3}, {"N", 2}}, "is a reduction, not an element-wise epilogue"},
      {"def f(f16[M, K] A, i8[K, N] B) -> (f32[M, N] C) {\n C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n",
       {{"M", 4}, {"K", 3}, {"N", 2}}, "operands have different dtypes (f16, i8)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto r = identify(c.text, c.sizes);
    CHECK_FALSE(r.c);
    CHECK_MESSAGE(contains(r.why, c.reason), r.why);
  }
}

TEST_CASE("the pipeline records the match in the kernel once (pass contraction), or why not") {
  frontend::Module mm = frontend::parse_module(test::kMatmul, "mm.tsl");
  auto c = test::compile_text(mm, {{"M", 64}, {"N", 32}, {"K", 48}}, std::nullopt);
  REQUIRE(c->kernel.contraction);
  CHECK(c->kernel.no_contraction.empty());
  CHECK(c->kernel.contraction->a.tensor == "A");
  CHECK(contains(poly::contraction_to_string(c->kernel), "M(m=64) N(n=32) K(k=48)"));
  CHECK(std::count(pass_names().begin(), pass_names().end(), "contraction") == 1);
  frontend::Module relu = frontend::parse_module("def f(f32[N] X) -> (f32[N] Y) {\n Y(n) = max(X(n), 0)\n}\n", "relu.tsl");
  auto r = test::compile_text(relu, {{"N", 8}}, std::nullopt);
  CHECK_FALSE(r->kernel.contraction);
  CHECK(contains(r->kernel.no_contraction, "no reduction statement"));
  CHECK(contains(poly::contraction_to_string(r->kernel), "no contraction: "));
}

TEST_CASE("shared primitives: casts stripped, plain indices, the product of two reads, index roles") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  const ir::Function& f = m.functions.at(0);
  std::string why;
  auto p = poly::product_of_accesses(f.statements[0], &why);
  REQUIRE_MESSAGE(p, why);
  CHECK(p->left->name == "A");
  CHECK(p->right->name == "B");
  CHECK(poly::classify_index(*p->left, *p->right, "m") == poly::IndexRole::M);
  CHECK(poly::classify_index(*p->left, *p->right, "n") == poly::IndexRole::N);
  CHECK(poly::classify_index(*p->left, *p->right, "k") == poly::IndexRole::Shared);
  CHECK(poly::classify_index(*p->left, *p->right, "z") == poly::IndexRole::Broadcast);
  CHECK_FALSE(poly::product_of_accesses(f.statements[1], &why));  // D = f16(max(..)): not a reduction
  CHECK(why == "not a sum reduction");
  CHECK(poly::strip_cast(f.statements[1].rhs.get())->op == ir::Op::Max);
  CHECK(poly::plain_index(ir::AffineExpr::index("m")) == std::optional<std::string>("m"));
  CHECK_FALSE(poly::plain_index(ir::AffineExpr::index("m", 2)));
  CHECK_FALSE(poly::plain_index(ir::AffineExpr::index("m") + ir::AffineExpr::constant_of(1)));
}
