// wgmma main loop (mainloop.h, sm_90a, f16 or bf16 operands, or f32 read as TF32): helper functions
// (descriptors, fence / commit / wait, the m64nNk16 instruction of the operand type, m64nNk8 for
// tf32), accumulators in the m16n8 layout per warp, and the K loop with its own copy/MMA schedule
// (one MMA group in flight, copies stages - 2 or stages - 1 tiles ahead). An instruction reads 32
// bytes of each operand row whatever the type, so a K-major tile of bk x 4-byte elements (bk = 32)
// has the f16 tile's bytes, swizzle and descriptors.
#include "compiler/emit_cuda/mainloop.h"

#include <algorithm>

#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tma_plan.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

void emit_wgmma_helpers(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const std::string ta = t.pa.k_inner ? "0" : "1", tb = t.pb.k_inner ? "0" : "1";
  const int nreg = cfg.bn / 2;
  const std::string ab = ptx_operand_type(t.c.in_type);
  const bool tf32 = tf32_wgmma_operand(t.c.in_type);  // no transpose operands (both K-major)
  os << "static __device__ __forceinline__ unsigned long long tessel_wg_desc(const void* p, unsigned lbo) {\n"
        "  const unsigned a = (unsigned)__cvta_generic_to_shared(p);  /* 128-byte swizzle, SBO 1024 B */\n"
        "  return (unsigned long long)((a & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | (64ull << 32) | (1ull << 62);\n}\n"
        "static __device__ __forceinline__ unsigned long long tessel_wg_desc32(const void* p, unsigned lbo, unsigned sbo) {\n"
        "  const unsigned a = (unsigned)__cvta_generic_to_shared(p);  /* 32-byte swizzle */\n"
        "  return (unsigned long long)((a & 0x3FFFFu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) | (3ull << 62);\n}\n"
        "static __device__ __forceinline__ void tessel_wg_fence() { asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\"); }\n"
        "static __device__ __forceinline__ void tessel_wg_commit() { asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\"); }\n"
        "template <int N> static __device__ __forceinline__ void tessel_wg_wait() { asm volatile(\"wgmma.wait_group.sync.aligned %0;\\n\" ::\"n\"(N) : \"memory\"); }\n"
        "static __device__ __forceinline__ void tessel_fence_proxy_async() { asm volatile(\"fence.proxy.async.shared::cta;\\n\" ::: \"memory\"); }\n";
  os << "#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#error \"wgmma tiles must be compiled for sm_90a\"\n#endif\n";
  if (cfg.keep_operands)
    os << "static __device__ __forceinline__ void tessel_cp_async16_el(void* smem, const void* gmem, bool pred, unsigned long long pol) {\n"
          "  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);  /* L2 evict-last: the operands stay, the output streams */\n"
          "  asm volatile(\"cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\\n\" ::\"r\"(s), \"l\"(gmem), \"r\"(pred ? 16 : 0), \"l\"(pol));\n"
          "}\n";
  os << "static __device__ __forceinline__ void tessel_wgmma_n" << cfg.bn << "_" << ta << tb
     << "(float* d, unsigned long long da, unsigned long long db) {\n  asm volatile(\"wgmma.mma_async.sync.aligned.m64n" << cfg.bn
     << "k" << wgmma_k_depth(t.m, t.c.in_type) << ".f32." << ab << "." << ab << " {";
  for (int r = 0; r < nreg; ++r) os << (r ? ", " : "") << "%" << r;
  os << "}, %" << nreg << ", %" << nreg + 1 << ", 1, 1, 1" << (tf32 ? "" : ", " + ta + ", " + tb) << ";\\n\"\n    : ";
  for (int r = 0; r < nreg; ++r) os << (r ? ", " : "") << "\"+f\"(d[" << r << "])";
  os << "\n    : \"l\"(da), \"l\"(db));\n}\n";
}

void wgmma_accumulators(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  os << "  const int lane_ = threadIdx.x % " << t.m.warp_size << ";\n";
  os << "  float acc_[" << t.fmx << "][" << t.fn8 << "][4];\n";
  zero_accumulators(t, t.fmx, "  ");
  const std::string kd = S(wgmma_k_depth(t.m, t.c.in_type));
  t.explain.push_back("  wgmma path (sm_90a): " + S(cfg.warps() / int(t.m.warps_per_warpgroup)) + " warpgroup(s), each " + S(t.fmx) + " x wgmma.m64n" + S(cfg.bn) +
                    "k" + kd + " " + ptx_operand_type(t.c.in_type) + " -> f32 per " + kd + "-deep K step; A " + (t.pa.k_inner ? "K" : "M") + "-major, B " + (t.pb.k_inner ? "K" : "N") +
                    "-major in 128-byte-swizzled shared memory filled by cp.async; one MMA group in flight while the next tiles load");
}

