// Every workload of workloads/*.tsl against an independent hand-written C++ loop nest, on the
// small shapes of workloads/small.yaml.
//
// Rule: results that the interpreter computes with f32 accumulation in domain order (reduction
// indices innermost, ascending) and that the reference computes in the same order are compared
// bitwise, as are integer results and pure data movement. Results that involve transcendental
// functions or divisions are compared with a double-precision reference: f16 outputs within 1 f16
// ulp of it (or 2^-14 absolutely, f16's smallest normal, where cancellation leaves a tiny value),
// f32 outputs within a relative 1e-5.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <set>

#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/interpreter.h"
#include "reference_util.h"

using namespace tessel;
using namespace tessel::test;
using interp::Sizes;
using interp::Tensors;

namespace {

constexpr double kF16AbsFloor = 6.103515625e-05;  // 2^-14

std::string workloads_dir() { return std::string(TESSEL_SOURCE_DIR) + "/workloads"; }

const frontend::Suite& small_suite() {
  static const frontend::Suite s = frontend::load_suite(workloads_dir() + "/small.yaml");
  return s;
}

struct Run {
  frontend::Module module;
  const ir::Function* f = nullptr;
  Sizes s;
  Tensors in, out;
  int64_t operator[](const char* n) const { return s.at(n); }
};

// Evaluates small-suite entry `name`; `adjust` may replace random inputs before evaluation.
Run run(const std::string& name, const std::function<void(Run&)>& adjust = {}) {
  Run r;
  const frontend::SuiteEntry* e = nullptr;
  for (const frontend::SuiteEntry& x : small_suite().entries)
    if (x.name == name) e = &x;
  REQUIRE_MESSAGE(e, "no small-suite entry " << name);
  r.module = frontend::load_module(e->file);
  r.f = &frontend::select_function(r.module, e->def);
  r.s = Sizes(e->shape.begin(), e->shape.end());
  r.in = interp::random_inputs(*r.f, r.s, 1);
  if (adjust) adjust(r);
  r.out = interp::evaluate(*r.f, r.s, r.in);
  return r;
}

void set_f32(NpyArray& a, const std::function<float(int64_t)>& value) {
  for (int64_t i = 0; i < a.element_count(); ++i) interp::store_float(a.dtype, a.data.data() + i * dtype_bytes(a.dtype), value(i));
}

float xpad_nhwc(const View& X, int64_t n, int64_t h, int64_t w, int64_t c, int64_t H, int64_t W) {
  return (h >= 1 && h <= H && w >= 1 && w <= W) ? X.f({n, h - 1, w - 1, c}) : 0.0f;
}

}  // namespace

TEST_CASE("the small suite covers every def of every workload file, and every suite is consistent") {
  std::set<std::string> covered;
  for (const frontend::SuiteEntry& e : small_suite().entries) covered.insert(e.def);
  for (const char* file : {"matmul", "conv2d", "relu", "batch_matmul", "cast", "transpose", "one_hot", "add",
                           "batch_norm", "conv_seed", "gemm_fused", "resnet50", "bert", "mobilenet", "gemm_layouts", "activations"}) {
    const frontend::Module m = frontend::load_module(workloads_dir() + "/" + file + ".tsl");
    for (const ir::Function& f : m.functions) {
      CAPTURE(f.name);
      CHECK(covered.count(f.name));
    }
  }
  for (const char* suite : {"small.yaml", "gemm.yaml", "gemm_large.yaml", "conv.yaml", "conv_layouts.yaml", "quasi.yaml"}) {
    CAPTURE(suite);
    frontend::check_suite(frontend::load_suite(workloads_dir() + "/" + suite));
  }
  const frontend::Suite gemm = frontend::load_suite(workloads_dir() + "/gemm.yaml");
  int seed_table = 0;
  for (const auto& e : gemm.entries)
    for (const auto& t : e.tags) seed_table += t == "seed_table";
  CHECK(seed_table == 7);
}

