#include "compiler/kernel/contraction.h"

namespace tessel::kernel {

int64_t extent_product(const std::vector<ContractionDim>& dims) {
  int64_t s = 1;
  for (const auto& d : dims) s *= d.extent;
  return s;
}

int64_t Contraction::size_m() const { return extent_product(m); }
int64_t Contraction::size_n() const { return extent_product(n); }
int64_t Contraction::size_k() const { return extent_product(k); }
int64_t Contraction::size_batch() const { return extent_product(batch); }

ir::AffineExpr substitute(const ir::AffineExpr& e, const std::map<std::string, ir::AffineExpr>& binding) {
  ir::AffineExpr r;
  r.constant = e.constant;
  r.param_coeffs = e.param_coeffs;
  for (const auto& [v, c] : e.index_coeffs) {
    auto it = binding.find(v);
    r = r + (it == binding.end() ? ir::AffineExpr::index(v, c) : it->second.scaled(c));
  }
  for (const ir::FloorDivTerm& t : e.divs)
    r = r + ir::AffineExpr::floor_div_of(substitute(t.numerator, binding), t.divisor).scaled(t.coeff);
  return r;
}

}  // namespace tessel::kernel
