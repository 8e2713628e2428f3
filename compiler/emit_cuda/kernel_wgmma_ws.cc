#include "compiler/emit_cuda/kernel_wgmma_ws.h"

#include <algorithm>
#include <functional>
#include <set>

#include "compiler/emit_cuda/epilogue.h"
#include "compiler/emit_cuda/mainloop.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"

namespace tessel::emit_cuda {

namespace {

// Stream-K fix-up of a piece of a tile cut between blocks: the piece's partial tile to this
// block's scratch slot (head or tail piece), a fence, the tile's counter; the last piece of the
// tile to arrive sums every piece's partial in block order (deterministic) into acc_ and goes on
// to the epilogue, the others skip it. Consumer threads only (named barrier 1).
void stream_k_fixup(const TcKernel& t, const PersistentSplit& ps, const std::string& pad) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int ct = (cfg.bm / cfg.wm) * int(t.m.threads_per_warpgroup());  // consumer threads
  const int64_t counters = split_counter_bytes(ps.sk_tiles);
  const int64_t KT = ps.k_tiles;
  const int regs4 = t.fmx * t.fn8;  // float4 groups per thread
  os << pad << "if (sk_) {\n";
  os << pad << "  const int ct_ = threadIdx.x - " << t.m.threads_per_warpgroup() << ";\n";
  os << pad << "  float4* mine_ = (float4*)(scratch + " << counters << ") + ((long long)blockIdx.x * 2 + (head_ ? 0 : 1)) * " << int64_t(regs4) * ct << "LL;\n";
  os << pad << "  #pragma unroll\n" << pad << "  for (int i = 0; i < " << t.fmx << "; ++i)\n" << pad << "    #pragma unroll\n" << pad << "    for (int j = 0; j < " << t.fn8
     << "; ++j) __stcg(mine_ + (i * " << t.fn8 << " + j) * " << ct << " + ct_, make_float4(acc_[i][j][0], acc_[i][j][1], acc_[i][j][2], acc_[i][j][3]));\n";
  os << pad << "  __threadfence();\n";
  os << pad << "  asm volatile(\"bar.sync 1, " << ct << ";\\n\" ::: \"memory\");  /* every consumer's partial is stored */\n";
  // the tile's pieces: blocks block_of(first iteration) .. block_of(last iteration)
  os << pad << "  const int bfirst_ = " << stream_k_block_of(ps, "(long long)sk_tile_ * " + S(KT)) << ", blast_ = "
     << stream_k_block_of(ps, "((long long)sk_tile_ + 1) * " + S(KT) + " - 1") << ";\n";
  os << pad << "  if (ct_ == 0) {\n";
  os << pad << "    unsigned* cnt_ = (unsigned*)scratch + sk_tile_;\n";
  os << pad << "    const bool last_ = atomicAdd(cnt_, 1u) == (unsigned)(blast_ - bfirst_);\n";
  os << pad << "    if (last_) atomicExch(cnt_, 0u);  /* ready for the next launch */\n";
  os << pad << "    sk_last_ = last_;\n";
  os << pad << "  }\n";
  os << pad << "  asm volatile(\"bar.sync 1, " << ct << ";\\n\" ::: \"memory\");\n";
  os << pad << "  if (!sk_last_) store_ = false;  /* another piece of the tile is still running: it finishes the tile */\n";
  os << pad << "  else {\n";
  os << pad << "    __threadfence();\n";
  zero_accumulators(t, t.fmx, pad + "    ");
  os << pad << "    for (int b_ = bfirst_; b_ <= blast_; ++b_) {  /* in block order: the sum does not depend on who finished last */\n";
  os << pad << "      const bool bhead_ = " << stream_k_starts_in(ps, "b_", "sk_tile_") << ";  /* block b_'s range starts in this tile */\n";
  os << pad << "      const float4* part_ = (const float4*)(scratch + " << counters << ") + ((long long)b_ * 2 + (bhead_ ? 0 : 1)) * " << int64_t(regs4) * ct
     << "LL;\n";
  os << pad << "      #pragma unroll\n" << pad << "      for (int i = 0; i < " << t.fmx << "; ++i)\n" << pad << "        #pragma unroll\n" << pad
     << "        for (int j = 0; j < " << t.fn8 << "; ++j) {\n";
  os << pad << "          const float4 p_ = __ldcg(part_ + (i * " << t.fn8 << " + j) * " << ct << " + ct_);\n";
  os << pad << "          acc_[i][j][0] += p_.x; acc_[i][j][1] += p_.y; acc_[i][j][2] += p_.z; acc_[i][j][3] += p_.w;\n";
  os << pad << "        }\n" << pad << "    }\n" << pad << "  }\n" << pad << "}\n";
}

// the TMA copies of one operand's stage: `boxes` copies, coordinates per tma_plan.h
void tma_copies(const TcKernel& t, const TmaPlan& p, bool k_inner, const std::string& smem, const std::string& stage_elems,
                const std::string& origin, const std::string& map, const std::string& pad) {
  auto& os = t.os;
  const int rank = int(p.map.dims.size());
  if (p.im2col) {  // one gather per stage: tile_outer output pixels from `origin`, 64 channels of one filter tap
    const Im2colView& v = p.view;
    const int64_t cb = v.C / t.cfg.bk;  // K tiles per tap
    os << pad << "{ const int k_ = kt0_ + kt, tap_ = k_ / " << cb << ", c0_ = (k_ % " << cb << ") * " << t.cfg.bk << ";\n";
    os << pad << "  tessel_tma_im2col4(" << smem << " + s_ * " << stage_elems << ", &" << map << ", full_ + s_, c0_, " << origin << " % " << v.Q
       << " + (" << v.w0 << "), (" << origin << " / " << v.Q << ") % " << v.P << " + (" << v.h0 << "), " << origin << " / " << v.P * v.Q
       << ", (unsigned short)((tap_ % " << v.S << ") * " << v.dw << "), (unsigned short)((tap_ / " << v.S << ") * " << v.dh << ")); }\n";
    return;
  }
  if (p.blocked) {  // the window's tap and channel blocks of K tile kt; a padding row fetches a box wholly past W
    const BlockedWindow& v = p.bview;
    const int64_t seg = v.Q * v.NI, kpt = v.CB * v.CI;  // M rows per output row, K per tap
    os << pad << "{ const int k_ = (kt0_ + kt) * " << t.cfg.bk << ", tap_ = k_ / " << kpt << ", cb_ = (k_ % " << kpt << ") / " << v.CI << ";\n";
    os << pad << "  const int row_ = " << origin << " / " << seg << ", h_ = row_ % " << v.P << " + (tap_ / " << v.S << ") * " << v.dh << " + (" << v.h0
       << "), w_ = (" << origin << " % " << seg << ") / " << v.NI << " + (tap_ % " << v.S << ") * " << v.dw << " + (" << v.w0 << ");\n";
    os << pad << "  const bool in_ = h_ >= 0 && h_ < " << v.H << ";\n";
    os << pad << "  tessel_tma_load5(" << smem << " + s_ * " << stage_elems << ", &" << map << ", full_ + s_, 0, 0, in_ ? w_ : " << v.W << ", cb_, (row_ / "
       << v.P << ") * " << v.H << " + (in_ ? h_ : 0)); }\n";
    return;
  }
  if (p.split_outer) {  // the tile from origin as (o_hi, o_lo) blocks; K as (k_hi, k_lo)
    os << pad << "tessel_tma_load4(" << smem << " + s_ * " << stage_elems << ", &" << map << ", full_ + s_, 0, 0, " << origin << " / " << p.sview.OL
       << ", (kt0_ + kt) * " << t.cfg.bk / p.sview.KL << ");\n";
    return;
  }
  std::string batch;
  for (const auto& v : p.batch_vars) batch += ", bv_" + v;
  const bool shared = t.cfg.schedule == WsSchedule::multicast && &p == &t.tb;  // B of a 2-block cluster: this block fetches every other box for both
  for (int b = 0; b < p.boxes; ++b) {
    const std::string dst = smem + " + s_ * " + stage_elems + (b ? " + " + S(b * p.box_elems) : "");
    const std::string coords = k_inner ? "(kt0_ + kt) * " + S(t.cfg.bk) + ", " + origin + (b ? " + " + S(b * int64_t(p.map.box[1])) : "")
                                       : origin + (b ? " + " + S(b * int64_t(p.map.box[0])) : "") + ", (kt0_ + kt) * " + S(t.cfg.bk);
    if (shared)
      os << pad << "if (crank_ == " << b % 2 << "u) tessel_tma_load" << rank << "_mc(" << dst << ", &" << map << ", full_ + s_, " << coords << batch << ");\n";
    else
      os << pad << "tessel_tma_load" << rank << "(" << dst << ", &" << map << ", full_ + s_, " << coords << batch << ");\n";
  }
}

}  // namespace