TEST_CASE("workload matmul: f16 x f16 summed in f32 over k ascending, bitwise") {
  for (const char* entry : {"matmul", "matmul_16"}) {
    Run r = run(entry);
    View A{r.in.at("A")}, B{r.in.at("B")};
    Expected C({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) {
        float acc = 0;
        for (int64_t k = 0; k < r["K"]; ++k) acc += A.f({m, k}) * B.f({k, n});
        C.at({m, n}) = acc;
      }
    CHECK(bitwise_difference(C, r.out.at("C"), "C") == "");
  }
}

TEST_CASE("workload conv2d (NCHW, pad 1) and conv2d_stride2: bitwise") {
  {
    Run r = run("conv2d");
    View X{r.in.at("X")}, Wt{r.in.at("Wt")};
    const int64_t N = r["N"], C = r["C"], H = r["H"], W = r["W"], K = r["K"], R = r["R"], S = r["S"];
    Expected Y({N, K, H + 3 - R, W + 3 - S});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t p = 0; p < H + 3 - R; ++p)
          for (int64_t q = 0; q < W + 3 - S; ++q) {
            float acc = 0;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t i = 0; i < R; ++i)
                for (int64_t j = 0; j < S; ++j) {
                  const int64_t h = p + i, w = q + j;
                  const float x = (h >= 1 && h <= H && w >= 1 && w <= W) ? X.f({n, c, h - 1, w - 1}) : 0.0f;
                  acc += x * Wt.f({k, c, i, j});
                }
            Y.at({n, k, p, q}) = acc;
          }
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
  {
    Run r = run("conv2d_stride2");
    View X{r.in.at("X")}, Wt{r.in.at("Wt")};
    const int64_t N = r["N"], C = r["C"], P = r["P"], Q = r["Q"], K = r["K"], R = r["R"], S = r["S"];
    CHECK(r.in.at("X").shape == std::vector<int64_t>{N, C, 2 * P + R - 2, 2 * Q + S - 2});
    Expected Y({N, K, P, Q});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q) {
            float acc = 0;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t i = 0; i < R; ++i)
                for (int64_t j = 0; j < S; ++j) acc += X.f({n, c, 2 * p + i, 2 * q + j}) * Wt.f({k, c, i, j});
            Y.at({n, k, p, q}) = acc;
          }
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
}

