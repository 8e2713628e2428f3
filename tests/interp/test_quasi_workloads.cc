// The quasi-affine workloads of workloads/quasi.tsl against hand-written C++ loop nests, on the
// shapes of workloads/quasi.yaml (inferred output sizes left out): bitwise, as in
// test_workloads.cc (f32 sums in domain order; max and data movement exact).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/interp/interpreter.h"
#include "reference_util.h"

using namespace tessel;
using namespace tessel::test;

namespace {

struct Run {
  frontend::Module module;
  interp::Sizes s;
  interp::Tensors in, out;
  int64_t operator[](const char* n) const { return s.at(n); }
};

Run run(const std::string& name) {
  static const frontend::Suite suite = frontend::load_suite(std::string(TESSEL_SOURCE_DIR) + "/workloads/quasi.yaml");
  const frontend::SuiteEntry* e = nullptr;
  for (const frontend::SuiteEntry& x : suite.entries)
    if (x.name == name) e = &x;
  REQUIRE_MESSAGE(e, "no quasi-suite entry " << name);
  Run r;
  r.module = frontend::load_module(e->file);
  const ir::Function& f = frontend::select_function(r.module, e->def);
  r.s = ir::bind_sizes(f, e->shape);
  r.in = interp::random_inputs(f, e->shape, 1);
  r.out = interp::evaluate(f, e->shape, r.in);
  return r;
}

}  // namespace

TEST_CASE("workload depthwise_stride2: P = (H - R) / 2 + 1 inferred, bitwise") {
  Run r = run("depthwise_stride2");
  View X{r.in.at("X")}, Wt{r.in.at("Wt")};
  const int64_t N = r["N"], H = r["H"], W = r["W"], C = r["C"], R = r["R"], S = r["S"];
  const int64_t P = (H - R) / 2 + 1, Q = (W - S) / 2 + 1;
  CHECK(r["P"] == P);
  CHECK(r["Q"] == Q);
  Expected Y({N, P, Q, C});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t c = 0; c < C; ++c) {
          float acc = 0;
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < S; ++j) acc += X.f({n, 2 * p + i, 2 * q + j, c}) * Wt.f({i, j, c});
          Y.at({n, p, q, c}) = acc;
        }
  CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
}

TEST_CASE("workload pixel_shuffle: depth to space by 2, bitwise") {
  Run r = run("pixel_shuffle");
  View X{r.in.at("X")};
  const int64_t N = r["N"], C = r["CI"] / 4, H = r["H"], W = r["W"];
  CHECK(r["C"] == C);
  Expected Y({N, C, 2 * H, 2 * W});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
          for (int64_t dy = 0; dy < 2; ++dy)
            for (int64_t dx = 0; dx < 2; ++dx) Y.at({n, c, 2 * y + dy, 2 * x + dx}) = X.f({n, 4 * c + 2 * dy + dx, y, x});
  CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
}

TEST_CASE("workload maxpool2x2: 2x2 windows at stride 2, odd edges dropped, bitwise") {
  for (const char* entry : {"maxpool2x2", "maxpool2x2_given"}) {
    CAPTURE(entry);
    Run r = run(entry);
    View X{r.in.at("X")};
    const int64_t N = r["N"], C = r["C"], P = r["H"] / 2, Q = r["W"] / 2;
    Expected Y({N, C, P, Q});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q)
            Y.at({n, c, p, q}) = std::max({X.f({n, c, 2 * p, 2 * q}), X.f({n, c, 2 * p, 2 * q + 1}),
                                           X.f({n, c, 2 * p + 1, 2 * q}), X.f({n, c, 2 * p + 1, 2 * q + 1})});
    CHECK(bitwise_difference(Y, r.out.at("Y"), "Y") == "");
  }
}
