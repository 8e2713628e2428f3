#include "compiler/emit_cuda/tc_kernel.h"

#include <algorithm>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/mainloop.h"
#include "compiler/emit_cuda/tile_policy.h"
#include "compiler/emit_cuda/tile_scheduler.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

constexpr int64_t kSharedAlignBytes = 128;  // extern __shared__ __align__(128): the dynamic size rounds to it

// 16-byte cp.async (or 128-bit / scalar loads before sm_80) of one operand stage, spread over the block
void loader(const TcKernel& t, const std::string& name, const OperandPlan& p, const std::string& smem_name) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const std::string pad = "  ";
  const int chunks = p.tile_outer * p.bk / p.vec;
  const int per_thread = (chunks + t.threads - 1) / t.threads;
  const std::string st = storage_type(p.op->dtype);
  const std::string origin = name == "a" ? "m0_" : "n0_";
  os << pad << "/* " << name << " = " << p.op->tensor << (p.op->producer ? " through " + p.op->producer->name + "'s padding (im2col view)" : "")
     << ": " << (p.vec > 1 ? S(p.vec * elem_bytes(p.op->dtype) * 8) + "-bit loads along " + std::string(p.k_inner ? "K" : "the tile's outer dim") : "scalar loads")
     << ", shared tile [" << (p.k_inner ? p.tile_outer : p.bk) << "][" << p.ld() << "] */\n";
  // per-chunk outer coordinates, fixed for the whole K loop
  // 32-bit per-chunk offsets where the tensor has under 2^30 elements (fewer registers: the wgmma
  // tiles keep 128 accumulators per thread)
  int64_t elems = 1;
  for (int64_t d : p.op->shape) elems *= d;
  const std::string off_type = elems < (int64_t(1) << 30) ? "int" : "long long";
  os << pad << "int " << name << "_o[" << per_thread << "]; bool " << name << "_ok[" << per_thread << "]; " << off_type << " " << name << "_off["
     << per_thread << "];\n";
  for (const auto& d : *p.outer) os << pad << "int " << name << "_v_" << d.var << "[" << per_thread << "];\n";
  os << pad << "#pragma unroll\n" << pad << "for (int i = 0; i < " << per_thread << "; ++i) {\n";
  os << pad << "  const int c_ = threadIdx.x + i * " << t.threads << ";\n";
  if (p.k_inner)
    os << pad << "  const int o_ = c_ / " << p.bk / p.vec << ";\n";
  else
    os << pad << "  const int o_ = (c_ % " << p.tile_outer / p.vec << ") * " << p.vec << ";\n";
  os << pad << "  " << name << "_o[i] = o_;\n";
  os << pad << "  " << name << "_ok[i] = c_ < " << chunks << " && " << origin << " + o_ < " << p.outer_size << ";\n";
  os << pad << "  const int g_ = " << name << "_ok[i] ? " << origin << " + o_ : 0;\n";
  for (const auto& d : *p.outer) os << pad << "  int ov_" << d.var << ";\n";
  t.decompose(pad + "  ", "g_", *p.outer, "ov_");
  std::string off = "0LL";
  for (const auto& d : *p.outer) {
    os << pad << "  " << name << "_v_" << d.var << "[i] = ov_" << d.var << ";\n";
    auto it = p.op->coeff.find(d.var);
    if (it != p.op->coeff.end()) off += " + " + S(it->second) + "LL * ov_" + d.var;
  }
  for (const auto& d : t.c.batch) {
    auto it = p.op->coeff.find(d.var);
    if (it != p.op->coeff.end()) off += " + " + S(it->second) + "LL * bv_" + d.var;
  }
  os << pad << "  " << name << "_off[i] = (" << off_type << ")(" << S(p.op->base) << "LL + " << off << ");\n";
  os << pad << "}\n";
  // the stage loader
  os << pad << "auto load_" << name << " = [&](int stage_, int kt_) {\n";
  os << pad << "  " << st << "* dst_ = " << smem_name << " + stage_ * " << p.stage_elems() << ";\n";
  os << pad << "  #pragma unroll\n" << pad << "  for (int i = 0; i < " << per_thread << "; ++i) {\n";
  os << pad << "    const int c_ = threadIdx.x + i * " << t.threads << ";\n";
  // guards that always hold are left out (no predicate selects or divergent exits per copy)
  const bool chunks_exact = chunks % t.threads == 0;
  const bool k_exact = t.c.size_k() % p.bk == 0;
  const bool outer_exact = chunks_exact && p.outer_size % p.tile_outer == 0;
  if (!chunks_exact) os << pad << "    if (c_ >= " << chunks << ") break;\n";
  else os << pad << "    (void)c_;\n";
  if (p.k_inner)
    os << pad << "    const int kl_ = (" << (t.threads % (p.bk / p.vec) == 0 ? "threadIdx.x" : "c_") << " % " << p.bk / p.vec << ") * " << p.vec
       << ";\n";  // the same for every i when the block is a multiple of the chunks per row
  else
    os << pad << "    const int kl_ = c_ / " << p.tile_outer / p.vec << ";\n";
  os << pad << "    const int kk_ = kt_ * " << p.bk << " + kl_;\n";
  for (const auto& d : *p.kdims) os << pad << "    int kv_" << d.var << ";\n";
  t.decompose(pad + "    ", k_exact ? std::string("kk_") : "kk_ < " + S(t.c.size_k()) + " ? kk_ : 0", *p.kdims, "kv_");
  std::string addr = name + "_off[i]";
  for (const auto& d : *p.kdims) {
    auto it = p.op->coeff.find(d.var);
    if (it != p.op->coeff.end()) addr += " + " + S(it->second) + "LL * kv_" + d.var;
  }
  std::string guard = "true";
  if (!outer_exact) guard += " && " + name + "_ok[i]";
  if (!k_exact) guard += " && kk_ < " + S(t.c.size_k());
  auto cvar = [&](const std::string& v) -> std::string {
    for (const auto& d : *p.kdims)
      if (d.var == v) return "kv_" + v;
    for (const auto& d : t.c.batch)
      if (d.var == v) return "bv_" + v;
    return name + "_v_" + v + "[i]";
  };
  for (int d : p.bounded) {
    const std::string ix = t.affine(p.op->indices[d], cvar);
    guard += " && " + ix + " >= 0 && " + ix + " < " + S(p.op->shape[d]);
  }
  if (p.op->guard) {
    ValueContext ctx;
    ctx.sizes = &t.k.sizes;
    ctx.affine = [&](const ir::AffineExpr& a) {
      return t.affine(substitute(a, p.op->producer_binding), [&](const std::string& v) {
        for (const auto& d : *p.kdims)
          if (d.var == v) return "kv_" + v;
        for (const auto& d : t.c.batch)
          if (d.var == v) return "bv_" + v;
        return name + "_v_" + v + "[i]";
      });
    };
    ctx.access = [](const ir::Expr& e) -> std::string { throw UserError("CUDA emitter: a padding guard reads tensor " + e.name); };
    guard += " && " + value_expr(*p.op->guard, ctx);
  }
  std::string dst = p.k_inner ? name + "_o[i] * " + S(p.ld()) + " + kl_" : "kl_ * " + S(p.ld()) + " + " + name + "_o[i]";
  const int row = kSwizzleRowBytes / elem_bytes(p.op->dtype);  // swizzled row: 8 chunks of one vector access
  if (p.swz && p.k_inner)
    dst = name + "_o[i] * " + S(row) + " + ((((kl_ >> 3) ^ " + name + "_o[i]) & 7) << 3)";
  else if (p.swz)
    dst = "(" + name + "_o[i] >> 6) * " + S(row * p.bk) + " + kl_ * " + S(row) + " + (((((" + name + "_o[i] >> 3) ^ kl_) & 7)) << 3)";
  os << pad << "    const bool ok_ = " << guard << ";\n";
  os << pad << "    const " << st << "* src_ = t_" << p.op->tensor << " + (ok_ ? " << addr << " : 0LL);\n";
  if (p.vec > 1) {
    if (t.async)
      os << pad << "    tessel_cp_async16" << (cfg.keep_operands ? "_el" : "") << "(dst_ + " << dst << ", src_, ok_"
         << (cfg.keep_operands ? ", l2pol_" : "") << ");\n";
    else
      os << pad << "    *(uint4*)(dst_ + " << dst << ") = ok_ ? *(const uint4*)src_ : make_uint4(0u, 0u, 0u, 0u);\n";
  } else {
    os << pad << "    dst_[" << dst << "] = ok_ ? *src_ : " << store_value(p.op->dtype, "0.0f") << ";\n";
  }
  os << pad << "  }\n" << pad << "};\n";
}

}  // namespace

