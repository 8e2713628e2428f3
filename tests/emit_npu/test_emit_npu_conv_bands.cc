// NPU convolutions larger than L1 (compiler/emit_npu/conv.cc, compiler/tile/npu_conv_plan.h):
// bands of output rows, each loading its input window (band rows x stride + the (R - 1) x dilation
// halo rows, zero rows only at the image's real border), and the fused epilogue's per-channel values
// loaded once per channel tile (compiler/emit_npu/conv_epilogue.h). Each program is compared element
// by element with the reference interpreter, race-free naive and pruned, on davinci-910 and -310.
#include <doctest/doctest.h>

#include "compiler/emit_npu/conv.h"
#include "isa/base/error.h"
#include "isa/npu_machine.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

std::vector<std::vector<int64_t>> fmatrices(const emit_npu::NpuKernel& k) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& in : k.program.code)
    if (in.opcode == npu::Opcode::SetFmatrix) {
      out.emplace_back();
      for (const auto& o : in.operands) out.back().push_back(o.imm);
    }
  return out;
}

int count(const emit_npu::NpuKernel& k, npu::Opcode op) {
  int n = 0;
  for (const auto& in : k.program.code) n += in.opcode == op;
  return n;
}

}  // namespace

TEST_CASE("a feature map larger than L1 runs in bands with halo rows: padded, strided, dilated, exact on 910 and 310") {
  // 80 x 80 x 256 f16 = 3.2 MB: no image fits L1 (1 MiB) next to its weights.
  const std::string shape = "N=2,H=80,W=80,C=256,K=32,R=3,S=3,P=40,Q=40";
  for (const std::string& target : {kTarget, kTarget310}) check_verifies("conv_halo.tsl", "conv_pad2_s2_d2", shape, "", target);
  auto c = compile_case("conv_halo.tsl", "conv_pad2_s2_d2", shape, "", false);
  // Bands of 4 output rows spread over the cores (2 images x 10 bands, one 32-channel tile),
  // stride 2, dilation 2, padding 2: band b reads input rows [8 b - 2, 8 b + 8] clipped to [0, 79]:
  // 9 rows and 2 zero rows on top for the first, 11 rows (the 3-row halo shared with each
  // neighbour) for the middle ones, 10 rows and 1 zero row below for the last; each kind of band
  // its own code.
  const auto fm = fmatrices(c->kernel);
  REQUIRE(fm.size() == 3);
  CHECK(fm[0] == std::vector<int64_t>{9, 80, 2, 0, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(fm[1] == std::vector<int64_t>{11, 80, 0, 0, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(fm[2] == std::vector<int64_t>{10, 80, 0, 1, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(c->kernel.program.cores == 20);
  // A tile of 16 channels keeps every band of an image on its core (2 images x 2 tiles): bands of
  // 10 output rows reading rows [20 b - 2, 20 b + 20] clipped: 21 rows and 2 zero rows on top, 23
  // (the 4-row halo shared with each neighbour), 22 and 1 zero row below.
  auto tiled = compile_case("conv_halo.tsl", "conv_pad2_s2_d2", shape, "n=1/1,p=1/1,q=40/40,k=16/16,c=64/16", false);
  const auto tfm = fmatrices(tiled->kernel);
  REQUIRE(tfm.size() == 4);
  CHECK(tfm[0] == std::vector<int64_t>{21, 80, 2, 0, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(tfm[1] == std::vector<int64_t>{23, 80, 0, 0, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(tfm[2] == std::vector<int64_t>{23, 80, 0, 0, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(tfm[3] == std::vector<int64_t>{22, 80, 0, 1, 2, 1, 2, 2, 3, 3, 2, 2});
  CHECK(tiled->kernel.program.cores == 4);
}

TEST_CASE("bands at stride 1 with padding 1 (ResNet-50 shapes): 112 x 112 maps (was a UserError), 56 x 56 x 64 on every core") {
  auto big = compile_case("conv_halo.tsl", "conv_pad1", "N=2,H=112,W=112,C=64,K=64,R=3,S=3", "", false);
  const auto fm = fmatrices(big->kernel);
  // 16 bands of 7 rows per image over 32 cores, one code per kind of band; each middle band reads
  // its 7 rows and one halo row either side
  REQUIRE(fm.size() == 3);
  CHECK(fm[0] == std::vector<int64_t>{8, 112, 1, 0, 1, 1, 1, 1, 3, 3, 1, 1});
  CHECK(fm[1] == std::vector<int64_t>{9, 112, 0, 0, 1, 1, 1, 1, 3, 3, 1, 1});
  CHECK(fm[2] == std::vector<int64_t>{8, 112, 0, 1, 1, 1, 1, 1, 3, 3, 1, 1});
  CHECK(big->kernel.program.cores == 32);
  check_verifies("conv_halo.tsl", "conv_pad1", "N=8,H=56,W=56,C=64,K=64,R=3,S=3");
  auto mid = compile_case("conv_halo.tsl", "conv_pad1", "N=8,H=56,W=56,C=64,K=64,R=3,S=3", "", false);
  CHECK(mid->kernel.program.cores == 32);
}

TEST_CASE("a feature map that fits L1 keeps one band: the set_fmatrix of the whole image") {
  // (32 images: no core left idle to spread bands over)
  auto c = compile_case("conv_seed.tsl", "conv2d_nhwc", "N=32,H=14,W=14,C=32,K=64,R=3,S=3", "", false);
  const auto fm = fmatrices(c->kernel);
  REQUIRE(fm.size() == 1);
  CHECK(fm[0] == std::vector<int64_t>{14, 14, 1, 1, 1, 1, 1, 1, 3, 3, 1, 1});
}

TEST_CASE("conv + bn + relu: per-channel values loaded once per channel tile, hoisted, read as patterns, exact on 910 and 310") {
  for (const std::string& target : {kTarget, kTarget310}) {
    check_verifies("resnet50.tsl", "conv_bn_relu", "N=8,H=14,W=14,C=64,K=64,R=3,S=3", "", target);
    check_verifies("resnet50.tsl", "conv_bn_relu", "N=4,H=7,W=7,C=32,K=48,R=3,S=3", "", target);
  }
  auto c = compile_case("resnet50.tsl", "conv_bn_relu", "N=8,H=14,W=14,C=64,K=64,R=3,S=3", "", false);
  // One vrsqrt per channel tile (gamma * rsqrt(var + eps) hoisted), not one per pixel block.
  CHECK(count(c->kernel, npu::Opcode::Vrsqrt) == 1);
  // The 4 per-channel tensors' DMAs: one each (every block's pattern row 0; rows 1.. copied on V),
  // once (no DMA inside the write-back).
  int ub_loads = 0;
  for (const auto& in : c->kernel.program.code)
    if (in.opcode == npu::Opcode::DmaIn && in.operands[0].buffer == npu::Buffer::UB) ++ub_loads;
  CHECK(ub_loads == 4);
}

TEST_CASE("conv + bn + relu with two images per core: the write-back trails the next image's first slice pairs (mutation)") {
  // (the channel tile given: the policy would spread each image's bands over cores, whose kinds'
  // codes run on different cores, so a pair between two kinds is never needed dynamically)
  check_mutants_of("resnet50.tsl", "conv_bn_relu", "N=2,H=6,W=6,C=32,K=16,R=3,S=3", "k=16");
}

TEST_CASE("NCHW and padded-channel convolutions run on every core (per-core copies), exact and race-free on 910 and 310") {
  for (const std::string& target : {kTarget, kTarget310}) {
    check_verifies("conv2d.tsl", "conv2d", "N=4,C=32,H=8,W=8,K=256,R=3,S=3", "", target);   // was: the weights transform did not fit UB
    check_verifies("conv2d.tsl", "conv2d", "N=3,C=20,H=9,W=11,K=24,R=3,S=3", "", target);   // NCHW and padded channels
    check_verifies("conv2d.tsl", "conv2d_stride2", "N=2,C=16,P=7,Q=5,K=32,R=3,S=3", "", target);
    check_verifies("resnet50.tsl", "conv_bn_relu", "N=8,H=28,W=28,C=3,K=20,R=3,S=3", "", target);  // padded, fused epilogue
    check_verifies("conv2d.tsl", "conv2d", "N=2,C=3,H=40,W=40,K=20,R=3,S=3", "", target);
  }
  // 4 images x 8 channel tiles of 32: every one of the 32 cores, each with its own copies.
  auto nchw = compile_case("conv2d.tsl", "conv2d", "N=4,C=32,H=8,W=8,K=256,R=3,S=3", "", false);
  CHECK(nchw->kernel.program.cores == 32);
  // Padded output channels: one tile of all 32 padded channels; 8 images on 8 cores (was 1).
  auto padded = compile_case("resnet50.tsl", "conv_bn_relu", "N=8,H=28,W=28,C=3,K=20,R=3,S=3", "", false);
  CHECK(padded->kernel.program.cores == 8);
}

TEST_CASE("tiny NCHW / padded convolutions keep their copies on one core (per-core copies would cost more than they save)") {
  auto nchw = compile_case("conv2d.tsl", "conv2d", "N=2,C=3,H=5,W=6,K=4,R=3,S=3", "", false);
  CHECK(nchw->kernel.program.cores == 1);
  auto padded = compile_case("resnet50.tsl", "conv_bn_relu", "N=4,H=6,W=6,C=3,K=20,R=3,S=3", "", false);
  CHECK(padded->kernel.program.cores == 1);
}

TEST_CASE("the ResNet-50 stem (7x7, stride 2, padding 3, C = 3) in bands over several cores, its window's columns folded into the channels") {
  // 56 x 56 x 16 f32 accumulators do not fit L0C twice: bands; 2 images x 14 bands of 4 rows on
  // 28 cores, each band's folded map (3 x 7 = 21 -> 32 channels, 7 kernel rows per L0 step) built
  // from X in UB.
  const std::string shape = "N=2,H=112,W=112,C=3,K=16,R=7,S=7,P=56,Q=56";
  check_verifies("conv_halo.tsl", "conv_pad3_s2", shape);
  auto c = compile_case("conv_halo.tsl", "conv_pad3_s2", shape, "", false);
  CHECK(c->kernel.program.cores == 28);
  bool folded_rows = false;
  for (const auto& n : c->kernel.notes) folded_rows |= n.find("2 channel slices x 1 kernel-position group(s) of 7") != std::string::npos;
  CHECK(folded_rows);
}

TEST_CASE("200 x 200 x 16 (1.28 MB, the former UserError example) maps in bands, one output row larger than L1 is left to the general lowering") {
  auto c = compile_case("conv_seed.tsl", "conv2d_nhwc", "N=1,H=200,W=200,C=16,K=16,R=3,S=3", "", false);
  CHECK(fmatrices(c->kernel).size() > 1);
  // the cube refuses it; the vector lowering takes it over every core, its padded copy shared
  auto wide = compile_case("conv_seed.tsl", "conv2d_nhwc", "N=1,H=4,W=40000,C=16,K=16,R=3,S=3", "", false);
  const std::string notes = kernel_notes(*wide);
  CHECK(notes.find("the input window of one output row exceed L1") != std::string::npos);
  CHECK(notes.find("general vector lowering on 32 core(s)") != std::string::npos);
}

TEST_CASE("NCHW images larger than UB: the layout copies in pieces (rows x plane), with bands, exact on 910 and 310") {
  // 64 x 56 x 56 f16 = 401 KB per image: was "a layout transform ... does not fit the vector buffer"
  check_verifies("conv2d.tsl", "conv2d", "N=1,C=64,H=56,W=56,K=64,R=3,S=3");
  check_verifies("conv2d.tsl", "conv2d", "N=2,C=3,H=56,W=56,K=20,R=3,S=3", "", kTarget310);  // padded channels, bands
  check_verifies("conv2d.tsl", "conv2d", "N=1,C=5,H=100,W=90,K=24,R=3,S=3");                 // 10 bands of 10 rows
}

TEST_CASE("padded bands spread over cores: the first, middle and last bands' code each on its cores, exact on 910 and 310") {
  // 56 x 56 x 64 -> 64, 3x3, padding 1, one image (several images keep their ping-pong): 4 cores before (one per channel tile of 16, 22,232
  // cycles on davinci-910); now bands of output rows over the idle cores too.
  const std::string shape = "N=1,H=56,W=56,C=64,K=64,R=3,S=3";
  for (const std::string& target : {kTarget, kTarget310}) check_verifies("conv_halo.tsl", "conv_pad1", shape, "", target);
  check_verifies("conv_halo.tsl", "conv_pad1", "N=1,H=12,W=10,C=16,K=16,R=3,S=3", "", kTarget);  // bands of 2 rows
  auto c = compile_case("conv_halo.tsl", "conv_pad1", shape);
  CHECK(c->kernel.program.cores >= 16);
  const auto fm = fmatrices(c->kernel);
  REQUIRE(fm.size() == 3);  // one set_fmatrix per kind of band: zero row on top, halo rows both sides, zero row below
  CHECK(fm[0][2] == 1);
  CHECK(fm[0][3] == 0);
  CHECK(fm[1][2] == 0);
  CHECK(fm[1][3] == 0);
  CHECK(fm[1][0] == fm[0][0] + 1);
  CHECK(fm[2][2] == 0);
  CHECK(fm[2][3] == 1);
  // within 4x of the bound: each core's share of the MACs at the cube's rate and the tensors once
  // at the shared GM bandwidth, plus a GM read's and write's latency
  const Run r = run(*c, npu_sync::SyncMode::Pruned);
  CHECK(r.verification.verified);
  const isa::NpuMachine m = isa::npu_machine(c->compilation->hierarchy);
  const double macs = 56.0 * 56 * 64 * 64 * 9, bytes = (56.0 * 56 * 64 * 2) * 2 + 9 * 64 * 64 * 2;
  const double cube = macs / c->kernel.program.cores / (double(m.cube_f16.m0) * m.cube_f16.n0 * m.cube_f16.k0 / m.cube_f16.cycles);
  const double gm = bytes / m.gm_shared_bandwidth_bytes_per_cycle;
  const double latency = m.path(npu::Buffer::GM, npu::Buffer::L1).latency_cycles + m.path(npu::Buffer::UB, npu::Buffer::GM).latency_cycles;
  MESSAGE(r.sim.record.total_cycles << " cycles on " << c->kernel.program.cores << " cores; cube " << cube << ", GM " << gm);
  CHECK(double(r.sim.record.total_cycles) <= 4 * (cube + gm) + latency);
}
