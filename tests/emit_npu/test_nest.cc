// The general NPU vector lowering (compiler/emit_npu/nest.h) end to end on both davinci targets:
// operators outside the templates (workloads/generality.tsl, long softmax / layer-norm rows, rows
// larger than UB) verify against the reference interpreter with naive and pruned syncs, race-free;
// the tile and core choices are the ones the header describes.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>

#include "compiler/emit_c/run_c.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/nest.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const std::string k310 = kRoot + "/isa/targets/davinci-310.yaml";

// Naive and pruned: verified (exactly when `exact`), race-free, no deadlock, pruning no worse.
void check_nest(const std::string& file, const std::string& def, const std::string& shape, bool exact,
                const std::string& target = kTarget) {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(target);
  auto c = compile_case(file, def, shape, "", true, target);
  const Run naive = run(*c, npu_sync::SyncMode::Naive);
  const Run pruned = run(*c, npu_sync::SyncMode::Pruned);
  MESSAGE(def << " " << shape << " (" << c->kernel.program.cores << " cores): syncs " << naive.sync.sync_instructions << " -> "
              << pruned.sync.sync_instructions << ", cycles " << naive.sim.record.total_cycles << " -> "
              << pruned.sim.record.total_cycles << ", max_abs_err " << pruned.verification.max_abs_err);
  for (const Run* r : {&naive, &pruned}) {
    CHECK(r->verification.verified);
    if (exact) CHECK(r->verification.max_abs_err == 0);
    CHECK(r->sim.record.races.empty());
    CHECK_FALSE(r->sim.record.deadlock);
  }
  CHECK(pruned.sync.sync_instructions <= naive.sync.sync_instructions);
  CHECK(pruned.sim.record.total_cycles <= naive.sim.record.total_cycles);
}

std::string notes_of(const std::string& file, const std::string& def, const std::string& shape) {
  auto c = compile_case(file, def, shape, "", false);
  std::string s;
  for (const auto& n : c->kernel.notes) s += n + "\n";
  return s;
}

}  // namespace

TEST_CASE("reductions over the last, a middle and the leading axis (sum / max / min, f32 and f16) verify on both targets") {
  for (const std::string& t : {kTarget, k310}) {
    check_nest("generality.tsl", "reduce_last", "A=3,B=5,C=37", false, t);
    check_nest("generality.tsl", "reduce_middle", "A=3,B=5,C=37", false, t);
    check_nest("generality.tsl", "reduce_lead", "A=7,B=3,C=20", false, t);
    check_nest("generality.tsl", "row_sum_f16", "M=5,N=300", false, t);
  }
  check_nest("generality.tsl", "reduce_last", "A=2,B=3,C=700", false);  // several repeats per row: folded, tail lanes set to the identity
  check_nest("generality.tsl", "reduce_middle", "A=4,B=300,C=5", false);
}

TEST_CASE("strided and broadcast reads, conditions, indices as values and integer arithmetic are exact") {
  for (const std::string& t : {kTarget, k310}) {
    check_nest("generality.tsl", "transpose_scale", "M=13,N=7", true, t);
    check_nest("generality.tsl", "leaky_clip", "M=5,N=33", true, t);
    check_nest("generality.tsl", "band", "M=9,N=11", true, t);
    check_nest("generality.tsl", "int_ops", "M=4,N=19", true, t);
    check_nest("generality.tsl", "stride2_pool", "N=2,H=9,W=8,C=5,P=4,Q=4", true, t);
  }
}

TEST_CASE("softmax and layer-norm with rows of any length: several repeats per row, rows over all cores, rows larger than UB") {
  for (const std::string& t : {kTarget, k310}) {
    check_nest("bert.tsl", "softmax", "M=37,N=1000", false, t);
    check_nest("bert.tsl", "layer_norm", "M=37,N=768", false, t);
  }
  check_nest("bert.tsl", "softmax", "M=2,N=140000", false);  // 280 KB rows, UB 256 KiB: tiled rows, running max and sum
  const std::string notes = notes_of("bert.tsl", "softmax", "M=64,N=768");
  CHECK(notes.find("row pipeline: statements S0..S3 per block of 1 rows x 768 lanes (pitch 768)") != std::string::npos);
  CHECK(notes.find("general vector lowering on 32 core(s), 2 rows each") != std::string::npos);
}

namespace {

// Bytes a run moved from GM into UB and from UB into GM (every core).
std::pair<uint64_t, uint64_t> gm_traffic(const Run& r) {
  uint64_t in = 0, out = 0;
  const int gm = static_cast<int>(npu::Buffer::GM), ub = static_cast<int>(npu::Buffer::UB);
  for (const auto& e : r.sim.record.instructions) {
    if (e.path_from == gm && e.path_to == ub) in += e.bytes;
    if (e.path_from == ub && e.path_to == gm) out += e.bytes;
  }
  return {in, out};
}

// Cycles core 0's vector pipe spent in vector instructions (one per repeat; no flags, no stalls).
uint64_t vector_cycles(const Run& r) {
  uint64_t v = 0;
  for (const auto& e : r.sim.record.instructions) {
    if (e.core != 0 || e.pipe != npu::Pipe::V) continue;
    const npu::Opcode o = r.sync.program.code[e.pc].opcode;
    if (o != npu::Opcode::SetFlag && o != npu::Opcode::WaitFlag && o != npu::Opcode::PipeBarrier) v += e.end - e.start;
  }
  return v;
}

}  // namespace

