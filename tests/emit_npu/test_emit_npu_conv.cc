// NPU convolutions (compiler/emit_npu/conv.cc) in every layout the small suite uses: NHWC, NCHW (via
// NHWC scratch copies transposed on the vector unit), the blocked seed layout (C1HWC0-like, mapped
// directly), strides; tails (pixel counts and channel counts not multiples of 16). Each program
// is compared element by element with the reference interpreter, race-free naive and pruned.
#include <doctest/doctest.h>

#include <set>

#include "compiler/emit_c/run_c.h"
#include "compiler/emit_npu/emit_npu.h"
#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "compiler/npu_sync/sync_insertion.h"
#include "compiler/pipeline.h"
#include "isa/base/error.h"
#include "npu_sim/simulator.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

TEST_CASE("NCHW convolution (AKG conv2d): NHWC scratch copies transposed on the vector unit, exact, tails") {
  check_verifies("conv2d.tsl", "conv2d", "N=2,C=3,H=5,W=6,K=4,R=3,S=3");    // the small-suite entry
  check_verifies("conv2d.tsl", "conv2d", "N=3,C=20,H=9,W=11,K=24,R=3,S=3");  // 99 pixels, 20 -> 24 channels
  check_verifies("conv2d.tsl", "conv2d", "N=2,C=16,H=6,W=7,K=32,R=1,S=3");   // channel counts multiples of 16
  auto c = compile_case("conv2d.tsl", "conv2d", "N=2,C=3,H=5,W=6,K=4,R=3,S=3", "", false);
  CHECK(c->kernel.program.cores == 1);
  CHECK(notes_contain(c->kernel, "NCHW: X and the weights transposed"));
}

TEST_CASE("strided convolution: set_fmatrix strides, load3d reads every second pixel") {
  check_verifies("conv2d.tsl", "conv2d_stride2", "N=2,C=3,P=3,Q=4,K=4,R=3,S=2");    // the small-suite entry
  check_verifies("conv2d.tsl", "conv2d_stride2", "N=2,C=16,P=7,Q=5,K=32,R=3,S=3");  // 35 pixels
  auto c = compile_case("conv2d.tsl", "conv2d_stride2", "N=2,C=16,P=7,Q=5,K=32,R=3,S=3", "", false);
  const npu::Instruction* fm = nullptr;
  for (const auto& in : c->kernel.program.code)
    if (in.opcode == npu::Opcode::SetFmatrix) fm = &in;
  REQUIRE(fm);
  // H = 2 P + R - 2 = 15, W = 2 Q + S - 2 = 11, no padding, stride 2 x 2, 3 x 3, dilation 1.
  std::vector<int64_t> geometry;
  for (const auto& o : fm->operands) geometry.push_back(o.imm);
  CHECK(geometry == std::vector<int64_t>{15, 11, 0, 0, 0, 0, 2, 2, 3, 3, 1, 1});
}

TEST_CASE("blocked seed layout [N/16, H, W, C/16, 16, 16] maps directly (one strided copy per image and 16 channels)") {
  check_verifies("conv_seed.tsl", "conv2d_blocked", "NB=1,H=4,W=3,CB=2,KB=1,R=3,S=3");  // the small-suite entry
  check_verifies("conv_seed.tsl", "conv2d_blocked", "NB=2,H=9,W=7,CB=2,KB=3,R=3,S=3");  // 63 pixels, 32 images, 3 blocks of K
}

TEST_CASE("NHWC convolution with pixel tails over several cores, weights of an output-channel tile stay in L1") {
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=4,H=13,W=11,C=32,K=48,R=3,S=3");  // 143 pixels
  check_verifies("conv_seed.tsl", "conv2d_nhwc", "N=6,H=5,W=5,C=16,K=64,R=3,S=3");
  // The seed convolution: tiles of 64 output channels (as cube-bound as tiles of 128, whose weights
  // and two feature maps would fit L1 too, but the cube waits for half the weights before its first
  // image: tile::plan_conv's fill), 8 tiles x 4 image groups = 32 cores, 64 images per core two at
  // a time, the 9 kernel positions in one group (9 x 16 x 64 x 2 = 18432 bytes per L0B half).
  auto c = compile_case("conv_seed.tsl", "conv2d_nhwc", "N=256,H=14,W=14,C=256,K=512,R=3,S=3", "", false);
  CHECK(c->kernel.program.cores == 32);
  CHECK(notes_contain(c->kernel, "tiles of 64 whose weights stay in L1, 64 image(s) x 1 tile(s) per core over 32 core(s) two "
                                 "images at a time (ping-pong), pixel blocks of 112 (of 208), 16 channel slices x 1 "
                                 "kernel-position group(s) of 9"));
}

