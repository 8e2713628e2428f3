// Reference interpreter semantics (compiler/README.md "Interpreter semantics"): f16 rounding at
// every operation and store, accumulation in the output dtype, summation order, integer
// wrap-around, cast rules, += into existing values, bounds and input checks, determinism.
#include <doctest/doctest.h>

#include <cmath>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/compare.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/scalar.h"
#include "isa/base/error.h"

using namespace tessel;
using interp::Sizes;
using interp::Tensors;

namespace {

ir::Function fn(const std::string& text) { return frontend::parse_module(text, "t.tsl").functions.at(0); }

NpyArray array(DType t, std::vector<int64_t> shape, const std::vector<double>& values) {
  NpyArray a;
  a.dtype = t;
  a.shape = std::move(shape);
  a.data.assign(values.size() * dtype_bytes(t), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = a.data.data() + i * dtype_bytes(t);
    if (dtype_is_float(t)) interp::store_float(t, p, values[i]);
    else interp::store_int(t, p, static_cast<int64_t>(values[i]));
  }
  return a;
}

std::vector<double> values(const NpyArray& a) {
  std::vector<double> v;
  for (int64_t i = 0; i < a.element_count(); ++i) v.push_back(interp::element_as_double(a, i));
  return v;
}

std::vector<double> eval1(const std::string& text, const Sizes& s, const Tensors& in, const std::string& out) {
  return values(interp::evaluate(fn(text), s, in).at(out));
}

}  // namespace

TEST_CASE("f16 arithmetic rounds every operation to f16 (round to nearest even)") {
  // 2048 + 1 is a tie between 2048 and 2050 in f16: even wins. (2048 + 1) + 1 stays 2048.
  const auto y = eval1("def f(f16[N] A, f16[N] B) -> (f16[N] Y) {\n Y(i) = A(i) + B(i) + B(i)\n}\n", {{"N", 2}},
                       {{"A", array(DType::F16, {2}, {2048, 2048})}, {"B", array(DType::F16, {2}, {1, 3})}}, "Y");
  CHECK(y == std::vector<double>{2048, 2056});
}

TEST_CASE("a reduction accumulates in the output dtype: f16 sums round after every step, f32 sums do not") {
  const Tensors in{{"A", array(DType::F16, {5}, {2048, 1, 1, 1, 1})}};
  CHECK(eval1("def f(f16[K] A) -> (f16[] Y) {\n Y() +=! A(k)\n}\n", {{"K", 5}}, in, "Y") == std::vector<double>{2048});
  CHECK(eval1("def f(f16[K] A) -> (f32[] Y) {\n Y() +=! f32(A(k))\n}\n", {{"K", 5}}, in, "Y") ==
        std::vector<double>{2052});
}

TEST_CASE("summation order: reduction indices innermost, ascending, in order of first appearance") {
  // In f32, 1e8 + 1 == 1e8 (the spacing there is 8): the result tells the order.
  const Tensors in{{"A", array(DType::F32, {5}, {1, 1, 1, 1e8, -1e8})}};
  CHECK(eval1("def f(f32[K] A) -> (f32[] Y) {\n Y() +=! A(k)\n}\n", {{"K", 5}}, in, "Y") == std::vector<double>{0});
  CHECK(eval1("def f(f32[K] A) -> (f32[] Y) {\n Y() +=! A(4 - k) where k in 0:5\n}\n", {{"K", 5}}, in, "Y") ==
        std::vector<double>{3});
  // Two reduction indices: the one that appears first on the right is the outer loop.
  const Tensors in2{{"A", array(DType::F32, {2, 2}, {1e8, -1e8, 1, 1})}};
  // i outer: 1e8, -1e8, 1, 1.
  CHECK(eval1("def f(f32[I, J] A) -> (f32[] Y) {\n Y() +=! A(i, j)\n}\n", {{"I", 2}, {"J", 2}}, in2, "Y") ==
        std::vector<double>{2});
  // j appears first (in B(j)): j outer, i inner: A(0,0), A(1,0), A(0,1), A(1,1) = 1e8, 1, -1e8, 1.
  CHECK(eval1("def f(f32[I, J] A, f32[J] B) -> (f32[] Y) {\n Y() +=! B(j) * A(i, j)\n}\n", {{"I", 2}, {"J", 2}},
              {{"A", in2.at("A")}, {"B", array(DType::F32, {2}, {1, 1})}}, "Y") == std::vector<double>{1});
}

