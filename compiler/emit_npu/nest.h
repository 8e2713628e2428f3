// General NPU vector lowering: any kernel whose statements have box domains and affine accesses
// (or indices divided by constants, split into quotient and remainder dimensions) runs on the
// vector unit, statement by statement (the fallback after the
// template mappings of pointwise.h / channels.h / transpose.h, which keep the shapes they know).
//
// Input: the kernel IR's tensor function (every statement: domain, output access, right-hand
// side, reduction) and the machine model. Each statement is modelled as loops over its index
// dimensions with every access an element offset `offset + sum(stride_d * i_d)`; adjacent
// dimensions that every access walks contiguously are coalesced. Two dimensions go on a UB tile:
// v (lanes: the one the most touched elements are contiguous along) and u (rows: the innermost output dimension
// left, else the innermost reduction one); a tile is rows x pitch elements, pitch a whole number
// of vector repeats for every element type, so element-wise operations are flat and rows start
// aligned. The other dimensions are scalar loops, output ones outside reduction ones, so the
// accumulator stays in UB across a reduction and is written back once.
//   loads: contiguous rows in one dma_in (nburst = rows), strided lanes as element bursts, a
//   value per row (stride 0 along v) gathered and broadcast across the row's lanes by vbrcb, an
//   f16 read strided along the lanes but contiguous along the rows turned by vtranspose; reads
//   outside a tensor (folded padding) from a zero-padded scratch copy; i8 computed in i32;
//   reductions: along u row by row in ascending order (the interpreter's order per lane), along v
//   by folding a row's repeats then vcadd / vcmax (min as -max(-x)), lanes past the row's end set
//   to the identity first, across tiles into the UB accumulator; f16 sums keep v an output
//   dimension (with none, no lanes: an element per row) and add each row straight into the
//   accumulator, so they accumulate in the interpreter's order;
//   conditions: vcmp_lt / vcmp_le / vcmp_eq give 1 / 0, combined by mul / max, and vselv selects.
// Tiles: sized from the values the right-hand side uses (equal subexpressions computed once), the
// innermost loop of two or more tiles double-buffered. The lanes go elsewhere than the most
// contiguous dimension where a roofline of one core's tiles (GM granules, one shared GM cycle per
// DMA of every core, scalar dispatch, vector repeats) says that is a clear win. A statement whose
// read and output share no unit-stride dimension goes through UB one element per 32-byte block
// (a DMA's bursts may be any bytes apart in UB, only its start is aligned), where estimated
// clearly faster: a pure move (permute) with loads along the read's unit stride and stores along
// the output's, runs continuing over further dimensions where GM and UB strides line up, the box
// with the fewest DMAs; or, for a copy or a max / min / sum over a window (NCHW pooling at stride
// 2, nearest upsampling), the tile mirrored as GM lays it out, the read's span and the output's
// span one DMA each, the window done by vector instructions whose block and repeat strides are the
// GM strides (8 elements per repeat); or mirrored densely where both walk one dimension with unit
// stride in whole blocks (NHWC windows: the channels' blocks are the lanes), against the lanes'
// tiles with the GM latency each pair of them waits out. Each read of a tile broadcast per row
// (per-channel values) gathers into a slot of its own, so a tile's gathers are in flight together.
// Row pipeline (softmax, layer norm, batch-norm update, bias + GELU; tried first): when the statements after a
// prologue of statements over one lane dimension only share a row partition (the leading output
// index), each being 2-D (rows u = the partition, lanes v: whole rows, element-wise or reduced
// along v with an initialised reduction) or 1-D over the rows, and read earlier results only at the
// element they were written at (as they are, one per row, or one per lane), the statements run
// together per block of R rows: each input row loaded once (equal loads and subexpressions shared
// across the statements), every result kept in UB (one per row as one repeat per row, read by the
// row's operations with repeat stride 0), only the kernel's outputs stored; the prologue's
// statements run once per core (every core computes them, core 0 alone stores their outputs: the
// per-channel statistics of bn_update, so its rows spread over every core) and reads that do not
// move with the rows (gamma, beta, the prologue's results) are expanded once per core to R rows.
// Blocks cycle through S value sets and the loads of block b + S - 1 are issued before the compute
// of b (S = 2, or 3 where one block's vector work, one cycle per repeat, is shorter than its loads'
// GM latency + bytes / bandwidth: both from the machine model); element-wise operations overwrite
// an operand no other node of the block reads; a row reduction folds out of place when its value is
// read again. R: the most rows (within one instruction's repeats, at least 8 blocks per core where
// the rows allow) whose per-core values and S sets of one block, measured by emitting them, fit UB.
// Equal shares of rows per core where a divisor keeps at least half the cores. Not taken: rows
// larger than what fits (R < 1), index values, divided indices, padded reads, transposed reads, a
// read of a result at another element or before it is written.
// Otherwise statements run in order; every statement's result goes to GM (temporaries and locals
// become scratch tensors), so a later statement reads it like an input. Cores: the kernel's rows (the
// leading output index every statement writes and reads its own tensors at, else the last one with
// a vector repeat of it per core) in contiguous ranges per core; or, where that leaves cores idle, a
// grid over several such leading output indices cut into equal parts, an index followed through the
// results where statements write it at different positions (nest_cores.cc: the most cores times
// the vector lanes kept); one core when the statements share no such index.
//
// Output: NpuKernel (program without syncs). Errors: why_not_nest says why a kernel is not taken
// (a reversed output index along the lanes or rows, or a reversed 1-byte read along the lanes; other
// reversed reads are gathered, a DMA per row or per element), a division of more than an index plus a constant, a
// tile of one repeat per value that does not fit UB, a program of more than 2^23 instructions per
// core),
// never throwing; emit_nest throws that UserError.
#pragma once

#include <string>

#include "compiler/emit_npu/emit_npu.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

std::string why_not_nest(const kernel::Kernel& kernel, const isa::NpuMachine& machine);
// The same with a tighter bound on the instructions issued per core (a contraction the cube refused
// takes the vector unit only while it stays small).
std::string why_not_nest(const kernel::Kernel& kernel, const isa::NpuMachine& machine, double max_issued);
// Reductions whose output is too small for the cores are split over them first (nest_split.h).
NpuKernel emit_nest(const kernel::Kernel& kernel, const isa::Hierarchy& target);
// The kernel as one phase: no reduction split (what each phase of a split runs).
NpuKernel emit_nest_phase(const kernel::Kernel& kernel, const isa::Hierarchy& target);
// The cores the row pipeline spreads the kernel over, 0 when it does not take it (emit_npu prefers
// it to the one-core row templates of channels.h and rows.h when that is more than one).
int row_pipeline_cores(const kernel::Kernel& kernel, const isa::NpuMachine& machine);

}  // namespace tessel::emit_npu
