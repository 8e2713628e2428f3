// Internal to the NPU GEMM path (gemm.h): what it decides before it writes an instruction —
// the operands' form, the fused epilogue, the GM strides, the tile policy's plan, the broadcast
// tensors' registers, the tails' copies (setup_gemm, in gemm_setup.cc) — and the shape the main
// loop carries out (GemmShape; GemmLoop and Builder in gemm.cc). Registers of the generated code
// are shared by both files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/emit_npu/emit_npu.h"
#include "compiler/emit_npu/pointwise.h"
#include "compiler/tile/npu_gemm_plan.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu::gemm_detail {

using Machine = isa::NpuMachine;

// Registers of the generated code.
enum Reg : uint8_t {
  kTile = 1, kTileM, kTileN, kTmp, kGmA, kGmB, kChunk, kGmAChunk, kGmBChunk, kInit, kGmC, kCopy, kCopySrc, kCopyDst,
  kBatch, kRest,
  kBroadcast  // the first of one register per broadcast tensor of the epilogue (its tile's byte offset)
};

// A GEMM C[M,N] (+)= A[M,K] * B[K,N] on GM tensors whose sizes are multiples of the tile, each
// operand stored with one unit-stride dimension: A [m][k] or transposed [k][m], B [k][n] or
// transposed [n][k], C [m][n]; the batch index anywhere (its own GM stride per tensor).
struct GemmShape : tile::GemmPlan {
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;                  // independent GEMMs
  int64_t a_off = 0, b_off = 0, c_off = 0;  // GM byte offsets
  // GM element strides of A(m, k), B(k, n), C(m, n) and of the batch index in each
  int64_t a_sm = 0, a_sk = 1, a_sb = 0, b_sk = 0, b_sn = 1, b_sb = 0, c_sm = 0, c_sb = 0;
  // Several batch indices (attention's batch and head: Q[b, s, h, d] * K[b, t, h, d] -> P[b, h, s, t]),
  // outermost first, each with its own element stride in A, B and C; `batch` is their product and
  // a_sb, b_sb, c_sb are unused. Empty: one batch index or none.
  struct BatchDim {
    int64_t extent = 1, a = 0, b = 0, c = 0;
  };
  std::vector<BatchDim> batch_dims;
  bool a_transposed() const { return a_sk != 1; }  // A stored [k][m]: its rows are K
  bool b_transposed() const { return b_sn != 1; }  // B stored [n][k]: its rows are N
  DType out = DType::F32;
  DType operand = DType::F16;  // the cube shape used: f16, or i8 (isa::NpuMachine::cube_i8, i32 accumulation)
  int64_t unit_m = 0, unit_n = 0;  // tile multiples beyond the fractal (tile::GemmRequest)
  bool int_out = false;  // i8 operands on the f16 cube (converted to f16, exact) -> i32: the f32 accumulator converted on UB
  int cores = 1;
  // Tails in place (GemmSetup::in_place): M, N, K above are the sizes padded to the tiles, these the
  // user's (0: that axis has no tail). Edge tiles are computed whole and written back clipped: their
  // rows and columns past M and N read whatever the guards after the operands hold and are never
  // written; the columns of K past K are zeros (the guard's zeros for an operand stored K-major, a
  // fill from `zeros` before the K-minor operand's last chunk).
  int64_t real_m = 0, real_n = 0, real_k = 0;
  int64_t zeros = -1;  // GM offset of a zero scratch tensor (the K fills), -1: none
  int64_t valid_m() const { return real_m ? real_m : M; }
  int64_t valid_n() const { return real_n ? real_n : N; }
  int64_t valid_k() const { return real_k ? real_k : K; }
  GemmEpilogue* epilogue = nullptr;                      // fused statements after the matmul
  struct Broadcast {  // an epilogue tensor read at some of the output's indices
    int64_t gm = 0;
    int eb = 4;                           // element bytes
    int64_t s_b = 0, s_m = 0, s_n = 0;    // element strides along the batch, M and N indices
    uint8_t reg = 0;                      // holds the tile's byte offset in it
  };
  std::map<std::string, Broadcast> broadcast;
};

// Rows per chunk of Builder::widen_i8: a whole GM alignment unit of i8 rows per chunk, within a
// quarter of UB and one instruction's repeats.
int64_t widen_i8_chunk_rows(const Machine& m, int64_t rows, int64_t dst_cols);
// "" when Builder::widen_i8 can widen `rows` i8 rows of `cols` elements to `dst_cols`, else the
// UserError text of why a chunk does not fit UB or one repeat run.
std::string widen_i8_refusal(const Machine& m, int64_t rows, int64_t cols, int64_t dst_cols);

// One GEMM operand as stored in GM: `rows` x `cols` (rows of `row_stride` elements), `batch_stride`
// elements apart per batch. Its unit-stride dimension is the innermost, so the tensor is
// batch x rows rows of `cols` elements, matrix row r of batch b being row b * batch_step() +
// r * row_step().
struct StoredMatrix {
  int64_t rows = 0, cols = 0, row_stride = 0, batch_stride = 0;
  int64_t row_step() const { return row_stride / cols; }
  int64_t batch_step() const { return batch_stride / cols; }
  bool rows_of_cols() const { return row_stride % cols == 0 && batch_stride % cols == 0; }
};

// What the GEMM path decides before it writes an instruction (emit_gemm carries it out): the
// operands, the fused epilogue, the GM strides, the plan and the broadcast tensors' registers.
struct GemmSetup {
  const kernel::GlobalTensor *A = nullptr, *B = nullptr, *C = nullptr;
  std::unique_ptr<GemmEpilogue> epilogue;
  GemmShape g;
  bool i8 = false, native_i8 = false, aligned = false;
  DType operand = DType::F16;  // a float GEMM's operand dtype (f16, or bf16 on a cube with that shape)
  // Tails in place (one batch, no i8 widening, GM addressable at any element): the main loop runs
  // on the sizes padded to the tiles over the user's tensors, on every core, with no padded copies.
  // Edge tiles read past M, N and K into GM guards placed right after the operands (scratch: zeros,
  // never written by the operands' guards), so the rows past K of an operand stored K-major are
  // zeros; an operand stored K-minor gets its columns past K filled with zeros in L1 (GemmLoop::
  // k_minor_fill). Rows past M and columns past N only reach outputs past M and N: the rows past M
  // are written into a guard after C, the columns past N are clipped by the write-back (GemmLoop::
  // write_back), so every core writes only its own tiles' outputs and no core waits for another.
  bool in_place = false;
  int64_t M = 0, N = 0, K = 0;
};

// The tails' zero-padded copies [batch, rows, cols] (each operand's rows and columns as stored,
// padded to the fractal): the operands as stored and their padded rows and columns.
struct TailCopies {
  StoredMatrix a, b, c;
  int64_t ar = 0, ac = 0, br = 0, bc = 0;
};

TailCopies tail_copies(const GemmShape& g, int64_t M, int64_t N, int64_t K);

// Every decision of the GEMM path, in the order its checks apply. "" or the UserError text of why
// it does not take the kernel.
std::string setup_gemm(const kernel::Kernel& k, const kernel::MatmulOp& mm, const Machine& m, const isa::Hierarchy& target,
                       GemmSetup& s);

// The notes of the setup: the i8 cube shape, the plan's, the operands' storage.
void gemm_notes(const Machine& m, const GemmSetup& s, std::vector<std::string>& notes);

// What the tails in place do, for the notes.
void in_place_notes(const GemmSetup& s, std::vector<std::string>& notes);

}  // namespace tessel::emit_npu::gemm_detail
