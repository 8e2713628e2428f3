// poly::find_online_softmax / build_attention (the record's roles, strides and causal offset
// checked against hand-computed values), the reasons it refuses, the partition keeping a match
// in one kernel, and the fused kernel through the C emitter against the reference interpreter
// element by element (sizes that are no multiple of the key block, decode, causal, BSHD).
#include <doctest/doctest.h>

#include "compiler/emit_c/run_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/pipeline.h"
#include "compiler/poly/online_softmax.h"
#include "compiler/poly/partition.h"
#include "compiler/program/program.h"
#include "tests/poly/poly_test_util.h"

using namespace tessel;

namespace {

const frontend::Module& attention_module() {
  static const frontend::Module m = frontend::load_module("workloads/attention.tsl");
  return m;
}
const ir::Function& attention_def(const std::string& name) { return frontend::select_function(attention_module(), name); }

std::string first_rejection(const std::string& src) {
  const auto c = test::load_one_def(src);
  const auto s = poly::find_online_softmax(*c.f);
  CHECK(s.matches.empty());
  return s.rejected.empty() ? std::string() : s.rejected.front();
}

}  // namespace

TEST_CASE("online softmax: every def of workloads/attention.tsl is one match covering the def") {
  for (const char* name : {"attention_bhsd", "attention_bshd", "attention_causal_bhsd", "attention_causal_bshd",
                           "attention_bf16_bhsd", "attention_softmax_first", "attention_f32"}) {
    INFO(name);
    const ir::Function& f = attention_def(name);
    std::string why;
    const auto m = poly::whole_function_match(f, &why);
    CHECK_MESSAGE(m.has_value(), why);
  }
}

TEST_CASE("online softmax: the BSHD record's roles and strides are the row-major strides of each tensor") {
  const ir::Function& f = attention_def("attention_bshd");
  const auto m = poly::whole_function_match(f);
  REQUIRE(m);
  const std::map<std::string, int64_t> sizes = {{"B", 2}, {"S", 5}, {"T", 7}, {"H", 3}, {"D", 4}};
  const kernel::Attention a = poly::build_attention(f, *m, sizes);
  REQUIRE(a.batch.size() == 2);
  CHECK(a.batch[0].var == "b");
  CHECK(a.batch[1].var == "h");
  CHECK(a.query.var == "i");
  CHECK(a.query.extent == 5);
  CHECK(a.key.var == "j");
  CHECK(a.key.extent == 7);
  REQUIRE(a.head.size() == 1);
  CHECK(a.head[0].extent == 4);
  REQUIRE(a.value.size() == 1);
  CHECK(a.value[0].var == "e");
  // Q[B, S, H, D]: b 5*3*4, i 3*4, h 4, d 1; K and V [B, T, H, D]: b 7*3*4, j 12, h 4
  CHECK(a.q.coeff == std::map<std::string, int64_t>{{"b", 60}, {"i", 12}, {"h", 4}, {"d", 1}});
  CHECK(a.k.coeff == std::map<std::string, int64_t>{{"b", 84}, {"j", 12}, {"h", 4}, {"d", 1}});
  CHECK(a.v.coeff == std::map<std::string, int64_t>{{"b", 84}, {"j", 12}, {"h", 4}, {"e", 1}});
  CHECK(a.out.tensor == "Out");
  CHECK(a.out.coeff == std::map<std::string, int64_t>{{"b", 60}, {"i", 12}, {"h", 4}, {"e", 1}});
  CHECK(a.steps.size() == 1);  // the maximum's own `* rsqrt(f32(D))`
  CHECK_FALSE(a.causal_offset);
  CHECK_FALSE(a.normalise_first);
  CHECK(a.prob_type == DType::F32);
  // 2 * (B H) * S * T * (D + D)
  CHECK(a.flops() == doctest::Approx(2.0 * 6 * 5 * 7 * 8));
}