TEST_CASE("workload relu, add, transpose: bitwise") {
  {
    Run r = run("relu");
    View X{r.in.at("X")};
    Expected Y(r.in.at("X").shape);
    for (int64_t n = 0; n < r["N"]; ++n)
      for (int64_t c = 0; c < r["C"]; ++c)
        for (int64_t h = 0; h < r["H"]; ++h)
          for (int64_t w = 0; w < r["W"]; ++w) Y.at({n, c, h, w}) = std::max(X.f({n, c, h, w}), 0.0f);
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
  {
    Run r = run("add", [](Run& x) {  // thirds are inexact in f16: the sum must round once
      set_f32(x.in.at("A"), [](int64_t i) { return static_cast<float>(i) / 3.0f - 10.0f; });
    });
    View A{r.in.at("A")}, B{r.in.at("B")};
    Expected Y(r.in.at("A").shape);
    for (int64_t n = 0; n < r["N"]; ++n)
      for (int64_t c = 0; c < r["C"]; ++c)
        for (int64_t h = 0; h < r["H"]; ++h)
          for (int64_t w = 0; w < r["W"]; ++w) Y.at({n, c, h, w}) = r16(A.f({n, c, h, w}) + B.f({n, c, h, w}));
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
  {
    Run r = run("transpose");
    View X{r.in.at("X")};
    Expected Y({r["N"], r["C"], r["H"], r["W"]});
    for (int64_t n = 0; n < r["N"]; ++n)
      for (int64_t c = 0; c < r["C"]; ++c)
        for (int64_t h = 0; h < r["H"]; ++h)
          for (int64_t w = 0; w < r["W"]; ++w) Y.at({n, c, h, w}) = X.f({n, h, w, c});
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
}

TEST_CASE("workload batch_matmul: bitwise") {
  Run r = run("batch_matmul");
  View X{r.in.at("X")}, Y{r.in.at("Y")};
  Expected Z({r["B"], r["M"], r["N"]});
  for (int64_t b = 0; b < r["B"]; ++b)
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) {
        float acc = 0;
        for (int64_t k = 0; k < r["K"]; ++k) acc += X.f({b, m, k}) * Y.f({b, k, n});
        Z.at({b, m, n}) = acc;
      }
  CHECK(bitwise_difference(Z, r.out.at("Z"), "Z") == "");
}

TEST_CASE("workload cast: f32 -> f16 rounds to nearest even, f16 -> f32 exact, f32 -> i32 truncates and saturates") {
  const auto inexact = [](Run& x) {
    set_f32(x.in.at("X"), [](int64_t i) { return static_cast<float>(i) * 0.1234567f - 3.0f; });
  };
  {
    Run r = run("cast_f32_to_f16", inexact);
    View X{r.in.at("X")};
    Expected Y({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) Y.at({m, n}) = r16(X.f({m, n}));
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
    // An exact tie between two halves rounds to the even one.
    CHECK(r16(2049.0f) == 2048.0f);
  }
  {
    Run r = run("cast_f16_to_f32");
    View X{r.in.at("X")};
    Expected Y({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) Y.at({m, n}) = X.f({m, n});
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
  {
    Run r = run("cast_f32_to_i32", [](Run& x) {
      set_f32(x.in.at("X"), [](int64_t i) {
        if (i == 0) return 1e10f;
        if (i == 1) return -1e10f;
        if (i == 2) return NAN;
        return static_cast<float>(i) * 0.1234567f - 3.0f;
      });
    });
    View X{r.in.at("X")};
    Expected Y({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) {
        const float v = X.f({m, n}) * 10.0f;
        Y.at({m, n}) = std::isnan(v) ? 0.0 : v >= 2147483647.0f ? 2147483647.0 : v <= -2147483648.0f ? -2147483648.0 : std::trunc(v);
      }
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
    CHECK(View{r.out.at("Y")}.i({0, 0}) == 2147483647);
    CHECK(View{r.out.at("Y")}.i({0, 1}) == -2147483648LL);
  }
}

TEST_CASE("workload one_hot: bitwise, out-of-range indices give a row of zeros") {
  Run r = run("one_hot");
  View idx{r.in.at("idx")};
  Expected Y({r["N"], r["D"]});
  for (int64_t n = 0; n < r["N"]; ++n)
    for (int64_t d = 0; d < r["D"]; ++d) Y.at({n, d}) = d == idx.i({n}) ? 1.0 : 0.0;
  CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
}

TEST_CASE("workload bn_reduce (bitwise) and bn_update (double reference) chained") {
  Run red = run("bn_reduce");
  View X{red.in.at("X")};
  const int64_t N = red["N"], H = red["H"], W = red["W"], C = red["C"];
  Expected Sum({C}), SumSq({C});
  for (int64_t c = 0; c < C; ++c) {
    float s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          s += X.f({n, h, w, c});
          q += X.f({n, h, w, c}) * X.f({n, h, w, c});
        }
    Sum.at({c}) = s;
    SumSq.at({c}) = q;
  }
  CHECK(bitwise_difference(Sum, red.out.at("Sum"), "Sum") == "");
  CHECK(bitwise_difference(SumSq, red.out.at("SumSq"), "SumSq") == "");

  Run up = run("bn_update", [&](Run& x) {
    x.in.at("X") = red.in.at("X");
    x.in.at("Sum") = red.out.at("Sum");
    x.in.at("SumSq") = red.out.at("SumSq");
  });
  View g{up.in.at("gamma")}, b{up.in.at("beta")}, S{up.in.at("Sum")}, Q{up.in.at("SumSq")};
  const double count = static_cast<double>(N * H * W);
  Expected Y({N, H, W, C}), Mean({C}), Var({C});
  for (int64_t c = 0; c < C; ++c) {
    const double mean = S.f({c}) / count, var = Q.f({c}) / count - mean * mean;
    Mean.at({c}) = mean;
    Var.at({c}) = var;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          Y.at({n, h, w, c}) = (X.f({n, h, w, c}) - mean) * g.f({c}) / std::sqrt(var + 1e-5) + b.f({c});
  }
  CHECK(relative_difference(Mean, up.out.at("Mean"), "Mean", 1e-5, 1e-6) == "");
  CHECK(relative_difference(Var, up.out.at("Var"), "Var", 1e-5, 1e-6) == "");
  CHECK(f16_difference(Y, up.out.at("Y"), "Y", 1, kF16AbsFloor) == "");
}

namespace {

Expected conv_nhwc_reference(const Run& r, const View& X, const View& Wt, int64_t K) {
  const int64_t N = r["N"], H = r["H"], W = r["W"], C = r["C"], R = r["R"], S = r["S"];
  Expected Y({N, H, W, K});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < H; ++p)
      for (int64_t q = 0; q < W; ++q)
        for (int64_t k = 0; k < K; ++k) {
          float acc = 0;
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < S; ++j)
              for (int64_t c = 0; c < C; ++c) acc += xpad_nhwc(X, n, p + i, q + j, c, H, W) * Wt.f({i, j, c, k});
          Y.at({n, p, q, k}) = acc;
        }
  return Y;
}

}  // namespace

TEST_CASE("workload conv2d_nhwc (seed convolution, pad 1): bitwise") {
  Run r = run("conv2d_nhwc");
  CHECK(bitwise_difference(conv_nhwc_reference(r, View{r.in.at("X")}, View{r.in.at("Wt")}, r["K"]), r.out.at("Y"), "Y") ==
        "");
}

TEST_CASE("workload conv2d_blocked: bitwise, and equal to conv2d_nhwc on the relaid-out data") {
  Run r = run("conv2d_blocked");
  View X{r.in.at("X")}, Wt{r.in.at("Wt")};
  const int64_t NB = r["NB"], H = r["H"], W = r["W"], CB = r["CB"], KB = r["KB"], R = r["R"], S = r["S"];
  Expected Y({NB, H, W, KB, 16, 16});
  for (int64_t nb = 0; nb < NB; ++nb)
    for (int64_t p = 0; p < H; ++p)
      for (int64_t q = 0; q < W; ++q)
        for (int64_t kb = 0; kb < KB; ++kb)
          for (int64_t ni = 0; ni < 16; ++ni)
            for (int64_t ki = 0; ki < 16; ++ki) {
              float acc = 0;
              for (int64_t i = 0; i < R; ++i)
                for (int64_t j = 0; j < S; ++j)
                  for (int64_t cb = 0; cb < CB; ++cb)
                    for (int64_t ci = 0; ci < 16; ++ci) {
                      const int64_t h = p + i, w = q + j;
                      const float x = (h >= 1 && h <= H && w >= 1 && w <= W) ? X.f({nb, h - 1, w - 1, cb, ni, ci}) : 0.0f;
                      acc += x * Wt.f({i, j, cb, kb, ci, ki});
                    }
              Y.at({nb, p, q, kb, ni, ki}) = acc;
            }
  CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");

  // The same convolution in NHWC: c = 16 cb + ci is summed in the same order, so results are equal.
  const frontend::Module m = frontend::load_module(workloads_dir() + "/conv_seed.tsl");
  const ir::Function& nhwc = frontend::select_function(m, "conv2d_nhwc");
  const Sizes s{{"N", NB * 16}, {"H", H}, {"W", W}, {"C", CB * 16}, {"K", KB * 16}, {"R", R}, {"S", S}};
  Tensors in = interp::random_inputs(nhwc, s, 0);
  for (int64_t n = 0; n < NB * 16; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < CB * 16; ++c)
          interp::store_float(DType::F16, in.at("X").data.data() + 2 * View{in.at("X")}.offset({n, h, w, c}),
                              X.f({n / 16, h, w, c / 16, n % 16, c % 16}));
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < S; ++j)
      for (int64_t c = 0; c < CB * 16; ++c)
        for (int64_t k = 0; k < KB * 16; ++k)
          interp::store_float(DType::F16, in.at("Wt").data.data() + 2 * View{in.at("Wt")}.offset({i, j, c, k}),
                              Wt.f({i, j, c / 16, k / 16, c % 16, k % 16}));
  const Tensors out = interp::evaluate(nhwc, s, in);
  View Yn{out.at("Y")}, Yb{r.out.at("Y")};
  int64_t differ = 0;
  for (int64_t n = 0; n < NB * 16; ++n)
    for (int64_t p = 0; p < H; ++p)
      for (int64_t q = 0; q < W; ++q)
        for (int64_t k = 0; k < KB * 16; ++k)
          differ += Yn.f({n, p, q, k}) != Yb.f({n / 16, p, q, k / 16, n % 16, k % 16});
  CHECK(differ == 0);
}

TEST_CASE("workload matmul_bias_relu: bitwise (f32 sum, then one rounding to f16)") {
  Run r = run("matmul_bias_relu");
  View A{r.in.at("A")}, B{r.in.at("B")}, bias{r.in.at("bias")};
  Expected D({r["M"], r["N"]});
  for (int64_t m = 0; m < r["M"]; ++m)
    for (int64_t n = 0; n < r["N"]; ++n) {
      float acc = 0;
      for (int64_t k = 0; k < r["K"]; ++k) acc += A.f({m, k}) * B.f({k, n});
      D.at({m, n}) = r16(std::max(acc + bias.f({n}), 0.0f));
    }
  CHECK(bitwise_difference(D, r.out.at("D"), "D") == "");
}

TEST_CASE("workload matmul_i8: i8 x i8 summed in i32, bitwise") {
  Run r = run("matmul_i8", [](Run& x) {  // the full i8 range
    for (const char* n : {"A", "B"})
      for (int64_t i = 0; i < x.in.at(n).element_count(); ++i) x.in.at(n).data[i] = static_cast<uint8_t>(i * 37 + 101);
  });
  View A{r.in.at("A")}, B{r.in.at("B")};
  Expected C({r["M"], r["N"]});
  for (int64_t m = 0; m < r["M"]; ++m)
    for (int64_t n = 0; n < r["N"]; ++n) {
      int64_t acc = 0;
      for (int64_t k = 0; k < r["K"]; ++k) acc += A.i({m, k}) * B.i({k, n});
      C.at({m, n}) = static_cast<double>(static_cast<int32_t>(acc));
    }
  CHECK(bitwise_difference(C, r.out.at("C"), "C") == "");
}

TEST_CASE("workload conv_bn_relu (ResNet-50): f32 convolution bitwise, epilogue within 1 f16 ulp") {
  Run r = run("conv_bn_relu", [](Run& x) {  // a variance must be positive
    set_f32(x.in.at("var"), [](int64_t i) { return 0.25f + static_cast<float>(i % 5) * 0.5f; });
  });
  View X{r.in.at("X")}, Wt{r.in.at("Wt")}, mean{r.in.at("mean")}, var{r.in.at("var")}, g{r.in.at("gamma")},
      b{r.in.at("beta")};
  Expected acc = conv_nhwc_reference(r, X, Wt, r["K"]);
  Expected Y(acc.shape);
  for (size_t i = 0; i < acc.values.size(); ++i) {
    const int64_t k = static_cast<int64_t>(i) % r["K"];
    Y.values[i] = std::max((acc.values[i] - mean.f({k})) * (g.f({k}) / std::sqrt(var.f({k}) + 1e-5)) + b.f({k}), 0.0);
  }
  CHECK(f16_difference(Y, r.out.at("Y"), "Y", 1, kF16AbsFloor) == "");
}

TEST_CASE("workload matmul_bias_gelu (BERT): within 1 f16 ulp of a double-precision GELU") {
  Run r = run("matmul_bias_gelu");
  View A{r.in.at("A")}, B{r.in.at("B")}, bias{r.in.at("bias")};
  Expected Y({r["M"], r["N"]});
  for (int64_t m = 0; m < r["M"]; ++m)
    for (int64_t n = 0; n < r["N"]; ++n) {
      float acc = 0;
      for (int64_t k = 0; k < r["K"]; ++k) acc += A.f({m, k}) * B.f({k, n});
      const double z = static_cast<double>(acc) + bias.f({n});
      Y.at({m, n}) = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    }
  CHECK(f16_difference(Y, r.out.at("Y"), "Y", 1, kF16AbsFloor) == "");
}

TEST_CASE("workload softmax and layer_norm (BERT): within 1 f16 ulp of double precision") {
  {
    Run r = run("softmax");
    View X{r.in.at("X")};
    Expected Y({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m) {
      double mx = -INFINITY, den = 0;
      for (int64_t n = 0; n < r["N"]; ++n) mx = std::max(mx, static_cast<double>(X.f({m, n})));
      for (int64_t n = 0; n < r["N"]; ++n) den += std::exp(X.f({m, n}) - mx);
      for (int64_t n = 0; n < r["N"]; ++n) Y.at({m, n}) = std::exp(X.f({m, n}) - mx) / den;
    }
    CHECK(f16_difference(Y, r.out.at("Y"), "Y", 1, kF16AbsFloor) == "");
  }
  {
    Run r = run("layer_norm");
    View X{r.in.at("X")}, g{r.in.at("gamma")}, b{r.in.at("beta")};
    const int64_t N = r["N"];
    Expected Y({r["M"], N});
    for (int64_t m = 0; m < r["M"]; ++m) {
      double mean = 0, var = 0;
      for (int64_t n = 0; n < N; ++n) mean += X.f({m, n});
      mean /= static_cast<double>(N);
      for (int64_t n = 0; n < N; ++n) var += (X.f({m, n}) - mean) * (X.f({m, n}) - mean);
      var /= static_cast<double>(N);
      for (int64_t n = 0; n < N; ++n) Y.at({m, n}) = (X.f({m, n}) - mean) / std::sqrt(var + 1e-5) * g.f({n}) + b.f({n});
    }
    CHECK(f16_difference(Y, r.out.at("Y"), "Y", 1, kF16AbsFloor) == "");
  }
}

TEST_CASE("workload depthwise_relu6 (MobileNet): bitwise") {
  Run r = run("depthwise_relu6", [](Run& x) {  // large enough for relu6 to clip
    set_f32(x.in.at("Wt"), [](int64_t i) { return static_cast<float>(i % 7) - 2.0f; });
  });
  View X{r.in.at("X")}, Wt{r.in.at("Wt")};
  const int64_t N = r["N"], H = r["H"], W = r["W"], C = r["C"], R = r["R"], S = r["S"];
  Expected Y({N, H, W, C});
  int clipped = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < H; ++p)
      for (int64_t q = 0; q < W; ++q)
        for (int64_t c = 0; c < C; ++c) {
          float acc = 0;
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < S; ++j) acc += xpad_nhwc(X, n, p + i, q + j, c, H, W) * Wt.f({i, j, c});
          clipped += acc > 6;
          Y.at({n, p, q, c}) = r16(std::min(std::max(acc, 0.0f), 6.0f));
        }
  CHECK(clipped > 0);
  CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
}

// gemm_layouts.tsl: the same sum over k ascending, each operand read where its layout stores it.
TEST_CASE("workload gemm_layouts: every operand layout and batch position, bitwise, epilogues within 1 f16 ulp") {
  for (const char* name : {"matmul_nn", "matmul_tn", "matmul_nt", "matmul_tt"}) {
    CAPTURE(name);
    const bool at = name[7] == 't', bt = name[8] == 't';
    Run r = run(name);
    View A{r.in.at("A")}, B{r.in.at("B")};
    Expected C({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) {
        float acc = 0;
        for (int64_t k = 0; k < r["K"]; ++k) acc += (at ? A.f({k, m}) : A.f({m, k})) * (bt ? B.f({n, k}) : B.f({k, n}));
        C.at({m, n}) = acc;
      }
    CHECK(bitwise_difference(C, r.out.at("C"), "C") == "");
  }
  for (const char* name : {"matmul_i8_nn", "matmul_i8_tn", "matmul_i8_nt", "matmul_i8_tt"}) {
    CAPTURE(name);
    const bool at = name[10] == 't', bt = name[11] == 't';
    Run r = run(name);
    View A{r.in.at("A")}, B{r.in.at("B")};
    Expected C({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) {
        int64_t acc = 0;
        for (int64_t k = 0; k < r["K"]; ++k) acc += (at ? A.i({k, m}) : A.i({m, k})) * (bt ? B.i({n, k}) : B.i({k, n}));
        C.at({m, n}) = static_cast<double>(static_cast<int32_t>(acc));
      }
    CHECK(bitwise_difference(C, r.out.at("C"), "C") == "");
  }
  {
    Run r = run("batch_matmul_mbk");
    View X{r.in.at("X")}, Y{r.in.at("Y")};
    Expected Z({r["B"], r["M"], r["N"]});
    for (int64_t b = 0; b < r["B"]; ++b)
      for (int64_t m = 0; m < r["M"]; ++m)
        for (int64_t n = 0; n < r["N"]; ++n) {
          float acc = 0;
          for (int64_t k = 0; k < r["K"]; ++k) acc += X.f({m, b, k}) * Y.f({b, k, n});
          Z.at({b, m, n}) = acc;
        }
    CHECK(bitwise_difference(Z, r.out.at("Z"), "Z") == "");
  }
  {
    Run r = run("matmul_ksplit");  // K split around M in A: k1 outer, k2 inner
    View A{r.in.at("A")}, B{r.in.at("B")};
    Expected C({r["M"], r["N"]});
    for (int64_t m = 0; m < r["M"]; ++m)
      for (int64_t n = 0; n < r["N"]; ++n) {
        float acc = 0;
        for (int64_t k1 = 0; k1 < r["K1"]; ++k1)
          for (int64_t k2 = 0; k2 < r["K2"]; ++k2) acc += A.f({k1, m, k2}) * B.f({k1, k2, n});
        C.at({m, n}) = acc;
      }
    CHECK(bitwise_difference(C, r.out.at("C"), "C") == "");
  }
  {
    Run r = run("batch_matmul_out_mbn");
    View X{r.in.at("X")}, Y{r.in.at("Y")};
    Expected Z({r["M"], r["B"], r["N"]});
    for (int64_t b = 0; b < r["B"]; ++b)
      for (int64_t m = 0; m < r["M"]; ++m)
        for (int64_t n = 0; n < r["N"]; ++n) {
          float acc = 0;
          for (int64_t k = 0; k < r["K"]; ++k) acc += X.f({b, m, k}) * Y.f({b, n, k});
          Z.at({m, b, n}) = acc;
        }
    CHECK(bitwise_difference(Z, r.out.at("Z"), "Z") == "");
  }
  {
    Run r = run("batch_matmul_scale_bias");
    View X{r.in.at("X")}, Y{r.in.at("Y")}, scale{r.in.at("scale")}, bias{r.in.at("bias")};
    Expected Z({r["B"], r["M"], r["N"]});
    for (int64_t b = 0; b < r["B"]; ++b)
      for (int64_t m = 0; m < r["M"]; ++m)
        for (int64_t n = 0; n < r["N"]; ++n) {
          float acc = 0;
          for (int64_t k = 0; k < r["K"]; ++k) acc += X.f({b, m, k}) * Y.f({b, k, n});
          const float scaled = acc * scale.f({m});  // rounded to f32, then the bias added
          Z.at({b, m, n}) = scaled + bias.f({b, n});
        }
    CHECK(bitwise_difference(Z, r.out.at("Z"), "Z") == "");
  }
  {
    Run r = run("batch_matmul_bias_gelu");
    View X{r.in.at("X")}, Y{r.in.at("Y")}, bias{r.in.at("bias")};
    Expected Z({r["B"], r["M"], r["N"]});
    for (int64_t b = 0; b < r["B"]; ++b)
      for (int64_t m = 0; m < r["M"]; ++m)
        for (int64_t n = 0; n < r["N"]; ++n) {
          float acc = 0;
          for (int64_t k = 0; k < r["K"]; ++k) acc += X.f({b, m, k}) * Y.f({b, k, n});
          const double z = static_cast<double>(acc) + bias.f({n});
          Z.at({b, m, n}) = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
        }
    CHECK(f16_difference(Z, r.out.at("Z"), "Z", 1, kF16AbsFloor) == "");
  }
}
