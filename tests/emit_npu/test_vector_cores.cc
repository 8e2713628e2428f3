// The general NPU vector lowering's block choice for operators whose read and output share no
// unit-stride dimension (compiler/emit_npu/nest_plan.cc: plan_move, plan_mirror; nest.cc:
// body_move, body_mirror): strided pooling windows and nearest upsampling in NCHW go through UB
// mirrored (one element per block, a DMA per span), a 5-D permute through UB blocks (loads along
// the read's unit stride, stores along the output's); each on every core it can use, verified
// element by element against the interpreter on davinci-910 and davinci-310 (naive and pruned
// syncs, race-free), with cycles under a bound worked out from the description that a one-core or
// element-strided mapping exceeds. Also where the lowering must keep its lanes (a dimension both
// tensors walk with unit stride; an f16 transpose that vtranspose turns).
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_npu/nest.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

// 2x2 max pooling at stride 2, NCHW f32, (4, 8) planes of 28 x 28 -> 14 x 14. davinci-910: one plane
// per core (32 cores). A core: its plane's span, 784 elements, by one dma_in (3,136 B: 300 latency +
// 37 transfer), 4 window positions x 2 groups of 8 columns x 14 row repeats = 112 vector cycles
// plus the identity (25 repeats) and ~10 instructions' start-up (15 each), the 196-element output
// span by one dma_out (784 B: 150 latency + 10): ~800 cycles; bound 1,200. On one core the 32 planes
// alone take 32 x (37 + 10 + 137) = 5,888 vector and transfer cycles; the element-strided lanes (a
// burst and a GM granule per element, 28 DMAs per tile) took 31,666 at the roofline size.
TEST_CASE("NCHW max pooling at stride 2 is mirrored in UB blocks on every core (davinci-910, f32 and f16, exact)") {
  for (const char* def : {"maxpool_nchw", "maxpool_nchw_f16"}) {
    auto c = compile_case("vector_cores.tsl", def, "N=4,C=8,P=14,Q=14");
    const std::string n = kernel_notes(*c);
    CAPTURE(def);
    CAPTURE(n);
    CHECK(c->kernel.program.cores == 32);
    CHECK(has(n, "tile mirrored in UB blocks: box p 14 x q 14 x r 2 x t 2, 8 lanes along q, repeats along p"));
    const uint64_t cycles = verified_cycles(*c, true);
    MESSAGE(std::string(def) << " 4x8x28x28 on davinci-910: " << cycles << " cycles");
    CHECK(cycles < 1200);
  }
}

// davinci-310: 2 cores, 16 planes each, GM shared at 95 B/cycle: the 32 planes' 125,440 B take
// 1,321 cycles of GM; a core's vector work is 16 x ~137 + start-ups, ~2,600 with the first load and
// last store; bound 4,000 (one core: 32 x 137 = 4,384 vector cycles alone).
TEST_CASE("NCHW pooling on davinci-310 uses both cores, average pooling too (its sum in the interpreter's order)") {
  auto c = compile_case("vector_cores.tsl", "maxpool_nchw", "N=4,C=8,P=14,Q=14", "", true, kTarget310);
  CAPTURE(kernel_notes(*c));
  CHECK(c->kernel.program.cores == 2);
  CHECK(has(kernel_notes(*c), "tile mirrored in UB blocks"));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("maxpool_nchw 4x8x28x28 on davinci-310: " << cycles << " cycles");
  CHECK(cycles < 4000);
  for (const std::string& target : {kTarget, kTarget310}) {
    auto a = compile_case("vector_cores.tsl", "avgpool_nchw", "N=3,C=5,P=9,Q=11", "", true, target);
    CAPTURE(kernel_notes(*a));
    CHECK(a->kernel.program.cores > 1);
    CHECK(has(kernel_notes(*a), "S0: 5 loop(s), tile mirrored in UB blocks"));
    verified_cycles(*a, true);  // r then t ascending, as the interpreter adds them
  }
}

