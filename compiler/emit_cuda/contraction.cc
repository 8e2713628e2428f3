#include "compiler/emit_cuda/contraction.h"

#include <algorithm>
#include <cstdlib>

#include "isa/base/error.h"

namespace tessel::emit_cuda {

bool dtype_has_tensor_core_shape(const Contraction& c, const isa::GpuMachine& machine) {
  // the fragments the TensorCore kernels have code for (f16 and bf16 on every main loop, i8 on WMMA)
  const bool float_in = c.in_type == DType::F16 || c.in_type == DType::BF16;
  if (!((float_in && c.acc_type == DType::F32) || (c.in_type == DType::I8 && c.acc_type == DType::I32))) return false;
  // ... and the description's matrix unit has, at its architecture (sm70: f16 only, i8 from sm_72,
  // bf16 from sm_80)
  for (const isa::MatrixShape& s : machine.tensor_shapes) {
    if (s.a != c.in_type || s.acc != c.acc_type) continue;
    if (s.min_arch.size() < 5 || s.min_arch.compare(0, 3, "sm_") != 0) return true;
    if (std::atoi(s.min_arch.c_str() + 3) <= machine.compute_capability) return true;
  }
  return false;
}

bool warp_mma_operand(DType t) { return t == DType::F16 || t == DType::BF16; }

const char* ptx_operand_type(DType t) {
  switch (t) {
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "tf32";  // the wgmma main loop's f32 operands (tf32_wgmma_operand)
    default: break;
  }
  throw InternalError("CUDA emitter: no mma.sync / wgmma operand type for " + std::string(dtype_name(t)));
}

bool tf32_wgmma_operand(DType t) { return t == DType::F32; }

int wgmma_k_depth(const isa::GpuMachine& m, DType t) {
  TESSEL_CHECK(m.wgmma.has_value(), "emit_cuda: " + m.arch + " has no wgmma shape");
  return m.wgmma->k * 2 / int(dtype_bytes(t));  // the description's shape is of 16-bit operands
}

std::string tensor_core_obstacle(const Contraction& c, const isa::GpuMachine& machine) {
  const std::string& arch = machine.arch;
  const isa::GpuMmaShape& f = machine.wmma;  // the fragment every TensorCore path pads to
  if (!dtype_has_tensor_core_shape(c, machine))
    return "dtypes " + std::string(dtype_name(c.in_type)) + " -> " + std::string(dtype_name(c.acc_type)) + " have no WMMA shape on " +
           arch + " (the description's matrix unit: f16 -> f32, i8 -> i32 from sm_72, bf16 -> f32 from sm_80)";
  // partial fragments are zero-filled by the loads and masked in the stores, so any size works;
  // tiny or badly rounded problems are better served by SIMT
  const int64_t M = c.size_m(), N = c.size_n(), K = c.size_k();
  const std::string sizes = "sizes M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  const std::string frag = std::to_string(f.m) + "x" + std::to_string(f.n) + "x" + std::to_string(f.k);
  if (M < f.m || N < f.n || K < f.k)
    return sizes + " are not multiples of the " + frag + " fragment (one is smaller than " + std::to_string(std::min({f.m, f.n, f.k})) + ")";
  auto up = [](int64_t v, int64_t unit) { return double((v + unit - 1) / unit * unit); };
  if (up(M, f.m) * up(N, f.n) * up(K, f.k) > 1.5 * double(M) * double(N) * double(K))
    return sizes + " are not multiples of the " + frag + " fragment and padding them would waste over a third of the work";
  return "";
}

}  // namespace tessel::emit_cuda
