// poly::split_reductions: long reductions to few outputs in two phases, checked against the
// reference interpreter on the original function (same outputs within the reassociation bound)
// and on the rewritten function's structure.
#include <doctest/doctest.h>

#include <cmath>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "compiler/poly/split_reductions.h"

using namespace tessel;

namespace {

const char* kSource =
    "def total(f32[N] X) -> (f32[] T) {\n  T() +=! X(i)\n}\n"
    "def rowmax(f16[M, N] X) -> (f32[M] Y) {\n  Y(m) max=! f32(X(m, n))\n}\n"
    "def shifted(f32[M, N] X) -> (f32[M] S) {\n  S(m) +=! X(m, n) * X(m, n) where n in 3:N\n}\n"
    "def acc(f32[N] X, f32[] T0) -> (f32[] T) {\n  T() = T0()\n  T() += X(i)\n}\n";

// The interpreter on the original and on the split function, element by element.
void check_same(const ir::Function& f, const std::map<std::string, int64_t>& sizes, const poly::SplitPolicy& policy,
                size_t expected_splits) {
  std::vector<poly::ReductionSplit> splits;
  auto g = poly::split_reductions(f, sizes, policy, &splits);
  REQUIRE(splits.size() == expected_splits);
  REQUIRE(g.has_value() == (expected_splits > 0));
  if (!g) return;
  const auto inputs = interp::random_inputs(f, sizes, 7);
  const auto a = interp::evaluate(f, sizes, inputs);
  const auto b = interp::evaluate(*g, sizes, inputs);
  const emit_c::Verification v = emit_c::verify(a, b, emit_c::reassociated_sum_tolerance(f, sizes));
  CHECK_MESSAGE(v.verified, v.first_mismatch);
}

}  // namespace

TEST_CASE("a long sum to one value: chunks of a multiple of the granule, a guard for the last chunk") {
  frontend::Module m = frontend::parse_module(kSource, "red.tsl");
  const ir::Function& f = frontend::select_function(m, "total");
  poly::SplitPolicy p;
  p.parallel_units = 132;
  std::vector<poly::ReductionSplit> splits;
  auto g = poly::split_reductions(f, {{"N", 1000003}}, p, &splits);
  REQUIRE(g);
  REQUIRE(splits.size() == 1);
  // 4 x 132 = 528 chunks wanted: ceil(1000003 / 528) = 1894 -> 2048 per chunk -> 489 chunks
  CHECK(splits[0].chunk == 2048);
  CHECK(splits[0].chunks == 489);
  CHECK(splits[0].index == "i");
  CHECK(splits[0].partial == "T_partial");
  REQUIRE(g->statements.size() == 2);
  CHECK(g->statements[0].name == "S0");
  CHECK(g->statements[1].name == "S1");
  CHECK(g->statements[0].output == "T_partial");
  CHECK(ir::to_string(*g).find("select(") != std::string::npos);  // 1000003 is not a multiple of 2048
  check_same(f, {{"N", 1000003}}, p, 1);
  check_same(f, {{"N", 1 << 20}}, p, 1);  // a multiple: no guard
}

TEST_CASE("max over long rows of few outputs, an offset range, and what stays in one phase") {
  frontend::Module m = frontend::parse_module(kSource, "red.tsl");
  poly::SplitPolicy p;
  p.parallel_units = 132;
  check_same(frontend::select_function(m, "rowmax"), {{"M", 3}, {"N", 100001}}, p, 1);
  check_same(frontend::select_function(m, "shifted"), {{"M", 2}, {"N", 70001}}, p, 1);
  check_same(frontend::select_function(m, "rowmax"), {{"M", 3}, {"N", 1000}}, p, 0);     // short
  check_same(frontend::select_function(m, "rowmax"), {{"M", 4096}, {"N", 65536}}, p, 0); // enough outputs
  check_same(frontend::select_function(m, "acc"), {{"N", 1 << 20}}, p, 0);               // `+=` accumulates
  p.parallel_units = 0;
  check_same(frontend::select_function(m, "total"), {{"N", 1 << 20}}, p, 0);
}