void emit_wgmma_ws_helpers(const TcKernel& t) {
  auto& os = t.os;
  std::set<int> ranks;
  for (const TmaPlan* p : {&t.ta, &t.tb})
    if (!p->im2col) ranks.insert(int(p->map.dims.size()));
  os << "struct __align__(64) tessel_tmap { unsigned long long v[16]; };  /* a CUtensorMap, passed as a __grid_constant__ parameter */\n";
  // evict-first stores of the register epilogue without __stcs's memory clobber, so the compiler
  // may share loads (per-column operands of the fused statements) between the rows of a thread
  os << "static __device__ __forceinline__ void tessel_stcs(float* p, float v) { asm volatile(\"st.global.cs.f32 [%0], %1;\\n\" ::\"l\"(p), \"f\"(v)); }\n"
        "static __device__ __forceinline__ void tessel_stcs(__half* p, __half v) { asm volatile(\"st.global.cs.b16 [%0], %1;\\n\" ::\"l\"(p), \"h\"(__half_as_ushort(v))); }\n";
  for (const auto& [tensor, dtype] : element_outputs(t))
    if (dtype == DType::BF16) {  // only where a bf16 output is stored (the f16 / f32 kernels' text unchanged)
      os << "static __device__ __forceinline__ void tessel_stcs(__nv_bfloat16* p, __nv_bfloat16 v) { asm volatile(\"st.global.cs.b16 [%0], %1;\\n\" ::\"l\"(p), \"h\"(__bfloat16_as_ushort(v))); }\n";
      break;
    }
  os << "static __device__ __forceinline__ void tessel_mbar_init(unsigned long long* bar, unsigned count) {\n"
        "  asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(count));\n}\n"
        "static __device__ __forceinline__ void tessel_mbar_expect(unsigned long long* bar, unsigned bytes) {\n"
        "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(bytes) : \"memory\");\n}\n"
        "static __device__ __forceinline__ void tessel_mbar_arrive(unsigned long long* bar) {\n"
        "  asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)) : \"memory\");\n}\n"
        "static __device__ __forceinline__ void tessel_mbar_wait(unsigned long long* bar, unsigned parity) {\n"
        "  asm volatile(\"{\\n.reg .pred p;\\nTESSEL_WAIT_%=:\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n@!p bra TESSEL_WAIT_%=;\\n}\\n\"\n"
        "               ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(parity) : \"memory\");\n}\n";
  if (t.ta.im2col || t.tb.im2col)
    os << "static __device__ __forceinline__ void tessel_tma_im2col4(void* dst, const tessel_tmap* map, unsigned long long* bar, int c, int w, int h, int n,\n"
          "                                                          unsigned short ow, unsigned short oh) {\n"
          "  asm volatile(\"cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\\n\"\n"
          "               ::\"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(map), \"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(c), \"r\"(w), \"r\"(h), \"r\"(n),\n"
          "                 \"h\"(ow), \"h\"(oh) : \"memory\");\n}\n";
  // tessel_tma_load<r>: one tiled copy completing on `bar`; with multicast also tessel_tma_load<r>_mc,
  // the same copy landing at the same offset in both blocks of the cluster (mask 0b11), completing
  // on each one's barrier
  auto load_helper = [&](int r, bool mc) {
    os << "static __device__ __forceinline__ void tessel_tma_load" << r << (mc ? "_mc" : "") << "(void* dst, const tessel_tmap* map, unsigned long long* bar";
    for (int i = 0; i < r; ++i) os << ", int c" << i;
    os << ") {\n  asm volatile(\"cp.async.bulk.tensor." << r << "d.shared::cluster.global.mbarrier::complete_tx::bytes" << (mc ? ".multicast::cluster" : "")
       << " [%0], [%1, {";
    const int first = mc ? 4 : 3;  // operands 0-2: dst, map, bar; 3: the cluster mask
    for (int i = 0; i < r; ++i) os << (i ? ", " : "") << "%" << i + first;
    os << "}], [%2]" << (mc ? ", %3" : "") << ";\\n\"\n               ::\"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(map), \"r\"((unsigned)__cvta_generic_to_shared(bar))"
       << (mc ? ", \"h\"((unsigned short)3)" : "");
    for (int i = 0; i < r; ++i) os << ", \"r\"(c" << i << ")";
    os << " : \"memory\");\n}\n";
  };
  for (int r : ranks) {
    load_helper(r, false);
    if (t.cfg.schedule == WsSchedule::multicast) load_helper(r, true);
  }
  if (t.cfg.store == OutputStore::tma) emit_tma_store_helpers(t);
  if (t.cfg.schedule == WsSchedule::multicast)
    os << "static __device__ __forceinline__ void tessel_mbar_arrive_peer(unsigned long long* bar, unsigned rank) {  /* the barrier at the same offset in block `rank` */\n"
          "  unsigned a;\n  asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\\n\" : \"=r\"(a) : \"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(rank));\n"
          "  asm volatile(\"mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\\n\" ::\"r\"(a) : \"memory\");\n}\n";
}

