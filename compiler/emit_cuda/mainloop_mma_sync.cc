// mma.sync main loop (mainloop.h, sm_80+, f16 or bf16 operands): m16n8 accumulators in registers,
// ldmatrix(.trans) lane addresses, and per K tile fragments double-buffered in registers around
// mma.sync.m16n8k16 (the prelude's tessel_mma16816, of the operand type: emit_cuda.cc).
#include "compiler/emit_cuda/mainloop.h"

namespace tessel::emit_cuda {

void mma_sync_accumulators(const TcKernel& t) {
  auto& os = t.os;
  os << "  const int lane_ = threadIdx.x % " << t.m.warp_size << ";\n";
  os << "  float acc_[" << t.fm << "][" << t.fn8 << "][4];\n";
  zero_accumulators(t, t.fm, "  ");
  // ldmatrix lane addresses (x4: lanes 8q..8q+7 address the rows of matrix q)
  if (t.pa.k_inner)  // [m][k]: a0..a3 = (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15)
    os << "  const int a_lrow_ = lane_ & 15, a_lcol_ = (lane_ >> 4) * 8;  /* A ldmatrix: row m, col k */\n";
  else  // [k][m], transposed
    os << "  const int a_lrow_ = (lane_ & 7) + ((lane_ >> 4) << 3), a_lcol_ = ((lane_ >> 3) & 1) * 8;  /* A ldmatrix.trans: row k, col m */\n";
  if (t.pb.k_inner)  // [n][k]: (n0-7,k0-7)=b0 n8#0, (n0-7,k8-15)=b1 #0, (n8-15,k0-7)=b0 #1, (n8-15,k8-15)=b1 #1
    os << "  const int b_lrow_ = (lane_ & 7) + ((lane_ >> 4) << 3), b_lcol_ = ((lane_ >> 3) & 1) * 8;  /* B ldmatrix: row n, col k */\n";
  else  // [k][n], transposed: (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
    os << "  const int b_lrow_ = lane_ & 15, b_lcol_ = (lane_ >> 4) * 8;  /* B ldmatrix.trans: row k, col n */\n";
  t.explain.push_back("  mma.sync path (sm_80+): ldmatrix" + std::string(t.pa.k_inner ? "" : ".trans") + " A, ldmatrix" +
                    (t.pb.k_inner ? "" : ".trans") + " B from the padded (conflict-free) shared rows, mma.sync.m16n8k16 " + ptx_operand_type(t.c.in_type) + " -> f32, " +
                    S(t.fm * t.fn8) + " m16n8 accumulator tiles per warp");
}

// ldmatrix + mma.sync over one shared K tile, fragments double-buffered in registers
void mma_sync_k_tile(const TcKernel& t, int kslice) {
  auto& os = t.os;
  // fragments double-buffered in registers: the ldmatrix of step kq+16 is issued before the
  // mma.sync of step kq (the asm statements keep their order, so the order is the schedule)
  const isa::GpuMmaShape f = *t.m.mma_sync;
  const std::string rows_a = S(f.m), cols_b = S(2 * f.n);  // one ldmatrix.x4: an m16 x k16 A tile, two n8 B tiles
  auto frag_loads = [&](const std::string& buf, const std::string& kk) {
    const std::string a_addr = t.pa.k_inner ? "as_ + (wm_ + i * " + rows_a + " + a_lrow_) * " + S(t.pa.ld()) + " + " + kk + " + a_lcol_"
                                            : "as_ + (" + kk + " + a_lrow_) * " + S(t.pa.ld()) + " + wm_ + i * " + rows_a + " + a_lcol_";
    const std::string b_addr = t.pb.k_inner ? "bs_ + (wn_ + j * " + cols_b + " + b_lrow_) * " + S(t.pb.ld()) + " + " + kk + " + b_lcol_"
                                            : "bs_ + (" + kk + " + b_lrow_) * " + S(t.pb.ld()) + " + wn_ + j * " + cols_b + " + b_lcol_";
    os << "      #pragma unroll\n      for (int i = 0; i < " << t.fm << "; ++i) tessel_ldsm_x4" << (t.pa.k_inner ? "" : "_trans") << "(af_["
       << buf << "][i][0], af_[" << buf << "][i][1], af_[" << buf << "][i][2], af_[" << buf << "][i][3], " << a_addr << ");\n";
    os << "      #pragma unroll\n      for (int j = 0; j < " << t.fn << "; ++j) tessel_ldsm_x4" << (t.pb.k_inner ? "" : "_trans") << "(bf_["
       << buf << "][2 * j][0], bf_[" << buf << "][2 * j][1], bf_[" << buf << "][2 * j + 1][0], bf_[" << buf << "][2 * j + 1][1], " << b_addr
       << ");\n";
  };
  os << "    unsigned af_[2][" << t.fm << "][4], bf_[2][" << t.fn8 << "][2];\n";
  os << "    {\n";
  frag_loads("0", "0");
  os << "    }\n";
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << kslice << "; kq += " << f.k << ") {\n";
  os << "      const int cur_ = (kq / " << f.k << ") & 1;\n";
  os << "      if (kq + " << f.k << " < " << kslice << ") {\n        const int kn_ = kq + " << f.k << ";\n";
  frag_loads("cur_ ^ 1", "kn_");
  os << "      }\n";
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fm << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << t.fn8
     << "; ++j) tessel_mma16816(acc_[i][j], af_[cur_][i], bf_[cur_][j][0], bf_[cur_][j][1]);\n";
}

}  // namespace tessel::emit_cuda
