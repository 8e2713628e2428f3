// Post-tiling fusion, checked on the kernel IR (not on text): element-wise consumers of the main
// reduction run inside its tile; softmax rows stay in one tile; fusion that is not wanted or not
// possible does not fire.
#include <doctest/doctest.h>

#include "tests/poly/poly_test_util.h"

using namespace tessel;

namespace {

// The loop nest (outermost first) enclosing the first node satisfying `pred`.
std::vector<const kernel::Node*> enclosing_loops(const kernel::NodePtr& root,
                                                 const std::function<bool(const kernel::Node&)>& pred) {
  std::vector<const kernel::Node*> path, found;
  std::function<bool(const kernel::NodePtr&)> rec = [&](const kernel::NodePtr& n) {
    if (pred(*n)) {
      found = path;
      return true;
    }
    if (n->kind == kernel::NodeKind::Loop) path.push_back(n.get());
    for (const auto& c : n->children)
      if (rec(c)) return true;
    for (const auto& c : n->else_children)
      if (rec(c)) return true;
    if (n->kind == kernel::NodeKind::Loop) path.pop_back();
    return false;
  };
  rec(root);
  return found;
}

std::vector<const kernel::Node*> core_loops(const std::vector<const kernel::Node*>& loops) {
  std::vector<const kernel::Node*> out;
  for (auto* l : loops)
    if (l->loop_kind == kernel::LoopKind::ParallelCores) out.push_back(l);
  return out;
}

bool is_compute_of(const kernel::Node& n, int statement, bool init = false) {
  return n.kind == kernel::NodeKind::Compute && n.statement == statement && n.init == init;
}

}  // namespace

TEST_CASE("matmul_bias_relu: bias and relu are computed inside the matmul's tile") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  auto c = test::compile_text(m, {{"M", 256}, {"N", 192}, {"K", 64}}, "m=64/32,n=64/32,k=32/16");
  const kernel::Kernel& k = c->kernel;
  auto mm = enclosing_loops(k.body, [](const kernel::Node& n) { return n.kind == kernel::NodeKind::Matmul; });
  auto epi = enclosing_loops(k.body, [](const kernel::Node& n) { return is_compute_of(n, 1); });
  auto mm_tiles = core_loops(mm), epi_tiles = core_loops(epi);
  REQUIRE(mm_tiles.size() == 2);
  CHECK(epi_tiles == mm_tiles);  // the very same tile loops (m, n)
  // the intermediate C never reaches global memory: it lives in the accumulator
  CHECK(k.find_tensor("C") == nullptr);
  bool epilogue_reads_accumulator = false;
  kernel::for_each_node(k.body, [&](const kernel::Node& n, int) {
    if (is_compute_of(n, 1)) epilogue_reads_accumulator = k.buffers.at(n.binding.at("C")).role == isa::Role::Accumulator;
  });
  CHECK(epilogue_reads_accumulator);
  CHECK(c->groups.size() == 1);
}

TEST_CASE("matmul_bias_relu with fusion none: the epilogue runs in its own loop nest") {
  frontend::Module m = frontend::parse_module(test::kMatmulBiasRelu, "mbr.tsl");
  CompileOptions o;
  o.fuse = false;
  o.scheduler.fusion = poly::FusionStrategy::None;
  auto c = test::compile_text(m, {{"M", 256}, {"N", 192}, {"K", 64}}, "m=64/32,n=64/32,k=32/16", o);
  auto mm = core_loops(enclosing_loops(c->kernel.body, [](const kernel::Node& n) { return n.kind == kernel::NodeKind::Matmul; }));
  auto epi = core_loops(enclosing_loops(c->kernel.body, [](const kernel::Node& n) { return is_compute_of(n, 1); }));
  REQUIRE(!mm.empty());
  REQUIRE(!epi.empty());
  CHECK(mm[0] != epi[0]);
  CHECK(c->kernel.find_tensor("C") != nullptr);  // a global temporary between the nests
  CHECK(c->kernel.find_tensor("C")->temporary);
}

TEST_CASE("softmax: every statement of a row runs in the same row tile") {
  frontend::Module m = frontend::parse_module(
      "def softmax(f32[M, N] X) -> (f32[M, N] Y) {\n"
      "  mx(i) max=! X(i, j)\n"
      "  e(i, j) = exp(X(i, j) - mx(i))\n"
      "  s(i) +=! e(i, j)\n"
      "  Y(i, j) = e(i, j) / s(i)\n"
      "}\n",
      "softmax.tsl");
  auto c = test::compile_text(m, {{"M", 37}, {"N", 50}}, "i=8/8");
  REQUIRE(c->groups.size() == 1);
  const kernel::Kernel& k = c->kernel;
  std::vector<std::vector<const kernel::Node*>> tiles;
  for (int s = 0; s < 4; ++s)
    tiles.push_back(core_loops(enclosing_loops(k.body, [&](const kernel::Node& n) { return is_compute_of(n, s); })));
  REQUIRE(tiles[0].size() == 1);
  for (int s = 1; s < 4; ++s) CHECK(tiles[s] == tiles[0]);
  // the row's intermediates stay on chip
  CHECK(k.find_tensor("e") == nullptr);
  CHECK(k.find_tensor("mx") == nullptr);
}