namespace {

// The kernel's shared memory (1024-byte aligned operand ring, the epilogue's staging), the ring's
// full / empty barriers (and ping-pong's order barriers) initialised, the cluster rank with
// multicast, and PDL's wait and launch.
void ws_prologue(const TcKernel& t, const PersistentSplit& ps) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int S_ = cfg.stages;
  const int wpg = int(t.m.warps_per_warpgroup);
  const int consumers = cfg.schedule == WsSchedule::pingpong ? 2 : cfg.bm / cfg.wm;  // consumer warpgroups
  const int readers = cfg.schedule == WsSchedule::pingpong ? 1 : consumers;          // warpgroups reading each slot
  os << "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n";
  os << "  unsigned char* smem_ = smem_raw_ + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw_) & 1023u)) & 1023u);\n";
  os << "  " << t.ft << "* As_ = (" << t.ft << "*)smem_;\n";
  os << "  " << t.ft << "* Bs_ = (" << t.ft << "*)(smem_ + " << S_ * t.a_stage * t.eb << ");\n";
  os << "  __shared__ __align__(8) unsigned long long full_[" << S_ << "], empty_[" << S_ << "];\n";
  if (ws_epilogue_bytes(t.c, cfg) > 0)
    os << "  float* Es_ = (float*)(smem_ + " << S_ * (t.a_stage + t.b_stage) * t.eb << ");  /* the epilogue's staging chunks */\n";
  os << "  (void)scratch;\n";
  if (ps.sk_tiles > 0) os << "  __shared__ int sk_last_;  /* stream-K: this block finishes the tile */\n";
  // ping-pong: order_[w] completes a phase when warpgroup w has issued a tile's MMAs; the other
  // warpgroup starts its next tile only then, so it never waits on a slot's barrier more than one
  // phase ahead (the parity test cannot tell phases two apart)
  if (cfg.schedule == WsSchedule::pingpong) os << "  __shared__ __align__(8) unsigned long long order_[2];\n";
  os << "  const int warp_ = threadIdx.x / " << t.m.warp_size << ", lane_ = threadIdx.x % " << t.m.warp_size << ";\n";
  os << "  if (threadIdx.x == 0) {\n    #pragma unroll\n    for (int s = 0; s < " << S_ << "; ++s) {\n"
     << "      tessel_mbar_init(full_ + s, 1);  /* the producer's arrival + the copies' bytes */\n"
     << "      tessel_mbar_init(empty_ + s, " << readers * wpg * (cfg.schedule == WsSchedule::multicast ? 2 : 1) << ");  /* one arrival per warp that reads the slot"
     << (cfg.schedule == WsSchedule::multicast ? ", in both blocks of the cluster" : "") << " */\n    }\n"
     << (cfg.schedule == WsSchedule::pingpong ? "    tessel_mbar_init(order_, " + S(wpg) + ");\n    tessel_mbar_init(order_ + 1, " + S(wpg) + ");\n" : std::string())
     << "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");  /* visible to the TMA unit */\n  }\n";
  if (cfg.schedule == WsSchedule::multicast) {  // both blocks' barriers exist before either block's copies or arrivals reach them
    os << "  unsigned crank_;\n  asm volatile(\"mov.u32 %0, %%cluster_ctarank;\\n\" : \"=r\"(crank_));\n";
    os << "  tessel_cluster_sync();\n";
  } else {
    os << "  __syncthreads();\n";
  }
  if (t.launch.pdl) {
    os << "  asm volatile(\"griddepcontrol.wait;\\n\" ::: \"memory\");  /* PDL: the previous kernel has finished and flushed */\n";
    os << "  asm volatile(\"griddepcontrol.launch_dependents;\\n\" ::: \"memory\");  /* PDL: the next kernel may launch */\n";
  }
}

