// The fused attention kernel on the NPU (compiler/emit_npu/attention.h): workloads/attention.tsl's
// forms compile to one program (Kernel::attention), which runs on the simulator with naive and
// pruned syncs, race-free, and matches the reference interpreter element by element; no GM tensor
// holds S x T values; the forms the lowering does not take are refused with their reason.
#include <doctest/doctest.h>

#include <numeric>

#include "compiler/emit_npu/attention.h"
#include "compiler/kernel/roofline.h"
#include "compiler/poly/online_softmax.h"
#include "isa/hierarchy.h"
#include "isa/base/error.h"
#include "tests/emit_npu/npu_case.h"

namespace tessel {
namespace {

using npu_test::compile_case;
using npu_test::run;

int64_t size_of(const std::string& shape, const std::string& name) { return parse_shape(shape).at(name); }

// One program, verified (f16 outputs within the interpreter's f16 tolerance: P is rounded to f16
// for the cube and the sums run in another order), race-free, with no S x T tensor.
void check_fused(const std::string& def, const std::string& shape) {
  CAPTURE(def);
  CAPTURE(shape);
  auto c = compile_case("attention.tsl", def, shape);
  REQUIRE(c->compilation->kernel.attention);
  const int64_t S = size_of(shape, "S"), T = size_of(shape, "T");
  // GM holds the kernel's tensors and zero guards after them (rows read past an end); no scores
  for (const npu::TensorBinding& t : c->kernel.program.tensors) {
    CAPTURE(t.name);
    if (c->compilation->kernel.find_tensor(t.name)) continue;
    CHECK(t.role == npu::TensorRole::Scratch);
    const std::string guarded = t.name.substr(0, t.name.rfind("_guard"));
    CHECK(t.name == guarded + "_guard");
    CHECK(c->compilation->kernel.find_tensor(guarded) != nullptr);
    const int64_t elements = std::accumulate(t.shape.begin(), t.shape.end(), int64_t{1}, std::multiplies<>());
    if (S >= 64 && T >= 64) CHECK(elements < S * T);
  }
  const npu_test::Run naive = run(*c, npu_sync::SyncMode::Naive);
  const npu_test::Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  MESSAGE(def << " " << shape << " (" << c->kernel.program.cores << " cores): cycles " << naive.sim.record.total_cycles << " -> "
              << pruned.sim.record.total_cycles);
  for (const npu_test::Run* r : {&naive, &pruned}) {
    CAPTURE(r->verification.first_mismatch);
    CHECK(r->verification.verified);
    CHECK(r->verification.mismatches == 0);
    CHECK(r->sim.record.races.empty());
    CHECK_FALSE(r->sim.record.deadlock);
  }
  CHECK(pruned.sync.sync_instructions <= naive.sync.sync_instructions);
}

TEST_CASE("fused attention: BHSD and BSHD, one program over the cores, verified against the interpreter") {
  check_fused("attention_bhsd", "B=1,H=2,S=128,T=128,D=64");
  check_fused("attention_bshd", "B=2,H=3,S=64,T=96,D=32");
}

TEST_CASE("fused attention: causal masks skip the key blocks above the diagonal and mask the crossing ones") {
  check_fused("attention_causal_bhsd", "B=1,H=2,S=128,T=128,D=64");
  // a cached prefix (T > S: offset T - S), sizes not multiples of 16
  check_fused("attention_causal_bshd", "B=1,H=2,S=37,T=150,D=16");
  // every core has a batch point: a section per query block, the key blocks above its diagonal
  // skipped (and the mask computed only on the blocks that cross it)
  check_fused("attention_causal_bhsd", "B=2,H=16,S=300,T=300,D=16");
  auto c = compile_case("attention.tsl", "attention_causal_bhsd", "B=2,H=16,S=300,T=300,D=16", "", false);
  const std::string notes = c->kernel.notes.front();
  CHECK(notes.find("the key blocks above its diagonal skipped") != std::string::npos);
}

TEST_CASE("fused attention: causal sections on every core when the batch points are fewer than the cores") {
  // 2 batch points x 22 query blocks dealt round-robin over the 32 cores: in some sections a core
  // has no batch point (a loop of no trip, which the sync pass must not lean on)
  const std::string shape = "B=2,H=1,S=700,T=700,D=64";
  check_fused("attention_causal_bhsd", shape);
  auto causal = compile_case("attention.tsl", "attention_causal_bhsd", shape);
  auto full = compile_case("attention.tsl", "attention_bhsd", shape);
  CHECK(causal->kernel.program.cores == 32);
  CHECK(causal->kernel.notes.front().find("the key blocks above its diagonal skipped") != std::string::npos);
  // about half the key blocks skipped: within 10 % of the unmasked attention's cycles (every block
  // computed and masked on the 32 cores took 1.44x)
  const int64_t c = run(*causal, npu_sync::SyncMode::Pruned).sim.record.total_cycles;
  const int64_t f = run(*full, npu_sync::SyncMode::Pruned).sim.record.total_cycles;
  MESSAGE("causal " << c << " cycles, unmasked " << f);
  CHECK(double(c) < 1.1 * double(f));
}

TEST_CASE("fused attention: decode (one query) and sizes that are not multiples of 16") {
  check_fused("attention_bhsd", "B=1,H=4,S=1,T=300,D=64");
  check_fused("attention_causal_bhsd", "B=2,H=1,S=1,T=147,D=32");
  check_fused("attention_bhsd", "B=1,H=2,S=33,T=147,D=16");
  // head and value dimensions padded to the fractal through UB (rows closer than 16 elements), or
  // read as they are with Q's padding zeroed (BSHD: rows H x D apart)
  check_fused("attention_bhsd", "B=2,H=3,S=45,T=131,D=24");
  check_fused("attention_bshd", "B=1,H=3,S=20,T=40,D=8");
  check_fused("attention_causal_bshd", "B=1,H=2,S=45,T=45,D=40");
}

// A def the fused lowering refuses (tests/emit_npu/data/FILE): the refusal names the reason, and the
// def runs unfused within the interpreter's tolerance (exp and the sums in the vector unit's order),
// naive and pruned, race-free.
void check_refused_then_unfused(const std::string& file, const std::string& def, const std::string& shape, const std::string& reason) {
  CAPTURE(def);
  const std::string path = "../tests/emit_npu/data/" + file;
  const frontend::Module module = frontend::load_module(npu_test::kRoot + "/workloads/" + path);
  const ir::Function& f = frontend::select_function(module, def);
  const auto match = poly::whole_function_match(f);
  REQUIRE(match);
  const std::string why = online_softmax_obstacle(npu_test::kTarget, isa::load_hierarchy(npu_test::kTarget), f, *match, parse_shape(shape));
  CAPTURE(why);
  CHECK(why.find(reason) != std::string::npos);
  auto c = compile_case(path, def, shape);
  CHECK_FALSE(c->compilation->kernel.attention);
  for (const auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
    const npu_test::Run r = run(*c, mode);
    CAPTURE(r.verification.first_mismatch);
    CHECK(r.verification.verified);
    CHECK(r.verification.mismatches == 0);
    CHECK(r.sim.record.races.empty());
  }
}

// A scale that is a select of constants is not folded into Q (folding took it for the causal
// mask's select: an internal error, exit 3): the analysis refuses the select.
TEST_CASE("fused attention: a score scale written as a select of constants is refused with the reason, unfused it verifies") {
  check_refused_then_unfused("attention_scale_select.tsl", "attention_scale_select", "B=1,H=2,S=64,T=64,D=64",
                             "does not take a select other than the causal mask");
}

// f16 operands with an f32 output: P is multiplied on the cube in f16, so the fused result was
// exact to f16 only (3 elements beyond the f32 output's tolerance at this shape): refused.
TEST_CASE("fused attention: an f32 output is refused (P in f16 on the cube), unfused it verifies to f32") {
  check_refused_then_unfused("attention_f32_output.tsl", "attention_f32_output", "B=1,H=2,S=45,T=131,D=24",
                             "an f32 output Out (P is multiplied on the cube in f16");
}

TEST_CASE("fused attention: a step reading a mask tensor, probabilities normalised first") {
  check_fused("attention_softmax_first", "B=1,H=2,S=33,T=80,D=16");
}

TEST_CASE("fused attention: the roofline counts both contractions on the cube") {
  auto c = compile_case("attention.tsl", "attention_bhsd", "B=1,H=2,S=64,T=96,D=32", "", false);
  const kernel::NpuRoofline r = kernel::npu_roofline(c->compilation->kernel, isa::npu_machine(c->compilation->hierarchy));
  CHECK(r.cube_macs == uint64_t(2) * 64 * 96 * (32 + 32));
  CHECK(c->kernel.macs == r.cube_macs);
}

TEST_CASE("fused attention: forms the NPU lowering does not take are refused with their reason") {
  const frontend::Module module = frontend::load_module(npu_test::kRoot + "/workloads/attention.tsl");
  const isa::Hierarchy h = isa::load_hierarchy(npu_test::kTarget);
  // the obstacle the pipeline asks before fusing (compiler/pipeline.h): the lowering's refusal, so
  // such a def compiles unfused
  auto refusal = [&](const std::string& def, const std::string& shape) {
    const ir::Function& f = frontend::select_function(module, def);
    const auto match = poly::whole_function_match(f);
    REQUIRE(match);
    return online_softmax_obstacle(npu_test::kTarget, h, f, *match, parse_shape(shape));
  };
  CHECK(refusal("attention_bhsd", "B=1,H=1,S=32,T=32,D=24").empty());
  // a match inside a larger def (what a program's partition sees: Q, K, V computed by earlier
  // statements): the f16 BERT layer's attention is taken, the f32 one's refused
  const frontend::Module bert = frontend::load_module(npu_test::kRoot + "/workloads/models/bert_encoder_layer.tsl");
  for (const std::string def : {"bert_layer_f16", "bert_layer"}) {
    const ir::Function& f = frontend::select_function(bert, def);
    const poly::OnlineSoftmaxSearch found = poly::find_online_softmax(f);
    REQUIRE(found.matches.size() == 1);
    const std::string why = online_softmax_obstacle(npu_test::kTarget, h, f, found.matches[0], parse_shape("T=32,H=2,D=32,F=128"));
    CAPTURE(why);
    CHECK(why.empty() == (def == "bert_layer_f16"));
  }
  CHECK(refusal("attention_f32", "B=1,H=1,S=16,T=16,D=16").find("Q in f32") != std::string::npos);
}

// The lowering's refusal is analysis (why_not_attention, compiler/emit_npu/attention.h): the record's
// form, the plan, then each step's and the epilogue's forms and UB regions, each in emit order,
// answered as a value before any emitting; emit_attention refuses with the same text.
TEST_CASE("fused attention: the NPU lowering decides by analysis, a step's form or its UB regions refused with the reason") {
  const frontend::Module module = frontend::parse_module(R"(
def att_sin(f16[B, H, S, D] Q, f16[B, H, T, D] K, f16[B, H, T, D] V) -> (f16[B, H, S, D] Out) {
  Sc(b, h, i, j) +=! f32(Q(b, h, i, d)) * f32(K(b, h, j, d))
  Mx(b, h, i) max=! sin(cos(sin(cos(sin(Sc(b, h, i, j))))))
  E(b, h, i, j) = exp(sin(cos(sin(cos(sin(Sc(b, h, i, j)))))) - Mx(b, h, i))
  Z(b, h, i) +=! E(b, h, i, j)
  O(b, h, i, e) +=! E(b, h, i, j) * f32(V(b, h, j, e))
  Out(b, h, i, e) = f16(O(b, h, i, e) / Z(b, h, i))
}
def att_index(f16[B, H, S, D] Q, f16[B, H, T, D] K, f16[B, H, T, D] V) -> (f16[B, H, S, D] Out) {
  Sc(b, h, i, j) +=! f32(Q(b, h, i, d)) * f32(K(b, h, j, d))
  Mx(b, h, i) max=! Sc(b, h, i, j) * f32(j)
  E(b, h, i, j) = exp(Sc(b, h, i, j) * f32(j) - Mx(b, h, i))
  Z(b, h, i) +=! E(b, h, i, j)
  O(b, h, i, e) +=! E(b, h, i, j) * f32(V(b, h, j, e))
  Out(b, h, i, e) = f16(O(b, h, i, e) / Z(b, h, i))
}
)", "steps.tsl");
  const std::map<std::string, int64_t> sizes = parse_shape("B=1,H=1,S=64,T=64,D=32");
  auto refusal = [&](const std::string& def, const isa::Hierarchy& h) {
    const ir::Function& f = frontend::select_function(module, def);
    const auto match = poly::whole_function_match(f);
    REQUIRE(match);
    return online_softmax_obstacle(npu_test::kTarget, h, f, *match, sizes);
  };
  const std::string lowering = "the NPU lowering of the fused attention (online softmax) does not take ";
  const isa::Hierarchy h = isa::load_hierarchy(npu_test::kTarget);
  // five composed sines and cosines fit davinci-910's UB; an index as a value is no form of it
  CHECK(refusal("att_sin", h).empty());
  CHECK(refusal("att_index", h) == "kernel att_index: " + lowering + "an index used as a value in a step, other than the causal mask");
  // with 40 KiB of UB the step's 45 regions of one 16-column block (16 rows here: 256 elements)
  // do not fit beside the plan's buffers; with 16 KiB the plan's own vector regions do not
  const isa::Hierarchy ub40 = isa::load_hierarchy(npu_test::kTarget, isa::parse_overrides("UB.capacity_bytes=40KiB"));
  CHECK(refusal("att_sin", ub40) == "kernel att_sin: " + lowering + "steps or an epilogue whose 45 UB regions of 256 elements do not fit UB");
  const isa::Hierarchy ub16 = isa::load_hierarchy(npu_test::kTarget, isa::parse_overrides("UB.capacity_bytes=16KiB"));
  CHECK(refusal("att_sin", ub16) == "kernel att_sin: " + lowering + "blocks whose vector regions do not fit UB");
}

}  // namespace
}  // namespace tessel
