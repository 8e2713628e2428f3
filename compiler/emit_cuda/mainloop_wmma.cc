#include "compiler/emit_cuda/mainloop.h"

#include <algorithm>

#include "compiler/emit_cuda/tile_policy.h"

namespace tessel::emit_cuda {

void wmma_accumulators(const TcKernel& t) {
  auto& os = t.os;
  const auto& acct = t.acct;
  const auto& fm = t.fm;
  const auto& fn = t.fn;
  os << "  wmma::fragment<wmma::accumulator, " << t.m.wmma.m << ", " << t.m.wmma.n << ", " << t.m.wmma.k << ", " << acct << "> acc_[" << fm << "][" << fn << "];\n";
  os << "  #pragma unroll\n  for (int i = 0; i < " << fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn
     << "; ++j) wmma::fill_fragment(acc_[i][j], 0);\n";
}

// the fragment loop over one shared K tile: each warp its slice of kslice K elements
void wmma_k_tile(const TcKernel& t, int kslice) {
  auto& os = t.os;
  const auto& pa = t.pa;
  const auto& pb = t.pb;
  const auto& ft = t.ft;
  const auto& la = t.la;
  const auto& lb = t.lb;
  const auto& fm = t.fm;
  const auto& fn = t.fn;
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << kslice << "; kq += 16) {\n";
  os << "      const int kk = ks_ * " << kslice << " + kq;\n";
  os << "      wmma::fragment<wmma::matrix_a, " << t.m.wmma.m << ", " << t.m.wmma.n << ", " << t.m.wmma.k << ", " << ft << ", " << la << "> af_[" << fm << "];\n";
  os << "      wmma::fragment<wmma::matrix_b, " << t.m.wmma.m << ", " << t.m.wmma.n << ", " << t.m.wmma.k << ", " << ft << ", " << lb << "> bf_[" << fn << "];\n";
  const std::string a_ptr = pa.k_inner ? "as_ + (wm_ + i * 16) * " + S(pa.ld()) + " + kk" : "as_ + kk * " + S(pa.ld()) + " + wm_ + i * 16";
  const std::string b_ptr = pb.k_inner ? "bs_ + (wn_ + j * 16) * " + S(pb.ld()) + " + kk" : "bs_ + kk * " + S(pb.ld()) + " + wn_ + j * 16";
  os << "      #pragma unroll\n      for (int i = 0; i < " << fm << "; ++i) wmma::load_matrix_sync(af_[i], " << a_ptr << ", " << pa.ld() << ");\n";
  os << "      #pragma unroll\n      for (int j = 0; j < " << fn << "; ++j) wmma::load_matrix_sync(bf_[j], " << b_ptr << ", " << pb.ld() << ");\n";
  os << "      #pragma unroll\n      for (int i = 0; i < " << fm << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << fn
     << "; ++j) wmma::mma_sync(acc_[i][j], af_[i], bf_[j], acc_[i][j]);\n";
}

}  // namespace tessel::emit_cuda