// The producer warpgroup: one thread walks the block's work and issues each K tile's TMA copies
// into the next free slot of the ring.
void ws_producer(const TcKernel& t, const PersistentSplit& ps) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int S_ = cfg.stages;
  const int wpg = int(t.m.warps_per_warpgroup);
  os << "  if (warp_ < " << wpg << ") {\n";
  os << "    asm volatile(\"setmaxnreg.dec.sync.aligned.u32 " << kProducerRegisters << ";\\n\");\n";
  os << "    if (threadIdx.x == 0) {\n";
  os << "      asm volatile(\"prefetch.tensormap [%0];\\n\" ::\"l\"(&tmap_a_) : \"memory\");\n";
  os << "      asm volatile(\"prefetch.tensormap [%0];\\n\" ::\"l\"(&tmap_b_) : \"memory\");\n";
  os << "      int it_ = 0;\n";
  emit_persistent_work(t, ps, "      ", [&](const std::string& pad, bool) {
    os << pad << "for (int kt = 0; kt < ktn_; ++kt, ++it_) {\n";
    os << pad << "  const int s_ = it_ % " << S_ << ";\n";
    os << pad << "  tessel_mbar_wait(empty_ + s_, ((it_ / " << S_ << ") & 1) ^ 1);  /* the consumers released the slot (a fresh slot passes) */\n";
    os << pad << "  tessel_mbar_expect(full_ + s_, " << t.ta.stage_bytes + t.tb.stage_bytes << "u);\n";
    tma_copies(t, t.ta, t.pa.k_inner, "As_", S(t.a_stage), "m0_", "tmap_a_", pad + "  ");
    tma_copies(t, t.tb, t.pb.k_inner, "Bs_", S(t.b_stage), "n0_", "tmap_b_", pad + "  ");
    os << pad << "}\n";
    os << pad << "(void)sk_; (void)head_;\n";
  });
  os << "    }\n";
}

