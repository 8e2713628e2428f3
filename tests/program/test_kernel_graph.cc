// The kernel dependence graph of a program (compiler/program/kernel_graph.h): which earlier kernels
// each kernel waits for, reduced, and the streams independent kernels go to.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/program/kernel_graph.h"
#include "compiler/program/program.h"

using namespace tessel;
using program::KernelAccess;

namespace {

KernelAccess::Location arena(int64_t begin, int64_t end) { return {"", begin, end}; }
KernelAccess::Location tensor(const std::string& name) { return {name, 0, 0}; }

}  // namespace

TEST_CASE("kernel graph: kernels reading only the inputs run beside each other, their reader waits for both") {
  // k0: X -> A, k1: X -> B, k2: A, B -> Y (the Q / K projections and the scores of a layer)
  std::vector<KernelAccess> ks = {{{tensor("X")}, {arena(0, 100)}}, {{tensor("X")}, {arena(100, 200)}},
                                  {{arena(0, 100), arena(100, 200)}, {tensor("Y")}}};
  const auto g = program::kernel_graph(ks, 4);
  CHECK(g.waits[0].empty());
  CHECK(g.waits[1].empty());
  CHECK(g.waits[2] == std::vector<int>{0, 1});
  CHECK(g.streams == 2);
  CHECK(g.stream == std::vector<int>{0, 1, 0});
  CHECK(g.cross_waits[2] == std::vector<int>{1});
  CHECK(g.signals == std::vector<bool>{false, true, false});
  CHECK(g.last_on_stream() == std::vector<int>{2, 1});
  CHECK(g.to_string() == "k0 on stream 0; k1 on stream 1; k2 on stream 0 after k0, k1");
}

TEST_CASE("kernel graph: a reused arena range orders its old reader before its new writer, implied waits are left out") {
  // k0 writes A at [0, 64), k1 reads A and writes B at [64, 128), k2 writes C over A's bytes:
  // k2 must follow k1 (it overwrites what k1 reads); its wait on k0 (both write [0, 64)) is implied
  std::vector<KernelAccess> ks = {{{tensor("X")}, {arena(0, 64)}}, {{arena(0, 64)}, {arena(64, 128)}}, {{tensor("X")}, {arena(0, 48)}},
                                  {{arena(0, 48), arena(64, 128)}, {tensor("Y")}}};
  const auto g = program::kernel_graph(ks, 4);
  CHECK(g.waits[1] == std::vector<int>{0});
  CHECK(g.waits[2] == std::vector<int>{1});
  CHECK(g.waits[3] == std::vector<int>{2});
  CHECK(g.streams == 1);  // a chain
  // two writers of one output of the def, and a reader of an input a later kernel writes
  std::vector<KernelAccess> w = {{{}, {tensor("Y")}}, {{tensor("Z")}, {}}, {{}, {tensor("Y"), tensor("Z")}}};
  const auto h = program::kernel_graph(w, 4);
  CHECK(h.waits[2] == std::vector<int>{0, 1});
  CHECK(h.stream == std::vector<int>{0, 1, 0});
}

TEST_CASE("kernel graph: past the stream limit a kernel queues behind the oldest stream, never without a wait it needs") {
  // five independent kernels, then one reading all of them; two streams at most
  std::vector<KernelAccess> ks;
  for (int i = 0; i < 5; ++i) ks.push_back({{tensor("X")}, {arena(100 * i, 100 * i + 100)}});
  ks.push_back({{arena(0, 500)}, {tensor("Y")}});
  const auto g = program::kernel_graph(ks, 2);
  CHECK(g.streams == 2);
  CHECK(g.stream == std::vector<int>{0, 1, 0, 1, 0, 1});
  // k5 waits on all five: k3 on its stream (k1 is behind it), k4 by an event (k0 and k2 behind it)
  CHECK(g.waits[5] == std::vector<int>{3, 4});
  CHECK(g.cross_waits[5] == std::vector<int>{4});
  const auto one = program::kernel_graph(ks, 1);
  CHECK(one.streams == 1);
  for (const auto& c : one.cross_waits) CHECK(c.empty());
}

TEST_CASE("kernel graph of a compiled layer: the projections are independent, attention waits for all three") {
  const std::string text = R"(def layer(f32[T, E] X, f32[E, E] Wq, f32[E, E] Wk, f32[E, E] Wv) -> (f32[T, E] Out) {
  Q(t, e) +=! X(t, c) * Wq(c, e)
  K(t, e) +=! X(t, c) * Wk(c, e)
  V(t, e) +=! X(t, c) * Wv(c, e)
  S(i, j) +=! Q(i, e) * K(j, e)
  Out(i, e) +=! S(i, j) * V(j, e)
}
)";
  frontend::Module m = frontend::parse_module(text, "layer.tsl");
  CompileOptions o;
  o.target = "c";
  o.sizes = {{"T", 8}, {"E", 16}};
  const auto prog = program::compile_program(frontend::select_function(m, "layer"), o, poly::PartitionMode::Auto);
  REQUIRE(prog->kernels.size() == 5);
  const auto g = program::kernel_graph(*prog, 4);
  CHECK(g.waits[0].empty());
  CHECK(g.waits[1].empty());
  CHECK(g.waits[2].empty());
  CHECK(g.waits[3] == std::vector<int>{0, 1});
  CHECK(g.waits[4] == std::vector<int>{2, 3});
  CHECK(g.streams == 3);
}