TEST_CASE("pruned NCHW, strided and blocked convolutions keep only needed syncs (mutation)") {
  check_mutants_of("conv2d.tsl", "conv2d", "N=2,C=3,H=5,W=6,K=4,R=3,S=3");
  check_mutants_of("conv2d.tsl", "conv2d_stride2", "N=2,C=16,P=7,Q=5,K=32,R=3,S=3");
  check_mutants_of("conv_seed.tsl", "conv2d_blocked", "NB=2,H=9,W=7,CB=2,KB=3,R=3,S=3");
}

// The user's tile spec drives the plan (README "Convolutions: tile spec"): outer k -> output-channel
// tile tn, inner p x q -> pixel block rows (rounded up to 16), inner r x s -> kernel positions per L0
// step; images per core follow from tn. Every plan verifies exactly, naive and pruned.
namespace {

std::string plan_note(const Case& c) {
  for (const auto& n : c.kernel.notes)
    if (n.find("img2col convolution") != std::string::npos) return n;
  return "";
}

// Each (tile, expected part of the plan note): compiled once, the note checked, verified naive and
// pruned; returns the programs' texts.
std::set<std::string> check_tiles(const std::string& def, const std::string& shape,
                                  const std::vector<std::pair<std::string, std::string>>& cases) {
  const std::string plain = plan_note(*compile_case("conv_seed.tsl", def, shape, "", false));
  CHECK(plain.find("from tile") == std::string::npos);
  std::set<std::string> programs;
  for (const auto& [tile, note] : cases) {
    CAPTURE(tile);
    auto c = compile_case("conv_seed.tsl", def, shape, tile);
    const std::string plan = plan_note(*c);
    CHECK(plan.find(note) != std::string::npos);
    CHECK(plan.find("from tile " + c->compilation->tile_spec.to_string()) != std::string::npos);
    CHECK(plan != plain);
    programs.insert(npu::print_program(c->kernel.program));
    verify(*c, def, shape);
  }
  CHECK(programs.size() == cases.size());  // every plan its own program
  return programs;
}

const std::string kSmallNhwc = "N=4,H=9,W=7,C=32,K=64,R=3,S=3";  // 63 pixels -> 64 rows (4 fractals)

}  // namespace

TEST_CASE("NHWC convolution: the tile spec's k chooses tn, its p x q the pixel blocks") {
  check_tiles("conv2d_nhwc", kSmallNhwc,
              {// tn = 32: 2 tiles x 4 images = 8 cores
               {"k=32", "tiles of 32 whose weights stay in L1, 1 image(s) x 1 tile(s) per core over 8 core(s)"},
               // pixel block 3 x 7 = 21 rows -> 32 (2 blocks), tn = 64
               {"k=64,p=3,q=7",
                "tiles of 64 whose weights stay in L1, 1 image(s) x 1 tile(s) per core over 4 core(s), pixel blocks of 32 (of 64)"},
               // p unnamed: 9 rows x 4 columns = 36 -> 48-row blocks (48 + 16)
               {"k=64/16,q=4",
                "tiles of 64 whose weights stay in L1, 1 image(s) x 1 tile(s) per core over 4 core(s), pixel blocks of 48 (of 64)"}});
}

