// f32 contractions on the vector unit (compiler/emit_npu/vector_gemm.h): outputs against the
// reference interpreter element by element (exact: every element summed in ascending k, as the
// interpreter does), naive and pruned syncs, race-free; cycles against the hand-computed vector
// work of a core: per row of C and per k, 2 repeats per 64 columns (vmul, vadd) and one vbrcb repeat
// for the A value, one cycle each.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_npu/vector_gemm.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

// A core's vector repeats for rows x cols of C over K: (2 * ceil(cols / 64) + 1) per row and k.
uint64_t vector_work(uint64_t rows, uint64_t cols, uint64_t K) { return rows * K * (2 * ((cols + 63) / 64) + 1); }

}  // namespace

// The roofline suite's gemm.nn.f32 (256 x 160 x 256): 52,579 cycles on davinci-910 (the general
// lowering, B reloaded per row of C), 679,363 on davinci-310; now 8 rows per core on 32 cores
// (10,240 cycles of vmul + vadd, 1,280 of vbrcb) and 128 per core on 2.
TEST_CASE("an f32 GEMM runs on the vector unit at its peak on every core") {
  auto c = compile_case("vector_gemm.tsl", "matmul_f32", "M=256,K=160,N=256");
  CAPTURE(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, "vector contraction 256x256x160 f32 on 32 core(s)"));
  CHECK(c->kernel.program.cores == 32);
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("matmul_f32 256x160x256 on davinci-910: " << cycles << " cycles");
  const uint64_t work = vector_work(8, 256, 160);  // 11,520
  CHECK(cycles >= work);
  CHECK(cycles < work * 6 / 5);  // 13,491 measured
  auto d = compile_case("vector_gemm.tsl", "matmul_f32", "M=256,K=160,N=256", "", true, kTarget310);
  CHECK(d->kernel.program.cores == 2);
  const uint64_t cycles310 = verified_cycles(*d, true);
  MESSAGE("matmul_f32 256x160x256 on davinci-310: " << cycles310 << " cycles");
  const uint64_t work310 = vector_work(128, 256, 160);  // 184,320
  CHECK(cycles310 >= work310);
  CHECK(cycles310 < work310 * 21 / 20);  // 189,215 measured
}

// Fewer rows than cores: a grid of row and column parts (5 x 4096 x 1000: one row part, 32 column
// parts of 128; the general lowering took 101,848 cycles on davinci-910).
TEST_CASE("an f32 GEMM with few rows splits its columns over the cores") {
  auto c = compile_case("vector_gemm.tsl", "matmul_f32", "M=5,K=1000,N=4096");
  CAPTURE(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, "(1 x 32: 5 rows x 128 columns each)"));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("matmul_f32 5x1000x4096 on davinci-910: " << cycles << " cycles");
  const uint64_t work = vector_work(5, 128, 1000);  // 25,000
  CHECK(cycles >= work);
  CHECK(cycles < work * 7 / 5);  // 33,634 measured
}

// Tails everywhere: rows not a multiple of the cores (the last grid row shorter), columns not whole
// repeats, k not whole chunks; A stored either way; one row, one k.
TEST_CASE("f32 GEMMs with tails and a transposed A verify on the vector unit") {
  for (const std::string& target : {kTarget, kTarget310})
    for (const char* def : {"matmul_f32", "matmul_f32_at"})
      for (const char* shape : {"M=7,K=5,N=6", "M=196,K=37,N=100", "M=33,K=200,N=700", "M=1,K=64,N=64", "M=300,K=1,N=3",
                                "M=3,K=17,N=200"}) {
        CAPTURE(target);
        const std::string d = def, sh = shape;
        CAPTURE(d);
        CAPTURE(sh);
        auto c = compile_case("vector_gemm.tsl", def, shape, "", true, target);
        CHECK(notes_contain(c->kernel, "vector contraction"));
        verified_cycles(*c, true);
      }
}

// B stored [N, K]: N is not unit-stride, so the general lowering maps it (still exact).
TEST_CASE("an f32 GEMM with B transposed is left to the general lowering") {
  auto c = compile_case("vector_gemm.tsl", "matmul_f32_bt", "M=33,K=20,N=70");
  CAPTURE(kernel_notes(*c));
  CHECK_FALSE(notes_contain(c->kernel, "vector contraction"));
  verified_cycles(*c, true);
  std::string why = emit_npu::why_not_vector_gemm(c->compilation->kernel, isa::npu_machine(c->compilation->hierarchy));
  CHECK(why.find("N is not unit-stride in B and C") != std::string::npos);
}