// Nearest 2x upsampling, NCHW f32, (4, 8) planes of 14 x 14 -> 28 x 28. davinci-910: a plane per
// core: 196 elements in (784 B: 300 + 10), 4 (h % 2, w % 2) copies x 2 groups x 14 repeats = 112
// vector cycles, 784 elements out (3,136 B: 150 + 37): ~700 cycles, bound 1,200 (the lanes along
// w % 2, two per repeat, took 79,643 cycles at the roofline size).
TEST_CASE("NCHW nearest upsampling is mirrored in UB blocks on every core (both targets, exact)") {
  auto c = compile_case("vector_cores.tsl", "upsample_nchw", "N=4,C=8,H=14,W=14");
  CAPTURE(kernel_notes(*c));
  CHECK(c->kernel.program.cores == 32);
  CHECK(has(kernel_notes(*c), "tile mirrored in UB blocks: box h/2 14 x h%2 2 x w/2 14 x w%2 2, 8 lanes along w/2"));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("upsample_nchw 4x8x14x14 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 1200);
  // davinci-310: 16 planes per core, GM 125,440 B at 95 B/cycle = 1,321; vector 16 x ~137: bound 4,000.
  auto d = compile_case("vector_cores.tsl", "upsample_nchw", "N=4,C=8,H=14,W=14", "", true, kTarget310);
  CAPTURE(kernel_notes(*d));
  CHECK(d->kernel.program.cores == 2);
  CHECK(has(kernel_notes(*d), "tile mirrored in UB blocks"));
  const uint64_t c310 = verified_cycles(*d, true);
  MESSAGE("upsample_nchw 4x8x14x14 on davinci-310: " << c310 << " cycles");
  CHECK(c310 < 4000);
  // Odd sizes: tails of the cut box and partial lane groups (masked).
  for (const std::string& target : {kTarget, kTarget310}) {
    auto s = compile_case("vector_cores.tsl", "upsample_nchw", "N=2,C=5,H=13,W=9", "", true, target);
    CHECK(s->kernel.program.cores > 1);
    verified_cycles(*s, true);
  }
}

// Permute (a, b, c, d, e) -> (a, d, b, e, c) f32, 4 x 8 x 16 x 8 x 32 (512 KiB each way).
// davinci-910: the grid a 4 x d 8, a core's 4,096 elements moved through UB blocks: 8 x 16 loads of
// a 32-element row (128 B) and one 4,096-element store per box of b 7 (and of b 1): 136 DMAs, the
// chip's GM serving one DMA of any core per cycle at least: 32 x 136 = 4,352 cycles plus a load's
// latency; bound 6,500 (element-strided lanes: a GM granule per element, 8x the bytes, 8,913 cycles).
// davinci-310: a core's 32 planes (b, c) of (d, e) go in boxes of d 7 x e 32 x c 16, each load a
// (d, e) run of 224 elements: GM 1 MiB at 95 B/cycle = 11,038 cycles; bound 16,000.
TEST_CASE("a 5-D f32 permute moves through UB blocks: GM runs on both sides, every core (both targets, exact)") {
  auto c = compile_case("vector_cores.tsl", "permute5", "A=4,B=8,C=16,D=8,E=32");
  CAPTURE(kernel_notes(*c));
  CHECK(c->kernel.program.cores == 32);
  CHECK(has(kernel_notes(*c), "moved through UB blocks: box b 7 x e 32 x c 16, loads along e, stores along c"));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("permute5 4x8x16x8x32 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 6500);
  auto d = compile_case("vector_cores.tsl", "permute5", "A=4,B=8,C=16,D=8,E=32", "", true, kTarget310);
  CAPTURE(kernel_notes(*d));
  CHECK(d->kernel.program.cores == 2);
  CHECK(has(kernel_notes(*d), "moved through UB blocks: box d 7 x e 32 x c 16"));
  const uint64_t c310 = verified_cycles(*d, true);
  MESSAGE("permute5 4x8x16x8x32 on davinci-310: " << c310 << " cycles");
  CHECK(c310 < 16000);
  for (const std::string& target : {kTarget, kTarget310}) {
    auto s = compile_case("vector_cores.tsl", "permute5", "A=2,B=5,C=16,D=12,E=32", "", true, target);
    verified_cycles(*s, true);
  }
}

// Where both tensors walk a dimension with unit stride in whole blocks (the NHWC channels) the tile
// is mirrored densely: the channels' blocks are the lanes, the other strides whole blocks. NHWC
// nearest upsampling (2, 14, 14, 64) f16 on 28 cores (grid n 2 x h/2 14): a core's two input rows'
// 14 x 128 B in one DMA (300 + 21), 4 copies x 14 repeats, 2 x 28 x 128 B out in one DMA (150 +
// 83): ~650 cycles; bound 900 (the lanes' tiles, a DMA per tile and (h % 2, w % 2): 1,042).
// 3x3 max pooling at stride 2 over NHWC f16 (now the strided window maxima of window_max.cc, still
// on several cores, exact). The lanes stay where a window would cost more vector work
// than it saves (a global pooling over the rows of its lanes: full-width repeats) and where the
// statement is element-wise on contiguous rows.
TEST_CASE("NHWC windows and upsampling are mirrored densely (channel blocks as lanes), whole repeats stay where they win") {
  auto c = compile_case("short_batch.tsl", "upsample2x", "N=2,H=14,W=14,C=64,P=28,Q=28");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 28);
  CHECK(has(n, "tile mirrored in UB blocks: box h%2 2 x w/2 14 x w%2 2 x c 64, blocks along c, repeats along w/2"));
  const uint64_t cycles = verified_cycles(*c, true);
  MESSAGE("upsample2x NHWC 2x14x14x64 f16 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 900);
  for (const std::string& target : {kTarget, kTarget310}) {
    auto m = compile_case("vector_cores.tsl", "maxpool3_nhwc", "N=2,P=9,Q=10,C=64", "", true, target);
    CAPTURE(kernel_notes(*m));
    CHECK(m->kernel.program.cores > 1);
    CHECK(has(kernel_notes(*m), "window max 3x3 (stride 2x2)"));  // window_max.cc takes NHWC max pooling now
    verified_cycles(*m, true);
  }
  auto g = compile_case("vector_cores.tsl", "global_max_nchw", "N=4,C=64,H=14,W=14", "", false);
  CAPTURE(kernel_notes(*g));
  CHECK_FALSE(has(kernel_notes(*g), "UB blocks"));
  auto e = compile_case("vector.tsl", "center_rows", "M=256,N=256", "", false);
  CHECK_FALSE(has(kernel_notes(*e), "UB blocks"));
}

// Group norm with the groups not trailing (X[N, I, G, E]): the statistics write g at output
// position 1, the element-wise statements at 2; the core axis follows g through the results
// (nest_cores.cc, tracked_indices), so the grid is n 2 x g 8 = 16 cores on davinci-910 (the rows
// alone: n, 2 cores, 21,822 cycles at this size). A core's (n, g): 64 x 32 f32 = 8 KiB read by
// each of the five statements, their results through GM: ~5 x (300 + 150 + 95 + the vector work),
// ~4,000 cycles; bound 8,000. davinci-310: the batch of 2 fills both cores (no grid).
TEST_CASE("group norm over non-trailing groups takes a core grid of batch x groups, the axis followed through its results") {
  auto c = compile_case("vector_cores.tsl", "group_norm_affine", "N=2,I=64,G=8,E=32");
  c->kernel = emit_npu::emit_nest(c->compilation->kernel, c->compilation->hierarchy);  // the general lowering (group_stats.cc takes it first)
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 16);
  CHECK(has(n, "core grid n 2 x 1, g 8 x 1"));
  const uint64_t cycles = verified_cycles(*c, false);
  MESSAGE("group_norm_affine 2x64x8x32 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 8000);
  auto d = compile_case("vector_cores.tsl", "group_norm_affine", "N=2,I=5,G=3,E=4", "", true, kTarget310);
  CHECK(d->kernel.program.cores == 2);
  verified_cycles(*d, false);
}
