#include "compiler/emit_cuda/mainloop.h"

#include <algorithm>

#include "compiler/emit_cuda/tile_policy.h"

namespace tessel::emit_cuda {

void wmma_accumulators(const TcKernel& t) {
  auto& os = t.os;
  os << "  wmma::fragment<wmma::accumulator, " << t.m.wmma.m << ", " << t.m.wmma.n << ", " << t.m.wmma.k << ", " << t.acct << "> acc_[" << t.fm << "][" << t.fn << "];\n";
  os << "  #pragma unroll\n  for (int i = 0; i < " << t.fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << t.fn
     << "; ++j) wmma::fill_fragment(acc_[i][j], 0);\n";
}

// the fragment loop over one shared K tile: each warp its slice of kslice K elements
void wmma_k_tile(const TcKernel& t, int kslice) {
  auto& os = t.os;
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << kslice << "; kq += 16) {\n";
  os << "      const int kk = ks_ * " << kslice << " + kq;\n";
  os << "      wmma::fragment<wmma::matrix_a, " << t.m.wmma.m << ", " << t.m.wmma.n << ", " << t.m.wmma.k << ", " << t.ft << ", " << t.la << "> af_[" << t.fm << "];\n";
  os << "      wmma::fragment<wmma::matrix_b, " << t.m.wmma.m << ", " << t.m.wmma.n << ", " << t.m.wmma.k << ", " << t.ft << ", " << t.lb << "> bf_[" << t.fn << "];\n";
  const std::string a_ptr = t.pa.k_inner ? "as_ + (wm_ + i * 16) * " + S(t.pa.ld()) + " + kk" : "as_ + kk * " + S(t.pa.ld()) + " + wm_ + i * 16";
  const std::string b_ptr = t.pb.k_inner ? "bs_ + (wn_ + j * 16) * " + S(t.pb.ld()) + " + kk" : "bs_ + kk * " + S(t.pb.ld()) + " + wn_ + j * 16";
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fm << "; ++i) wmma::load_matrix_sync(af_[i], " << a_ptr << ", " << t.pa.ld() << ");\n";
  os << "      #pragma unroll\n      for (int j = 0; j < " << t.fn << "; ++j) wmma::load_matrix_sync(bf_[j], " << b_ptr << ", " << t.pb.ld() << ");\n";
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fm << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << t.fn
     << "; ++j) wmma::mma_sync(acc_[i][j], af_[i], bf_[j], acc_[i][j]);\n";
}

}  // namespace tessel::emit_cuda
