// WMMA main loop (mainloop.h): accumulator fragments, and per K tile each warp loads its A / B
// fragments from the padded shared rows (load_matrix_sync) and runs mma_sync on them.
#include "compiler/emit_cuda/mainloop.h"

namespace tessel::emit_cuda {

void wmma_accumulators(const TcKernel& t) {
  auto& os = t.os;
  const isa::GpuMmaShape f = t.m.wmma;
  os << "  wmma::fragment<wmma::accumulator, " << f.m << ", " << f.n << ", " << f.k << ", " << t.acct << "> acc_[" << t.fm << "][" << t.fn << "];\n";
  os << "  #pragma unroll\n  for (int i = 0; i < " << t.fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << t.fn
     << "; ++j) wmma::fill_fragment(acc_[i][j], 0);\n";
}

// the fragment loop over one shared K tile: each warp its slice of kslice K elements
void wmma_k_tile(const TcKernel& t, int kslice) {
  auto& os = t.os;
  const isa::GpuMmaShape f = t.m.wmma;
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << kslice << "; kq += " << f.k << ") {\n";
  os << "      const int kk = ks_ * " << kslice << " + kq;\n";
  os << "      wmma::fragment<wmma::matrix_a, " << f.m << ", " << f.n << ", " << f.k << ", " << t.ft << ", " << t.la << "> af_[" << t.fm << "];\n";
  os << "      wmma::fragment<wmma::matrix_b, " << f.m << ", " << f.n << ", " << f.k << ", " << t.ft << ", " << t.lb << "> bf_[" << t.fn << "];\n";
  const std::string a_ptr = t.pa.k_inner ? "as_ + (wm_ + i * " + S(f.m) + ") * " + S(t.pa.ld()) + " + kk"
                                         : "as_ + kk * " + S(t.pa.ld()) + " + wm_ + i * " + S(f.m);
  const std::string b_ptr = t.pb.k_inner ? "bs_ + (wn_ + j * " + S(f.n) + ") * " + S(t.pb.ld()) + " + kk"
                                         : "bs_ + kk * " + S(t.pb.ld()) + " + wn_ + j * " + S(f.n);
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fm << "; ++i) wmma::load_matrix_sync(af_[i], " << a_ptr << ", " << t.pa.ld() << ");\n";
  os << "      #pragma unroll\n      for (int j = 0; j < " << t.fn << "; ++j) wmma::load_matrix_sync(bf_[j], " << b_ptr << ", " << t.pb.ld() << ");\n";
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fm << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << t.fn
     << "; ++j) wmma::mma_sync(acc_[i][j], af_[i], bf_[j], acc_[i][j]);\n";
}

}  // namespace tessel::emit_cuda