TEST_CASE("the row pipeline keeps a row kernel's results in UB: each input row read once, each output row written once") {
  // softmax 64 x 768 f16: X in once (64 x 768 x 2 bytes), Y out once; Mx, E, Den never reach GM
  // (statement by statement they did: X twice, E f32 out and in twice, the row values).
  for (const std::string& t : {kTarget, k310}) check_nest("bert.tsl", "softmax", "M=64,N=768", false, t);
  auto sm = compile_case("bert.tsl", "softmax", "M=64,N=768");
  const Run s = run(*sm, npu_sync::SyncMode::Pruned);
  CHECK(s.verification.verified);
  CHECK(gm_traffic(s) == std::pair<uint64_t, uint64_t>{64 * 768 * 2, 64 * 768 * 2});
  // layer norm 64 x 768 on 32 cores: X once, gamma and beta (768 f32 each) once per core.
  for (const std::string& t : {kTarget, k310}) check_nest("bert.tsl", "layer_norm", "M=64,N=768", false, t);
  auto ln = compile_case("bert.tsl", "layer_norm", "M=64,N=768");
  REQUIRE(ln->kernel.program.cores == 32);
  const Run l = run(*ln, npu_sync::SyncMode::Pruned);
  CHECK(l.verification.verified);
  CHECK(gm_traffic(l) == std::pair<uint64_t, uint64_t>{64 * 768 * 2 + 32 * 2 * 768 * 4, 64 * 768 * 2});
  std::string notes;
  for (const auto& n : ln->kernel.notes) notes += n + "\n";
  CHECK(notes.find("row-invariant reads once per core: beta, gamma") != std::string::npos);
}

TEST_CASE("the row pipeline's vector work per row, counted by hand: values per row one repeat, folds of a row's repeats") {
  // softmax, 32 rows of 1024 f16 on 32 cores (one row each); core 0's vector cycles (one per repeat):
  //   Mx:  vconv f16 -> f32 16, fold 8 + 4 + 2 + 1, vcmax 1, identity 1, combine 1      = 34
  //   E:   vbrcb of Mx 1 (one repeat per row), vsub 16 (Mx read with repeat stride 0), vexp 16 = 33
  //   Den: fold 15 (out of place: E is read again), vcadd 1, identity 1, combine 1       = 18
  //   Y:   vbrcb of Den 1, vdiv 16, vconv f32 -> f16 16                                   = 33
  auto c = compile_case("bert.tsl", "softmax", "M=32,N=1024");
  const Run r = run(*c, npu_sync::SyncMode::Pruned);
  CHECK(r.verification.verified);
  CHECK(vector_cycles(r) == 34 + 33 + 18 + 33);
}

TEST_CASE("batch-norm update: the per-channel statements run once per core, the rows over every core") {
  // 2 x 4 x 4 pixels x 64 channels: 32 rows over 32 cores. Mean, Var (outputs) and Scale are
  // computed by every core from Sum / SumSq (4 x 256 bytes in per core) and kept in UB; core 0
  // alone writes Mean and Var; X in once, Y out once.
  for (const std::string& t : {kTarget, k310}) check_nest("batch_norm.tsl", "bn_update", "N=2,H=4,W=4,C=64", false, t);
  auto c = compile_case("batch_norm.tsl", "bn_update", "N=2,H=4,W=4,C=64");
  CHECK(c->kernel.program.cores == 32);
  const Run r = run(*c, npu_sync::SyncMode::Pruned);
  CHECK(r.verification.verified);
  CHECK(gm_traffic(r) == std::pair<uint64_t, uint64_t>{32 * 64 * 2 + 32 * 4 * 64 * 4, 32 * 64 * 2 + 2 * 64 * 4});
  std::string notes;
  for (const auto& n : c->kernel.notes) notes += n + "\n";
  CHECK(notes.find("S0..S2 once per core") != std::string::npos);
  // a larger one: several blocks per core, a last core with fewer rows, channels not a multiple of 64
  check_nest("batch_norm.tsl", "bn_update", "N=3,H=7,W=5,C=100", false);
}

TEST_CASE("the row pipeline does not take what it cannot keep in UB") {
  // rows larger than UB: statement by statement with tiled rows and running accumulators
  CHECK(notes_of("bert.tsl", "softmax", "M=2,N=140000").find("row pipeline") == std::string::npos);
  // a statement reading a result at another row (the column statistic read along rows)
  CHECK(notes_of("generality.tsl", "col_then_row", "M=70,N=300").find("row pipeline") == std::string::npos);
  // a transposed read (vtranspose blocks need 16 rows of their own tile)
  CHECK(notes_of("vector.tsl", "transpose2d", "M=512,N=512").find("row pipeline") == std::string::npos);
}

