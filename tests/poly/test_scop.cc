// Scop, dependences and the isl schedule, checked in isl's own set notation.
#include <doctest/doctest.h>

#include "compiler/poly/dependences.h"
#include "compiler/poly/schedule.h"
#include "compiler/poly/scop.h"
#include "tests/poly/poly_test_util.h"

using namespace tessel;
using tessel::test::same;

TEST_CASE("scop: matmul domains have the sizes as parameters and an init statement, accesses are tagged") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  CHECK(same(s.domain,
             "[M, K, N] -> { S0_init[m, n] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N; "
             "S0[m, n, k] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N and 0 <= k < K }"));
  CHECK(same(s.context.params().is_null() ? isl::union_set() : isl::union_set(s.context),
             "[M, K, N] -> { : M >= 1 and K >= 1 and N >= 1 }"));
  const std::string in_domain = "M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N and 0 <= k < K";
  CHECK(same(s.reads.intersect_domain(s.domain), "[M, K, N] -> { S0[m, n, k] -> A[m, k] : " + in_domain +
                                                     "; S0[m, n, k] -> B[k, n] : " + in_domain +
                                                     "; S0[m, n, k] -> C[m, n] : " + in_domain + " }"));
  CHECK(same(s.tagged_writes,
             "[M, K, N] -> { [S0[m, n, k] -> S0_W[]] -> C[m, n] : 0 <= m < M and 0 <= n < N and 0 <= k < K; "
             "[S0_init[m, n] -> S0_init_W[]] -> C[m, n] : 0 <= m < M and 0 <= n < N }"));
}

TEST_CASE("dependences: flow, anti and output of a matmul in isl notation") {
  frontend::Module m = frontend::parse_module(test::kMatmul, "mm.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  poly::Dependences d = poly::compute_dependences(s);
  CHECK(same(d.flow,
             "[M, K, N] -> { S0_init[m, n] -> S0[m, n, 0] : K >= 1 and 0 <= m < M and 0 <= n < N; "
             "S0[m, n, k] -> S0[m, n, k + 1] : 0 <= m < M and 0 <= n < N and 0 <= k <= K - 2 }"));
  CHECK(same(d.anti,
             "[M, K, N] -> { S0[m, n, k] -> S0[m, n, k'] : 0 <= m < M and 0 <= n < N and 0 <= k < k' < K }"));
  CHECK(same(d.output,
             "[M, K, N] -> { S0_init[m, n] -> S0[m, n, k] : 0 <= m < M and 0 <= n < N and 0 <= k < K; "
             "S0[m, n, k] -> S0[m, n, k'] : 0 <= m < M and 0 <= n < N and 0 <= k < k' < K }"));
}

TEST_CASE("dependences: an element-wise chain has flow only where the consumer reads the producer") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  poly::Dependences d = poly::compute_dependences(s);
  isl::union_map to_d = d.flow.intersect_range(isl::union_set(isl::set(isl.ctx(), "[M, K, N] -> { S1[m, n] }")));
  CHECK(same(to_d, "[M, K, N] -> { S0[m, n, K - 1] -> S1[m, n] : K >= 1 and 0 <= m < M and 0 <= n < N }"));
  // no dependence from the consumer back to the producer
  CHECK(d.all().intersect_domain(isl::union_set(isl::set(isl.ctx(), "[M, K, N] -> { S1[m, n] }"))).is_empty());
}

TEST_CASE("schedule: validity holds and the fused band keeps m and n outermost for matmul_bias_relu") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  poly::Dependences d = poly::compute_dependences(s);
  poly::SchedulerOptions o;
  o.fusion = poly::FusionStrategy::Max;
  poly::ScheduleResult r = poly::compute_schedule(s, d, o);
  CHECK_FALSE(r.fell_back);
  CHECK(poly::respects(r.map, d.all()));
  // the outermost schedule dimension is m for every statement (fused, not split by statement)
  CHECK(same(test::outer_dims(r.map, 1).intersect_domain(s.domain),
             "[M, K, N] -> { S0_init[m, n] -> [m] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N; "
             "S0[m, n, k] -> [m] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N and 0 <= k < K; "
             "S1[m, n] -> [m] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N }"));
}

