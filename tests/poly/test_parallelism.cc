// Which loops the polyhedral core marks parallel (compiler/poly/parallelism.h), checked against the
// kernel IR's own execution (compiler/kernel/check_parallel.h): a reduction's loops over its
// reduced axis are never parallel, the loops of element-wise statements are, the decision is per
// loop (not per time dimension), a loop that refills a buffer each iteration says so, and the
// checker finds the conflict when a flag is wrong.
#include <doctest/doctest.h>

#include <functional>

#include "compiler/frontend/frontend.h"
#include "compiler/frontend/suite.h"
#include "compiler/kernel/check_parallel.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

const char* kLayerNorm = R"(def layer_norm(f16[M, N] X) -> (f16[M, N] Y) {
  Sum(m) +=! f32(X(m, n))
  D(m, n) = f32(X(m, n)) - Sum(m) / f32(N)
  Y(m, n) = f16(D(m, n))
}
)";

std::unique_ptr<Compilation> compile_text(const char* text, const std::map<std::string, int64_t>& sizes, const std::string& target,
                                          frontend::Module& m) {
  m = frontend::parse_module(text, "t.tsl");
  CompileOptions o;
  o.target = target;
  o.sizes = sizes;
  return compile(m.functions[0], o);
}

// Loops whose subtree computes statement `name` (updates, not inits), outermost first.
std::vector<kernel::Node*> loops_over(const kernel::Kernel& k, const std::string& name) {
  std::vector<kernel::Node*> out;
  std::function<bool(kernel::Node&)> visit = [&](kernel::Node& n) {
    bool hit = n.kind == kernel::NodeKind::Compute && !n.init && k.function->statements.at(n.statement).name == name;
    for (auto& c : n.children) hit |= visit(*c);
    if (hit && n.kind == kernel::NodeKind::Loop) out.insert(out.begin(), &n);
    return hit;
  };
  visit(*k.body);
  return out;
}

}  // namespace

TEST_CASE("a row reduction's loops over the reduced axis carry a dependence, the rows and element-wise loops do not") {
  frontend::Module m;
  auto c = compile_text(kLayerNorm, {{"M", 8}, {"N", 300}}, "isa/targets/sm90.yaml", m);
  const kernel::Kernel& k = c->kernel;
  const auto& st = k.function->statements;
  std::string sum = st[0].name, d = st[1].name;
  auto red = loops_over(k, sum), ew = loops_over(k, d);
  REQUIRE(!red.empty());
  REQUIRE(!ew.empty());
  int reduced = 0, rows = 0;
  for (kernel::Node* l : red) {
    if (l->axis == "n" || l->var == red.back()->var) {
      // the loop over n (tile or point) carries Sum's dependence on itself
      if (l->loop_kind != kernel::LoopKind::ParallelCores) {
        CHECK_FALSE(l->parallel);
        ++reduced;
      }
    } else {
      CHECK(l->parallel);
      ++rows;
    }
  }
  CHECK(reduced >= 1);
  CHECK(rows >= 1);
  for (kernel::Node* l : ew) CHECK(l->parallel);  // the same time dimensions, other statements
  const auto pc = kernel::check_parallel(k);
  CHECK(pc.complete);
  CHECK(pc.loops > 0);
  CHECK(pc.conflicts == 0);
}

TEST_CASE("the checker finds the conflict when a reduction loop is wrongly marked parallel") {
  frontend::Module m;
  auto c = compile_text(kLayerNorm, {{"M", 4}, {"N", 40}}, "isa/targets/sm90.yaml", m);
  kernel::Kernel& k = c->kernel;
  auto red = loops_over(k, k.function->statements[0].name);
  REQUIRE(!red.back()->parallel);
  red.back()->parallel = true;
  const auto pc = kernel::check_parallel(k);
  CHECK(pc.conflicts > 0);
  CHECK(pc.first_conflict.find("loop " + red.back()->var) == 0);
  CHECK(pc.first_conflict.find("Sum") != std::string::npos);
}

TEST_CASE("a loop that places a buffer box anew each iteration is marked, and sharing its buffers is a conflict") {
  frontend::Module m;
  auto c = compile_text(kLayerNorm, {{"M", 512}, {"N", 32}}, "isa/targets/sm90.yaml", m);
  kernel::Kernel& k = c->kernel;
  kernel::Node* grid = nullptr;
  kernel::for_each_node(k.body, [&](const kernel::Node& n, int) {
    if (!grid && n.kind == kernel::NodeKind::Loop && n.loop_kind == kernel::LoopKind::ParallelCores)
      grid = const_cast<kernel::Node*>(&n);
  });
  REQUIRE(grid);
  CHECK(grid->parallel);         // blocks have their own buffers
  CHECK(grid->rebinds_buffers);  // the row tile's buffers are placed at its origin
  CHECK(kernel::check_parallel(k).conflicts == 0);
  grid->rebinds_buffers = false;  // as if threads of one block shared the tiles' buffers
  const auto pc = kernel::check_parallel(k);
  CHECK(pc.conflicts > 0);
  CHECK(pc.first_conflict.find("_g0") != std::string::npos);  // a buffer, not a tensor
}

TEST_CASE("every small-suite workload: parallel loops proved by isl are conflict-free when executed (sm90, davinci-910, c)") {
  const frontend::Suite s = frontend::load_suite("workloads/small.yaml");
  for (const std::string target : {"isa/targets/sm90.yaml", "isa/targets/davinci-910.yaml", "c"}) {
    for (const auto& e : s.entries) {
      frontend::Module m = frontend::load_module(e.file);
      CompileOptions o;
      o.target = target;
      o.sizes = e.shape;
      auto c = compile(frontend::select_function(m, e.def), o);
      const auto pc = kernel::check_parallel(c->kernel);
      INFO(e.name << " on " << target << ": " << pc.first_conflict);
      CHECK(pc.complete);
      CHECK(pc.conflicts == 0);
    }
  }
}
