// Values per row in the general NPU vector lowering's statement tiles (compiler/emit_npu/
// nest_values.cc: row_values, row_op, narrow_rows, mixed_rows; nest_plan.cc: count_regions and
// the tile's rows): a read that does not move along the lanes (a per-channel operand of an NCHW
// tile) is gathered and spread by one vbrcb of one repeat per row, the operations of such values
// alone (batch norm's gamma * rsqrt(|var| + eps)) run on those repeats, and the tile's operations
// read them with repeat stride 0; the values take a repeat per row of UB, not a tile each, and
// element-wise results overwrite operands no other node reads, so tiles hold more rows (or whole
// rows). Verified element by element against the interpreter (naive and pruned syncs, race-free)
// on davinci-910 and davinci-310, with cycle bounds the per-lane broadcasts exceeded.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

constexpr const char* kFile = "row_values.tsl";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Every vbrcb of the program writes one repeat per row (destination repeat stride one repeat): no
// broadcast of a value over a row's repeats; returns how many there are.
int row_broadcasts(const Case& c) {
  int n = 0;
  for (const auto& i : c.kernel.program.code)
    if (i.opcode == npu::Opcode::Vbrcb) {
      CHECK(i.operands.back().imm == 8);
      ++n;
    }
  return n;
}

}  // namespace

// 8 x 128 x 28 x 28 f32 (the roofline instance): a core grid of n 8 x c 4, 32 channels per core
// in tiles of 4 channel rows x 784 lanes. Before: 2-row tiles, each of the four per-channel reads
// spread over the rows' 13 repeats by 13 vbrcb (104 repeats per tile) and the scale's abs, add,
// rsqrt and multiply done on the whole tile (7 operations of 26 repeats): 10,408 cycles (30.8 % of
// the roofline). Now the four reads are 4 vbrcb of 4 repeats, the scale 4 operations of 4 repeats,
// the tile 3 operations of 52 repeats: 4,411 cycles, GM-bound.
TEST_CASE("batch-norm inference NCHW: per-channel operands one repeat per row, the scale computed per row") {
  auto c = compile_case(kFile, "bn_infer_nchw", "N=8,C=128,H=28,W=28");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(c->kernel.program.cores == 32);
  CHECK(has(n, "rows c, lanes h_w"));
  CHECK(has(n, "tile 4 x 784"));
  CHECK(row_broadcasts(*c) > 0);
  const uint64_t cycles = verified_cycles(*c, false);
  MESSAGE("bn_infer_nchw 8x128x28x28 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 5000);
  auto d = compile_case(kFile, "bn_infer_nchw", "N=2,C=3,H=4,W=5", "", true, kTarget310);
  verified_cycles(*d, false);
  auto e = compile_case(kFile, "bn_infer_nchw", "N=2,C=5,H=3,W=70");
  row_broadcasts(*e);
  verified_cycles(*e, false);
}

// 8 x 64 x 56 x 56, f16 in and out, f32 scale and shift: before, each 3,136-lane channel row went
// in two tiles (2,304 + 832 lanes, one row each) whose two gathers waited in turn: 12,082 cycles
// (36.3 %). The values per row leave room for a whole row per tile: 4,952 cycles.
TEST_CASE("scale, bias and ReLU NCHW f16: whole channel rows per tile, the per-channel operands one repeat per row") {
  auto c = compile_case(kFile, "scale_bias_relu", "N=8,C=64,H=56,W=56");
  const std::string n = kernel_notes(*c);
  CAPTURE(n);
  CHECK(has(n, "tile 1 x 3136"));
  row_broadcasts(*c);
  const uint64_t cycles = verified_cycles(*c, false);
  MESSAGE("scale_bias_relu 8x64x56x56 on davinci-910: " << cycles << " cycles");
  CHECK(cycles < 5600);
  auto d = compile_case(kFile, "scale_bias_relu", "N=8,C=64,H=56,W=56", "", true, kTarget310);
  const uint64_t cycles310 = verified_cycles(*d, false);
  MESSAGE("scale_bias_relu 8x64x56x56 on davinci-310: " << cycles310 << " cycles");
  CHECK(cycles310 < 92000);  // was 184,674
}

TEST_CASE("casts of values per row: f16 widened to f32 and f32 narrowed to f16 fill every lane of the row's repeat") {
  for (const char* shape : {"N=2,C=7,H=5,W=30", "N=1,C=3,H=16,W=16"}) {
    CAPTURE(shape);
    auto c = compile_case(kFile, "cast_rows", shape);
    CAPTURE(kernel_notes(*c));
    row_broadcasts(*c);
    verified_cycles(*c, false);
    auto d = compile_case(kFile, "cast_rows", shape, "", true, kTarget310);
    verified_cycles(*d, false);
  }
}
