// Runs compiled kernels through the C emitter and the host compiler, and checks them against the
// reference interpreter. Several kernels are compiled in one host-compiler run.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/interp/compare.h"
#include "compiler/kernel/kernel_ir.h"
#include "isa/base/npy.h"

namespace tessel::emit_c {

using Tensors = std::map<std::string, NpyArray>;

struct CRun {
  Tensors outputs;
  double c_compile_ms = 0;  // host compiler time, shared by the batch
};

// Compiles every kernel into one shared object and runs kernel i on inputs[i].
std::vector<CRun> run_c_batch(const std::vector<const kernel::Kernel*>& kernels, const std::vector<Tensors>& inputs);

// Tolerances for comparing a result of dtype `t` with the interpreter (summation order is the
// interpreter's, so differences come from libm and f16 rounding of transcendental functions).
void tolerance_for(DType t, double& abs_tol, double& rel_tol);

struct Verification {
  bool verified = true;
  double max_abs_err = 0;
  int64_t mismatches = 0;
  std::string first_mismatch;
};
// f32 outputs may compare with a wider bound than tolerance_for's when the function sums f32
// values: a target that reassociates such a sum (a vector unit adds a row's lanes as a tree, as every
// vector unit does) and the interpreter's sequential order carry different rounding errors, each a
// random walk of about sqrt(n) steps of u = 2^-24 (relative to the sum of the |terms|; n the terms).
// The interpreter's own sequential sum is the less accurate of the two for long rows (a
// 300,000-term f32 sum of squares is off by ~1e-4 of its value), so neither order is "the" exact
// one. A sequential sum of same-sign terms also drifts systematically when the terms' low bits are
// not uniform (the squares of multiples of 1/64 round down more often than up): the reference's
// sum of squares of the 25,088 inputs per channel of a batch norm is off by 0.065 n u (10 sqrt(n) u)
// from the exact value, where a two-phase sum is off by 0.3 sqrt(n) u. The bound is
// max(tolerance_for's 1e-5, kReassociationSigmas * sqrt(n) * u, min(n * u / 8, 1e-3)), n the most
// terms of one f32 sum or product in f — unchanged up to n ~ 440, 1.5e-5 at n = 1024, 1.9e-4 at n = 25,088,
// 1e-3 from n = 134,218 on.
// The bound is relative to the sum of the |terms|, not to the result: where the terms cancel (252
// terms up to 51 adding up to -1.04, program fuzz seed 8808 program 141) the two orders differ by
// far more than a bound relative to the result (2.7e-5 there). verify's `term_magnitudes`
// (interp::evaluate's) carry that sum per element of every output a float sum wrote; a relative
// tolerance r then allows r * max(|expected|, sum of |terms|) there (f16 / bf16 sums as well: the
// GPU reassociates those too).
inline constexpr double kReassociationSigmas = 8;
double reassociated_sum_tolerance(const ir::Function& f, const std::map<std::string, int64_t>& sizes);

// f32_tolerance > 0: the relative and absolute bound for f32 outputs instead of tolerance_for's.
// term_magnitudes: per output, the scale of its relative bound (above); outputs without one
// compare relative to |expected|.
Verification verify(const Tensors& expected, const Tensors& actual, double f32_tolerance = 0,
                    const Tensors* term_magnitudes = nullptr);

}  // namespace tessel::emit_c