// The consumer warpgroups: each waits for a slot's bytes, runs its wgmma on it, releases it, and
// after the tile's K tiles runs the stream-K fix-up (where cut) and the register epilogue; with
// ping-pong the two take alternate tiles.
void ws_consumers(const TcKernel& t, const PersistentSplit& ps) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int S_ = cfg.stages;
  const int wpg = int(t.m.warps_per_warpgroup);
  os << "  } else {\n";
  os << "    asm volatile(\"setmaxnreg.inc.sync.aligned.u32 " << kConsumerRegisters << ";\\n\");\n";
  if (cfg.schedule == WsSchedule::pingpong)  // warpgroup cw_ takes the block's tiles cw_, cw_ + 2, ...: whole tiles, rows from 0
    os << "    const int cw_ = __shfl_sync(0xffffffffu, warp_ / " << wpg << ", 0) - 1, wg_ = 0;  /* warp-uniform (a uniform register) */\n";
  else
    os << "    const int wg_ = warp_ / " << wpg << " - 1;\n";
  os << "    const int wm_ = wg_ * " << cfg.wm << " + (warp_ % " << wpg << ") * " << t.m.wgmma->m / wpg << ", wn_ = 0;\n";
  os << "    float acc_[" << t.fmx << "][" << t.fn8 << "][4];\n";
  // a consumer warp's release of a slot: its own block's empty barrier, and with multicast the peer's
  auto release = [&](const std::string& bar) {
    return cfg.schedule == WsSchedule::multicast ? "{ tessel_mbar_arrive(" + bar + "); tessel_mbar_arrive_peer(" + bar + ", crank_ ^ 1u); }" : "tessel_mbar_arrive(" + bar + ");";
  };
  auto consumer_body = [&](const std::string& pad, bool sk_part) {
    if (cfg.schedule == WsSchedule::pingpong)  // the other warpgroup has issued the MMAs of the block's previous tile
      os << pad << "if (lt_ > 0) tessel_mbar_wait(order_ + (1 - cw_), ((lt_ - 1) >> 1) & 1);\n";
    zero_accumulators(t, t.fmx, pad);
    os << pad << "for (int kt = 0; kt < ktn_; ++kt, ++it_) {\n";
    os << pad << "  const int s_ = it_ % " << S_ << ";\n";
    os << pad << "  tessel_mbar_wait(full_ + s_, (it_ / " << S_ << ") & 1);  /* the slot's bytes have landed */\n";
    os << pad << "  const " << t.ft << "* as_ = As_ + s_ * " << t.a_stage << ";\n";
    os << pad << "  const " << t.ft << "* bs_ = Bs_ + s_ * " << t.b_stage << ";\n";
    wgmma_k_tile(t, pad + "  ");
    os << pad << "  tessel_wg_wait<1>();  /* the previous K tile's MMAs are done: release its slot */\n";
    os << pad << "  if (kt > 0 && lane_ == 0) " << release("empty_ + (it_ + " + S(S_ - 1) + ") % " + S(S_)) << "\n";
    os << pad << "}\n";
    if (cfg.schedule == WsSchedule::pingpong) os << pad << "__syncwarp();\n" << pad << "if (lane_ == 0) tessel_mbar_arrive(order_ + cw_);  /* this tile's MMAs are issued */\n";
    os << pad << "tessel_wg_wait<0>();\n";
    os << pad << "if (lane_ == 0) " << release("empty_ + (it_ + " + S(S_ - 1) + ") % " + S(S_)) << "\n";
    fence_accumulators(t, pad);
    os << pad << "bool store_ = true;\n";
    if (sk_part) stream_k_fixup(t, ps, pad);
    else os << pad << "(void)sk_; (void)head_;\n";
    os << pad << "if (store_) {\n";
    register_epilogue(t, pad + "  ");
    os << pad << "}\n";
  };
  if (cfg.schedule == WsSchedule::pingpong) {  // each warpgroup walks its own tiles (no branch around the MMAs: ptxas would serialise them)
    emit_pingpong_tiles(t, ps, "    ", [&](const std::string& pad) { consumer_body(pad, false); });
  } else {
    os << "    int it_ = 0;\n";
    emit_persistent_work(t, ps, "    ", consumer_body);
  }
  if (cfg.store == OutputStore::tma)  // the buffers stay valid until the TMA unit has read them (and the stores are issued)
    os << "    if (threadIdx.x % " << t.m.threads_per_warpgroup() << " == 0) asm volatile(\"cp.async.bulk.wait_group 0;\\n\" ::: \"memory\");\n";
  os << "  }\n";
}

