// Division tails (pass "split_division_tails", after split_reductions; NPU targets): a statement
// that reads floor((i + c) / q) of an output index i whose range is not a whole number of
// quotients
//   Y(i, ..) = e(floor((i + c) / q), i, ..)              i in lo:hi, E = hi - lo, E % q != 0
// becomes the whole quotients and the tail, two statements writing disjoint outputs:
//   Y(i, ..) = e(floor((i + c) / q), i, ..)              i in lo : lo + q*m       (m = E / q)
//   Y(i, ..) = e(t, i, ..)                               i in lo + q*m : hi
// where t = (lo + q*m + c) / q is the quotient every tail point has. The NPU's vector lowering
// splits a divided index into quotient and remainder dimensions (compiler/emit_npu/nest_plan.cc,
// split_divisions), which needs whole quotients: a tail refused every such program before (the
// most frequent refusal of the program fuzzer on the NPU columns).
//
// An output index divided by several constants (X(floor(i / 3), i % 2)) is split by residue
// instead: one statement per r in 0:L, L the divisors' least common multiple (at most 12), with
// i = L * i' + lo + r, in which every division of i is affine in i' ((L / q) * i' + a constant).
//
// Taken only where it is exact: every division of i has the same divisor q and a numerator
// i + c (constants and size parameters in c, coefficient 1, no nested division), each c starts a
// quotient at lo ((lo + c) % q == 0, which the lowering requires anyway; any c for residues), i is not reduced, and
// no range bound reads i. Several such indices split one after the other (at most 2^3
// statements from one). Anything else is left as written, and the lowering gives its reason.
// Statements are renumbered S0, S1, ... in program order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/tensor_ir.h"

namespace tessel::poly {

// One statement's index cut: "S2: index i (0:7) divided by 2: whole quotients 0:6 and the tail 6:7";
// cut -1: split by residue modulo `divisor` (the divisors' least common multiple).
struct DivisionTail {
  std::string statement, index;
  int64_t divisor = 0, lo = 0, cut = 0, hi = 0;
  std::string to_string() const;
};

// The function with its division tails split off, or nothing where no statement has one.
std::optional<ir::Function> split_division_tails(const ir::Function& f, const std::map<std::string, int64_t>& sizes,
                                                 std::vector<DivisionTail>* tails = nullptr);

}  // namespace tessel::poly
