// Verification on a sample of output rows (issue 17 item 15): for a problem too large for the
// reference interpreter to evaluate in full (an 8192^3 GEMM is 5.5e11 multiply-adds), the rows of a
// few random row blocks of every output are recomputed exactly and compared, element by element,
// with the same rows of the target's outputs. Elements outside the sample are not checked: the
// caller prints the coverage.
//
// A function can be sampled when it is row-separable: every statement writes its output's first
// dimension through one plain, non-reduction index whose range is that whole dimension (the same
// row count R for every output), and every read of a tensor some statement writes (a temporary or
// an output read back) uses that statement's row index as its first index — so row r of every
// output depends on row r of those tensors only. A row block is then the function with each
// statement's row index restricted to the block, evaluated by the interpreter as written.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/interp/interpreter.h"
#include "compiler/ir/tensor_ir.h"

namespace tessel::interp {

// The number of rows R when `f` is row-separable at `sizes`, else the reason it is not.
struct RowSeparability {
  bool separable = false;
  int64_t rows = 0;
  std::string reason;  // when not separable: which statement and why
};
RowSeparability row_separability(const ir::Function& f, const Sizes& sizes);

// Multiply-adds (or iteration points) the interpreter evaluates for `f` at `sizes`: the sum over
// statements of their domain sizes (bounds at the box of each index's range).
double iteration_points(const ir::Function& f, const Sizes& sizes);

// Row blocks to recompute: `blocks` blocks of `block_rows` consecutive rows at positions drawn from
// `seed` (the first block starts at row 0, the last ends at row R - 1, so both edges are covered),
// merged where they overlap; every row when they would cover R.
struct RowBlock {
  int64_t begin = 0, end = 0;  // [begin, end)
};
std::vector<RowBlock> choose_row_blocks(int64_t rows, int blocks, int64_t block_rows, uint64_t seed);

// Outputs of `f` restricted to `blocks` (each output's rows concatenated in block order, shape
// [sum of block lengths, ...]); InternalError when `f` is not row-separable. `term_magnitudes`:
// evaluate's, restricted to the same rows.
Tensors evaluate_rows(const ir::Function& f, const Sizes& sizes, const Tensors& inputs, const std::vector<RowBlock>& blocks,
                      Tensors* term_magnitudes = nullptr);

// The same rows of `full` outputs (what the target computed), for comparison with evaluate_rows.
Tensors take_rows(const Tensors& full, const std::vector<RowBlock>& blocks);

// "4 blocks of 8 rows (32 of 8192 rows, 0.39 % of every output): rows 0-7, 2711-2718, ..."
std::string describe_row_blocks(const std::vector<RowBlock>& blocks, int64_t rows);

// The first mismatch text of a sampled comparison ("C[9, 3]" in sample coordinates) with the row
// given back in the full output's coordinates ("C[2713, 3]").
std::string unsample_position(const std::string& first_mismatch, const std::vector<RowBlock>& blocks);

}  // namespace tessel::interp
