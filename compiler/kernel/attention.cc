#include "compiler/kernel/attention.h"

#include <algorithm>
#include <sstream>

namespace tessel::kernel {

int64_t Attention::size_batch() const { return extent_product(batch); }

double Attention::flops() const {
  return 2.0 * double(size_batch()) * double(query.extent) * double(key.extent) * double(extent_product(head) + extent_product(value));
}

double Attention::effective_flops() const {
  if (!causal_offset) return flops();
  // keys j <= i + c of each query row i
  double kept = 0;
  for (int64_t i = 0; i < query.extent; ++i) {
    const int64_t n = std::min<int64_t>(key.extent, std::max<int64_t>(0, i + *causal_offset + 1));
    kept += double(n);
  }
  return 2.0 * double(size_batch()) * kept * double(extent_product(head) + extent_product(value));
}

std::string to_string(const Attention& a) {
  std::ostringstream os;
  auto dims = [&](const std::vector<ContractionDim>& ds) {
    std::string s;
    for (const auto& d : ds) s += (s.empty() ? "" : ",") + d.var + "=" + std::to_string(d.extent);
    return s.empty() ? std::string("-") : s;
  };
  auto operand = [&](const AttentionOperand& o) {
    std::string s = o.tensor + " (" + std::string(dtype_name(o.dtype)) + ", strides";
    for (const auto& [v, c] : o.coeff) s += " " + v + ":" + std::to_string(c);
    return s + ")";
  };
  os << "attention " << a.name << "\n";
  os << "  batch " << dims(a.batch) << "  query " << a.query.var << "=" << a.query.extent << "  key " << a.key.var << "="
     << a.key.extent << "  head " << dims(a.head) << "  value " << dims(a.value) << "\n";
  os << "  Q " << operand(a.q) << "  K " << operand(a.k) << "  V " << operand(a.v) << "\n";
  os << "  out " << operand(a.out) << "\n";
  os << "  score " << dtype_name(a.score_type) << ", " << a.steps.size() << " step(s)";
  if (a.causal_offset) os << ", causal (keys j <= i + " << *a.causal_offset << ")";
  os << "; probabilities " << dtype_name(a.prob_type) << "; " << (a.normalise_first ? "normalised before the context" : "divided after the context")
     << "\n";
  return os.str();
}

}  // namespace tessel::kernel
