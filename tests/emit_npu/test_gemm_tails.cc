// GEMM tails in place (compiler/emit_npu/gemm.cc, GemmSetup::in_place; the tile policy's
// tile::plan_gemm_tails): sizes that are not whole cube fractals run on every core with no padded
// copies — reads past M, N and K land in guards after the operands (zeros past K for an operand
// stored K-major), an operand stored K-minor gets its columns past K zero-filled in L1, rows past M
// are written into a guard after C and columns past N are clipped by the write-back — and the i8
// GEMM with a per-column dequant runs on the cube's i8 shape with the dequant as a fused epilogue.
// Every program is verified element by element against the reference interpreter, with naive and
// pruned syncs, race-free (npu_case.h), on davinci-910 and davinci-310; the mapping notes say how
// many cores run it, and cycle bounds fail if it falls back to one core.
#include <doctest/doctest.h>

#include <regex>

#include "isa/npu_machine.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const std::string kTails = "../tests/emit_npu/data/gemm_tails.tsl";
const std::string kTargets[] = {kTarget, kTarget310};
const char* const kLayouts[] = {"matmul_nn", "matmul_tn", "matmul_nt", "matmul_tt"};

std::string notes_of(const Case& c) {
  std::string notes;
  for (const auto& n : c.kernel.notes) notes += n + "\n";
  return notes;
}

// The mapping note "T output tiles over C core(s)": T and C.
std::pair<int, int> tiles_and_cores(const std::string& notes) {
  std::smatch m;
  REQUIRE(std::regex_search(notes, m, std::regex(R"((\d+) output tiles over (\d+) core)")));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

// Compiles and checks the mapping: tails in place (no padded copies on one core), the tiles spread
// over min(tiles, cores) cores, at least `least_cores` of them. Returns the case.
std::unique_ptr<Case> mapped_in_place(const std::string& file, const std::string& def, const std::string& shape,
                                      const std::string& target, int least_cores, const std::string& tile = "") {
  CAPTURE(def);
  CAPTURE(shape);
  CAPTURE(target);
  auto c = compile_case(file, def, shape, tile, true, target);
  const std::string notes = notes_of(*c);
  CAPTURE(notes);
  CHECK(notes.find("through UB on one core") == std::string::npos);
  CHECK((notes.find("on every core, in place") != std::string::npos || notes.find("M tail:") != std::string::npos));
  const auto [tiles, cores] = tiles_and_cores(notes);
  const int machine_cores = isa::npu_machine(c->compilation->hierarchy).cores;
  CHECK(cores == std::min(tiles, machine_cores));
  CHECK(c->kernel.program.cores == cores);
  CHECK(cores >= least_cores);
  return c;
}

// npu_case.h's verify without its pruned-no-slower check, which does not hold here: on davinci-310
// two cores share 95 B/cycle of GM, and a pruned program's DMAs, issued sooner, can meet the other
// core's (M=93,N=71,K=45 A^T: 1,202 naive, 1,258 pruned cycles).
void verify_exact(const Case& c, const std::string& def, const std::string& shape) {
  npu_test::verify(c, def, shape, /*pruned_no_slower=*/false);
}

// Verified (naive and pruned, exact, race-free) and, pruned, within `most_cycles`.
void verified_within(const Case& c, const std::string& def, const std::string& shape, int64_t most_cycles) {
  verify_exact(c, def, shape);
  const Run pruned = run(c, npu_sync::SyncMode::Pruned);
  MESSAGE(def << " " << shape << ": " << pruned.sim.record.total_cycles << " cycles on " << c.kernel.program.cores
              << " cores (bound " << most_cycles << ")");
  CHECK(pruned.sim.record.total_cycles <= most_cycles);
}

}  // namespace

// Small GEMMs: several cores on davinci-910; on davinci-310 the plan may keep one tile on one core
// (its two cores share 95 B/cycle of GM: M=133,N=57,K=150 B^T 2,148 cycles on one core, 2,277 on two).
int least_cores(const std::string& target) { return target == kTarget ? 2 : 1; }

TEST_CASE("f16 GEMM tails in every operand layout run in place on every core and verify bit for bit") {
  // M, N and K all tails: K past one chunk, the K-minor operands' columns past K filled in L1, the
  // last tile column's columns past N clipped
  for (const std::string& target : kTargets)
    for (const char* def : kLayouts)
      for (const char* shape : {"M=93,N=71,K=45", "M=133,N=57,K=150", "M=40,N=37,K=200"}) {
        auto c = mapped_in_place("gemm_layouts.tsl", def, shape, target, least_cores(target));
        verify_exact(*c, def, shape);
      }
}

TEST_CASE("only one tail at a time: M, N or K alone, in place on every core") {
  for (const std::string& target : kTargets)
    for (const char* def : kLayouts)
      for (const char* shape : {"M=100,N=64,K=64", "M=64,N=100,K=64", "M=64,N=64,K=100"}) {
        auto c = mapped_in_place("gemm_layouts.tsl", def, shape, target, least_cores(target));
        verify_exact(*c, def, shape);
      }
}

TEST_CASE("the roofline suite's odd GEMMs: in place on the whole chip, far below the one-core padded copies' cycles") {
  // (roofline shapes: gemm.nn/tn/nt/tt.f16 of scripts/roofline_gen.py.) One core with padded copies
  // took 42,707-50,763 cycles on davinci-910 and 27,889-41,282 on davinci-310; in place about
  // 1,450-1,610 and 10,100-13,400.
  const std::pair<const char*, const char*> shapes[] = {{"matmul_nn", "M=333,N=257,K=191"},
                                                        {"matmul_tn", "M=301,N=263,K=209"},
                                                        {"matmul_nt", "M=277,N=359,K=173"},
                                                        {"matmul_tt", "M=269,N=311,K=181"}};
  for (const auto& [def, shape] : shapes) {
    verified_within(*mapped_in_place("gemm_layouts.tsl", def, shape, kTarget, 24), def, shape, 2400);
    verified_within(*mapped_in_place("gemm_layouts.tsl", def, shape, kTarget310, 2), def, shape, 18000);
  }
}

