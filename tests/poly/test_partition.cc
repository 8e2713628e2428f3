// poly::partition_program and program::plan_memory: which statements become which kernel and why,
// the kernels' own functions (inputs, outputs, locals), the kernels run one after another on the
// interpreter against the whole def element by element, and arena offsets computed by hand.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "tests/poly/poly_test_util.h"
#include "compiler/interp/interpreter.h"
#include "compiler/poly/partition.h"
#include "compiler/program/memory_plan.h"
#include "compiler/program/program.h"
#include "compiler/pipeline_fit.h"
#include "isa/base/error.h"

using namespace tessel;

namespace {

using Case = test::OneDef;
Case load(const std::string& src) { return test::load_one_def(src); }

std::vector<std::vector<std::string>> outputs_by_group(const ir::Function& f, const poly::ProgramPartition& p) {
  std::vector<std::vector<std::string>> r;
  for (const auto& g : p.groups) {
    r.emplace_back();
    for (int i : g.statements) r.back().push_back(f.statements[size_t(i)].output);
  }
  return r;
}

std::vector<std::string> names_of(const std::vector<const ir::Tensor*>& ts) {
  std::vector<std::string> r;
  for (const auto* t : ts) r.push_back(t->name);
  return r;
}

// Runs every kernel of `p` on the interpreter in order and compares the def's outputs with the
// interpreter on the whole def.
void check_kernels_compose(const ir::Function& f, const poly::ProgramPartition& p, const std::map<std::string, int64_t>& sizes) {
  const auto inputs = interp::random_inputs(f, sizes, 7);
  const auto whole = interp::evaluate(f, sizes, inputs);
  std::map<std::string, NpyArray> pool = inputs;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const ir::Function k = poly::kernel_function(f, p, g);
    std::map<std::string, int64_t> ks;
    for (const auto& q : k.params) ks[q] = sizes.at(q);
    std::map<std::string, NpyArray> in;
    for (const auto* t : k.inputs()) in.emplace(t->name, pool.at(t->name));
    for (auto& [n, a] : interp::evaluate(k, ks, in)) pool.insert_or_assign(n, a);
  }
  for (const auto& [n, a] : whole) {
    const NpyArray& b = pool.at(n);
    CHECK(a.shape == b.shape);
    CHECK(a.data == b.data);  // the same interpreter in the same order: bit for bit
  }
}

const char* kLayer = R"(
def layer(f32[T, E] X, f32[E, E] Wq, f32[E, E] Wk, f32[E, F] W1, f32[F] b1) -> (f32[T, F] Y) {
  Q(t, e) +=! X(t, i) * Wq(i, e)
  K(t, e) +=! X(t, i) * Wk(i, e)
  S(s, u) +=! Q(s, e) * K(u, e)
  Mx(s) max=! S(s, u)
  P(s, u) = exp(S(s, u) - Mx(s))
  Z(s) +=! P(s, u)
  O(s, e) +=! P(s, u) * X(u, e)
  On(s, e) = O(s, e) / Z(s)
  G(t, f) +=! On(t, i) * W1(i, f)
  Y(t, f) = max(G(t, f) + b1(f), 0.0)
}
)";

}  // namespace

TEST_CASE("partition: every contraction anchors a kernel, element-wise consumers of its output space join it as an epilogue, row reductions form a chain") {
  Case c = load(kLayer);
  const auto p = poly::partition_program(*c.f, poly::PartitionMode::Auto);
  CHECK(p.contraction_units == 5);
  CHECK(outputs_by_group(*c.f, p) == std::vector<std::vector<std::string>>{
                                        {"Q"}, {"K"}, {"S"}, {"Mx", "P", "Z"}, {"O", "On"}, {"G", "Y"}});
  CHECK(p.groups[4].anchor == 6);
  CHECK(p.groups[3].anchor == -1);
  CHECK(p.groups[0].name == "layer_k0");
  REQUIRE(p.decisions.size() == 10);
  CHECK(p.decisions[3] == "S3 (Mx) -> kernel 3: starts a kernel: a reduction after a contraction is not an epilogue");
  CHECK(p.decisions[7] == "S7 (On) -> kernel 4: joins as an epilogue of the contraction");
}

