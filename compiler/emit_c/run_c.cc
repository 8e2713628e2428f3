#include "compiler/emit_c/run_c.h"

#include <algorithm>
#include <cmath>

#include "compiler/emit_c/emit_c.h"
#include "compiler/emit_c/host_cc.h"
#include "isa/base/error.h"

namespace tessel::emit_c {

std::vector<CRun> run_c_batch(const std::vector<const kernel::Kernel*>& kernels, const std::vector<Tensors>& inputs) {
  TESSEL_CHECK(kernels.size() == inputs.size(), "run_c_batch: one input set per kernel");
  std::string src = prelude();
  for (size_t i = 0; i < kernels.size(); ++i) src += emit_function(*kernels[i], "tessel_kernel_" + std::to_string(i));
  SharedObject so(src);
  std::vector<CRun> runs;
  for (size_t i = 0; i < kernels.size(); ++i) {
    CRun r;
    r.outputs = run_kernel(so.symbol("tessel_kernel_" + std::to_string(i)), *kernels[i], inputs[i]);
    r.c_compile_ms = so.compile_ms();
    runs.push_back(std::move(r));
  }
  return runs;
}

void tolerance_for(DType t, double& abs_tol, double& rel_tol) {
  switch (t) {
    case DType::F16: abs_tol = 2e-3; rel_tol = 2e-3; return;  // about 4 units in the last place (2^-10) near 1
    // bf16 keeps 8 significant bits: one unit in the last place is 2^-8 = 3.9e-3 relative, more than
    // f16's bound, so a target that rounds once in another order (a reassociated sum) would fail it;
    // the same 4 units in the last place
    case DType::BF16: abs_tol = 8e-3; rel_tol = 8e-3; return;
    case DType::F32: abs_tol = 1e-5; rel_tol = 1e-5; return;
    case DType::F64: abs_tol = 1e-12; rel_tol = 1e-12; return;  // about 4500 units in the last place (2^-52) near 1
    default: abs_tol = 0; rel_tol = 0; return;
  }
}

double reassociated_sum_tolerance(const ir::Function& f, const std::map<std::string, int64_t>& sizes) {
  double terms = 1;
  for (const auto& s : f.statements) {
    const ir::Tensor* t = f.find_tensor(s.output);
    // a product taken in another order rounds as differently as a sum (relative error, no cancellation)
    if ((s.reduction != ir::Reduction::Sum && s.reduction != ir::Reduction::Prod) || !t || t->dtype != DType::F32) continue;
    double n = 1;
    for (const auto& iv : s.domain)
      if (iv.is_reduction) n *= double(iv.hi.evaluate({}, sizes) - iv.lo.evaluate({}, sizes));
    terms = std::max(terms, n);
  }
  double a = 0, r = 0;
  tolerance_for(DType::F32, a, r);
  const double u = std::ldexp(1.0, -24);
  return std::max({r, kReassociationSigmas * std::sqrt(terms) * u, std::min(terms * u / 8, 1e-3)});
}

Verification verify(const Tensors& expected, const Tensors& actual, double f32_tolerance, const Tensors* term_magnitudes) {
  Verification v;
  for (const auto& [name, e] : expected) {
    auto it = actual.find(name);
    if (it == actual.end()) {
      v.verified = false;
      if (v.first_mismatch.empty()) v.first_mismatch = "output " + name + " missing";
      continue;
    }
    double a = 0, r = 0;
    tolerance_for(e.dtype, a, r);
    if (f32_tolerance > 0 && e.dtype == DType::F32) a = r = f32_tolerance;
    const NpyArray* scale = nullptr;
    if (term_magnitudes)
      if (auto m = term_magnitudes->find(name); m != term_magnitudes->end()) scale = &m->second;
    interp::Comparison c = interp::compare(e, it->second, a, r, name, scale);
    v.max_abs_err = std::max(v.max_abs_err, c.max_abs_err);
    v.mismatches += c.mismatches;
    if (!c.ok) {
      v.verified = false;
      if (v.first_mismatch.empty()) v.first_mismatch = c.first_mismatch;
    }
  }
  return v;
}

}  // namespace tessel::emit_c
