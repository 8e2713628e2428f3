// Gathers along a table's outer axis (workloads/gather.tsl, the one-hot sum tessel import writes for
// ONNX Gather with data indices) on davinci-910: mapped by compiler/emit_npu/gather.h (the scalar
// unit's ld of each index, one DMA in and one out per row, rows over the cores), compared element
// by element with the reference interpreter (naive and pruned syncs, exact, race-free), with
// indices that select no row (zeros) and negative ones (from the end), and held under a bound
// derived from the DMA cost.
//
// Bound (davinci-910.yaml): a core's rows run one after another at worst, each
//   ld of the index:       scalar_cycles 1 + GM->UB latency 300                     = 301
//   its scalar arithmetic: at most 16 instructions of 1 cycle                       =  16
//   DMA in of B bytes:     GM->UB latency 300 + ceil(B / 87 bytes per cycle)
//   DMA out of B bytes:    UB->GM latency 150 + ceil(B / 87)
//   flags between them:    at most 16 set/wait of 1 cycle                           =  16
//   zeros (an index that selects no row): ceil(B / 256) vector repeats + start-up 15
// so cycles <= ceil(N / cores) x (798 + 2 ceil(B / 87) + ceil(B / 256)) + 64 (the final barrier and
// issue), with cores = min(32, N); a row over 131,072 bytes (half of UB) moves in pieces, each a DMA
// pair and a zero fill of its own. BERT's word embedding, N = 16 rows of B = 3,072 bytes: bound
// 798 + 72 + 12 + 64 = 946 (measured 844 with every index selecting a row); as the one-hot sum in the
// general vector lowering it took 5.18 M cycles (gather_rows at D = 1,000: 171,633). The cycles must
// not depend on the table's rows D: only the selected rows move.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

const std::string kFile = "gather.tsl";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The bound above for N rows of B bytes moved in `pieces` DMA pairs each.
uint64_t dma_bound(int64_t N, int64_t B, int64_t pieces = 1) {
  const int64_t cores = std::min<int64_t>(32, N);
  const int64_t piece = ceil_div(B, pieces);
  const int64_t per_piece = 300 + 150 + 2 * ceil_div(piece, 87) + 15 + ceil_div(piece, 256);
  return uint64_t(ceil_div(N, cores) * (301 + 16 + 16 + pieces * per_piece) + 64);
}

// Compiles DEF at SHAPE, checks the gather mapping took it and that the indices hold negatives and
// (with `unselected`) indices that select no row, verifies naive and pruned, returns the pruned cycles.
uint64_t gather_cycles(const std::string& def, const std::string& shape, int64_t D, bool wraps, bool unselected) {
  CAPTURE(def);
  CAPTURE(shape);
  auto c = compile_case(kFile, def, shape);
  const std::string notes = kernel_notes(*c);
  MESSAGE(notes);
  CHECK(notes.find("gather of") != std::string::npos);
  CHECK((notes.find("negative indices from the end") != std::string::npos) == wraps);
  const auto& code = c->kernel.program.code;
  CHECK(std::count_if(code.begin(), code.end(), [](const npu::Instruction& i) { return i.opcode == npu::Opcode::Ld; }) == 1);
  // the random indices hold rows selected, negatives, and indices that select no row (zeros) or none
  const NpyArray& ids = c->inputs.at("ids");
  const auto* v = reinterpret_cast<const int32_t*>(ids.data.data());
  const size_t n = ids.data.size() / 4;
  CHECK(std::any_of(v, v + n, [&](int32_t x) { return x >= 0 && x < D; }));
  CHECK(std::any_of(v, v + n, [&](int32_t x) { return x < 0; }));
  CHECK(std::any_of(v, v + n, [&](int32_t x) { return x >= D || (wraps ? x < -D : x < 0); }) == unselected);
  return verified_cycles(*c, true);
}

}  // namespace

TEST_CASE("a gather along a table's outer axis moves only the selected rows, one DMA pair per row") {
  // BERT's embedding row shape (L = 768 f32, 16 tokens); the cycles do not depend on the table's
  // rows (every index selects one in both), and rows that select nothing are zeroed (D = 5)
  const uint64_t small = gather_cycles("gather_rows", "N=16,D=30,L=768", 30, true, false);
  const uint64_t large = gather_cycles("gather_rows", "N=16,D=3000,L=768", 3000, true, false);
  const uint64_t zeros = gather_cycles("gather_rows", "N=16,D=5,L=768", 5, true, true);
  MESSAGE("16 rows of 3,072 bytes: " << small << " cycles (D = 30), " << large << " (D = 3,000), " << zeros
                                     << " (D = 5, some zero rows); bound " << dma_bound(16, 3072));
  CHECK(small == large);
  CHECK(large <= dma_bound(16, 3072));
  CHECK(zeros <= dma_bound(16, 3072));
  // more rows than cores (two rounds, the last core's second row skipped), rows not whole repeats
  const uint64_t rounds = gather_cycles("gather_rows", "N=45,D=7,L=100", 7, true, true);
  MESSAGE("45 rows of 400 bytes: " << rounds << " cycles; bound " << dma_bound(45, 400));
  CHECK(rounds <= dma_bound(45, 400));
}

TEST_CASE("f16 gathers by a two-dimensional index tensor and rows longer than half of UB") {
  const uint64_t f16 = gather_cycles("gather_f16", "A=3,B=30,D=6,C=2,L=70", 6, false, true);
  MESSAGE("90 f16 rows of 280 bytes: " << f16 << " cycles; bound " << dma_bound(90, 280));
  CHECK(f16 <= dma_bound(90, 280));
  // 2 x 40,000 x 2 bytes = 160,000 bytes a row: two pieces of at most 131,072 bytes
  const uint64_t pieces = gather_cycles("gather_f16", "A=1,B=3,D=4,C=2,L=40000", 4, false, true);
  MESSAGE("3 f16 rows of 160,000 bytes: " << pieces << " cycles; bound " << dma_bound(3, 160000, 2));
  CHECK(pieces <= dma_bound(3, 160000, 2));
}
