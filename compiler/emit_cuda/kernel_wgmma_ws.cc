#include "compiler/emit_cuda/kernel_wgmma_ws.h"

#include <algorithm>

#include "compiler/emit_cuda/epilogue.h"
#include "compiler/emit_cuda/mainloop.h"
#include "compiler/emit_cuda/tile_policy.h"

namespace tessel::emit_cuda {

namespace {

constexpr int kRasterGroupRows = 8;  // block rows of one rasterisation group (they share B tiles in L2)

// the coordinates of work unit u_: output tile origin (m0_, n0_), batch indices, K-tile range
void unit_coordinates(const TcKernel& t, const std::string& pad) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int64_t per = k_tiles_per_block(t.c, cfg), kt_total = k_tiles(t.c, cfg);
  if (cfg.k_blocks > 1)
    os << pad << "const int tile_ = u_ / " << cfg.k_blocks << ", split_ = u_ % " << cfg.k_blocks << ";\n";
  else
    os << pad << "const int tile_ = u_;\n";
  os << pad << "const int bz_ = tile_ / " << t.tiles_m * t.tiles_n << ", pid_ = tile_ % " << t.tiles_m * t.tiles_n << ";\n";
  os << pad << "const int group_ = " << kRasterGroupRows << " * " << t.tiles_n << ", first_m_ = (pid_ / group_) * " << kRasterGroupRows << ";\n";
  os << pad << "const int gsize_ = min(" << t.tiles_m << " - first_m_, " << kRasterGroupRows << ");\n";
  os << pad << "const int m0_ = (first_m_ + (pid_ % group_) % gsize_) * " << cfg.bm << ", n0_ = ((pid_ % group_) / gsize_) * " << cfg.bn << ";\n";
  for (const auto& d : t.c.batch) os << pad << "int bv_" << d.var << ";\n";
  t.decompose(pad, "bz_", t.c.batch, "bv_");
  if (cfg.k_blocks > 1)
    os << pad << "const int kt0_ = split_ * " << per << ", ktn_ = min(" << per << ", " << kt_total << " - kt0_);\n";
  else
    os << pad << "const int kt0_ = 0, ktn_ = " << kt_total << ";\n";
  os << pad << "(void)m0_; (void)n0_; (void)bz_;\n";
}

// the TMA copies of one operand's stage: `boxes` copies, coordinates per tma_plan.h
void tma_copies(const TcKernel& t, const TmaPlan& p, bool k_inner, const std::string& smem, const std::string& stage_elems,
                const std::string& origin, const std::string& map, const std::string& pad) {
  auto& os = t.os;
  const int rank = int(p.map.dims.size());
  std::string batch;
  for (const auto& v : p.batch_vars) batch += ", bv_" + v;
  for (int b = 0; b < p.boxes; ++b) {
    const std::string dst = smem + " + s_ * " + stage_elems + (b ? " + " + S(b * p.box_elems) : "");
    const std::string coords = k_inner ? "(kt0_ + kt) * " + S(t.cfg.bk) + ", " + origin
                                       : origin + (b ? " + " + S(b * int64_t(p.map.box[0])) : "") + ", (kt0_ + kt) * " + S(t.cfg.bk);
    os << pad << "tessel_tma_load" << rank << "(" << dst << ", &" << map << ", full_ + s_, " << coords << batch << ");\n";
  }
}

}  // namespace

void emit_wgmma_ws_helpers(const TcKernel& t) {
  auto& os = t.os;
  std::set<int> ranks = {int(t.ta.map.dims.size()), int(t.tb.map.dims.size())};
  os << "struct __align__(64) tessel_tmap { unsigned long long v[16]; };  /* a CUtensorMap, passed as a __grid_constant__ parameter */\n";
  os << "static __device__ __forceinline__ void tessel_mbar_init(unsigned long long* bar, unsigned count) {\n"
        "  asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(count));\n}\n"
        "static __device__ __forceinline__ void tessel_mbar_expect(unsigned long long* bar, unsigned bytes) {\n"
        "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(bytes) : \"memory\");\n}\n"
        "static __device__ __forceinline__ void tessel_mbar_arrive(unsigned long long* bar) {\n"
        "  asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)) : \"memory\");\n}\n"
        "static __device__ __forceinline__ void tessel_mbar_wait(unsigned long long* bar, unsigned parity) {\n"
        "  asm volatile(\"{\\n.reg .pred p;\\nTESSEL_WAIT_%=:\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n@!p bra TESSEL_WAIT_%=;\\n}\\n\"\n"
        "               ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(parity) : \"memory\");\n}\n";
  for (int r : ranks) {
    os << "static __device__ __forceinline__ void tessel_tma_load" << r << "(void* dst, const tessel_tmap* map, unsigned long long* bar";
    for (int i = 0; i < r; ++i) os << ", int c" << i;
    os << ") {\n  asm volatile(\"cp.async.bulk.tensor." << r << "d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {";
    for (int i = 0; i < r; ++i) os << (i ? ", " : "") << "%" << i + 3;
    os << "}], [%2];\\n\"\n               ::\"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(map), \"r\"((unsigned)__cvta_generic_to_shared(bar))";
    for (int i = 0; i < r; ++i) os << ", \"r\"(c" << i << ")";
    os << " : \"memory\");\n}\n";
  }
}

