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

namespace {

// A copy whose innermost dim moves: 32 x 32 tiles of the plane (source innermost a, copy innermost
// b) through shared memory, read along a and written along b (both coalesced); the other dims are
// the block's tile index
Launch transpose_kernel(const kernel::Kernel& k, const OperandCopy& cp, const std::string& name, const isa::GpuMachine& m,
                        std::ostringstream& os) {
  const size_t rank = cp.shape.size();
  std::vector<int64_t> ss(rank, 1), ds(rank, 1);  // source and copy strides (elements)
  for (size_t d = rank; d-- > 1;) ss[d - 1] = ss[d] * cp.source_shape[d], ds[d - 1] = ds[d] * cp.shape[d];
  const size_t a = rank - 1, b = size_t(cp.perm.back());
  size_t pa = 0;
  while (size_t(cp.perm[pa]) != a) ++pa;
  const int64_t ea = cp.source_shape[a], eb_ = cp.source_shape[b], T = kRepackTile;
  const int64_t ta = (ea + T - 1) / T, tb = (eb_ + T - 1) / T;
  int64_t rest = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    if (d != pa) rest *= cp.shape[d];
  const int64_t blocks = ta * tb * rest;
  const std::string ty = move_type(elem_bytes(cp.dtype));
  const std::string ix = cp.elements() < (int64_t(1) << 31) ? "unsigned" : "unsigned long long";
  std::string perm;
  for (int p : cp.perm) perm += (perm.empty() ? "" : ",") + S(p);
  os << "\n/* operand copy (repack_plan.h): " << cp.source << " [" << list(cp.source_shape) << "] -> scratch + " << cp.offset << " ["
     << list(cp.shape) << "] (source dims " << perm << "): the innermost dim moves, " << T << "x" << T << " tiles through shared memory */\n";
  os << "extern \"C\" __global__ void __launch_bounds__(" << kRepackThreads << ") " << name << "(" << kernel_parameters(k) << ") {\n";
  os << "  __shared__ " << ty << " tile_[" << T << "][" << T + 1 << "];\n";
  os << "  const " << ty << "* __restrict__ src_ = (const " << ty << "*)t_" << cp.source << ";\n";
  os << "  " << ty << "* __restrict__ dst_ = (" << ty << "*)(scratch + " << cp.offset << "ULL);\n";
  os << "  const int tx_ = threadIdx.x % " << T << ", ty_ = threadIdx.x / " << T << ";\n";
  os << "  for (" << ix << " blk_ = blockIdx.x; blk_ < " << blocks << "u; blk_ += gridDim.x) {\n";
  os << "    " << ix << " r_ = blk_;\n";
  os << "    const int a0_ = (int)(r_ % " << ta << "u) * " << T << "; r_ /= " << ta << "u;\n";
  os << "    const int b0_ = (int)(r_ % " << tb << "u) * " << T << "; r_ /= " << tb << "u;\n";
  os << "    " << ix << " so_ = 0, do_ = 0;\n";
  for (size_t d = rank - 1; d-- > 0;) {
    if (d == pa) continue;
    os << "    { const " << ix << " x_ = r_ % " << cp.shape[d] << "u; r_ /= " << cp.shape[d] << "u; so_ += x_ * " << ss[size_t(cp.perm[d])]
       << "u; do_ += x_ * " << ds[d] << "u; }\n";
  }
  os << "    __syncthreads();  /* the previous tile is written out */\n";
  os << "    for (int y_ = ty_; y_ < " << T << "; y_ += " << kRepackThreads / T << ") {\n";
  os << "      const int a_ = a0_ + tx_, b_ = b0_ + y_;\n";
  os << "      if (a_ < " << ea << " && b_ < " << eb_ << ") tile_[y_][tx_] = src_[so_ + a_ + (" << ix << ")b_ * " << ss[b] << "u];\n    }\n";
  os << "    __syncthreads();\n";
  os << "    for (int y_ = ty_; y_ < " << T << "; y_ += " << kRepackThreads / T << ") {\n";
  os << "      const int b_ = b0_ + tx_, a_ = a0_ + y_;\n";
  os << "      if (a_ < " << ea << " && b_ < " << eb_ << ") dst_[do_ + b_ + (" << ix << ")a_ * " << ds[pa] << "u] = tile_[tx_][y_];\n    }\n";
  os << "  }\n}\n";
  Launch l;
  l.kernel = name;
  l.block = kRepackThreads;
  l.grid[0] = unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, kRepackBlocksPerSm * std::max<int64_t>(1, m.sm_count))));
  return l;
}

// `cp` with the source dims that stay adjacent and in order in the copy merged into one (fewer
// index divisions; an NCHW input's (h, w) is one 196-wide dim of the transpose)
OperandCopy merged(const OperandCopy& cp) {
  std::vector<std::vector<int>> groups;  // in copy order, each a run of consecutive source dims
  for (int d : cp.perm) {
    if (!groups.empty() && groups.back().back() + 1 == d) groups.back().push_back(d);
    else groups.push_back({d});
  }
  std::vector<size_t> order(groups.size());  // groups in source order
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return groups[x][0] < groups[y][0]; });
  OperandCopy m = cp;
  m.source_shape.assign(groups.size(), 1);
  m.shape.assign(groups.size(), 1);
  m.perm.assign(groups.size(), 0);
  for (size_t s = 0; s < order.size(); ++s)
    for (int d : groups[order[s]]) m.source_shape[s] *= cp.source_shape[size_t(d)];
  for (size_t g = 0; g < groups.size(); ++g) {
    m.perm[g] = int(std::find(order.begin(), order.end(), g) - order.begin());
    m.shape[g] = m.source_shape[size_t(m.perm[g])];
  }
  return m;
}

}  // namespace

Launch emit_repack_kernel(const kernel::Kernel& k, const OperandCopy& copy, const std::string& name, const isa::GpuMachine& m,
                          std::ostringstream& os) {
  if (copy.shape.empty() || copy.perm.size() != copy.shape.size()) throw InternalError("repack kernel " + name + ": not a permutation");
  const OperandCopy cp = merged(copy);
  const size_t rank = cp.shape.size();
  const int eb = elem_bytes(cp.dtype);
  if (cp.perm.back() != int(rank - 1)) return transpose_kernel(k, cp, name, m, os);
  if (cp.move_bytes % eb || (cp.shape.back() * eb) % cp.move_bytes)
    throw InternalError("repack kernel " + name + ": moves that do not divide the innermost run");
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