TcKernel::TcKernel(const kernel::Kernel& k_, const Contraction& c_, const TcConfig& cfg_, const isa::GpuMachine& m_,
                   const TcLaunchOptions& launch_, std::ostringstream& os_, std::vector<std::string>& explain_)
    : k(k_), c(c_), cfg(cfg_), m(m_), launch(launch_), os(os_), explain(explain_), anchor(k_.function->statements.at(c_.anchor)) {
  M = c.size_m(), N = c.size_n(), K = c.size_k();
  async = m.has(isa::GpuFeature::CpAsync);
  threads = cfg.warps() * int(m.warp_size);
  wg = cfg.wgmma();
  pa = plan_operand(c.a, c, k.sizes, c.m, c.k, cfg.bm, cfg.bk, M, m, wg);
  pb = plan_operand(c.b, c, k.sizes, c.n, c.k, cfg.bn, cfg.bk, N, m, wg);
  if (cfg.loader == OperandLoader::bulk) {
    ba = bulk_plan(pa, c, m), bb = bulk_plan(pb, c, m);
    if (ba.whole) pa.pad = 0;  // one copy per stage: the shared rows are the global ones
    if (bb.whole) pb.pad = 0;
  }
  if (cfg.tma_ws()) ta = tma_plan(pa, c, m), tb = tma_plan(pb, c, m, cfg.schedule == WsSchedule::multicast ? 2 : 1);
  i8 = c.in_type == DType::I8;
  ft = i8 ? "signed char" : storage_type(c.in_type);  // __half or __nv_bfloat16
  acct = i8 ? "int" : "float";
  // matrix_a is [m][k] row-major when its tile is K-inner; matrix_b is [k][n] row-major when N-inner
  la = pa.k_inner ? "wmma::row_major" : "wmma::col_major";
  lb = pb.k_inner ? "wmma::col_major" : "wmma::row_major";
  warps_m = cfg.bm / cfg.wm, warps_n = cfg.bn / cfg.wn, fm = cfg.wm / m.wmma.m, fn = cfg.wn / m.wmma.n;
  ldc = cfg.bn + kAccumulatorRowPad;
  eb = elem_bytes(c.in_type);
  a_stage = pa.stage_elems(), b_stage = pb.stage_elems();
  const int64_t pipe_bytes = cfg.stages * (a_stage + b_stage) * eb;
  direct = direct_store(c, cfg);
  const int64_t epi_bytes = direct || cfg.tma_ws() ? 0 : int64_t(cfg.k_split) * cfg.bm * ldc * 4;  // tma_ws: epilogue from registers
  smem = (std::max(pipe_bytes, epi_bytes) + kSharedAlignBytes - 1) / kSharedAlignBytes * kSharedAlignBytes + (wg ? kSwizzleAlignBytes : 0);  // wgmma: stages on swizzle boundaries
  if (cfg.tma_ws()) smem += ws_epilogue_bytes(c, cfg);  // the epilogue's staging chunks, after the stages
  tiles_m = m_tiles(c, cfg), tiles_n = (N + cfg.bn - 1) / cfg.bn;
  name = "tessel_wmma_" + k.name;
  mma = cfg.mma != MmaKind::wmma;  // wgmma accumulators have the mma.sync m16n8 layout per warp
  fn8 = m.mma_sync ? cfg.wn / m.mma_sync->n : 0;  // m16n8 accumulator tiles along N (mma.sync and wgmma layout)
  rstep = wg ? m.wgmma->m : m.wmma.m;
  fmx = wg ? cfg.wm / m.wgmma->m : fm;
}

