// Divisibility of kernel-IR integer values (analysis): for every loop and Let variable, a number
// that divides each value the variable takes; for an expression, one that divides each value it
// takes. The emitters use it to prove that box offsets are multiples of a vector width (so a copy
// may move 16 bytes at once and a chunk lies wholly inside or outside a tensor whose row is a
// multiple of the width).
//
// A loop variable takes lo + i * step: its divisor is gcd(divisor(lo), step). A Let variable's is
// the gcd over every assignment (Lets may be assigned in several places; emitters declare them
// once, initialised to 0, which every number divides). Divisors are computed to a fixpoint over
// the whole tree. 0 stands for "every number" (the value is always 0); 1 for "nothing known".
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "compiler/kernel/kernel_ir.h"

namespace tessel::kernel {

using Divisors = std::map<std::string, int64_t>;

// The divisor of each variable bound in `k` (variables not bound in the kernel: 1).
Divisors variable_divisors(const Kernel& k);

// A positive number dividing every value of `e` (0: e is always 0), given the variables' divisors.
int64_t divisor(const Expr& e, const Divisors& vars);

}  // namespace tessel::kernel
