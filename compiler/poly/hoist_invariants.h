// Invariant values (pass "hoist_invariants", after split_reductions; GPU and c targets): a costly
// float subexpression of a statement that uses only some of the statement's indices is computed
// once per point of those indices, in a new local written just before the statement, instead of
// once per point of the statement:
//   Y(n, h, w, c) = f16(D(n, h, w, c) * rsqrt(SqSum(c) / f32(N * H * W) + 1e-5) * gamma(c) + beta(c))
// becomes
//   Y_inv0(c) = rsqrt(SqSum(c) / f32(N * H * W) + 1e-5)
//   Y(n, h, w, c) = f16(D(n, h, w, c) * Y_inv0(c) * gamma(c) + beta(c))
// (batch norm's per-element square root and two IEEE divisions were most of its normalising
// kernel's instructions on the GPU: 52 per element).
//
// Exact: the local has the subexpression's own type, so every use reads the value the statement
// computed before. A subexpression is taken where
//   - it is a float-typed operation (never an integer one: an integer division the statement only
//     reaches under a select could divide by zero when computed everywhere),
//   - it is costly: a float division or a float built-in (exp, log, sqrt, rsqrt, tanh, pow, ...),
//   - it reads a tensor an earlier statement writes, through exactly the indices it uses (the
//     statistic of a normalisation: SqSum(c), Var(n, g)); its local then joins that producer's
//     loops instead of becoming a kernel of its own,
//   - it reads neither the statement's own output nor any index outside that set, each of those
//     indices starts at 0 or above (the local is indexed by them), and the statement's other
//     indices give every value at least kMinReuse uses.
// The largest such subexpression is taken (a qualifying node's operands are not searched again).
// Statements are renumbered S0, S1, ... in program order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

// One hoisted value: "S4: Y_inv0(c) = rsqrt(...), 12544 uses each".
struct HoistedValue {
  std::string statement, local, expression;
  std::vector<std::string> indices;
  int64_t uses = 0;  // points of the statement per point of the local
  std::string to_string() const;
};

// The function with its invariant values hoisted, or nothing where no statement has one.
std::optional<ir::Function> hoist_invariants(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                             std::vector<HoistedValue>* hoisted = nullptr);

}  // namespace tessel::poly