void emit_wgmma_ws_body(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int S_ = cfg.stages;
  const int consumers = cfg.bm / cfg.wm;  // consumer warpgroups
  const int wgt = int(t.m.threads_per_warpgroup()), wpg = int(t.m.warps_per_warpgroup);
  const int64_t units = output_tiles(t.c, cfg) * cfg.k_blocks;
  const int64_t grid = std::min<int64_t>(units, t.m.sm_count);
  os << "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n";
  os << "  unsigned char* smem_ = smem_raw_ + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw_) & 1023u)) & 1023u);\n";
  os << "  " << t.ft << "* As_ = (" << t.ft << "*)smem_;\n";
  os << "  " << t.ft << "* Bs_ = (" << t.ft << "*)(smem_ + " << S_ * t.a_stage * t.eb << ");\n";
  os << "  __shared__ __align__(8) unsigned long long full_[" << S_ << "], empty_[" << S_ << "];\n";
  os << "  (void)scratch;\n";
  os << "  const int warp_ = threadIdx.x / " << t.m.warp_size << ", lane_ = threadIdx.x % " << t.m.warp_size << ";\n";
  os << "  if (threadIdx.x == 0) {\n    #pragma unroll\n    for (int s = 0; s < " << S_ << "; ++s) {\n"
     << "      tessel_mbar_init(full_ + s, 1);  /* the producer's arrival + the copies' bytes */\n"
     << "      tessel_mbar_init(empty_ + s, " << consumers * wpg << ");  /* one arrival per consumer warp */\n    }\n"
     << "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");  /* visible to the TMA unit */\n  }\n";
  os << "  __syncthreads();\n";
  if (t.launch.pdl) {
    os << "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");  /* PDL: the previous kernel has finished and flushed */\n";
    os << "  asm volatile(\"griddepcontrol.launch_dependents;\\n\" ::: \"memory\");  /* PDL: the next kernel may launch */\n";
  }
  // ---- producer warpgroup ----
  os << "  if (warp_ < " << wpg << ") {\n";
  os << "    asm volatile(\"setmaxnreg.dec.sync.aligned.u32 " << kProducerRegisters << ";\\n\");\n";
  os << "    if (threadIdx.x == 0) {\n";
  os << "      asm volatile(\"prefetch.tensormap [%0];\\n\" ::\"l\"(&tmap_a_) : \"memory\");\n";
  os << "      asm volatile(\"prefetch.tensormap [%0];\\n\" ::\"l\"(&tmap_b_) : \"memory\");\n";
  os << "      int it_ = 0;\n";
  os << "      for (int u_ = blockIdx.x; u_ < " << units << "; u_ += gridDim.x) {\n";
  unit_coordinates(t, "        ");
  os << "        for (int kt = 0; kt < ktn_; ++kt, ++it_) {\n";
  os << "          const int s_ = it_ % " << S_ << ";\n";
  os << "          tessel_mbar_wait(empty_ + s_, ((it_ / " << S_ << ") & 1) ^ 1);  /* the consumers released the slot (a fresh slot passes) */\n";
  os << "          tessel_mbar_expect(full_ + s_, " << t.ta.stage_bytes + t.tb.stage_bytes << "u);\n";
  tma_copies(t, t.ta, t.pa.k_inner, "As_", S(t.a_stage), "m0_", "tmap_a_", "          ");
  tma_copies(t, t.tb, t.pb.k_inner, "Bs_", S(t.b_stage), "n0_", "tmap_b_", "          ");
  os << "        }\n      }\n    }\n";
  // ---- consumer warpgroups ----
  os << "  } else {\n";
  os << "    asm volatile(\"setmaxnreg.inc.sync.aligned.u32 " << kConsumerRegisters << ";\\n\");\n";
  os << "    const int wg_ = warp_ / " << wpg << " - 1;\n";
  os << "    const int wm_ = wg_ * " << cfg.wm << " + (warp_ % " << wpg << ") * " << t.m.wgmma->m / wpg << ", wn_ = 0;\n";
  os << "    float acc_[" << t.fmx << "][" << t.fn8 << "][4];\n";
  os << "    int it_ = 0;\n";
  os << "    for (int u_ = blockIdx.x; u_ < " << units << "; u_ += gridDim.x) {\n";
  unit_coordinates(t, "      ");
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fmx << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << t.fn8
     << "; ++j) acc_[i][j][0] = acc_[i][j][1] = acc_[i][j][2] = acc_[i][j][3] = 0.0f;\n";
  os << "      for (int kt = 0; kt < ktn_; ++kt, ++it_) {\n";
  os << "        const int s_ = it_ % " << S_ << ";\n";
  os << "        tessel_mbar_wait(full_ + s_, (it_ / " << S_ << ") & 1);  /* the slot's bytes have landed */\n";
  os << "        const " << t.ft << "* as_ = As_ + s_ * " << t.a_stage << ";\n";
  os << "        const " << t.ft << "* bs_ = Bs_ + s_ * " << t.b_stage << ";\n";
  wgmma_k_tile(t, "        ");
  os << "        tessel_wg_wait<1>();  /* the previous K tile's MMAs are done: release its slot */\n";
  os << "        if (kt > 0 && lane_ == 0) tessel_mbar_arrive(empty_ + (it_ + " << S_ - 1 << ") % " << S_ << ");\n";
  os << "      }\n";
  os << "      tessel_wg_wait<0>();\n";
  os << "      if (ktn_ > 0 && lane_ == 0) tessel_mbar_arrive(empty_ + (it_ + " << S_ - 1 << ") % " << S_ << ");\n";
  os << "      #pragma unroll\n      for (int i = 0; i < " << t.fmx << "; ++i)\n        #pragma unroll\n        for (int j = 0; j < " << t.fn8
     << "; ++j)\n          #pragma unroll\n          for (int q = 0; q < 4; ++q) asm volatile(\"\" : \"+f\"(acc_[i][j][q]) :: \"memory\");  /* MMAs done */\n";
  register_epilogue(t, "      ");
  os << "    }\n  }\n}\n";
  t.explain.push_back("  persistent warp-specialised wgmma kernel (sm_90a): producer warpgroup (one thread issues TMA tensor-map copies, " +
                      S(kProducerRegisters) + " registers after setmaxnreg), " + S(consumers) + " consumer warpgroup(s) of " + S(cfg.wm) + "x" +
                      S(cfg.bn) + " (" + S(t.fmx) + " x wgmma.m64n" + S(cfg.bn) + "k16 per 16-deep K step, " + S(kConsumerRegisters) +
                      " registers); " + S(S_) + "-stage ring of " + S((t.ta.stage_bytes + t.tb.stage_bytes) / 1024) +
                      " KiB slots with full/empty mbarriers, 128-byte swizzle, no block-wide barrier in the main loop; cluster 1x1x1");
  t.explain.push_back("  tile scheduler: persistent grid of " + S(grid) + " blocks (one per SM) over " + S(units) + " work units (" +
                      S(output_tiles(t.c, cfg)) + " output tiles" + (cfg.k_blocks > 1 ? " x " + S(cfg.k_blocks) + " K ranges" : "") +
                      ") in grouped order (" + S(kRasterGroupRows) + " block rows share B in L2); the next unit's copies overlap this unit's epilogue");
  t.explain.push_back("  TMA: " + t.c.a.tensor + " " + S(t.ta.boxes) + " box(es) {" + S(t.ta.map.box[0]) + ", " + S(t.ta.map.box[1]) + "} and " +
                      t.c.b.tensor + " " + S(t.tb.boxes) + " box(es) {" + S(t.tb.map.box[0]) + ", " + S(t.tb.map.box[1]) +
                      "} per stage; tails past M, N, K zero-filled by the TMA unit");
}

}  // namespace tessel::emit_cuda