// A product's last chunk, cut short, is padded with its identity 1 (a 0 would zero the partial);
// phase two multiplies the partials. Factors near 1 keep a million of them finite.
TEST_CASE("a long product to one value: the cut chunk padded with 1, the partials multiplied") {
  frontend::Module m = frontend::parse_module("def prod(f32[N] X) -> (f32[] P) {\n  P() *=! X(i) * 0.0009765625 + 1\n}\n", "p.tsl");
  const ir::Function& f = frontend::select_function(m, "prod");
  poly::SplitPolicy p;
  p.parallel_units = 132;
  std::vector<poly::ReductionSplit> splits;
  auto g = poly::split_reductions(f, {{"N", 1000003}}, p, &splits);
  REQUIRE(g);
  REQUIRE(g->statements.size() == 2);
  CHECK(g->statements[0].reduction == ir::Reduction::Prod);
  CHECK(g->statements[1].reduction == ir::Reduction::Prod);
  const std::string text = ir::to_string(*g);
  CAPTURE(text);
  CHECK(text.find(", 1)") != std::string::npos);  // select(in range, factor, 1)
  check_same(f, {{"N", 1000003}}, p, 1);
}

TEST_CASE("GPU targets split in the pipeline, NPU targets and user tile specs do not") {
  frontend::Module m = frontend::parse_module(kSource, "red.tsl");
  const ir::Function& f = frontend::select_function(m, "total");
  CompileOptions o;
  o.sizes = {{"N", 1 << 22}};
  o.target = "isa/targets/sm90.yaml";
  auto c = compile(f, o);
  REQUIRE(c->splits.size() == 1);
  CHECK(c->function->statements.size() == 2);
  CHECK(c->function != &f);
  o.target = "isa/targets/davinci-910.yaml";
  CHECK(compile(f, o)->splits.empty());
  o.target = "isa/targets/sm90.yaml";
  o.tile = "i=4096/4096";
  CHECK(compile(f, o)->splits.empty());
}

TEST_CASE("a reduction over several short axes (batch norm over N, H, W) splits the outermost one") {
  frontend::Module m = frontend::parse_module(
      "def bn_reduce(f16[N, H, W, C] X) -> (f32[C] Sum, f32[C] SumSq) {\n"
      "  Sum(c) +=! f32(X(n, h, w, c))\n  SumSq(c) +=! f32(X(n, h, w, c)) * f32(X(n, h, w, c))\n}\n",
      "bn.tsl");
  const ir::Function& f = m.functions[0];
  poly::SplitPolicy p;
  p.parallel_units = 132;
  const std::map<std::string, int64_t> sizes{{"N", 32}, {"H", 28}, {"W", 28}, {"C", 64}};
  std::vector<poly::ReductionSplit> splits;
  auto g = poly::split_reductions(f, sizes, p, &splits);
  REQUIRE(splits.size() == 2);
  // a column reduction (X's last index is the output's c): 256 x 132 / 64 outputs -> 528 chunks
  // wanted, n in chunks of ceil(32 / 528) = 1 image, 32 chunks
  CHECK(ir::is_column_reduction(f.statements[0]));
  CHECK(splits[0].index == "n");
  CHECK(splits[0].chunk == 1);
  CHECK(splits[0].chunks == 32);
  REQUIRE(g->statements.size() == 4);
  // both phase ones first (one pass over X when fused), then both phase twos
  CHECK(g->statements[0].output == "Sum_partial");
  CHECK(g->statements[1].output == "SumSq_partial");
  CHECK(g->statements[2].output == "Sum");
  CHECK(g->statements[3].output == "SumSq");
  check_same(f, sizes, p, 2);
  // a column reduction's outputs are threads: 256 channels are 256 threads, still split; one
  // with 256 outputs per SM (33,792) is not, nor one of fewer than two 32-element chunks
  check_same(f, {{"N", 32}, {"H", 28}, {"W", 28}, {"C", 256}}, p, 2);
  check_same(f, {{"N", 2}, {"H", 2}, {"W", 2}, {"C", 33792}}, p, 0);
  check_same(f, {{"N", 2}, {"H", 4}, {"W", 4}, {"C", 64}}, p, 0);
  // the middle axis of a 16x512x256 max: 4,096 outputs, 9 chunks of 57
  frontend::Module mid = frontend::parse_module("def mx(f16[A, B, C] X) -> (f16[A, C] Y) {\n  Y(a, c) max=! X(a, b, c)\n}\n", "mx.tsl");
  std::vector<poly::ReductionSplit> mids;
  REQUIRE(poly::split_reductions(mid.functions[0], {{"A", 16}, {"B", 512}, {"C", 256}}, p, &mids));
  REQUIRE(mids.size() == 1);
  CHECK(mids[0].index == "b");
  CHECK(mids[0].chunks == 9);
  CHECK(mids[0].chunk == 57);
}