std::string TcKernel::affine(const ir::AffineExpr& a, const std::function<std::string(const std::string&)>& var) const {
  int64_t cst = a.constant;
  for (const auto& [p, q] : a.param_coeffs) cst += q * k.sizes.at(p);
  std::string s = "(" + S(cst);
  for (const auto& [v, q] : a.index_coeffs) s += " + " + S(q) + " * (" + var(v) + ")";
  return s + ")";
}

void TcKernel::decompose(const std::string& pad, const std::string& lin, const std::vector<ContractionDim>& dims, const std::string& prefix,
                         const std::string& suffix) const {
  if (dims.empty()) return;
  os << pad << "{ int r_ = " << lin << ";\n";
  for (int d = int(dims.size()) - 1; d > 0; --d)
    os << pad << "  " << prefix << dims[d].var << suffix << " = r_ % " << dims[d].extent << "; r_ /= " << dims[d].extent << ";\n";
  os << pad << "  " << prefix << dims[0].var << suffix << " = r_; }\n";
}

void emit_device_helpers(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  if (cfg.schedule == WsSchedule::multicast)  // the persistent kernel's cluster barrier (set-up and exit); cluster split-K has its own helpers below
    os << "static __device__ __forceinline__ void tessel_cluster_sync() {\n"
          "  asm volatile(\"barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;\\n\" ::: \"memory\");\n}\n";
  if (cfg.reduce == SplitKReduce::cluster) {
    os << "static __device__ __forceinline__ unsigned tessel_cluster_addr(const void* p, unsigned rank) {\n"
          "  unsigned r;\n"
          "  asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\\n\" : \"=r\"(r) : \"r\"((unsigned)__cvta_generic_to_shared(p)), \"r\"(rank));\n"
          "  return r;\n}\n"
          // no memory clobber: the loads between the two cluster barriers may be issued together
          "static __device__ __forceinline__ float4 tessel_cluster_ld4(const float* p, unsigned rank) {\n"
          "  float4 v;\n  asm volatile(\"ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\\n\" : \"=f\"(v.x), \"=f\"(v.y), \"=f\"(v.z), \"=f\"(v.w) : \"r\"(tessel_cluster_addr(p, rank)));\n  return v;\n}\n"
          "static __device__ __forceinline__ int4 tessel_cluster_ld4(const int* p, unsigned rank) {\n"
          "  int4 v;\n  asm volatile(\"ld.shared::cluster.v4.s32 {%0, %1, %2, %3}, [%4];\\n\" : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"r\"(tessel_cluster_addr(p, rank)));\n  return v;\n}\n"
          "static __device__ __forceinline__ void tessel_cluster_sync() {\n"
          "  asm volatile(\"barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;\\n\" ::: \"memory\");\n}\n";
  }
  if (cfg.loader == OperandLoader::bulk)
    os << "static __device__ __forceinline__ void tessel_bulk_g2s(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {\n"
          "  asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\\n\"\n"
          "               ::\"r\"((unsigned)__cvta_generic_to_shared(smem)), \"l\"(gmem), \"r\"(bytes), \"r\"((unsigned)__cvta_generic_to_shared(bar)) : \"memory\");\n}\n"
          "static __device__ __forceinline__ void tessel_mbar_expect(unsigned long long* bar, unsigned bytes) {\n"
          "  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(bytes) : \"memory\");\n}\n"
          "static __device__ __forceinline__ void tessel_mbar_wait(unsigned long long* bar, unsigned parity) {\n"
          "  asm volatile(\"{\\n.reg .pred p;\\nTESSEL_WAIT_%=:\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n@!p bra TESSEL_WAIT_%=;\\n}\\n\"\n"
          "               ::\"r\"((unsigned)__cvta_generic_to_shared(bar)), \"r\"(parity) : \"memory\");\n}\n";
  if (t.wg) emit_wgmma_helpers(t);
}