// The --explain lines of the kernel: its warpgroups, ring, cluster, scheduler and TMA copies.
void ws_explain(const TcKernel& t, const PersistentSplit& ps) {
  const auto& cfg = t.cfg;
  const int S_ = cfg.stages;
  const int consumers = cfg.schedule == WsSchedule::pingpong ? 2 : cfg.bm / cfg.wm;  // consumer warpgroups
  t.explain.push_back("  persistent warp-specialised wgmma kernel (sm_90a): producer warpgroup (one thread issues TMA tensor-map copies, " +
                      S(kProducerRegisters) + " registers after setmaxnreg), " + S(consumers) + " consumer warpgroup(s) of " + S(cfg.wm) + "x" +
                      S(cfg.bn) + " (" + S(t.fmx) + " x wgmma.m64n" + S(cfg.bn) + "k" + S(wgmma_k_depth(t.m, t.c.in_type)) + " " +
                      ptx_operand_type(t.c.in_type) + " per " + S(wgmma_k_depth(t.m, t.c.in_type)) + "-deep K step, " + S(kConsumerRegisters) +
                      " registers); " + S(S_) + "-stage ring of " + S((t.ta.stage_bytes + t.tb.stage_bytes) / 1024) +
                      " KiB slots with full/empty mbarriers, 128-byte swizzle, no block-wide barrier in the main loop; cluster 1x1x1");
  if (cfg.schedule == WsSchedule::multicast)
    t.explain.push_back("  TMA multicast: 2-block clusters along M share each B tile; each block fetches half of its boxes into both blocks' "
                        "shared memory; a slot is refilled once the consumers of both blocks released it; cluster 2x1x1");
  if (cfg.schedule == WsSchedule::pingpong)
    t.explain.push_back("  ping-pong: the 2 consumer warpgroups take alternate tiles of the block (each a whole " + S(cfg.bm) + "x" + S(cfg.bn) +
                        " tile), so one's epilogue overlaps the other's main loop");
  t.explain.push_back("  tile scheduler: persistent grid of " + S(ps.blocks) + " blocks (at most one per SM) over " + S(output_tiles(t.c, cfg)) +
                      " output tiles in grouped order (" + S(kRasterGroupRows) + " block rows share B in L2); " + S(ps.dp_tiles) +
                      " tiles taken whole, block b the tiles b, b + " + S(ps.blocks) + ", ...; the next tile's copies overlap this tile's epilogue");
  if (ps.sk_tiles > 0)
    t.explain.push_back("  stream-K: the last " + S(ps.sk_tiles) + " tiles' " + S(ps.sk_iterations()) + " K iterations cut into " + S(ps.blocks) +
                        " equal ranges, one per block; a tile cut between blocks is summed from their partial tiles in global scratch by the "
                        "last to finish (per-tile counter), in block order (deterministic)");
  else if (cfg.schedule == WsSchedule::stream_k)
    t.explain.push_back("  stream-K: not needed, the tiles are whole waves");
  auto copies = [&](const std::string& name, const TmaPlan& p) {
    if (p.im2col)
      return name + " 1 im2col gather of " + S(p.map.pixels) + " pixels x " + S(p.map.channels) + " channels (one filter tap; padding zero-filled)";
    if (p.blocked)
      return name + " 1 box {" + S(p.map.box[0]) + ", " + S(p.map.box[1]) + ", " + S(p.map.box[2]) + ", " + S(p.map.box[3]) +
             ", 1} over {ci, ni, w, cb, nb * H + h} (" + S(p.map.box[2]) + " pixels of one output row x " + S(p.map.box[1]) + " images x " +
             S(p.map.box[3]) + " channel blocks of one filter tap, 32-byte swizzle; padding and pixels past the row zero-filled; M tiles cut per "
             "output row of " + S(p.m_segment) + " rows)";
    if (p.split_outer)
      return name + " 1 box {" + S(p.map.box[0]) + ", " + S(p.map.box[1]) + ", " + S(p.map.box[2]) + ", " + S(p.map.box[3]) +
             "} over {o_lo, k_lo, o_hi, k_hi} (blocked outer dim, 32-byte swizzle)";
    return name + " " + S(p.boxes) + " box(es) {" + S(p.map.box[0]) + ", " + S(p.map.box[1]) + "}";
  };
  t.explain.push_back("  TMA: " + copies(t.c.a.tensor, t.ta) + " and " + copies(t.c.b.tensor, t.tb) +
                      " per stage; tails past M, N, K zero-filled by the TMA unit");
}

}  // namespace

void emit_wgmma_ws_body(const TcKernel& t) {
  const PersistentSplit ps = persistent_split(t.c, t.cfg, t.m);
  ws_prologue(t, ps);
  ws_producer(t, ps);
  ws_consumers(t, ps);
  if (t.cfg.schedule == WsSchedule::multicast)  // no block leaves while its peer may still multicast into it or arrive on its barriers
    t.os << "  tessel_cluster_sync();\n";
  t.os << "}\n";
  ws_explain(t, ps);
}

}  // namespace tessel::emit_cuda