void wgmma_k_tile(const TcKernel& t, const std::string& pad) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const std::string ta = t.pa.k_inner ? "0" : "1", tb = t.pb.k_inner ? "0" : "1";
  const std::string fnname = "tessel_wgmma_n" + S(cfg.bn) + "_" + ta + tb;
  // descriptors: K-major rows of 128 B (8-row groups 1024 B apart, a K step of 16 = 32 B);
  // M/N-major 64-wide atoms bk*128 B apart (LBO), 8 K rows 1024 B apart (SBO), a K step = 2048 B
  const isa::GpuMmaShape w = *t.m.wgmma;
  const int kd = wgmma_k_depth(t.m, t.c.in_type);  // K per instruction: w.k for 16-bit operands, 8 for tf32
  const int row = kSwizzleRowBytes / t.eb;  // elements per swizzled row (the M/N-major atom width)
  const int atom_bytes = kSwizzleRowBytes * cfg.bk;
  const int a_lbo = t.pa.k_inner ? kDescriptorUnitBytes : atom_bytes, b_lbo = t.pb.k_inner ? kDescriptorUnitBytes : atom_bytes;
  const std::string a_base = t.pa.k_inner ? "as_ + (wg_ * " + S(cfg.wm) + " + i * " + S(w.m) + ") * " + S(row)
                                        : "as_ + (wg_ * " + S(cfg.wm / w.m) + " + i) * " + S(row * cfg.bk);
  // bytes per K step of the instruction: along a K-major row, or K rows of an M/N-major atom
  const int a_kstep = t.pa.k_inner ? kd * t.eb : kd * kSwizzleRowBytes, b_kstep = t.pb.k_inner ? kd * t.eb : kd * kSwizzleRowBytes;
  // 32-byte swizzle (blocked operands, tma_plan.h kNarrowSwizzleBytes): a K-major A is one slice of
  // bm rows x 32 B per 16-deep K step (8-row groups 256 B apart); an N-major B holds 16-wide atoms
  // of 16 K rows (512 B apart, LBO), 8 K rows 256 B apart (SBO), a K step = bn x 32 B
  const int nb32 = kNarrowSwizzleBytes, g8 = 8 * nb32;
  const bool a32 = cfg.tma_ws() && t.ta.map.swizzle_bytes == nb32, b32 = cfg.tma_ws() && t.tb.map.swizzle_bytes == nb32;
  const std::string adesc =
      a32 ? "tessel_wg_desc32(as_ + (wg_ * " + S(cfg.wm) + " + i * " + S(w.m) + ") * " + S(nb32 / t.eb) + ", 16, " + S(g8) + ") + (unsigned long long)(kq * " +
                S(cfg.bm * nb32 / kDescriptorUnitBytes) + ")"
          : "tessel_wg_desc(" + a_base + ", " + S(a_lbo) + ") + (unsigned long long)(kq * " + S(a_kstep / kDescriptorUnitBytes) + ")";
  const std::string bdesc =
      b32 ? "tessel_wg_desc32(bs_, " + S(w.k * nb32) + ", " + S(g8) + ") + (unsigned long long)(kq * " + S(cfg.bn * nb32 / kDescriptorUnitBytes) + ")"
          : "tessel_wg_desc(bs_, " + S(b_lbo) + ") + (unsigned long long)(kq * " + S(b_kstep / kDescriptorUnitBytes) + ")";
  TESSEL_CHECK(!a32 || t.pa.k_inner, "emit_cuda: a 32-byte-swizzled A must be K-inner");
  TESSEL_CHECK(!b32 || !t.pb.k_inner, "emit_cuda: a 32-byte-swizzled B must be N-inner");
  os << pad << "tessel_wg_fence();\n";
  os << pad << "#pragma unroll\n" << pad << "for (int kq = 0; kq < " << cfg.bk / kd << "; ++kq) {\n";
  os << pad << "  const unsigned long long db_ = " << bdesc << ";\n";
  os << pad << "  #pragma unroll\n" << pad << "  for (int i = 0; i < " << t.fmx << "; ++i)\n" << pad << "    " << fnname << "(&acc_[i][0][0], " << adesc
     << ", db_);\n";
  os << pad << "}\n";
  os << pad << "tessel_wg_commit();\n";
}

void wgmma_mainloop(const TcKernel& t, const std::string& prologue_loads) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  // the MMAs of tile kt are issued first (the tensor cores always hold a queued group), then the
  // copies of tile kt + D. D = stages - 2: their slot was last read by the MMAs of tile kt - 2,
  // complete in every warpgroup (wait_group 1 in iteration kt - 1, then this iteration's
  // barrier). wg_deep, D = stages - 1: slot of tile kt - 1, complete after this iteration's
  // wait_group 1 and a second barrier.
  const int S_ = cfg.stages;
  const int D_ = cfg.issue == CopyIssue::deep ? S_ - 1 : S_ - 2;
  os << "  #pragma unroll\n  for (int s = 0; s < " << D_ << "; ++s) {\n    if (s < kt_total_) { " << prologue_loads << "}\n    tessel_cp_commit();\n  }\n";
  os << "  for (int kt = 0; kt < kt_total_; ++kt) {\n";
  os << "    tessel_cp_wait<" << D_ - 1 << ">();\n    tessel_fence_proxy_async();  /* cp.async data -> the async proxy (wgmma) */\n    __syncthreads();\n";
  const std::string copies = "    { const int nt = kt + " + S(D_) + "; if (nt < kt_total_) { load_a(nt % " + S(S_) + ", kt0_ + nt); load_b(nt % " +
                             S(S_) + ", kt0_ + nt); } tessel_cp_commit(); }\n";
  if (cfg.issue == CopyIssue::before_mma) os << copies;  // /cf: the copies before the MMA issue (slot of tile kt - 2, free as above)
  os << "    const " << t.ft << "* as_ = As_ + (kt % " << S_ << ") * " << t.a_stage << ";\n";
  os << "    const " << t.ft << "* bs_ = Bs_ + (kt % " << S_ << ") * " << t.b_stage << ";\n";
  wgmma_k_tile(t, "    ");
  if (cfg.issue == CopyIssue::deep) os << "    tessel_wg_wait<1>();\n    __syncthreads();  /* tile kt - 1's slot is free in every warpgroup */\n";
  if (cfg.issue != CopyIssue::before_mma) os << copies;
  if (cfg.issue != CopyIssue::deep) os << "    tessel_wg_wait<1>();\n";
  os << "  }\n";
  os << "  tessel_wg_wait<0>();\n";
  fence_accumulators(t, "  ");
}

}  // namespace tessel::emit_cuda