void emit_preamble(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  os << "  using namespace nvcuda;\n";
  if (t.wg) {  // the swizzle pattern repeats every 1024 bytes: stages start on 1024-byte boundaries
    os << "  extern __shared__ __align__(1024) unsigned char smem_raw_[];\n";
    os << "  unsigned char* smem_ = smem_raw_ + ((1024u - ((unsigned)__cvta_generic_to_shared(smem_raw_) & 1023u)) & 1023u);\n";
  } else {
    os << "  extern __shared__ __align__(128) unsigned char smem_[];\n";
  }
  os << "  " << t.ft << "* As_ = (" << t.ft << "*)smem_;\n";
  os << "  " << t.ft << "* Bs_ = (" << t.ft << "*)(smem_ + " << cfg.stages * t.a_stage * t.eb << ");\n";
  os << "  (void)scratch;\n";
  if (cfg.loader == OperandLoader::bulk) {  // one transaction barrier per stage; phase u of stage s completes tile u * stages + s
    os << "  __shared__ __align__(8) unsigned long long tessel_bar_[" << cfg.stages << "];\n";
    os << "  if (threadIdx.x == 0) {\n    #pragma unroll\n    for (int s = 0; s < " << cfg.stages
       << "; ++s) asm volatile(\"mbarrier.init.shared::cta.b64 [%0], 1;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(tessel_bar_ + s)));\n";
    os << "    asm volatile(\"fence.mbarrier_init.release.cluster;\\n\" ::: \"memory\");  /* visible to the copy engine */\n  }\n";
    os << "  __syncthreads();\n";
  }
  if (t.wg && cfg.keep_operands)
    os << "  unsigned long long l2pol_;\n  asm volatile(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\\n\" : \"=l\"(l2pol_));\n";
  emit_grid_tile(t);  // grouped rasterisation (tile_scheduler.h)
  // unified thread index: every lane of a warp works on the same fragments
  os << "  const int warp_ = threadIdx.x / " << t.m.warp_size << ";\n";
  if (t.wg) {  // warpgroup g: rows g*wm.., warp w of it: rows w*16.. of each m64 tile (accumulator layout)
    os << "  const int ks_ = 0, wg_ = warp_ / " << t.m.warps_per_warpgroup << ";\n";
    os << "  const int wm_ = wg_ * " << cfg.wm << " + (warp_ % " << t.m.warps_per_warpgroup << ") * " << t.m.wgmma->m / int(t.m.warps_per_warpgroup) << ", wn_ = 0;\n";
  } else {
    os << "  const int ks_ = warp_ / " << t.warps_m * t.warps_n << ", wi_ = warp_ % " << t.warps_m * t.warps_n << ";\n";
    os << "  const int wm_ = (wi_ / " << t.warps_n << ") * " << cfg.wm << ", wn_ = (wi_ % " << t.warps_n << ") * " << cfg.wn << ";\n";
  }
}

