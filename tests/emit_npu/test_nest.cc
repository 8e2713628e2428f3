// The general NPU vector lowering (compiler/emit_npu/nest.h) end to end on both davinci targets:
// operators outside the templates (workloads/generality.tsl, long softmax / layer-norm rows, rows
// larger than UB) verify against the reference interpreter with naive and pruned syncs, race-free;
// the tile and core choices are the ones the header describes.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_c/run_c.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/nest.h"
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
  CHECK(notes.find("S0: 2 loop(s), tile 2 x 768 (pitch 768), rows m, lanes n") != std::string::npos);
  CHECK(notes.find("general vector lowering on 32 core(s), 2 rows each") != std::string::npos);
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
  CHECK(notes.find("rows b, lanes c") != std::string::npos);  // a: an outer loop, accumulated tile by tile in order
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
}