TEST_CASE("NHWC convolution: the tile spec's r x s chooses the kernel positions per L0 step, k rounded like the GEMM's") {
  check_tiles("conv2d_nhwc", kSmallNhwc,
              {// one kernel row per L0 step (3 groups of 3), tn = 16: 4 tiles x 4 images = 16 cores
               {"k=16,r=1", "tiles of 16 whose weights stay in L1, 1 image(s) x 1 tile(s) per core over 16 core(s), pixel blocks of 64 "
                            "(of 64), 2 channel slices x 3 kernel-position group(s) of 3"},
               // k = 40 rounds up to 48, shrinks to 32 (divides 64); 2 x 2 = 4 positions: groups 4 + 4 + 1;
               // p = 1: rows of 7 -> 16-row blocks
               {"k=40,r=2,s=2,p=1", "tiles of 32 whose weights stay in L1, 1 image(s) x 1 tile(s) per core over 8 core(s), pixel "
                                    "blocks of 16 (of 64), 2 channel slices x 3 kernel-position group(s) of 4"}});
}

TEST_CASE("blocked convolution: the tile spec's kb (blocks of 16 channels), p, q, r, s") {
  check_tiles("conv2d_blocked", "NB=2,H=9,W=7,CB=2,KB=3,R=3,S=3",  // 32 images, 48 output channels
              {// kb = 1 block: tn = 16, 3 tiles x 8 image groups (the largest divisor of 32 <= 32 / 3) = 24
               // cores, 4 images each; 4 x 7 = 28 -> 32-row pixel blocks
               {"nb=1,kb=1,p=4,q=7", "tiles of 16 whose weights stay in L1, 4 image(s) x 1 tile(s) per core over 24 core(s) two images "
                                     "at a time (ping-pong), pixel blocks of 32 (of 64)"},
               // one tile of 48 (32 cores, 1 image each); 2 x 2 positions per step: groups 4 + 4 + 1
               {"nb=1,kb=3,r=2,s=2", "tiles of 48 whose weights stay in L1, 1 image(s) x 1 tile(s) per core over 32 core(s), pixel "
                                     "blocks of 64 (of 64), 2 channel slices x 3 kernel-position group(s) of 4"}});
}

TEST_CASE("NCHW convolution and a fused epilogue follow the tile spec too") {
  // NCHW (one core, through the NHWC copies): tn = 16 (2 tiles in the tile loop), one position per step
  auto nchw = compile_case("conv2d.tsl", "conv2d", "N=2,C=16,H=6,W=7,K=32,R=1,S=3", "k=16,s=1");
  CHECK(plan_note(*nchw).find("tiles of 16 whose weights stay in L1, 2 image(s) x 2 tile(s) per core over 1 core(s)") !=
        std::string::npos);
  CHECK(plan_note(*nchw).find("1 channel slices x 3 kernel-position group(s) of 1") != std::string::npos);  // C = 16: one slice
  verify(*nchw, "conv2d", "N=2,C=16,H=6,W=7,K=32,R=1,S=3");
  // conv_bn_relu: the user's 16-row pixel blocks (2 x 6 = 12 -> 16) and tn = 16 with the epilogue on UB
  auto fused = compile_case("resnet50.tsl", "conv_bn_relu", "N=4,H=6,W=6,C=32,K=48,R=3,S=3", "k=16,p=2", false);
  CHECK(plan_note(*fused).find("tiles of 16 whose weights stay in L1") != std::string::npos);
  CHECK(plan_note(*fused).find("pixel blocks of 16 (of 48)") != std::string::npos);
}