void emit_operand_loaders(const TcKernel& t) {
  auto& os = t.os;
  const auto& cfg = t.cfg;
  const int64_t bulk_bytes = (t.ba.ok ? int64_t(t.ba.rows) * t.ba.row_elems * t.eb : 0) + (t.bb.ok ? int64_t(t.bb.rows) * t.bb.row_elems * t.eb : 0);
  // the bulk copies of one stage: warp 0 announces the stage's bytes on its barrier, then its lanes
  // issue one copy per row (or one for a whole stage)
  auto bulk_loader = [&](const std::string& name, const OperandPlan& p, const BulkPlan& b, const std::string& smem_name, bool first) {
    const std::string origin = name == "a" ? "m0_" : "n0_";
    std::string base = S(p.op->base) + "LL + " + S(p.op->coeff.at(b.outer_var)) + "LL * " + origin;
    for (const auto& d : t.c.batch)
      if (p.op->coeff.count(d.var)) base += " + " + S(p.op->coeff.at(d.var)) + "LL * bv_" + d.var;
    const int64_t row_bytes = int64_t(b.row_elems) * t.eb;
    os << "  /* " << name << " = " << p.op->tensor << ": bulk copies (cp.async.bulk), "
       << (b.whole ? "one copy of " + S(b.rows * row_bytes) + " B per stage into unpadded rows"
                   : S(b.rows) + " rows of " + S(row_bytes) + " B per stage") << ", shared tile [" << (p.k_inner ? p.tile_outer : p.bk) << "]["
       << p.ld() << "] */\n";
    os << "  auto load_" << name << " = [&](int stage_, int kt_) {\n";
    os << "    if (warp_ != 0) return;\n";
    if (first) os << "    if (threadIdx.x == 0) tessel_mbar_expect(tessel_bar_ + stage_, " << bulk_bytes << "u);\n    __syncwarp();\n";
    os << "    " << storage_type(p.op->dtype) << "* dst_ = " << smem_name << " + stage_ * " << p.stage_elems() << ";\n";
    os << "    const " << storage_type(p.op->dtype) << "* src_ = t_" << p.op->tensor << " + (" << base << " + " << b.k_stride << "LL * (kt_ * "
       << p.bk << "));\n";
    if (b.whole)
      os << "    if (threadIdx.x == 0) tessel_bulk_g2s(dst_, src_, " << b.rows * row_bytes << "u, tessel_bar_ + stage_);\n";
    else
      os << "    for (int r_ = threadIdx.x; r_ < " << b.rows << "; r_ += " << t.m.warp_size << ") tessel_bulk_g2s(dst_ + r_ * " << p.ld() << ", src_ + r_ * "
         << b.row_stride << "LL, " << row_bytes << "u, tessel_bar_ + stage_);\n";
    os << "  };\n";
  };
  if (t.ba.ok) bulk_loader("a", t.pa, t.ba, "As_", true);
  else loader(t, "a", t.pa, "As_");
  if (t.bb.ok) bulk_loader("b", t.pb, t.bb, "Bs_", !t.ba.ok);
  else loader(t, "b", t.pb, "Bs_");
  if (cfg.loader == OperandLoader::bulk) {
    std::string how;
    for (const auto& [nm, b] : {std::pair<std::string, const BulkPlan*>{t.c.a.tensor, &t.ba}, {t.c.b.tensor, &t.bb}})
      how += (how.empty() ? "" : "; ") + nm + (b->ok ? b->whole ? ": one bulk copy per stage" : ": " + S(b->rows) + " bulk row copies per stage"
                                                     : ": cp.async (" + b->why + ")");
    t.explain.push_back("  bulk copy engine (sm_90): " + how + "; one transaction barrier (mbarrier) per stage");
  }
}

}  // namespace tessel::emit_cuda