TEST_CASE("conv2d: the zero-padding producer is computed inside the convolution's tile (zero-filled copies)") {
  frontend::Module m = frontend::load_module("workloads/conv2d.tsl");
  CompileOptions o;
  o.sizes = {{"N", 1}, {"C", 4}, {"H", 6}, {"W", 6}, {"K", 8}, {"R", 3}, {"S", 3}};
  auto c = compile(frontend::select_function(m, "conv2d"), o);
  CHECK(c->folded.has_value());
  CHECK(c->groups.size() == 1);                      // no separate padding loop nest
  CHECK(c->kernel.find_tensor("Xp") == nullptr);     // the padded tensor never exists
  // the input's stage box starts one row/column before the image: the copy fills zeros there
  bool shifted = false;
  for (const auto& b : c->kernel.buffers)
    if (b.tensor == "X" && b.role == isa::Role::Stage) shifted = b.offset[2].to_string().find("-1") != std::string::npos;
  CHECK(shifted);
}

TEST_CASE("padding folding must not fire when the select is not exactly the input's bounds") {
  frontend::Module m = frontend::parse_module(
      "def f(f32[N] X) -> (f32[N] Y) {\n"
      "  P(i) = select(i >= 2 && i <= N, X(i - 1), 0) where i in 0:N + 2\n"
      "  Y(j) = P(j) + P(j + 2) where j in 0:N\n"
      "}\n", "pad.tsl");
  poly::IslContext isl;
  CHECK_FALSE(poly::fold_padding(isl.ctx(), m.functions[0]).has_value());
  auto c = test::compile_text(m, {{"N", 9}}, std::nullopt);
  CHECK(c->kernel.find_tensor("P") != nullptr);
}

TEST_CASE("padding folding reads a bound with a division by a constant (a network stage's size)") {
  // X holds (H - 1) / 4 + 1 rows: the padded copy's condition spells that size; isl proves the
  // numerator H - 1 non-negative, so the value division (truncating) equals isl's floor
  frontend::Module m = frontend::parse_module(
      "def f(f32[N, (H - 1) / 4 + 1] X) -> (f32[N, (H - 1) / 4 + 1] Y) {\n"
      "  P(n, h) = select(h >= 1 && h <= (H - 1) / 4 + 1, X(n, h - 1), 0) where h in 0:(H - 1) / 4 + 3\n"
      "  Y(n, p) = P(n, p + 1) + P(n, p + 2)\n"
      "}\n", "pad_div.tsl");
  poly::IslContext isl;
  auto g = poly::fold_padding(isl.ctx(), m.functions[0]);
  REQUIRE(g.has_value());
  CHECK(g->find_tensor("P") == nullptr);
  CHECK(g->statements.size() == 1);
}

TEST_CASE("padding folding must not fire when a division's numerator may be negative") {
  // (H - 9) / 4 truncates toward zero in a value but isl floors: they differ for H < 9
  frontend::Module m = frontend::parse_module(
      "def f(f32[N, H] X) -> (f32[N, H] Y) {\n"
      "  P(n, h) = select(h >= 1 && h <= H + (H - 9) / 4 - (H - 9) / 4, X(n, h - 1), 0) where h in 0:H + 2\n"
      "  Y(n, p) = P(n, p + 1) + P(n, p + 2)\n"
      "}\n", "pad_neg.tsl");
  poly::IslContext isl;
  CHECK_FALSE(poly::fold_padding(isl.ctx(), m.functions[0]).has_value());
}

TEST_CASE("fusion on a GPU: a long statement does not join a group of fewer tiles than SMs, short ones still do") {
  const std::string text = R"(def group_norm(f32[N, I, G, E] X) -> (f32[N, I, G, E] Y) {
  Sum(n, g) +=! X(n, i, g, e)
  Mean(n, g) = Sum(n, g) / f32(I * E)
  Y(n, i, g, e) = X(n, i, g, e) - Mean(n, g)
}
)";
  frontend::Module m = frontend::parse_module(text, "gn.tsl");
  auto groups_of = [&](int64_t I, const std::string& target) {
    CompileOptions o;
    o.target = target;
    o.sizes = {{"N", 2}, {"I", I}, {"G", 8}, {"E", 32}};
    auto c = compile(frontend::select_function(m, "group_norm"), o);
    std::vector<std::vector<std::string>> out;
    for (const auto& g : c->groups) {
      out.emplace_back();
      for (int s : g.members) out.back().push_back(c->scop.statements[size_t(s)].name);
    }
    return out;
  };
  // 2 x 1024 x 8 x 32 points under 16 (n, g) tiles on sm90's 132 SMs: Y (S3 after the sum is
  // split in two phases, S0 / S1) seeds its own group; Mean stays with the sum
  const auto gpu = groups_of(1024, "isa/targets/sm90.yaml");
  REQUIRE(gpu.size() == 3);
  CHECK(gpu[1] == std::vector<std::string>{"S1_init", "S1", "S2"});
  CHECK(gpu[2] == std::vector<std::string>{"S3"});
  // 16 tiles of 2 x 16 x 8 x 32 / 16 = 512 points each: one launch is worth more than the SMs
  const auto small = groups_of(16, "isa/targets/sm90.yaml");
  CHECK(small.back() == std::vector<std::string>{"S0_init", "S0", "S1", "S2"});
  // the rule is the GPU's: c and the NPU keep the joins by axes
  for (const char* t : {"c", "isa/targets/davinci-910.yaml"}) {
    CAPTURE(t);
    CHECK(groups_of(1024, t).back() == std::vector<std::string>{"S0_init", "S0", "S1", "S2"});
  }
}
