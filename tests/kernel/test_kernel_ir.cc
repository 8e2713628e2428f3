// The kernel IR the emitters see: loop kinds, buffers at levels, lets, copies, compute and matmul
// nodes, partial tiles, the printer.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {
const char* kMatmul = "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n";

std::map<kernel::NodeKind, int> count_nodes(const kernel::Kernel& k) {
  std::map<kernel::NodeKind, int> n;
  kernel::for_each_node(k.body, [&](const kernel::Node& x, int) { ++n[x.kind]; });
  return n;
}
}  // namespace

TEST_CASE("kernel IR of a tiled GEMM: core-parallel tiles, operand tiles within a core, sequential k") {
  frontend::Module m = frontend::parse_module(kMatmul, "mm.tsl");
  CompileOptions o;
  o.sizes = {{"M", 256}, {"N", 256}, {"K", 256}};
  o.tile = "m=128/64,n=128/64,k=64/16";
  auto c = compile(m.functions[0], o);
  const kernel::Kernel& k = c->kernel;
  std::map<kernel::LoopKind, int> kinds;
  kernel::for_each_node(k.body, [&](const kernel::Node& x, int) {
    if (x.kind == kernel::NodeKind::Loop) ++kinds[x.loop_kind];
  });
  CHECK(kinds[kernel::LoopKind::ParallelCores] == 2);       // m, n stage tiles
  CHECK(kinds[kernel::LoopKind::ParallelWithinCore] == 2);  // m, n operand tiles
  CHECK(kinds[kernel::LoopKind::Sequential] >= 2);          // k stage + operand tiles, init points
  auto n = count_nodes(k);
  CHECK(n[kernel::NodeKind::Matmul] == 1);
  CHECK(n[kernel::NodeKind::Copy] == 5);  // A, B -> stage; stage -> operand A, B; C -> global
  CHECK(n[kernel::NodeKind::Compute] == 1);  // the init
  CHECK(k.buffers.size() == 5);
  CHECK(std::find(k.let_vars.begin(), k.let_vars.end(), "g0_k_o") != k.let_vars.end());
  const std::string text = kernel::to_string(k);
  CHECK(text.find("// parallel_cores") != std::string::npos);
  CHECK(text.find("matmul 16x16x16 fragments S0") != std::string::npos);
  CHECK(text.find("buffer A_L0A_g0 f16[64, 16] of A at L0A (operand_a)") != std::string::npos);
}

TEST_CASE("partial tiles: fragment extents shrink at the edges and evaluate to the remainder") {
  frontend::Module m = frontend::parse_module(kMatmul, "mm.tsl");
  CompileOptions o;
  o.sizes = {{"M", 67}, {"N", 45}, {"K", 33}};
  o.tile = "m=32/16,n=32/16,k=16/16";
  auto c = compile(m.functions[0], o);
  const kernel::MatmulOp* mm = nullptr;
  kernel::for_each_node(c->kernel.body, [&](const kernel::Node& x, int) {
    if (x.kind == kernel::NodeKind::Matmul) mm = &x.matmul;
  });
  REQUIRE(mm);
  // last m tile: outer origin 64, inner origin 64 -> 3 rows; last k tile: origin 32 -> 1
  CHECK(mm->em.evaluate({{"g0_m_o", 64}, {"g0_m_i", 64}}) == 3);
  CHECK(mm->em.evaluate({{"g0_m_o", 32}, {"g0_m_i", 48}}) == 16);
  CHECK(mm->ek.evaluate({{"g0_k_o", 32}, {"g0_k_i", 32}}) == 1);
  CHECK(mm->en.evaluate({{"g0_n_o", 32}, {"g0_n_i", 32}}) == 13);
  CHECK(mm->a_coords.size() == 2);
  CHECK(mm->a_coords[0].to_string() == "frag_m");
}

TEST_CASE("kernel IR of the NHWC convolution: one img2col fragment per filter tap") {
  frontend::Module m = frontend::load_module("workloads/conv_seed.tsl");
  CompileOptions o;
  o.sizes = {{"N", 2}, {"H", 8}, {"W", 8}, {"C", 32}, {"K", 32}, {"R", 3}, {"S", 3}};
  o.tile = "n=1,p=1,q=8/8,k=32/16,r=1,s=1,c=32/16";
  auto c = compile(frontend::select_function(m, "conv2d_nhwc"), o);
  const kernel::MatmulOp* mm = nullptr;
  kernel::for_each_node(c->kernel.body, [&](const kernel::Node& x, int) {
    if (x.kind == kernel::NodeKind::Matmul) mm = &x.matmul;
  });
  REQUIRE(mm);
  CHECK(mm->img2col);
  CHECK(mm->a_tensor == "X");  // the padding was folded into zero-filled copies of X
  std::string a;
  for (const auto& e : mm->a_coords) a += e.to_string() + ";";
  CHECK(a == "g0_n_o;((-1 + g0_p_o) + g0_r_o);((-1 + frag_m) + g0_s_o);frag_k;");
}

TEST_CASE("an element-wise operator has no matmul and no stage buffers: vector buffers only") {
  frontend::Module m = frontend::parse_module(
      "def relu(f32[M, N] X) -> (f32[M, N] Y) {\n  Y(i, j) = max(X(i, j), 0)\n}\n", "relu.tsl");
  CompileOptions o;
  o.sizes = {{"M", 100}, {"N", 300}};
  auto c = compile(m.functions[0], o);
  for (const auto& b : c->kernel.buffers) CHECK(b.role == isa::Role::Vector);
  CHECK(count_nodes(c->kernel)[kernel::NodeKind::Matmul] == 0);
}
