// The general NPU vector lowering's double-buffered tile pairs (compiler/emit_npu/nest.cc: levels,
// body_loads, body_compute): where every read of a tile is a plain DMA move and the levels inside the
// double-buffered loop are one tile each, a pair's two loads are emitted before either tile's
// compute. In program order after the first tile's vector work, the second tile's load was held
// back by the vector queue (32 deep) until the first tile had its data, so every tile paid the GM
// read latency (300 cycles) in turn; now the two latencies overlap. Verified against the
// interpreter (naive and pruned syncs, race-free), with cycle bounds the in-order tiles exceeded.
#include <doctest/doctest.h>

#include <string>

#include "compiler/emit_npu/nest.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

// The roofline suite's batchnorm.train_nhwc.f16 (16 x 28 x 28 x 128): its Sum and SqSum partials
// (34-row f16 tiles, 12 per core: ~550 cycles each, mostly the read latency) and the other phases:
// 31,988 cycles in order, 28,264 with the loads paired.
TEST_CASE("batch-norm training's partial sums load their tiles in pairs") {
  auto c = compile_case("reduction_cores.tsl", "bn_train_nhwc", "N=16,H=28,W=28,C=128");
  CAPTURE(kernel_notes(*c));
  CHECK(c->kernel.program.cores == 32);
  const uint64_t cycles = verified_cycles(*c, false, false, run_any);
  MESSAGE("bn_train_nhwc 16x28x28x128 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 29500);
}

// The roofline suite's groupnorm.nige.f32 (2 x 1024 x 8 x 32): 25,418 cycles in order, 23,207 paired.
TEST_CASE("group norm's statistics and normalisation load their tiles in pairs") {
  auto c = compile_case("reduction_cores.tsl", "group_norm_nige", "N=2,I=1024,G=8,E=32");
  c->kernel = emit_npu::emit_nest(c->compilation->kernel, c->compilation->hierarchy);  // the general lowering (group_stats.cc takes it first)
  CAPTURE(kernel_notes(*c));
  const uint64_t cycles = verified_cycles(*c, false, false, run_any);
  MESSAGE("group_norm_nige 2x1024x8x32 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 24500);
  auto d = compile_case("reduction_cores.tsl", "group_norm_nige", "N=2,I=64,G=3,E=20", "", true, kTarget310);
  verified_cycles(*d, false, false, run_any);
}
