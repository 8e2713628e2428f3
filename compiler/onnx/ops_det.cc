// Det (the determinant of each trailing n x n matrix): expanded by permutations (Leibniz), one
// statement over the batch indices,
//   Y(i..) = X(i.., 0, p0) * X(i.., 1, p1) * ... - ...   (a sign per permutation p)
// n! products of n factors, so n is at most 4 (24 terms); a larger matrix is refused (an LU
// factorisation's pivoting is data-dependent control the language lacks). Computed in f32.
#include <algorithm>
#include <numeric>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

constexpr int64_t kMaxDetSize = 4;

int permutation_sign(const std::vector<int64_t>& p) {
  int inversions = 0;
  for (size_t a = 0; a < p.size(); ++a)
    for (size_t b = a + 1; b < p.size(); ++b) inversions += p[a] > p[b];
  return inversions % 2 ? -1 : 1;
}

void translate_det(Context& c) {
  const Value& x = c.input(0);
  const size_t rank = x.shape.size();
  if (rank < 2 || x.shape[rank - 1] != x.shape[rank - 2]) c.malformed("the input's trailing dimensions are not a square matrix");
  const int64_t n = x.shape[rank - 1];
  if (n > kMaxDetSize) c.unsupported("Det of " + std::to_string(n) + " x " + std::to_string(n) + " matrices (expanded by permutations up to " +
                                     std::to_string(kMaxDetSize) + " x " + std::to_string(kMaxDetSize) + ")");
  if (c.dtype(x) != DType::F32) c.unsupported("Det of " + std::string(dtype_name(c.dtype(x))) + " data (f32 is translated)");
  const Value y = output_value(c, 0);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::string rhs;
  do {
    std::string term;
    for (int64_t row = 0; row < n; ++row) {
      std::vector<std::string> idx = indices(rank - 2);
      idx.push_back(std::to_string(row));
      idx.push_back(std::to_string(p[size_t(row)]));
      term += (row ? " * " : "") + c.read(x, idx);
    }
    const bool minus = permutation_sign(p) < 0;
    rhs += rhs.empty() ? (minus ? "f32(0) - " : "") + term : (minus ? " - " : " + ") + term;
  } while (std::next_permutation(p.begin(), p.end()));
  c.emit({y.tsl, indices(rank - 2), "=", rhs, ranges_of(y.shape)});
}

}  // namespace

void add_det_ops(std::map<std::string, Translator>& t) { t["Det"] = translate_det; }

}  // namespace tessel::onnx_import