TEST_CASE("a phase two waits for the phase ones after it until a statement reads its output") {
  // M2 reads Sum: Sum's phase two must come before M2's phase one; the result is unchanged
  frontend::Module m = frontend::parse_module(
      "def centred(f32[N, H, W, C] X) -> (f32[C] Sum, f32[C] M2) {\n"
      "  Sum(c) +=! X(n, h, w, c)\n  M2(c) +=! (X(n, h, w, c) - Sum(c)) * (X(n, h, w, c) - Sum(c))\n}\n",
      "c.tsl");
  const ir::Function& f = m.functions[0];
  CHECK(ir::is_column_reduction(f.statements[0]));
  CHECK(ir::is_column_reduction(f.statements[1]));  // X(.., c) and Sum(c): last indices of outputs only
  poly::SplitPolicy p;
  p.parallel_units = 132;
  const std::map<std::string, int64_t> sizes{{"N", 16}, {"H", 16}, {"W", 32}, {"C", 64}};
  std::vector<poly::ReductionSplit> splits;
  auto g = poly::split_reductions(f, sizes, p, &splits);
  REQUIRE(splits.size() == 2);
  REQUIRE(g->statements.size() == 4);
  CHECK(g->statements[0].output == "Sum_partial");
  CHECK(g->statements[1].output == "Sum");
  CHECK(g->statements[2].output == "M2_partial");
  CHECK(g->statements[3].output == "M2");
  check_same(f, sizes, p, 2);
}

TEST_CASE("column reductions: the reads' last index is an output index and no reduced one") {
  frontend::Module m = frontend::parse_module(kSource, "red.tsl");
  CHECK_FALSE(ir::is_column_reduction(frontend::select_function(m, "total").statements[0]));
  CHECK_FALSE(ir::is_column_reduction(frontend::select_function(m, "rowmax").statements[0]));
  frontend::Module c = frontend::parse_module("def colsum(f32[M, N] X) -> (f32[N] S) {\n  S(n) +=! X(m, n)\n}\n", "c.tsl");
  CHECK(ir::is_column_reduction(c.functions[0].statements[0]));
}

TEST_CASE("a split reduction's first phase that reads a statistic keeps its chunks parallel (batch norm without D)") {
  // SqSum's first phase reads Mean(c), which the group of Sum's second phase computes: joining
  // that group (tile axes c, 128 tiles) would run its 1.6 M points on 128 tiles without its chunks,
  // whose X box then overflowed every tile and shrank the default to c=1/1 (621 us on an H200
  // against 21 us for the form with a D local). Its work per tile counts the reduced points.
  frontend::Module m = frontend::parse_module(
      "def bn(f16[N, H, W, C] X, f32[C] gamma, f32[C] beta) -> (f16[N, H, W, C] Y) {\n"
      "  Sum(c) +=! f32(X(n, h, w, c))\n"
      "  Mean(c) = Sum(c) / f32(N * H * W)\n"
      "  SqSum(c) +=! (f32(X(n, h, w, c)) - Mean(c)) * (f32(X(n, h, w, c)) - Mean(c))\n"
      "  Y(n, h, w, c) = f16((f32(X(n, h, w, c)) - Mean(c)) * rsqrt(SqSum(c) / f32(N * H * W) + 0.00001) * gamma(c) + beta(c))\n"
      "}\n",
      "bn.tsl");
  CompileOptions o;
  o.sizes = {{"N", 16}, {"H", 28}, {"W", 28}, {"C", 128}};
  o.target = "isa/targets/sm90.yaml";
  auto c = compile(m.functions[0], o);
  REQUIRE(c->splits.size() == 2);
  const ir::Function& g = *c->function;
  int phase_one_group = -1, mean_group = -1;
  for (const auto& grp : c->groups)
    for (int s : grp.members) {
      const std::string& out = g.statements[c->scop.statements[s].statement].output;
      if (out == "SqSum_partial") phase_one_group = grp.id;
      if (out == "Mean") mean_group = grp.id;
    }
  REQUIRE(phase_one_group >= 0);
  CHECK(phase_one_group != mean_group);
  CHECK(c->groups[phase_one_group].tile_axes.size() == 2);  // c and the chunk
  CHECK(c->tile_spec.to_string().find("c=1/1") == std::string::npos);
  CHECK(c->warnings.empty());
}