TEST_CASE("schedule: fusion none serialises the strongly connected components") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  poly::Dependences d = poly::compute_dependences(s);
  poly::SchedulerOptions o;
  o.fusion = poly::FusionStrategy::None;
  poly::ScheduleResult r = poly::compute_schedule(s, d, o);
  CHECK(poly::respects(r.map, d.all()));
  // no band is shared: every statement is its own component, in program order
  isl::union_map first = test::outer_dims(r.map, 1);
  isl::union_map s1_first = first.intersect_domain(isl::union_set(isl::set(isl.ctx(), "[M, K, N] -> { S1[m, n] }")));
  const bool separated = same(first.intersect_domain(s.domain),
                              "[M, K, N] -> { S0_init[m, n] -> [0] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N; "
                              "S0[m, n, k] -> [1] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N and 0 <= k < K; "
                              "S1[m, n] -> [2] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N }");
  INFO(poly::str(r.schedule));
  CHECK(separated);
}

TEST_CASE("schedule: the operation quota falls back to the statement order with a warning") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  poly::Dependences d = poly::compute_dependences(s);
  poly::SchedulerOptions o;
  o.max_operations = 1;
  poly::ScheduleResult r = poly::compute_schedule(s, d, o);
  CHECK(r.fell_back);
  CHECK(r.warning.find("quota") != std::string::npos);
  CHECK(poly::respects(r.map, d.all()));
  CHECK(same(r.map, "[M, K, N] -> { S0_init[m, n] -> [0, m, n, 0] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N; "
                    "S0[m, n, k] -> [1, m, n, k] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N and 0 <= k < K; "
                    "S1[m, n] -> [2, m, n, 0] : M >= 1 and N >= 1 and K >= 1 and 0 <= m < M and 0 <= n < N }"));
  // the context stays usable: a later schedule without quota succeeds
  o.max_operations = 0;
  CHECK_FALSE(poly::compute_schedule(s, d, o).fell_back);
}

TEST_CASE("pipeline: the quota fall-back reaches the user as a warning and the kernel still verifies") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  CompileOptions o;
  o.scheduler.max_operations = 1;
  auto c = test::compile_text(m, {{"M", 20}, {"N", 12}, {"K", 8}}, "m=8/4,n=8/4,k=4/4", o);
  REQUIRE(c->warnings.size() >= 1);
  CHECK(c->warnings[0].find("statement order") != std::string::npos);
}

TEST_CASE("scop: floor division in range bounds and indices reaches isl as existentially quantified divisions") {
  frontend::Module m = frontend::parse_module(
      "def f(f32[M] A) -> (f32[P] Y) {\n"
      "  Y(p) = A(p / 2 + p % 3)\n"
      "      where p in 0:(M - 1) / 2\n"
      "}\n",
      "q.tsl");
  poly::IslContext isl;
  poly::Scop s = poly::build_scop(isl.ctx(), m.functions[0]);
  CHECK(same(s.domain, "[M, P] -> { S0[p] : M >= 1 and P >= 1 and 0 <= p and 2p <= M - 3 }"));
  CHECK(same(s.reads.intersect_domain(s.domain),
             "[M, P] -> { S0[p] -> A[a] : M >= 1 and P >= 1 and 0 <= p and 2p <= M - 3 and "
             "exists (d2, d3 : 2 d2 <= p < 2 d2 + 2 and 3 d3 <= p < 3 d3 + 3 and a = d2 + p - 3 d3) }"));
}

TEST_CASE("contraction: a product whose reads divide is not matched and says why, divided ranges alone are") {
  frontend::Module q = frontend::parse_module(
      "def f(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(m, k / 2)) * f32(B(k, n))\n}\n", "q.tsl");
  std::string why;
  CHECK_FALSE(poly::product_of_accesses(q.functions[0].statements[0], &why));
  CHECK(why == "an index uses floor division or modulo (not matched as a contraction)");
  CompileOptions o;
  o.sizes = {{"M", 4}, {"N", 5}, {"K", 6}};
  auto c = compile(q.functions[0], o);
  CHECK_FALSE(c->kernel.contraction);
  CHECK(c->kernel.no_contraction ==
        "S0 reads A(m, floor((k)/2)): an index uses floor division or modulo (the contraction's operands are affine views)");
  frontend::Module m = frontend::load_module(std::string(TESSEL_SOURCE_DIR) + "/workloads/quasi.tsl");
  o.sizes = {{"N", 1}, {"H", 7}, {"W", 8}, {"C", 2}, {"R", 3}, {"S", 3}};
  auto d = compile(frontend::select_function(m, "depthwise_stride2"), o);
  CHECK(d->kernel.no_contraction.find("division") == std::string::npos);  // only its ranges divide
  CHECK(d->kernel.sizes.at("P") == 3);
  CHECK(d->kernel.sizes.at("Q") == 3);
}