TEST_CASE("integers wrap around in two's complement, division and modulo by zero give 0") {
  const std::string prog = "def f(i8[N] A, i8[N] B, i32[N] C) -> (i8[N] S, i32[N] P, i32[N] D, i32[N] R) {\n"
                           "  S(i) = A(i) + B(i)\n  P(i) = C(i) * C(i)\n  D(i) = C(i) / (C(i) - 5)\n"
                           "  R(i) = C(i) % (C(i) - 5)\n}\n";
  const Tensors in{{"A", array(DType::I8, {3}, {100, -128, 5})},
                   {"B", array(DType::I8, {3}, {100, -1, 7})},
                   {"C", array(DType::I32, {3}, {65536, 5, -7})}};
  const Tensors out = interp::evaluate(fn(prog), {{"N", 3}}, in);
  CHECK(values(out.at("S")) == std::vector<double>{-56, 127, 12});
  CHECK(values(out.at("P")) == std::vector<double>{0, 25, 49});  // 2^32 wraps to 0
  CHECK(values(out.at("D")) == std::vector<double>{1, 0, 0});    // truncation toward zero; x / 0 = 0
  CHECK(values(out.at("R")) == std::vector<double>{5, 0, -7});
}

TEST_CASE("i8 GEMM sums in i32 and wraps on overflow") {
  const std::string prog = "def f(i8[K] A) -> (i32[] Y, i8[] Z) {\n Y() +=! i32(A(k)) * i32(A(k))\n Z() +=! A(k)\n}\n";
  const Tensors out = interp::evaluate(fn(prog), {{"K", 3}}, {{"A", array(DType::I8, {3}, {-128, -128, 100})}});
  CHECK(values(out.at("Y")) == std::vector<double>{16384 + 16384 + 10000});
  CHECK(values(out.at("Z")) == std::vector<double>{-156 + 256});
}

TEST_CASE("casts: float to integer truncates and saturates, integer to integer wraps, to f16 rounds") {
  const std::string prog = "def f(f32[N] A, i32[N] I) -> (i8[N] X, u8[N] U, i8[N] W, f16[N] H) {\n"
                           "  X(i) = i8(A(i))\n  U(i) = u8(A(i))\n  W(i) = i8(I(i))\n  H(i) = f16(A(i))\n}\n";
  const Tensors out = interp::evaluate(
      fn(prog), {{"N", 4}},
      {{"A", array(DType::F32, {4}, {-1.9, 300, NAN, 0.1})}, {"I", array(DType::I32, {4}, {300, -129, 127, 256})}});
  CHECK(values(out.at("X")) == std::vector<double>{-1, 127, 0, 0});
  CHECK(values(out.at("U")) == std::vector<double>{0, 255, 0, 0});
  CHECK(values(out.at("W")) == std::vector<double>{44, 127, 127, 0});
  CHECK(values(out.at("H"))[3] == static_cast<double>(round_to_f16(0.1f)));
}

TEST_CASE("+= accumulates into the values of an earlier statement, max=! / min=! start from -inf / +inf") {
  const std::string prog = "def f(f32[M, K] A) -> (f32[M] S, f32[M] X, i32[M] N) {\n"
                           "  S(m) +=! A(m, k)\n  S(m) += A(m, k) * 10\n  X(m) max=! A(m, k)\n  N(m) min=! i32(A(m, k))\n}\n";
  const Tensors out = interp::evaluate(fn(prog), {{"M", 2}, {"K", 3}},
                                       {{"A", array(DType::F32, {2, 3}, {-5, -7, -6, 1, 2, 3})}});
  CHECK(values(out.at("S")) == std::vector<double>{-198, 66});
  CHECK(values(out.at("X")) == std::vector<double>{-5, 3});
  CHECK(values(out.at("N")) == std::vector<double>{-7, 1});
}

