// Error scales of the reference's float results: the scale S of each element's rounding error, so
// that a target computing the same value in another order (a sum reassociated, a product fused)
// may differ from the interpreter by a small multiple of u x S (u the unit roundoff), and a
// comparison allows abs + rel x max(|expected|, S) (emit_c::verify, interp::compare).
//
// A float sum's S is the sum of its terms' scales, not |result|: where the terms cancel, the result
// is far smaller than its error. The scale then travels with the value through later arithmetic
// (first order): S(a + b) = S(a) + S(b); S(a b) = S(a)|b| + |a|S(b); S(a / b) = (S(a) + |a/b| S(b)) / |b|;
// S(f(a)) = |f'(a)| S(a) + |f(a)| for the differentiable built-ins; min / max / select take their
// operands' scales; a value computed from no scaled tensor has S = |value|. Comparisons, integer
// casts, floor / ceil / round / sign and `%` turn an error into a jump, which no scale bounds:
// their S is |value| (the program fuzzer keeps reassociable sums out of them).
//
// interp::evaluate runs, for every statement that reads a tensor with a scale, the statement
// scale_statement returns (the same loops, its right-hand side S(rhs), writing the output's scale
// buffer) just before the statement itself, so it reads the operands' values as the statement does.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "compiler/ir/tensor_ir.h"

namespace tessel::interp {

// The interpreter's name for tensor `tensor`'s scale buffer (no source name contains its '#').
std::string scale_name(const std::string& tensor);

// Whether `e` reads one of `tracked`.
bool reads_any(const ir::Expr& e, const std::set<std::string>& tracked);

// S(e), an f32 expression reading scale_name(T) where `e` reads a tensor T of `tracked`.
ir::ExprPtr scale_expr(const ir::ExprPtr& e, const std::set<std::string>& tracked);

// The statement computing `st`'s output scale (writing scale_name(st.output)) when st's output is a
// float tensor and its right-hand side reads a tensor of `tracked`: the same domain and output
// indices, S(rhs) on the right, a sum for a sum, a max for a max or min; nothing otherwise (and
// for a product, whose terms' relative errors add: its output gets no scale).
std::optional<ir::Statement> scale_statement(const ir::Statement& st, const std::set<std::string>& tracked);

}  // namespace tessel::interp
