// The NPU GEMM over every operand layout the contraction record describes (workloads/gemm_layouts.tsl):
// A stored [K, M] and / or B stored [N, K] (load2d's transpose where the fractals need it), the
// batch index at any dimension of each tensor (GM strides from the record), batched epilogues
// reading lower-rank tensors, i8 on the cube's i8 shape. Each program is verified element by
// element against the reference interpreter on davinci-910 and davinci-310, with naive and pruned
// syncs, race-free (npu_case.h).
#include <doctest/doctest.h>

#include "isa/base/error.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const char* const kLayouts[] = {"matmul_nn", "matmul_tn", "matmul_nt", "matmul_tt"};
const std::string kTargets[] = {kTarget, kTarget310};

}  // namespace

TEST_CASE("f16 GEMM in the four layouts (A [K, M], B [N, K]) verifies bit for bit: odd sizes and multiples of 16") {
  for (const std::string& target : kTargets)
    for (const char* def : kLayouts)
      for (const char* shape : {"M=7,N=13,K=37", "M=33,N=17,K=50", "M=64,N=48,K=96", "M=128,N=64,K=256"})
        check_verifies("gemm_layouts.tsl", def, shape, "", target);
}

TEST_CASE("transposed GEMMs through the L1 ring, the chunk loop, the tile loop and the last block by columns") {
  for (const char* def : kLayouts) {
    check_verifies("gemm_layouts.tsl", def, "M=128,N=128,K=1024", "m=64/32,n=64/32,k=32/16");
    check_verifies("gemm_layouts.tsl", def, "M=64,N=64,K=512", "m=64/32,n=64/64,k=64/32");
    check_verifies("gemm_layouts.tsl", def, "M=256,N=128,K=128", "m=32/32,n=32/16,k=32/16", kTarget310);
  }
}

TEST_CASE("pruned transposed GEMMs keep only needed syncs: removing any kept pair lets the race detector fire") {
  check_mutants_of("gemm_layouts.tsl", "matmul_tt", "M=64,N=32,K=128", "m=32/32,n=32/16,k=32/16");
  check_mutants_of("gemm_layouts.tsl", "matmul_nt", "M=128,N=128,K=32", "m=16/16,n=16/16,k=16/16");
}

TEST_CASE("batched GEMM whose batch is not the leading dimension (A [M, B, K], C [M, B, N], B^T per batch)") {
  for (const std::string& target : kTargets) {
    check_verifies("gemm_layouts.tsl", "batch_matmul_mbk", "B=3,M=32,N=48,K=64", "", target);
    check_verifies("gemm_layouts.tsl", "batch_matmul_out_mbn", "B=4,M=48,N=32,K=32", "", target);
  }
}

TEST_CASE("batched GEMM with tails and the batch not leading: the tensor's rows through UB, one strided DMA per batch") {
  for (const std::string& target : kTargets) {
    check_verifies("gemm_layouts.tsl", "batch_matmul_mbk", "B=3,M=7,N=5,K=9", "", target);
    check_verifies("gemm_layouts.tsl", "batch_matmul_out_mbn", "B=3,M=7,N=5,K=9", "", target);
  }
  check_verifies("gemm_layouts.tsl", "batch_matmul_out_mbn", "B=2,M=20,N=33,K=17");
}

TEST_CASE("batched GEMM with a bias over N and a GELU epilogue verifies, tails included") {
  for (const std::string& target : kTargets) {
    check_verifies("gemm_layouts.tsl", "batch_matmul_bias_gelu", "B=2,M=32,N=48,K=32", "", target);
    check_verifies("gemm_layouts.tsl", "batch_matmul_bias_gelu", "B=3,M=7,N=5,K=9", "", target);
  }
}

TEST_CASE("batched GEMM with a per-row scale [M] (vbrcb across the columns) and a per-batch bias [B, N]") {
  for (const std::string& target : kTargets) {
    check_verifies("gemm_layouts.tsl", "batch_matmul_scale_bias", "B=2,M=32,N=48,K=32", "", target);
    check_verifies("gemm_layouts.tsl", "batch_matmul_scale_bias", "B=3,M=64,N=32,K=64", "b=1/1,m=32/16,n=32/16,k=32/16", target);
  }
  check_mutants_of("gemm_layouts.tsl", "batch_matmul_scale_bias", "B=2,M=32,N=32,K=32");
}