TEST_CASE("a convolution tile that does not fit names the buffer, its capacity and the bytes it needs") {
  const std::string seed = "N=2,H=14,W=14,C=256,K=512,R=3,S=3";  // the seed convolution, 2 images
  auto message = [&](const std::string& tile) {
    try {
      compile_case("conv_seed.tsl", "conv2d_nhwc", seed, tile, false);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // (n = 1 and p x q small enough for promotion's own check of the polyhedral tiles)
  // weights 256 x 9 x 256 x 2 = 1179648 + feature map 14 x 14 x 256 x 2 = 100352 > 1 MiB of L1
  CHECK(message("n=1,p=1,q=14,k=256/64,c=16") ==
        "kernel conv2d_nhwc: tile n=1/1,p=1/1,q=14/14,k=256/64,c=16/16 does not fit: level L1 (stage) of davinci-910 needs 1280000 "
        "bytes (weights of 256 output channels 1179648 + one image's feature map 100352) but its capacity is 1048576 bytes; use "
        "smaller sizes in --tile");
  // the whole image (208 rows) x 5 kernel positions x 16 channels x 2 = 33280 bytes per L0A half
  CHECK(message("n=1,p=14,q=14,k=128/64,c=16") ==
        "kernel conv2d_nhwc: tile n=1/1,p=14/14,q=14/14,k=128/64,c=16/16 does not fit: level L0A (operand_a) of davinci-910 needs 66560 "
        "bytes (2 x 208 pixel rows x 5 kernel positions x 16 input channels x 2; double buffering reserves half the level) but its "
        "capacity is 65536 bytes; use smaller sizes in --tile");
  // 9 positions x 16 x 128 x 2 = 36864 bytes per L0B half
  CHECK(message("n=1,p=1,q=14,k=128/64,c=16,r=3,s=3") ==
        "kernel conv2d_nhwc: tile n=1/1,p=1/1,q=14/14,k=128/64,c=16/16,r=3/3,s=3/3 does not fit: level L0B (operand_b) of "
        "davinci-910 needs 73728 bytes (2 x 9 kernel positions x 16 input channels x 128 output channels x 2; double buffering "
        "reserves half the level) but its capacity is 65536 bytes; use smaller sizes in --tile");
}

TEST_CASE("an epilogue is fused only where the accumulator is not stored too: else both outputs written, exact") {
  // conv_and_relu writes Y and Z = max(Y, 0): the fused epilogue wrote Z only (Y was left 0,
  // program_fuzz seed 302 program 500); the general lowering writes both. Must not fire: conv_relu,
  // whose Y is a local, keeps the img2col path with its epilogue.
  const std::string file = "../tests/emit_npu/data/stored_results.tsl", shape = "N=1,H=8,W=10,C=16,K=16,R=3,S=3,P=6,Q=8";
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto both = compile_case(file, "conv_and_relu", shape, "", true, target);
    CHECK(notes_contain(both->kernel, "the accumulator Y is stored too"));
    CHECK_FALSE(notes_contain(both->kernel, "img2col convolution"));
    verify(*both, "conv_and_relu", shape);
    auto fused = compile_case(file, "conv_relu", shape, "", true, target);
    CHECK(notes_contain(fused->kernel, "img2col convolution"));
    verify(*fused, "conv_relu", shape);
  }
}

// One-core scratch copies (NCHW transposes in and out, padded channels) take UB regions of their
// own when every copy's fits (conv_layout.h copy_region; the padded weights in UB's second half),
// so the sync pass lets them overlap instead of handing one region from copy to copy. The small
// suite's entries, davinci-910 (at dd19a10 / before / after): conv2d 2,607 / 2,851 / 2,519;
// conv2d_stride2 2,357 / 2,632 / 2,339; conv2d_nhwc 2,256 / 2,263 / 1,789.
TEST_CASE("one-core scratch copies of small convolutions overlap in UB regions of their own") {
  auto nchw = compile_case("conv2d.tsl", "conv2d", "N=2,C=3,H=5,W=6,K=4,R=3,S=3");
  CHECK(verified_cycles(*nchw, true) < 2600);
  auto strided = compile_case("conv2d.tsl", "conv2d_stride2", "N=2,C=3,P=3,Q=4,K=4,R=3,S=2");
  CHECK(verified_cycles(*strided, true) < 2400);
  auto padded = compile_case("conv_seed.tsl", "conv2d_nhwc", "N=2,C=3,H=5,W=6,K=4,R=3,S=3");
  CHECK(verified_cycles(*padded, true) < 1900);
  auto bn = compile_case("resnet50.tsl", "conv_bn_relu", "N=2,C=3,H=5,W=4,K=4,R=3,S=3");
  CHECK(verified_cycles(*bn, false) < 1900);  // 2,230 / 2,237 / 1,763
}
