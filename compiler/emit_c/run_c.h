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
Verification verify(const Tensors& expected, const Tensors& actual);

}  // namespace tessel::emit_c
