// Strided 1x1 convolutions without padding (ResNet-50's projection shortcuts) on the cube
// (compiler/emit_npu/conv.cc, Conv::x_step): the image's rows clipped to the last one read, and
// where the column stride divides W, X's columns read as pixels `stride` apart (one strided copy
// per fractal row of channels brings only the columns read into L1; img2col then strides the rows
// alone). Written with a weight matrix (Wt[C, K]) or with R = S = 1; an even H was refused before
// (windows that stop short of the image have no img2col geometry) and went to the general vector
// lowering.
// Each program is compared element by element with the reference interpreter, race-free naive and
// pruned, on davinci-910 and -310.
#include <doctest/doctest.h>

#include "compiler/emit_npu/conv.h"
#include "isa/npu_machine.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

bool gathered(const emit_npu::NpuKernel& k) {
  for (const auto& n : k.notes)
    if (n.find("the columns read as pixels") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a strided 1x1 convolution with a weight matrix maps to the cube reading only its columns, exact on 910 and 310") {
  for (const std::string& target : {kTarget, kTarget310}) {
    check_verifies("conv_projection.tsl", "projection_acc", "N=2,H=8,W=8,C=32,K=48,P=4,Q=4", "", target);
    check_verifies("conv_projection.tsl", "projection", "N=1,H=28,W=28,C=64,K=128,P=14,Q=14", "", target);  // + scale, bias
    check_verifies("conv_projection.tsl", "projection", "N=1,H=7,W=7,C=64,K=64,P=4,Q=4", "", target);       // odd H: the last row read
    check_verifies("conv_projection.tsl", "projection_s2x1", "N=2,H=6,W=5,C=16,K=16,P=3", "", target);     // rows only
    check_verifies("conv_projection.tsl", "projection_acc", "N=1,H=8,W=7,C=16,K=16,P=4,Q=4", "", target);  // rows clipped, odd W
  }
  auto c = compile_case("conv_projection.tsl", "projection", "N=1,H=28,W=28,C=64,K=128,P=14,Q=14", "", false);
  CHECK(gathered(c->kernel));
  // img2col over rows 14 wide (the even columns), stride 2 over the rows, 1 over the columns.
  bool fm = false;
  for (const auto& in : c->kernel.program.code)
    if (in.opcode == npu::Opcode::SetFmatrix) fm = in.operands[1].imm == 14 && in.operands[6].imm == 2 && in.operands[7].imm == 1;
  CHECK(fm);
  // an odd W: the columns stay (stride 2 reaches the last one), only the rows are clipped
  CHECK_FALSE(gathered(compile_case("conv_projection.tsl", "projection_acc", "N=1,H=8,W=7,C=16,K=16,P=4,Q=4", "", false)->kernel));
}

TEST_CASE("the R = S = 1 form of an even H (the former 'windows stop short' refusal) maps, exact on 910 and 310") {
  const std::string shape = "N=1,H=8,W=8,C=16,K=16,R=1,S=1,P=4,Q=4";
  CHECK(emit_npu::why_not_conv(compile_case("resnet50_layers.tsl", "conv1x1_s2", shape, "", false)->compilation->kernel,
                               compile_case("resnet50_layers.tsl", "conv1x1_s2", shape, "", false)->compilation->hierarchy) == "");
  for (const std::string& target : {kTarget, kTarget310}) check_verifies("resnet50_layers.tsl", "conv1x1_s2", shape, "", target);
  CHECK(gathered(compile_case("resnet50_layers.tsl", "conv1x1_s2", shape, "", false)->kernel));
}

TEST_CASE("the columns read come in one strided copy per fractal row of channels, a burst per pixel read") {
  // C = 64: 4 fractal rows of channels; each copy takes the band's rows x 14 pixels, skipping one
  // pixel of 64 f16 channels after each 32-byte burst.
  auto c = compile_case("conv_projection.tsl", "projection_acc", "N=1,H=28,W=28,C=64,K=16,P=14,Q=14", "", false);
  int64_t rows = 0;
  for (const auto& in : c->kernel.program.code)
    if (in.opcode == npu::Opcode::SetFmatrix) rows = in.operands[0].imm;
  REQUIRE(rows > 0);
  int copies = 0;
  for (const auto& in : c->kernel.program.code)
    if (in.opcode == npu::Opcode::DmaIn && in.operands[0].buffer == npu::Buffer::L1 && in.operands[2].imm == rows * 14) {
      ++copies;
      CHECK(in.operands[3].imm == 32);
      CHECK(in.operands[4].imm == 2 * 64 * 2 - 32);
    }
  CHECK(copies == 4);
}

TEST_CASE("ResNet-50's projections at 112 x 112 spread over the cores, within 10x of their GM and cube bounds") {
  // stage 2 (28 x 28 x 256 -> 14 x 14 x 512, even W: the columns read as pixels) and stage 4
  // (7 x 7 x 1024 -> 4 x 4 x 2048, odd: img2col at stride 2) with scale and bias. On the general
  // vector lowering they took 163,267 and 370,489 cycles (60 and 180 x these bounds).
  struct Layer {
    std::string shape;
    int64_t macs, bytes;
    bool columns;
  };
  for (const Layer& l : {Layer{"N=1,H=28,W=28,C=256,K=512,P=14,Q=14", 14 * 14 * 256 * 512LL, (14 * 14 * 256 + 256 * 512 + 14 * 14 * 512) * 2LL, true},
                         Layer{"N=1,H=7,W=7,C=1024,K=2048,P=4,Q=4", 4 * 4 * 1024 * 2048LL, (4 * 4 * 1024 + 1024 * 2048 + 4 * 4 * 2048) * 2LL, false}}) {
    CAPTURE(l.shape);
    auto c = compile_case("conv_projection.tsl", "projection", l.shape);
    CHECK(gathered(c->kernel) == l.columns);
    CHECK(c->kernel.program.cores >= 16);
    const Run r = run(*c, npu_sync::SyncMode::Pruned);
    CHECK(r.verification.verified);
    CHECK(r.verification.max_abs_err == 0);
    const isa::NpuMachine m = isa::npu_machine(c->compilation->hierarchy);
    // the bytes read and written once at the chip's GM bandwidth, each core's share of the MACs at
    // the cube's rate, the first read's and the last write's latency
    const double gm = double(l.bytes) / m.gm_shared_bandwidth_bytes_per_cycle;
    const double cube = double(l.macs) / c->kernel.program.cores / (double(m.cube_f16.m0) * m.cube_f16.n0 * m.cube_f16.k0 / m.cube_f16.cycles);
    const double latency = m.path(npu::Buffer::GM, npu::Buffer::L1).latency_cycles + m.path(npu::Buffer::UB, npu::Buffer::GM).latency_cycles;
    MESSAGE(l.shape << ": " << r.sim.record.total_cycles << " cycles on " << c->kernel.program.cores << " cores; GM " << gm << ", cube " << cube);
    CHECK(double(r.sim.record.total_cycles) <= 10 * (gm + cube) + latency);
  }
}