TEST_CASE("*=! multiplies from 1 in domain order, *= multiplies into the existing value") {
  const std::string prog = "def f(f32[M, K] A) -> (f32[M] P, f32[M] Q, f32[] R) {\n"
                           "  P(m) *=! A(m, k)\n  Q(m) = A(m, 0)\n  Q(m) *= A(m, k)\n  R() *=! A(m, k)\n}\n";
  const Tensors out = interp::evaluate(fn(prog), {{"M", 2}, {"K", 3}},
                                       {{"A", array(DType::F32, {2, 3}, {-2, 0.5, 3, 1.5, -1, 4})}});
  CHECK(values(out.at("P")) == std::vector<double>{-3, -6});
  CHECK(values(out.at("Q")) == std::vector<double>{6, -9});
  CHECK(values(out.at("R")) == std::vector<double>{18});
  // an empty reduced range leaves the identity
  CHECK(eval1("def f(f32[N] A) -> (f32[] Y) {\n Y() *=! A(i)\n}\n", {{"N", 0}}, {{"A", array(DType::F32, {0}, {})}}, "Y") ==
        std::vector<double>{1});
}

TEST_CASE("integer products wrap after every step, f16 products round after every step") {
  // i8: 5 * 7 = 35, * 11 = 385 -> -127 (385 - 512), * 3 = -381 -> -125 (-381 + 256)
  CHECK(eval1("def f(i8[N] A) -> (i8[] Y) {\n Y() *=! A(i)\n}\n", {{"N", 4}}, {{"A", array(DType::I8, {4}, {5, 7, 11, 3})}}, "Y") ==
        std::vector<double>{-125});
  // i32: 65536 * 65536 wraps to 0, so anything after stays 0
  CHECK(eval1("def f(i32[N] A) -> (i32[] Y) {\n Y() *=! A(i)\n}\n", {{"N", 3}},
              {{"A", array(DType::I32, {3}, {65536, 65536, 3})}}, "Y") == std::vector<double>{0});
  // f16: (1 + 2^-10) * (1 + 2^-10) = 1 + 2^-9 + 2^-20 rounds to 1 + 2^-9 at each step; then * 2048
  const double e = std::ldexp(1.0, -10);
  const auto y = eval1("def f(f16[N] A) -> (f16[] Y) {\n Y() *=! A(i)\n}\n", {{"N", 3}},
                       {{"A", array(DType::F16, {3}, {1 + e, 1 + e, 2048})}}, "Y");
  CHECK(y == std::vector<double>{(1 + 2 * e) * 2048});
}

TEST_CASE("select evaluates only the chosen operand, so padding reads stay in bounds") {
  const std::string prog = "def f(f32[N] A) -> (f32[N] Y) {\n"
                           "  P(h) = select(h >= 1 && h <= N, A(h - 1), 0) where h in 0:N+2\n"
                           "  Y(p) +=! P(p + r) where r in 0:3\n}\n";
  CHECK(eval1(prog, {{"N", 4}}, {{"A", array(DType::F32, {4}, {1, 2, 3, 4})}}, "Y") ==
        std::vector<double>{3, 6, 9, 7});
}

TEST_CASE("math functions compute in f32 and round once to the result type") {
  const auto y = eval1("def f(f16[N] A) -> (f16[N] Y) {\n Y(i) = exp(A(i)) + sqrt(abs(A(i)))\n}\n", {{"N", 1}},
                       {{"A", array(DType::F16, {1}, {-0.5})}}, "Y");
  const float e = round_to_f16(std::exp(-0.5f)), s = round_to_f16(std::sqrt(0.5f));
  CHECK(y[0] == static_cast<double>(round_to_f16(e + s)));
}

TEST_CASE("size parameters as values and index values") {
  const auto y = eval1("def f(f32[N] A) -> (f32[N] Y) {\n Y(i) = A(i) / f32(N) + f32(i) * 0.5\n}\n", {{"N", 4}},
                       {{"A", array(DType::F32, {4}, {4, 8, 12, 16})}}, "Y");
  CHECK(y == std::vector<double>{1, 2.5, 4, 5.5});
}