TEST_CASE("partition: a single operator with its epilogue, softmax, and a sum of squares stay one kernel in auto mode") {
  Case gemm = load("def g(f16[M, K] A, f16[K, N] B, f32[N] b) -> (f32[M, N] C) {\n"
                   "  T(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n  C(m, n) = max(T(m, n) + b(n), 0.0)\n}\n");
  auto p = poly::partition_program(*gemm.f, poly::PartitionMode::Auto);
  CHECK_FALSE(p.cut());
  CHECK(p.groups[0].name == "g");
  CHECK(p.groups[0].anchor == 0);
  p = poly::partition_program(*gemm.f, poly::PartitionMode::Split);
  CHECK_FALSE(p.cut());  // the epilogue joins its contraction even when cutting is forced
  Case norm = load("def n(f32[T, E] X) -> (f32[T, E] Y) {\n  Mu(t) +=! X(t, e)\n  C(t, e) = X(t, e) - Mu(t) / f32(E)\n"
                   "  V(t) +=! C(t, e) * C(t, e)\n  Y(t, e) = C(t, e) * rsqrt(V(t) / f32(E) + 0.00001)\n}\n");
  CHECK(poly::partition_program(*norm.f, poly::PartitionMode::Auto).contraction_units == 0);  // V is a row reduction
  CHECK_FALSE(poly::partition_program(*norm.f, poly::PartitionMode::Split).cut());
}

TEST_CASE("partition: statements that write one tensor stay in one kernel (strongly connected in the dependence graph)") {
  Case c = load("def f(f32[M, K] A, f32[K, N] B, f32[N, P] D, f32[N] b) -> (f32[M, P] E) {\n"
                "  C(m, n) = b(n) where m in 0:M\n  C(m, n) += A(m, k) * B(k, n)\n  E(m, p) +=! C(m, n) * D(n, p)\n}\n");
  const auto p = poly::partition_program(*c.f, poly::PartitionMode::Auto);
  CHECK(outputs_by_group(*c.f, p) == std::vector<std::vector<std::string>>{{"C", "C"}, {"E"}});
  check_kernels_compose(*c.f, p, {{"M", 5}, {"K", 3}, {"N", 4}, {"P", 6}});
}

TEST_CASE("partition: one mode never cuts, and the mode's spelling is checked") {
  Case c = load(kLayer);
  CHECK(poly::partition_program(*c.f, poly::PartitionMode::One).groups.size() == 1);
  CHECK(poly::parse_partition_mode("split", "--partition") == poly::PartitionMode::Split);
  CHECK_THROWS_WITH_AS(poly::parse_partition_mode("all", "--partition"),
                       "--partition: 'all' is not a partition mode (auto, one, split)", UserError);
}

TEST_CASE("kernel_function: tensors another kernel reads become outputs, tensors from outside inputs, the rest locals") {
  Case c = load(kLayer);
  const auto p = poly::partition_program(*c.f, poly::PartitionMode::Auto);
  const ir::Function softmax = poly::kernel_function(*c.f, p, 3);
  CHECK(softmax.name == "layer_k3");
  CHECK(names_of(softmax.inputs()) == std::vector<std::string>{"S"});
  CHECK(names_of(softmax.outputs()) == std::vector<std::string>{"P", "Z"});  // Mx stays inside
  REQUIRE(softmax.find_tensor("Mx"));
  CHECK(softmax.find_tensor("Mx")->kind == ir::TensorKind::Local);
  CHECK(softmax.params == std::vector<std::string>{"T"});
  CHECK(softmax.statements[0].name == "S0");
  const ir::Function last = poly::kernel_function(*c.f, p, 5);
  CHECK(names_of(last.inputs()) == std::vector<std::string>{"W1", "b1", "On"});
  CHECK(names_of(last.outputs()) == std::vector<std::string>{"Y"});
  CHECK(last.find_tensor("G")->kind == ir::TensorKind::Local);
  check_kernels_compose(*c.f, p, {{"T", 6}, {"E", 5}, {"F", 7}});
}

TEST_CASE("memory plan: intermediates share the arena by liveness, largest first at the lowest free aligned offset") {
  // A chain X -> P0 -> P1 -> P2 -> Y of whole-tensor contractions: P0 lives in kernels 0..1, P1 in
  // 1..2, P2 in 2..3. Sizes (f32): P0 = 8x16 = 512 B, P1 = 8x4 = 128 B, P2 = 8x16 = 512 B.
  Case c = load("def chain(f32[M, K] X, f32[K, N] W0, f32[N, R] W1, f32[R, N] W2, f32[N, K] W3) -> (f32[M, K] Y) {\n"
                "  P0(m, n) +=! X(m, k) * W0(k, n)\n  P1(m, r) +=! P0(m, n) * W1(n, r)\n"
                "  P2(m, n) +=! P1(m, r) * W2(r, n)\n  Y(m, k) +=! P2(m, n) * W3(n, k)\n}\n");
  const std::map<std::string, int64_t> sizes{{"M", 8}, {"K", 3}, {"N", 16}, {"R", 4}};
  const auto p = poly::partition_program(*c.f, poly::PartitionMode::Auto);
  REQUIRE(p.groups.size() == 4);
  const program::MemoryPlan plan = program::plan_memory(*c.f, p, sizes, 256);
  REQUIRE(plan.slots.size() == 3);
  // P0 (512 B, placed first) at 0; P2 (512 B) does not meet P0 (kernels 2..3 vs 0..1): also at 0;
  // P1 meets both: after them, at 512 (already aligned to 256).
  CHECK(plan.find("P0")->offset == 0);
  CHECK(plan.find("P2")->offset == 0);
  CHECK(plan.find("P1")->offset == 512);
  CHECK(plan.arena_bytes == 640);
  CHECK(plan.peak_live_bytes == 640);  // kernel 1: P0 and P1, kernel 2: P1 and P2
  CHECK(plan.total_bytes == 1152);
  const program::MemoryPlan tight = program::plan_memory(*c.f, p, sizes, 1024);
  CHECK(tight.find("P1")->offset == 1024);  // the end of P0 (512) rounded up to the alignment
  CHECK(tight.arena_bytes == 1152);
}