TEST_CASE("a cut max chunk pads with its own first element, so a tile's box is one chunk") {
  // max over b (512) of X[16, 512, 256], in 9 chunks of 57: the last chunk's missing elements
  // repeat the chunk's first element (idempotent); the index's first element instead made every
  // tile's X box span rows 0 .. 57 * chunk + 57, 513 rows for 57 (9x the traffic on an H200).
  frontend::Module m = frontend::parse_module("def mx(f16[A, B, C] X) -> (f16[A, C] Y) {\n  Y(a, c) max=! X(a, b, c)\n}\n", "mx.tsl");
  CompileOptions o;
  o.sizes = {{"A", 16}, {"B", 512}, {"C", 256}};
  o.target = "isa/targets/sm90.yaml";
  auto c = compile(m.functions[0], o);
  REQUIRE(c->splits.size() == 1);
  REQUIRE(c->splits[0].chunk == 57);
  int boxes = 0;
  for (const auto& b : c->kernel.buffers)
    if (b.tensor == "X") {
      CHECK(b.extents[1] == 57);
      ++boxes;
    }
  CHECK(boxes == 1);
  poly::SplitPolicy p;
  p.parallel_units = 132;
  check_same(m.functions[0], o.sizes, p, 1);
  check_same(m.functions[0], {{"A", 3}, {"B", 100001}, {"C", 5}}, p, 1);
}

TEST_CASE("chunk-major partials: a column reduction with at least chunk_major_outputs outputs, T_partial(c, n)") {
  frontend::Module c = frontend::parse_module("def colsum(f32[M, N] X) -> (f32[N] S) {\n  S(n) +=! X(m, n)\n}\n", "c.tsl");
  const ir::Function& f = c.functions[0];
  const std::map<std::string, int64_t> sizes{{"M", 4096}, {"N", 1024}};
  poly::SplitPolicy p;
  p.parallel_units = 132;
  const auto partial_shape = [&](const poly::SplitPolicy& policy) {
    std::vector<poly::ReductionSplit> splits;
    auto g = poly::split_reductions(f, sizes, policy, &splits);
    REQUIRE(g);
    REQUIRE(splits.size() == 1);
    std::vector<int64_t> shape;
    for (const auto& t : g->tensors)
      if (t.name == splits[0].partial)
        for (const auto& d : t.shape) shape.push_back(d.evaluate({}, sizes));
    return std::make_pair(shape, splits[0].chunks);
  };
  const auto [output_major, chunks] = partial_shape(p);  // the default: output-major
  CHECK(output_major == std::vector<int64_t>{1024, chunks});
  p.chunk_major_outputs = 256;
  const auto [chunk_major, chunks2] = partial_shape(p);
  CHECK(chunk_major == std::vector<int64_t>{chunks2, 1024});
  check_same(f, sizes, p, 1);
  p.chunk_major_outputs = 2048;  // more than the 1,024 outputs: output-major
  CHECK(partial_shape(p).first == std::vector<int64_t>{1024, chunks});
}
