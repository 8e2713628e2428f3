#include "compiler/emit_cuda/repack_kernel.h"

#include <algorithm>

#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/emit_cuda/operand_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

std::string move_type(int bytes) {
  switch (bytes) {
    case 16: return "uint4";
    case 8: return "uint2";
    case 4: return "unsigned";
    case 2: return "unsigned short";
    default: return "unsigned char";
  }
}

std::string list(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + S(x);
  return s;
}

}  // namespace

Launch emit_repack_kernel(const kernel::Kernel& k, const OperandCopy& cp, const std::string& name, const isa::GpuMachine& m,
                          std::ostringstream& os) {
  const size_t rank = cp.shape.size();
  const int eb = elem_bytes(cp.dtype);
  if (rank == 0 || cp.perm.size() != rank || cp.perm.back() != int(rank - 1) || cp.move_bytes % eb ||
      (cp.shape.back() * eb) % cp.move_bytes)
    throw InternalError("repack kernel " + name + ": not a permutation that keeps the innermost dim");
  const int64_t per_move = cp.move_bytes / eb;
  // the copy's dims in moves (innermost divided into moves) and the source's strides in moves
  std::vector<int64_t> extent(cp.shape), src_stride(rank, 1);
  extent.back() /= per_move;
  std::vector<int64_t> src_elem_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) src_elem_stride[d - 1] = src_elem_stride[d] * cp.source_shape[d];
  for (size_t d = 0; d < rank; ++d) src_stride[d] = d + 1 == rank ? 1 : src_elem_stride[size_t(cp.perm[d])] / per_move;
  int64_t total = 1;
  for (int64_t e : extent) total *= e;
  const std::string ix = total * per_move < (int64_t(1) << 31) ? "unsigned" : "unsigned long long";
  const std::string ty = move_type(cp.move_bytes);
  const std::string sfx = ix == "unsigned" ? "u" : "ull";
  std::string perm;
  for (int p : cp.perm) perm += (perm.empty() ? "" : ",") + S(p);
  os << "\n/* operand copy (repack_plan.h): " << cp.source << " [" << list(cp.source_shape) << "] -> scratch + " << cp.offset << " ["
     << list(cp.shape) << "] (source dims " << perm << "), " << cp.move_bytes << "-byte moves */\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << kRepackThreads << ") " << name << "(" << kernel_parameters(k) << ") {\n";
  os << "  const " << ty << "* __restrict__ src_ = (const " << ty << "*)t_" << cp.source << ";\n";
  os << "  " << ty << "* __restrict__ dst_ = (" << ty << "*)(scratch + " << cp.offset << "ULL);\n";
  os << "  const " << ix << " step_ = (" << ix << ")gridDim.x * " << kRepackThreads << "u;\n";
  os << "  for (" << ix << " i0_ = (" << ix << ")blockIdx.x * " << kRepackThreads << "u + threadIdx.x; i0_ < " << total << sfx << "; i0_ += "
     << kRepackUnroll << " * step_) {\n";
  os << "    " << ty << " v_[" << kRepackUnroll << "];\n";
  os << "    #pragma unroll\n    for (int u_ = 0; u_ < " << kRepackUnroll << "; ++u_) {\n";
  os << "      " << ix << " r_ = i0_ + u_ * step_;\n";
  os << "      if (r_ >= " << total << sfx << ") break;\n";
  os << "      " << ix << " src_at_ = 0;\n";
  for (size_t d = rank; d-- > 0;) {
    if (d == 0) {
      os << "      src_at_ += r_ * " << src_stride[d] << sfx << ";\n";
    } else {
      os << "      src_at_ += (r_ % " << extent[d] << sfx << ") * " << src_stride[d] << sfx << "; r_ /= " << extent[d] << sfx << ";\n";
    }
  }
  os << "      v_[u_] = __ldg(src_ + src_at_);\n    }\n";
  os << "    #pragma unroll\n    for (int u_ = 0; u_ < " << kRepackUnroll << "; ++u_) {\n";
  os << "      const " << ix << " i_ = i0_ + u_ * step_;\n";
  os << "      if (i_ < " << total << sfx << ") dst_[i_] = v_[u_];\n    }\n  }\n}\n";
  Launch l;
  l.kernel = name;
  l.block = kRepackThreads;
  const int64_t blocks = (total + int64_t(kRepackThreads) * kRepackUnroll - 1) / (int64_t(kRepackThreads) * kRepackUnroll);
  l.grid[0] = unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, kRepackBlocksPerSm * std::max<int64_t>(1, m.sm_count))));
  return l;
}

}  // namespace tessel::emit_cuda