TEST_CASE("evaluation errors: missing size, missing or unknown input, wrong dtype or shape, out of bounds") {
  const ir::Function f = fn("def f(f32[M] A) -> (f32[M] Y) {\n Y(m) = A(m + 1)\n}\n");
  const Tensors ok{{"A", array(DType::F32, {4}, {1, 2, 3, 4})}};
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {}, ok), doctest::Contains("size parameter 'M' of 'f' has no value"), UserError);
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {{"M", 4}}, {}), doctest::Contains("missing input 'A' (f32[4])"), UserError);
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {{"M", 4}}, {{"A", ok.at("A")}, {"B", ok.at("A")}}),
                       doctest::Contains("'B' is not an input of 'f'"), UserError);
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {{"M", 4}}, {{"A", array(DType::F16, {4}, {1, 2, 3, 4})}}),
                       doctest::Contains("input 'A' has dtype f16 but 'f' declares f32"), UserError);
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {{"M", 3}}, ok),
                       doctest::Contains("input 'A' has shape [4] but 'f' expects [3]"), UserError);
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {{"M", 4}}, ok),
                       doctest::Contains("t.tsl:2:2: S0 reads A(m + 1) outside the shape [4] of 'A'"), UserError);
  CHECK_THROWS_WITH_AS(interp::tensor_shape(f.tensors[0], {}), doctest::Contains("size parameter 'M'"), UserError);
  CHECK(interp::tensor_shape(f.tensors[0], {{"M", 7}}) == std::vector<int64_t>{7});
}

TEST_CASE("an empty domain writes nothing and reduces to the identity") {
  const auto y = eval1("def f(f32[M, K] A) -> (f32[M] Y) {\n Y(m) +=! A(m, k)\n}\n", {{"M", 2}, {"K", 0}},
                       {{"A", array(DType::F32, {2, 0}, {})}}, "Y");
  CHECK(y == std::vector<double>{0, 0});
}

TEST_CASE("random inputs are deterministic, f16-exact multiples of 1/64 in [-2, 2], small integers") {
  const ir::Function f = fn("def f(f16[N] A, f32[N] B, i8[N] C, u8[N] D) -> (f32[N] Y) {\n Y(i) = B(i)\n}\n");
  const Tensors a = interp::random_inputs(f, {{"N", 1000}}, 5), b = interp::random_inputs(f, {{"N", 1000}}, 5),
                c = interp::random_inputs(f, {{"N", 1000}}, 6);
  CHECK(a.at("A").data == b.at("A").data);
  CHECK(a.at("A").data != c.at("A").data);
  for (const char* n : {"A", "B"})
    for (double v : values(a.at(n))) {
      CHECK(std::fabs(v) <= 2);
      CHECK(v * 64 == std::round(v * 64));
    }
  for (double v : values(a.at("C"))) CHECK(std::fabs(v) <= 8);
  for (double v : values(a.at("D"))) CHECK((v >= 0 && v <= 8));
}

TEST_CASE("results do not depend on the number of threads") {
  const frontend::Module m = frontend::load_module(std::string(TESSEL_SOURCE_DIR) + "/workloads/conv_seed.tsl");
  const ir::Function& f = frontend::select_function(m, "conv2d_nhwc");
  const Sizes s{{"N", 3}, {"H", 6}, {"W", 5}, {"C", 8}, {"K", 16}, {"R", 3}, {"S", 3}};
  const Tensors in = interp::random_inputs(f, s, 2);
  interp::set_thread_count(1);
  const Tensors one = interp::evaluate(f, s, in);
  interp::set_thread_count(4);
  const Tensors four = interp::evaluate(f, s, in);
  interp::set_thread_count(0);
  CHECK(one.at("Y").data == four.at("Y").data);
}