TEST_CASE("i8 GEMM with a per-column dequant to f16: i8 cube shape, fused epilogue on UB, every core") {
  // the roofline suite's gemm.i8_dequant (M tail): the general vector lowering took 103,151 cycles
  // on davinci-910 and 1,448,741 on davinci-310
  const std::string shape = "M=257,N=384,K=128";
  for (const std::string& target : kTargets) {
    auto c = mapped_in_place(kTails, "dequant_nn", shape, target, target == kTarget ? 24 : 2);
    const std::string notes = notes_of(*c);
    CHECK(notes.find("i8 on the cube's 16x16x32 i8 shape, i32 accumulation") != std::string::npos);
    CHECK(notes.find("fused epilogue on UB") != std::string::npos);
    verified_within(*c, "dequant_nn", shape, target == kTarget ? 2500 : 20000);
  }
}

TEST_CASE("i8 dequant GEMMs with tails in every layout, and with a per-row scale too") {
  for (const std::string& target : kTargets) {
    for (const char* def : {"dequant_nn", "dequant_tn", "dequant_nt", "dequant_tt"}) {
      auto c = mapped_in_place(kTails, def, "M=75,N=70,K=100", target, least_cores(target));
      verify_exact(*c, def, "M=75,N=70,K=100");
    }
    auto rows = mapped_in_place(kTails, "dequant_rows_columns", "M=93,N=71,K=45", target, least_cores(target));
    verify_exact(*rows, "dequant_rows_columns", "M=93,N=71,K=45");
  }
}

TEST_CASE("fused f16 epilogues over edge tiles: a bias over N (columns past N clipped) and a scale over M") {
  for (const std::string& target : kTargets) {
    auto bias = mapped_in_place(kTails, "bias_relu_nt", "M=69,N=131,K=57", target, least_cores(target));
    verify_exact(*bias, "bias_relu_nt", "M=69,N=131,K=57");
    auto scale = mapped_in_place(kTails, "row_scale_tn", "M=93,N=71,K=45", target, least_cores(target));
    verify_exact(*scale, "row_scale_tn", "M=93,N=71,K=45");
  }
}

TEST_CASE("a user's tile spec keeps its boxes with tails in place: the sizes padded to them") {
  auto c = mapped_in_place("gemm_layouts.tsl", "matmul_nt", "M=70,N=50,K=40", kTarget, 6, "m=32/32,n=32/32,k=32/32");
  const std::string notes = notes_of(*c);
  CHECK(notes.find("stage tile 32x32x32") != std::string::npos);
  CHECK(notes.find("computed as 96x64x64") != std::string::npos);
  verify_exact(*c, "matmul_nt", "M=70,N=50,K=40");
}

TEST_CASE("pruned in-place tails keep only needed syncs: removing any kept pair lets the race detector fire") {
  // M and K tails (the K-minor operands' fills from UB, rows past M into the guard after C): one
  // class of tiles. (With an N tail each class of tiles is a loop a core may run no or one
  // iteration of, whose carried pairs the pass keeps without a trip count to rule them out.)
  check_mutants_of("gemm_layouts.tsl", "matmul_nt", "M=40,N=32,K=40", "m=32/32,n=32/32,k=32/32");
  check_mutants_of("gemm_layouts.tsl", "matmul_nn", "M=40,N=32,K=40", "m=32/32,n=32/32,k=32/32");
}

TEST_CASE("tails in place must not fire: an operand stored K-major shorter than one tile row falls back to padded copies") {
  // B [k][n] with N = 6 < 16 columns: its tile rows would read past the row (dma_in_nz needs a row
  // stride of at least the tile's columns), so the zero-padded copies on one core
  for (const std::string& target : kTargets) {
    auto c = compile_case("gemm_layouts.tsl", "matmul_nn", "M=40,N=6,K=37", "", true, target);
    CHECK(notes_of(*c).find("through UB on one core") != std::string::npos);
    CHECK(c->kernel.program.cores == 1);
    verify_exact(*c, "matmul_nn", "M=40,N=6,K=37");
  }
}

TEST_CASE("an index of extent 1 stored innermost: its rows get a packed matrix's stride, the GEMM path verifies") {
  // A [K][1] read as A(m, k) (M = 1) or B [N][1] read as B(n, k) (K = 1): both matrix dimensions have
  // a stride of 1, rows one element apart (a dma_in gap of -2 bytes, a dma_in_nz row stride below its
  // columns: the simulator refused them, exit 3). The extent-1 index's stride is free: it takes the
  // row length, as if stored outermost (program_fuzz seed 61 program 145)
  for (const std::string& target : kTargets)
    for (const char* def : kLayouts)
      for (const char* shape : {"M=1,N=40,K=2", "M=1,N=16,K=37", "M=40,N=37,K=1", "M=1,N=1,K=40", "M=40,N=1,K=33"}) {
        CAPTURE(target);
        CAPTURE(def);
        CAPTURE(shape);
        auto c = compile_case("gemm_layouts.tsl", def, shape, "", true, target);
        tiles_and_cores(notes_of(*c));  // the GEMM path's mapping note, not the general lowering's
        verify_exact(*c, def, shape);
      }
}
