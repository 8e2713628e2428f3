// Reference interpreter: evaluates a tensor-IR function on concrete tensors with exact dtype
// semantics. Every backend's output is compared with it.
//
// Semantics (compiler/README.md, "Interpreter semantics"): statements run in program order; each
// statement runs its domain as a loop nest, output indices outermost in domain order and
// reduction indices innermost in domain order, so a reduction sums in increasing order of its
// indices. Every arithmetic result is rounded to its dtype (f16 via round_to_f16, integers wrap
// around in two's complement); a reduction accumulates in the output tensor's dtype, rounding
// after every step. Each statement is compiled once into a tree of typed closures with
// precomputed strides; no name is looked up per element.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "isa/base/npy.h"

namespace tessel::interp {

using Sizes = std::map<std::string, int64_t>;
using Tensors = std::map<std::string, NpyArray>;

// Concrete shape of `t`; UserError if a size parameter is missing or a dimension is negative.
std::vector<int64_t> tensor_shape(const ir::Tensor& t, const Sizes& sizes);

// Deterministic inputs for every Input tensor of `f`: floats are multiples of 1/64 in [-2, 2]
// (exact in f16), i8/i32 integers in [-8, 8], u8 in [0, 8]. Each tensor's values depend only on
// the seed and the tensor's name. Inferred sizes need not be given.
Tensors random_inputs(const ir::Function& f, const Sizes& sizes, uint64_t seed);

// UserError where `sizes` lacks one of f's size parameters, `inputs` names a tensor that is not an
// input of f, or misses one, or holds one of another dtype or shape than f declares at `sizes`.
void check_inputs(const ir::Function& f, const Sizes& sizes, const Tensors& inputs);

// Runs `f` and returns its Output tensors. Inferred sizes (ir::bind_sizes) need not be given.
// UserError on a missing size parameter, a given size that disagrees with its inferred value, a missing input,
// an input of the wrong shape or dtype, or an access outside a tensor's shape.
//
// With `term_magnitudes`, it also gets, for every float output a float sum (`+=!` / `+=`) wrote or
// whose value was computed from one, an f32 tensor of the output's shape holding each element's
// error scale (error_scale.h): for a sum of unscaled terms the sum of their magnitudes, |t_1| + ...
// + |t_n| (plus |initial value| for `+=`), carried through later arithmetic to first order: the
// scale of the rounding error of the sums taken in any other order, which a result that cancels to
// a small value does not show (emit_c::verify). Other outputs have no entry.
Tensors evaluate(const ir::Function& f, const Sizes& sizes, const Tensors& inputs, Tensors* term_magnitudes = nullptr);

// Number of threads evaluate() may use (default: hardware concurrency, at most 8). Statements
// whose right-hand side does not read their own output are split over the outermost output index;
// results do not depend on the thread count.
void set_thread_count(int threads);

}  // namespace tessel::interp