TEST_CASE("the row pipeline folds a reduction out of place when its value is a row another statement reads") {
  for (const std::string& t : {kTarget, k310}) check_nest("vector.tsl", "center_rows", "M=64,N=700", false, t);
  CHECK(notes_of("vector.tsl", "center_rows", "M=64,N=700").find("row pipeline") != std::string::npos);
}

TEST_CASE("one statement in the row pipeline: bias + GELU with the bias loaded once per core, loads one block ahead") {
  for (const std::string& t : {kTarget, k310}) check_nest("vector.tsl", "bias_gelu", "M=64,N=3072", false, t);
  auto c = compile_case("vector.tsl", "bias_gelu", "M=64,N=3072");
  const Run r = run(*c, npu_sync::SyncMode::Pruned);
  CHECK(r.verification.verified);
  // X in once (f16), the bias (f32) once per core, Y out once
  CHECK(gm_traffic(r) == std::pair<uint64_t, uint64_t>{64 * 3072 * 2 + 32 * 3072 * 4, 64 * 3072 * 2});
  std::string notes;
  for (const auto& n : c->kernel.notes) notes += n + "\n";
  CHECK(notes.find("row-invariant reads once per core: bias") != std::string::npos);
}

TEST_CASE("reassociated f32 sums compare within the documented bound, which grows with sqrt(terms)") {
  const ir::Function* f = nullptr;
  frontend::Module m = frontend::load_module(kRoot + "/workloads/bert.tsl");
  f = &frontend::select_function(m, "layer_norm");
  const double u = std::ldexp(1.0, -24);
  CHECK(emit_c::reassociated_sum_tolerance(*f, {{"M", 4}, {"N", 256}}) == 1e-5);  // 8 sqrt(256) u = 7.6e-6 < 1e-5
  CHECK(emit_c::reassociated_sum_tolerance(*f, {{"M", 2}, {"N", 300000}}) == 1e-3);  // n u / 8 = 2.2e-3, capped
  CHECK(emit_c::reassociated_sum_tolerance(*f, {{"M", 2}, {"N", 25088}}) == doctest::Approx(25088 * u / 8));
  const ir::Function& sm = frontend::select_function(m, "softmax");  // f16 input, f32 sums
  CHECK(emit_c::reassociated_sum_tolerance(sm, {{"M", 2}, {"N", 1024}}) == doctest::Approx(8 * 32 * u));
}

TEST_CASE("permutations, a column statistic read along rows (cores split the last dimension), divided indices") {
  for (const std::string& t : {kTarget, k310}) {
    check_nest("generality.tsl", "perm3", "A=5,B=7,C=33", true, t);
    check_nest("generality.tsl", "col_then_row", "M=70,N=45", true, t);
    check_nest("generality.tsl", "interleave", "M=9,N=21", true, t);
    check_nest("generality.tsl", "pool_div", "N=2,H=9,W=11", true, t);
  }
  CHECK(notes_of("generality.tsl", "col_then_row", "M=70,N=300").find("general vector lowering on 4 core(s)") != std::string::npos);
}

TEST_CASE("an f16 sum keeps its reduction off the lanes, so it accumulates in the interpreter's order (bit-exact)") {
  const std::string notes = notes_of("generality.tsl", "reduce_lead", "A=7,B=3,C=20");
  // b, c collapse into b_c (poly::collapse_indices): the lanes; a is never on the lanes, accumulated in order
  CHECK(notes.find("lanes b_c") != std::string::npos);
  check_nest("generality.tsl", "reduce_lead", "A=50,B=3,C=20", true);
}

TEST_CASE("a transposed f16 read is turned by vtranspose in 16x16 blocks (bit-exact, tails, both targets)") {
  for (const std::string& t : {kTarget, k310}) {
    check_nest("vector.tsl", "transpose2d", "M=77,N=600", true, t);   // 19 rows per core, 77 lanes: partial blocks
    check_nest("vector.tsl", "transpose2d", "M=300,N=1300", true, t);  // several tiles per core
  }
  CHECK(notes_of("vector.tsl", "transpose2d", "M=512,N=512").find("rows n, lanes m") != std::string::npos);
  auto c = compile_case("vector.tsl", "transpose2d", "M=512,N=512", "", false);
  int turns = 0;
  for (const auto& in : c->kernel.program.code) turns += in.opcode == npu::Opcode::Vtranspose;
  CHECK(turns > 0);
}

TEST_CASE("pruned nest programs keep only needed syncs: removing any kept pair lets the race detector fire") {
  check_mutants_of("generality.tsl", "mean_var_rows", "M=5,N=100");
  check_mutants_of("generality.tsl", "transpose_scale", "M=13,N=7");
  check_mutants_of("vector.tsl", "transpose2d", "M=160,N=512");
  // the row pipeline: prefetched blocks in a loop (softmax: 16 blocks per core), the once-per-core prologue
  check_mutants_of("bert.tsl", "softmax", "M=512,N=256");
  check_mutants_of("batch_norm.tsl", "bn_update", "N=2,H=4,W=4,C=256");
}