TEST_CASE("compare: tolerances, NaN and infinities, the first mismatch named by position") {
  const NpyArray e = array(DType::F32, {2, 3}, {1, 2, 3, NAN, INFINITY, 6});
  CHECK(interp::compare(e, e, 0, 0).ok);
  const NpyArray a = array(DType::F32, {2, 3}, {1, 2.5, 3, NAN, INFINITY, 6.001});
  const interp::Comparison c = interp::compare(e, a, 0, 0, "C");
  CHECK_FALSE(c.ok);
  CHECK(c.mismatches == 2);
  CHECK(c.first_mismatch == "C[0, 1]: expected 2, got 2.5");
  CHECK(c.max_abs_err == doctest::Approx(0.5));
  CHECK(interp::compare(e, a, 0.6, 0).ok);
  CHECK(interp::compare(e, a, 0, 0.25).ok);
  CHECK_FALSE(interp::compare(e, array(DType::F32, {2, 3}, {1, 2, 3, 4, INFINITY, 6}), 1, 1).ok);
  CHECK_FALSE(interp::compare(e, array(DType::F32, {2, 3}, {1, 2, 3, NAN, -INFINITY, 6}), 1, 1).ok);
  const interp::Comparison shape = interp::compare(e, array(DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6}), 1, 1, "C");
  CHECK_FALSE(shape.ok);
  CHECK(shape.first_mismatch == "C: expected shape [2, 3], got [3, 2]");
  // Different dtypes compare by value.
  CHECK(interp::compare(array(DType::F16, {2}, {1, 2}), array(DType::I32, {2}, {1, 2}), 0, 0).ok);
}

TEST_CASE("quasi-affine indices: floor division and modulo by constants round toward minus infinity") {
  // A(i) = i, so Q(m) = floor((m - 5) / 2) + 3 and R(m) = (m - 5) mod 4, for negative numerators too.
  const ir::Function f = fn(
      "def f(i32[D] A) -> (i32[M] Q, i32[M] R) {\n"
      "  Q(m) = A((m - 5) / 2 + 3)\n"
      "  R(m) = A((m - 5) % 4)\n"
      "}\n");
  const Tensors out = interp::evaluate(f, {{"D", 6}, {"M", 10}}, {{"A", array(DType::I32, {6}, {0, 1, 2, 3, 4, 5})}});
  CHECK(values(out.at("Q")) == std::vector<double>{0, 1, 1, 2, 2, 3, 3, 4, 4, 5});
  CHECK(values(out.at("R")) == std::vector<double>{3, 0, 1, 2, 3, 0, 1, 2, 3, 0});
}

TEST_CASE("quasi-affine range bounds and inferred sizes, and a division index outside the shape is an error") {
  // Y(p) = A(2p + 1) over p in 0:(M - 1) / 2; P is inferred.
  const ir::Function f = fn("def f(f32[M] A) -> (f32[P] Y) {\n  Y(p) = A(p * 2 + 1)\n      where p in 0:(M - 1) / 2\n}\n");
  CHECK(eval1("def f(f32[M] A) -> (f32[P] Y) {\n  Y(p) = A(p * 2 + 1)\n      where p in 0:(M - 1) / 2\n}\n",
              {{"M", 6}}, {{"A", array(DType::F32, {6}, {10, 11, 12, 13, 14, 15})}}, "Y") == std::vector<double>{11, 13});
  CHECK_THROWS_WITH_AS(interp::evaluate(f, {{"M", 6}, {"P", 3}}, {{"A", array(DType::F32, {6}, {0, 0, 0, 0, 0, 0})}}),
                       doctest::Contains("size parameter 'P' is given as 3 but is inferred as 2"), UserError);
  const ir::Function g = fn("def f(f32[M] A) -> (f32[M] Y) {\n Y(m) = A(m / 2 + 3)\n}\n");
  CHECK_THROWS_WITH_AS(interp::evaluate(g, {{"M", 4}}, {{"A", array(DType::F32, {4}, {1, 2, 3, 4})}}),
                       doctest::Contains("t.tsl:2:2: S0 reads A(floor((m)/2) + 3) outside the shape [4] of 'A'"),
                       UserError);
}
