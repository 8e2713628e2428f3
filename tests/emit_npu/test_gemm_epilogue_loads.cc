// The NPU GEMM's copies into the core (issue 33 / 30; compiler/emit_npu/gemm.cc, GemmLoop, and
// GemmEpilogue::emit_block in pointwise.cc). On davinci-910 every DMA of every core holds the
// shared GM ceil(bytes / 2,784) cycles, so 32 cores' small copies queue behind each other:
// - the fused epilogue's per-channel values (a scale and a bias [K]) come by one DMA of one row per
//   column block (was one per row of a vector repeat: 4), replicated down the rows on the vector
//   unit, and are queued right after the first K chunk's copies instead of after the last (the
//   write-back then waits for neither their GM latency nor their turns at the shared GM); the
//   blocks' rows of one tensor come by one DMA, a burst per block (GemmEpilogue::emit_loads);
//   where the blocks are more than the epilogue's UB sets, the regions the loads write are set
//   apart, one per block, so that all are still queued ahead;
// - a K chunk of A (one row block) and of B (operand tiles one fractal column wide, laid out
//   column by column) is one DMA each instead of one per operand tile or piece (2-4 KiB copies
//   took 64 of the 87 B/cycle a core's share of the shared GM allows).
// ResNet-50's 1x1 convolutions at N=1, 112x112 input (l3_x_a: 49 x 1024 -> 256 channels; l3_x_c:
// 49 x 256 -> 1024 with the block's input added). Every program is compared element by element
// with the reference interpreter, naive and pruned, race-free.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {
constexpr const char* kBnRelu = "../tests/emit_npu/data/gemm_dividing_tiles.tsl";
constexpr const char* kBnAddRelu = "../tests/emit_npu/data/gemm_epilogue_loads.tsl";

// Indices of the program's instructions with opcode `o` whose first address operand is in `buffer`.
std::vector<size_t> find_copies(const npu::Program& p, npu::Opcode o, npu::Buffer buffer) {
  std::vector<size_t> at;
  for (size_t i = 0; i < p.code.size(); ++i) {
    const npu::Instruction& in = p.code[i];
    if (in.opcode != o) continue;
    for (const npu::Operand& op : in.operands)
      if (op.kind == npu::OperandKind::Address) {
        if (op.buffer == buffer) at.push_back(i);
        break;
      }
  }
  return at;
}
}  // namespace

TEST_CASE("GEMM epilogue values: one row per DMA, queued after the first K chunk, and one copy per K chunk of A and B") {
  const std::string shape = "N=1,P=7,Q=7,C=1024,K=256";
  auto c = compile_case(kBnRelu, "conv1x1_bn_relu", shape);
  const npu::Program& p = c->kernel.program;
  CAPTURE(kernel_notes(*c));
  REQUIRE(notes_contain(c->kernel, "stage tiles of 16x32x256"));  // 32 tiles of 16 rows x 32 channels, K chunks of 256
  // 2 column blocks x 2 tensors: a row of 16 f32 values each, one DMA per tensor (a burst per block)
  const std::vector<size_t> values = find_copies(p, npu::Opcode::DmaIn, npu::Buffer::UB);
  CHECK(values.size() == 2);
  for (size_t i : values) {
    CHECK(p.code[i].operands[2].imm == 2);   // two bursts
    CHECK(p.code[i].operands[3].imm == 64);  // of 16 f32
  }
  // 4 K chunks: the first 3 A 16 x 256 and B 256 x 32, one copy each (the last, computed block by
  // block: A's row block and each of B's 2 column blocks one copy, test_gemm_l1_ring.cc); the
  // values right after chunk 0's
  const std::vector<size_t> chunks = find_copies(p, npu::Opcode::DmaInNz, npu::Buffer::L1);
  REQUIRE(chunks.size() == 6 + 3);
  for (size_t n = 0; n < 6; ++n) {
    const auto& o = p.code[chunks[n]].operands;
    CAPTURE(n);
    CHECK(o[3].imm == (n % 2 == 0 ? 16 : 256));
    CHECK(o[4].imm == (n % 2 == 0 ? 256 : 32));
  }
  CHECK(values.front() > chunks[1]);
  CHECK(values.back() < chunks[2]);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv1x1_bn_relu " << shape << " on davinci-910: " << cycles << " cycles (16 value DMAs after the loop, a copy per operand tile or piece: 2,554)");
  CHECK(cycles < 2100);  // 1,988
  auto d = compile_case(kBnRelu, "conv1x1_bn_relu", shape, "", true, kTarget310);
  MESSAGE("on davinci-310: " << verified_cycles(*d, /*exact=*/true) << " cycles");
}

