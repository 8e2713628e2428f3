#include "compiler/emit_cuda/contraction.h"

namespace tessel::emit_cuda {

std::string tensor_core_obstacle(const Contraction& c, const std::string& arch) {
  const bool f16 = c.in_type == DType::F16 && c.acc_type == DType::F32;
  const bool i8 = c.in_type == DType::I8 && c.acc_type == DType::I32;
  if (!f16 && !i8)
    return "dtypes " + std::string(dtype_name(c.in_type)) + " -> " + std::string(dtype_name(c.acc_type)) +
           " have no WMMA shape on " + arch + " (f16 -> f32 and i8 -> i32 do)";
  // partial fragments are zero-filled by the loads and masked in the stores, so any size works;
  // tiny or badly rounded problems are better served by SIMT
  const int64_t M = c.size_m(), N = c.size_n(), K = c.size_k();
  const std::string sizes = "sizes M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  if (M < 16 || N < 16 || K < 16) return sizes + " are not multiples of the 16x16x16 fragment (one is smaller than 16)";
  auto up = [](int64_t v) { return double((v + 15) / 16 * 16); };
  if (up(M) * up(N) * up(K) > 1.5 * double(M) * double(N) * double(K))
    return sizes + " are not multiples of the 16x16x16 fragment and padding them would waste over a third of the work";
  return "";
}

}  // namespace tessel::emit_cuda