TEST_CASE("compile_program: a cut def compiles each kernel with its own sizes, a one-kernel def is compiled as it is") {
  Case c = load(kLayer);
  CompileOptions o;
  o.sizes = {{"T", 8}, {"E", 16}, {"F", 16}};
  o.online_softmax = false;  // the softmax as written: its own kernels (fused: tests/poly/test_online_softmax.cc)
  const auto prog = program::compile_program(*c.f, o, poly::PartitionMode::Auto);
  REQUIRE(prog->kernels.size() == 6);
  CHECK(prog->kernels[3]->function->name == "layer_k3");
  CHECK(prog->memory.slots.size() == 6);  // Q K S P Z On
  CHECK(program::explain_program(*prog).find("memory plan: arena") != std::string::npos);
  o.tile = "t=8/8";
  o.plan_source.kind = PlanSource::Kind::Given;
  CHECK_THROWS_AS(program::compile_program(*c.f, o, poly::PartitionMode::Auto), UserError);
  const auto one = program::compile_program(*c.f, CompileOptions{"c", "", {}, {{"T", 8}, {"E", 16}, {"F", 16}}},
                                            poly::PartitionMode::One);
  REQUIRE(one->single());
  CHECK(one->kernels[0]->function->name == "layer");
}

// A GEMM beside a 0-d minimum over a 1024 x 1024 tensor: as one kernel the minimum's whole operand
// box is staged in L1 at every tile (4 MiB double-buffered against davinci-910's 1 MiB), so the pipeline
// answers "no tile fits" as a value (compile_unless_no_tile_fits) and `auto` cuts the def, the note
// naming that answer; with R = 64 it fits and stays one kernel; `--partition one` reports the failure.
TEST_CASE("compile_program: auto cuts a def no tile of which fits as one kernel, keeps one that fits, and one reports it") {
  Case c = load("def gemm_and_min(f16[M, K] A, f16[K, N] B, f16[R, R] X) -> (f32[M, N] C, f16[] Y) {\n"
                "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
                "  Y() min=! X(r1, r0)\n"
                "}\n");
  CompileOptions o;
  o.target = "isa/targets/davinci-910.yaml";
  o.sizes = {{"M", 64}, {"N", 64}, {"K", 64}, {"R", 1024}};
  const CompileFit whole = compile_unless_no_tile_fits(*c.f, o);
  CHECK_FALSE(whole.compilation);
  CHECK(whole.no_tile_fits.rfind("gemm_and_min: no tile fits davinci-910: the default tile, shrunk to m=1/1,n=1/1,k=1/1, still does not fit: "
                                 "level L1 (stage) of davinci-910 needs 4194304 bytes", 0) == 0);
  const auto cut = program::compile_program(*c.f, o, poly::PartitionMode::Auto);
  REQUIRE(cut->kernels.size() == 2);
  CHECK(cut->partition_note == "cut into 2 kernels: as one kernel, " + whole.no_tile_fits);
  CHECK(program::explain_program(*cut).find("partition: cut into 2 kernels: as one kernel, gemm_and_min: no tile fits davinci-910") !=
        std::string::npos);
  try {
    program::compile_program(*c.f, o, poly::PartitionMode::One);
    FAIL("--partition one compiled a def no tile fits");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()) == whole.no_tile_fits);
  }
  o.sizes["R"] = 64;
  const CompileFit fits = compile_unless_no_tile_fits(*c.f, o);
  CHECK(fits.compilation);
  CHECK(fits.no_tile_fits.empty());
  const auto one = program::compile_program(*c.f, o, poly::PartitionMode::Auto);
  CHECK(one->single());
  CHECK(one->partition_note.empty());
}