TEST_CASE("a GEMM epilogue with a residual input and per-channel values is exact with its loads ahead") {
  const std::string shape = "N=1,P=7,Q=7,C=256,K=1024";
  auto c = compile_case(kBnAddRelu, "conv1x1_bn_add_relu", shape);
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv1x1_bn_add_relu " << shape << " on davinci-910: " << cycles << " cycles (2,519 before)");
  CHECK(cycles < 1900);  // 1,780
  auto d = compile_case(kBnAddRelu, "conv1x1_bn_add_relu", shape, "", true, kTarget310);
  MESSAGE("on davinci-310: " << verified_cycles(*d, /*exact=*/true) << " cycles");
  // odd sizes: a column tail, rows past M, two images
  check_verifies(kBnAddRelu, "conv1x1_bn_add_relu", "N=2,P=5,Q=3,C=96,K=200");
  check_verifies(kBnAddRelu, "conv1x1_bn_add_relu", "N=2,P=5,Q=3,C=96,K=200", "", kTarget310);
}

TEST_CASE("the GEMM plan prices the epilogue's loads that no UB set holds ahead: l2_x_c on davinci-310 keeps 112-row blocks") {
  // 196 x 128 -> 512 with the block's input added, 2 cores: 208 x 256 stage tiles fit the residual's
  // regions only in 16-row blocks, 13 x 4 column blocks a core, each waiting about half a GM read
  // for its values (29,941 cycles); 112 x 512 tiles in 112-row blocks: 15,593
  const std::string shape = "N=1,P=14,Q=14,C=128,K=512";
  auto c = compile_case(kBnAddRelu, "conv1x1_bn_add_relu", shape, "", true, kTarget310);
  CAPTURE(kernel_notes(*c));
  CHECK(notes_contain(c->kernel, "operand tile 112x64x64"));
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv1x1_bn_add_relu " << shape << " on davinci-310: " << cycles << " cycles (16-row blocks: 29,941)");
  CHECK(cycles < 17000);  // 15,593
}

TEST_CASE("GEMM epilogue loads: more column blocks than UB sets still queued ahead, the values one DMA per tensor") {
  // l2_x_c on davinci-910: 196 x 128 -> 512 with the block's input added, 64 x 64 stage tiles, 4
  // column blocks of 64 x 16 a core and 2 whole sets of the epilogue's regions: the loads of blocks
  // 2 and 3 came after blocks 0 and 1's evaluation and waited out the GM latency (1,776 cycles)
  const std::string shape = "N=1,P=14,Q=14,C=128,K=512";
  auto c = compile_case(kBnAddRelu, "conv1x1_bn_add_relu", shape);
  const npu::Program& p = c->kernel.program;
  CAPTURE(kernel_notes(*c));
  REQUIRE(notes_contain(c->kernel, "stage tiles of 64x64x128"));
  const std::vector<size_t> values = find_copies(p, npu::Opcode::DmaIn, npu::Buffer::UB);
  const std::vector<size_t> chunks = find_copies(p, npu::Opcode::DmaInNz, npu::Buffer::L1);
  const std::vector<size_t> moves = find_copies(p, npu::Opcode::MovL0c, npu::Buffer::UB);
  REQUIRE(!moves.empty());
  // the scale and the bias: one DMA of 4 bursts each; the residual: a DMA per column block (64 rows)
  int per_channel = 0, residual = 0;
  for (size_t i : values) {
    const auto& o = p.code[i].operands;
    if (o[2].imm == 4 && o[3].imm == 64) ++per_channel;
    if (o[2].imm == 64) ++residual;
    CHECK(i < moves.front());  // every load queued before the first write-back
  }
  CHECK(per_channel == 2);
  CHECK(residual == 4);
  CHECK(values.size() == 6);
  CHECK(values.front() > chunks.front());
  const uint64_t cycles = verified_cycles(*c, /*exact=*/true);
  MESSAGE("conv1x1_bn_add_relu " << shape << " on davinci-910: " << cycles << " cycles (blocks 2 and 3's loads after blocks 0 and 1: 1,776)");
  CHECK(cycles < 1600);
}