TEST_CASE("i8 x i8 -> i32 on the cube's i8 shape in the four layouts: bit-exact, K = 2048 included (no K limit)") {
  for (const char* def : {"matmul_i8_nn", "matmul_i8_tn", "matmul_i8_nt", "matmul_i8_tt"}) {
    for (const std::string& target : kTargets) {
      check_verifies("gemm_layouts.tsl", def, "M=64,N=64,K=2048", "", target);
      check_verifies("gemm_layouts.tsl", def, "M=7,N=13,K=37", "", target);
    }
    check_verifies("gemm_layouts.tsl", def, "M=96,N=64,K=256", "m=32/32,n=32/32,k=64/32");
  }
  check_verifies("gemm_fused.tsl", "matmul_i8", "M=16,N=16,K=1040");  // past the f16 cube's exactness limit
  check_mutants_of("gemm_layouts.tsl", "matmul_i8_tt", "M=64,N=32,K=128", "m=32/32,n=32/32,k=64/32");
}

TEST_CASE("attention's contractions in BSHD run on the cube with two batch indices (rows H*D apart), on every core") {
  for (const std::string& target : kTargets) {
    check_verifies("gemm_layouts.tsl", "scores_bshd", "B=2,S=32,H=3,D=32,T=48", "", target);
    check_verifies("gemm_layouts.tsl", "context_bshd", "B=2,S=32,H=3,D=32,T=48", "", target);
  }
  auto c = compile_case("gemm_layouts.tsl", "scores_bshd", "B=2,S=64,H=4,D=64,T=64", "", false);
  std::string notes;
  for (const auto& n : c->kernel.notes) notes += n + "\n";
  CHECK(notes.find("operands as stored: A [m][k], B [n][k]") != std::string::npos);
  CHECK(c->kernel.program.cores == 32);  // 2 x 4 (b, h) GEMMs of 64x64, in tiles that fill the chip
  // two batch indices with tails stay off the cube, with the reason
  auto t = compile_case("gemm_layouts.tsl", "scores_bshd", "B=2,S=5,H=3,D=8,T=7", "", false);
  std::string tnotes;
  for (const auto& n : t->kernel.notes) tnotes += n + "\n";
  CHECK(tnotes.find("several batch indices with tails") != std::string::npos);
  check_verifies("gemm_layouts.tsl", "scores_bshd", "B=2,S=5,H=3,D=8,T=7");
}

TEST_CASE("a GEMM whose only tail is M runs on every core with guards after A and C (no padded copies)") {
  for (const std::string& target : kTargets) {
    check_verifies("gemm_layouts.tsl", "shared_weight", "B=3,M=37,N=48,K=64", "", target);  // 111 rows: b_m collapsed
    // (at K=128 on davinci-910 the pruned program is 1.5 % slower than the naive one: GM contention order)
    check_verifies("matmul.tsl", "matmul", "M=196,N=256,K=256", "", target);
  }
  auto c = compile_case("matmul.tsl", "matmul", "M=196,N=256,K=256", "", false);
  std::string notes;
  for (const auto& n : c->kernel.notes) notes += n + "\n";
  CHECK(notes.find("M tail: 196 rows computed as") != std::string::npos);  // in place, tiles chosen over the cores
  CHECK(notes.find("on every core") != std::string::npos);
  CHECK(c->kernel.program.cores > 1);
  check_mutants_of("matmul.tsl", "matmul", "M=40,N=32,K=32", "m=32/16,n=16/16,k=32/16");
}

TEST_CASE("GEMM tails pad to the fractal multiple whose tiles finish soonest, not always to one fractal") {
  // 196 rows: one fractal (208 = 13 x 16) leaves only 16-row tiles; wider padding gives whole-chip waves
  auto m196 = compile_case("matmul.tsl", "matmul", "M=196,N=1024,K=256", "", false);
  std::string notes;
  for (const auto& n : m196->kernel.notes) notes += n + "\n";
  CHECK(notes.find("M tail: 196 rows computed as 208") == std::string::npos);
  CHECK(m196->kernel.program.cores == 32);
  // every size a tail (one core, padded copies): tiles larger than one fractal
  auto odd = compile_case("gemm_layouts.tsl", "matmul_tn", "M=301,N=263,K=209", "", false);
  std::string odd_notes;
  for (const auto& n : odd->kernel.notes) odd_notes += n + "\n";
  CHECK(odd_notes.find("padded to 304x272x224") == std::string::npos);
  CHECK(odd_notes.find("operand tile 16x16x16") == std::string::npos);
  for (const std::string& target : kTargets) check_verifies("gemm_layouts.tsl", "matmul_tn", "M=101,N=83,K=59", "", target);
}