TEST_CASE("online softmax: a select(j <= i + T - S, x, -1.0e30) step is recognised as causal with offset T - S") {
  const ir::Function& f = attention_def("attention_causal_bhsd");
  const auto m = poly::whole_function_match(f);
  REQUIRE(m);
  const kernel::Attention a = poly::build_attention(f, *m, {{"B", 1}, {"H", 2}, {"S", 4}, {"T", 10}, {"D", 8}});
  REQUIRE(a.causal_offset);
  CHECK(*a.causal_offset == 6);
  // rows i = 0..3 keep 7, 8, 9, 10 keys: 34 of 40
  CHECK(a.effective_flops() == doctest::Approx(a.flops() * 34.0 / 40.0));
  // a mask that keeps no key for the first rows (j <= i - 1) is no skip: the masked rows are uniform averages
  const auto c = test::load_one_def(R"(
def a(f32[S, D] Q, f32[S, D] K, f32[S, D] V) -> (f32[S, D] Out) {
  Sc(i, j) +=! Q(i, d) * K(j, d)
  L(i, j) = select(j <= i - 1, Sc(i, j), -1.0e30)
  Mx(i) max=! L(i, j)
  E(i, j) = exp(L(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  O(i, e) +=! E(i, j) * V(j, e)
  Out(i, e) = O(i, e) / Z(i)
})");
  const auto mm = poly::whole_function_match(*c.f);
  REQUIRE(mm);
  CHECK_FALSE(poly::build_attention(*c.f, *mm, {{"S", 6}, {"D", 4}}).causal_offset);
}

TEST_CASE("online softmax: the softmax-then-matmul form is normalise-first and its mask tensor a step's read") {
  const ir::Function& f = attention_def("attention_softmax_first");
  const auto m = poly::whole_function_match(f);
  REQUIRE(m);
  const kernel::Attention a = poly::build_attention(f, *m, {{"B", 1}, {"H", 2}, {"S", 4}, {"T", 10}, {"D", 8}});
  CHECK(a.normalise_first);
  REQUIRE(a.steps.size() == 1);
  CHECK(a.steps[0].inputs == std::map<std::string, std::string>{{"Sc", "score"}});
  CHECK(a.epilogue.expr != nullptr);
  CHECK(a.epilogue.inputs == std::map<std::string, std::string>{{"O", "O"}});
}

TEST_CASE("online softmax: the reasons it does not apply") {
  // the maximum is also an output's input
  CHECK(first_rejection(R"(
def a(f32[S, D] Q, f32[S, D] K, f32[S, D] V) -> (f32[S, D] Out, f32[S] R) {
  Sc(i, j) +=! Q(i, d) * K(j, d)
  Mx(i) max=! Sc(i, j)
  E(i, j) = exp(Sc(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  O(i, e) +=! E(i, j) * V(j, e)
  Out(i, e) = O(i, e) / Z(i)
  R(i) = Mx(i)
})").find("Mx is read by 2 statements") != std::string::npos);
  // the exponent is not what the maximum reduces
  CHECK(first_rejection(R"(
def a(f32[S, D] Q, f32[S, D] K, f32[S, D] V) -> (f32[S, D] Out) {
  Sc(i, j) +=! Q(i, d) * K(j, d)
  Mx(i) max=! Sc(i, j)
  E(i, j) = exp(Sc(i, j) * 0.5 - Mx(i))
  Z(i) +=! E(i, j)
  O(i, e) +=! E(i, j) * V(j, e)
  Out(i, e) = O(i, e) / Z(i)
})").find("not the expression the maximum Mx reduces") != std::string::npos);
  // the exponentials are also an output
  CHECK(first_rejection(R"(
def a(f32[S, D] Q, f32[S, D] K, f32[S, D] V) -> (f32[S, D] Out, f32[S, S] P) {
  Sc(i, j) +=! Q(i, d) * K(j, d)
  Mx(i) max=! Sc(i, j)
  E(i, j) = exp(Sc(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  O(i, e) +=! E(i, j) * V(j, e)
  Out(i, e) = O(i, e) / Z(i)
  P(i, j) = E(i, j)
})").find("E is read by 3 statements") != std::string::npos);
  // probabilities rounded to f16 feeding an f32 result: the online form would round them at another scale
  CHECK(first_rejection(R"(
def a(f16[S, D] Q, f16[S, D] K, f16[S, D] V) -> (f32[S, D] Out) {
  Sc(i, j) +=! f32(Q(i, d)) * f32(K(j, d))
  Mx(i) max=! Sc(i, j)
  E(i, j) = exp(Sc(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  P(i, j) = f16(E(i, j) / Z(i))
  Out(i, e) +=! f32(P(i, j)) * f32(V(j, e))
})").find("rounded to a 16-bit type but the result Out is f32") != std::string::npos);
  // a plain softmax has no context contraction
  CHECK(first_rejection(R"(
def a(f32[S, T] X) -> (f32[S, T] Y) {
  Mx(i) max=! X(i, j)
  E(i, j) = exp(X(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  Y(i, j) = E(i, j) / Z(i)
})").find("not one local written by a contraction") != std::string::npos);
}

TEST_CASE("online softmax: the partition keeps BERT's attention in one kernel of its own") {
  const frontend::Module m = frontend::load_module("workloads/models/bert_encoder_layer.tsl");
  const ir::Function& f = frontend::select_function(m, "bert_layer_f16");
  const auto found = poly::find_online_softmax(f);
  REQUIRE(found.matches.size() == 1);
  const auto p = poly::partition_program(f, poly::PartitionMode::Auto, {found.matches[0].statements});
  int fused = -1;
  for (size_t g = 0; g < p.groups.size(); ++g)
    if (p.groups[g].fused) fused = int(g);
  REQUIRE(fused >= 0);
  std::vector<std::string> outs;
  for (int i : p.groups[size_t(fused)].statements) outs.push_back(f.statements[size_t(i)].output);
  CHECK(outs == std::vector<std::string>{"S", "Mx", "E", "Z", "O", "On"});
  // 11 kernels unfused (scores, softmax rows, context as three): 9 with the fused one
  CHECK(poly::partition_program(f, poly::PartitionMode::Auto).groups.size() == 11);
  CHECK(p.groups.size() == 9);
}

TEST_CASE("online softmax: the fused kernel through the C emitter equals the reference element by element") {
  struct Run {
    const char* def;
    std::map<std::string, int64_t> sizes;
  };
  const std::vector<Run> runs = {
      {"attention_bhsd", {{"B", 1}, {"H", 2}, {"S", 33}, {"T", 147}, {"D", 16}}},  // 147 keys: 2 full blocks of 64 and 19
      {"attention_bshd", {{"B", 2}, {"H", 3}, {"S", 17}, {"T", 70}, {"D", 8}}},
      {"attention_causal_bhsd", {{"B", 1}, {"H", 2}, {"S", 70}, {"T", 70}, {"D", 16}}},
      {"attention_causal_bshd", {{"B", 1}, {"H", 2}, {"S", 1}, {"T", 200}, {"D", 16}}},  // decode: one query, every key
      {"attention_softmax_first", {{"B", 1}, {"H", 2}, {"S", 20}, {"T", 130}, {"D", 8}}},
      {"attention_f32", {{"B", 2}, {"H", 1}, {"S", 9}, {"T", 65}, {"D", 12}}},
  };
  std::vector<std::unique_ptr<Compilation>> compiled;
  std::vector<const kernel::Kernel*> kernels;
  std::vector<emit_c::Tensors> inputs;
  for (const auto& r : runs) {
    CompileOptions o;
    o.sizes = r.sizes;
    compiled.push_back(compile(attention_def(r.def), o));
    const kernel::Kernel& k = compiled.back()->kernel;
    INFO(r.def);
    REQUIRE(k.attention);
    // no score tensor: the kernel's tensors are the def's inputs and outputs
    for (const auto& t : k.tensors) CHECK(t.kind != ir::TensorKind::Local);
    CHECK(k.buffers.empty());
    kernels.push_back(&k);
    inputs.push_back(interp::random_inputs(attention_def(r.def), r.sizes, 11));
  }
  const auto results = emit_c::run_c_batch(kernels, inputs);
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto expected = interp::evaluate(attention_def(runs[i].def), runs[i].sizes, inputs[i]);
    const auto v = emit_c::verify(expected, results[i].outputs);
    INFO(runs[i].def << ": " << v.first_mismatch);
    CHECK(v.verified);
  }
}

TEST_CASE("online softmax: --no-online-softmax and forms the NPU lowering refuses keep the statements unfused and say why") {
  const ir::Function& f = attention_def("attention_bhsd");
  CompileOptions o;
  o.sizes = {{"B", 1}, {"H", 1}, {"S", 8}, {"T", 8}, {"D", 8}};
  o.online_softmax = false;
  const auto off = program::compile_program(f, o, poly::PartitionMode::Auto);
  CHECK(off->kernels.size() == 3);
  for (const auto& k : off->kernels) CHECK_FALSE(k->kernel.attention);
  REQUIRE(off->online_softmax.size() == 1);
  CHECK(off->online_softmax[0].find("not applied") != std::string::npos);
  CHECK(off->online_softmax[0].find("--no-online-softmax") != std::string::npos);
  o.online_softmax = true;
  // davinci-910 lowers the fused kernel (compiler/emit_npu/attention.h), D = 8 padded to the fractal
  o.target = "isa/targets/davinci-910.yaml";
  const auto npu = program::compile_program(f, o, poly::PartitionMode::Auto);
  REQUIRE(npu->kernels.size() == 1);
  CHECK(npu->kernels[0]->kernel.attention);
  // ... but not f32 operands (the cube takes f16): the statements compile unfused, with the reason
  const auto f32 = compile(attention_def("attention_f32"), o);
  CHECK_FALSE(f32->kernel.attention);
  CHECK(f32->online_softmax.find("not applied on davinci-910") != std::string::npos);
  CHECK(f32->online_softmax.find("Q in f32") != std::string::npos);
  o.target = "c";
  const auto on = program::compile_program(f, o, poly::PartitionMode::Auto);
  REQUIRE(on->kernels.size() == 1);
  CHECK(on->kernels[0]->kernel.attention);
}
