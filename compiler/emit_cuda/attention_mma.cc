#include "compiler/emit_cuda/attention_mma.h"

#include <algorithm>
#include <map>

#include "compiler/emit_cuda/attention_pieces.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

using attention::role_var;

// Policy (FA2's tiles): 64 keys a block up to head dim 128, 32 beyond (the S and O fragments of
// one warp stay near 128 registers); Q kept as fragments in registers up to head dim 128.
constexpr int kKeyBlock = 64, kKeyBlockWide = 32, kWideHead = 128;
constexpr int kRowsPerWarp = 16;      // one m16 tile
constexpr int kRowPadElements = 8;    // 16 bytes: ldmatrix's 8 row addresses in distinct bank groups
constexpr int kMaxHead = 256;
// Decode (at most 16 query rows): 4 warps of 16 keys each a block (2 of 16 past head dim 128),
// 3 K / V buffers (about 107 KB at head dim 128: two blocks an SM, two blocks in flight each).
constexpr int kDecodeWarps = 4, kDecodeStages = 3;

std::string N(int64_t v) { return std::to_string(v); }

std::string replace_all(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [key, value] : vars) {
    const std::string token = "@" + key + "@";
    for (size_t at = s.find(token); at != std::string::npos; at = s.find(token, at + value.size())) s.replace(at, token.size(), value);
  }
  TESSEL_CHECK(s.find('@') == std::string::npos, "emit_cuda attention_mma: a template token is left: " + s.substr(s.find('@'), 24));
  return s;
}

// Device helpers: cp.async, ldmatrix, the MMA of the operand type, f32 pairs packed to it.
const char* kHelpers = R"(static __device__ __forceinline__ unsigned tessel_att_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void tessel_att_cp16(unsigned dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
static __device__ __forceinline__ void tessel_att_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void tessel_att_wait_group() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
static __device__ __forceinline__ void tessel_att_ldsm4(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
static __device__ __forceinline__ void tessel_att_ldsm4t(unsigned* r, unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
static __device__ __forceinline__ void tessel_att_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.@AB@.@AB@.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ unsigned tessel_att_pack(float lo, float hi) {
  @PAIR@ v = @PAIR_MAKE@(lo, hi);
  return *(unsigned*)&v;
}
)";

// The kernel. Tokens: sizes and tiles, the operands' batch offsets and row strides, the pieces of
// attention_pieces.h, the causal limit and the end of a block's rows (store or partials).
const char* kKernel = R"(extern "C" __global__ void __launch_bounds__(@THREADS@) @NAME@(@PARAMS@) {
  constexpr int BQ = @BQ@, BK = @BK@, D = @D@, E = @E@, QS = D + @PAD@, VS = E + @PAD@, NT = @THREADS@;
@BKWDECL@  constexpr long long S = @S@LL, T = @T@LL;
  extern __shared__ __align__(16) unsigned char smem_[];
  @ET@* sQ = (@ET@*)smem_;
  @ET@* sK = sQ + BQ * QS;
  @ET@* sV = sK + @STAGES@ * BK * QS;
  long long bid_ = blockIdx.x;
  const int qb_ = @QB@;
  bid_ /= @NQ@LL;
  const int split_ = (int)(bid_ % @SPLITS@LL);
  const long long flat_ = bid_ / @SPLITS@LL;
  (void)split_; (void)scratch;
@BATCH@  const int i0 = qb_ * BQ;
  const @ET@* gQ = t_@QT@ + @QOFF@;
  const @ET@* gK = t_@KT@ + @KOFF@;
  const @ET@* gV = t_@VT@ + @VOFF@;
  int kb_end_ = (int)((T + BK - 1) / BK);
@CAUSAL@  const int kb_begin_ = (int)((long long)kb_end_ * split_ / @SPLITS@);
  kb_end_ = (int)((long long)kb_end_ * (split_ + 1) / @SPLITS@);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
@LOGIT@@STORE@
  for (int c = tid; c < BQ * (D / 8); c += NT) {
    const int r = c / (D / 8), ch = c % (D / 8);
    const bool ok = i0 + r < S;
    tessel_att_cp16(tessel_att_smem(sQ + r * QS + ch * 8), ok ? (const void*)(gQ + (long long)(i0 + r) * @QSI@LL + ch * 8) : (const void*)t_@QT@, ok);
  }
  auto load_kv = [&](int kb, int st) {
    const long long j0 = (long long)kb * BK;
    for (int c = tid; c < BK * (D / 8); c += NT) {
      const int r = c / (D / 8), ch = c % (D / 8);
      const bool ok = j0 + r < T;
      tessel_att_cp16(tessel_att_smem(sK + (st * BK + r) * QS + ch * 8), ok ? (const void*)(gK + (j0 + r) * @KSJ@LL + ch * 8) : (const void*)t_@KT@, ok);
    }
    for (int c = tid; c < BK * (E / 8); c += NT) {
      const int r = c / (E / 8), ch = c % (E / 8);
      const bool ok = j0 + r < T;
      tessel_att_cp16(tessel_att_smem(sV + (st * BK + r) * VS + ch * 8), ok ? (const void*)(gV + (j0 + r) * @VSJ@LL + ch * 8) : (const void*)t_@VT@, ok);
    }
  };
  #pragma unroll
  for (int n = 0; n < @STAGES@ - 1; ++n) {  /* the first stages - 1 key blocks in flight, a group each */
    if (kb_begin_ + n < kb_end_) load_kv(kb_begin_ + n, n);
    tessel_att_commit();
  }
  float o[E / 8][4];
  #pragma unroll
  for (int n = 0; n < E / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float mrow[2] = {-TESSEL_INF, -TESSEL_INF}, lrow[2] = {0.0f, 0.0f};
  const int wr = @WR@;
  const unsigned q_addr = tessel_att_smem(sQ + (wr + lane % 16) * QS + (lane / 16) * 8);
  const unsigned k_addr = tessel_att_smem(sK + ((lane % 8) + (lane / 16) * 8@KW0@) * QS + ((lane / 8) % 2) * 8);
  const unsigned v_addr = tessel_att_smem(sV + ((lane % 8) + ((lane / 8) % 2) * 8@KW0@) * VS + (lane / 16) * 8);
@QDECL@  for (int kb = kb_begin_; kb < kb_end_; ++kb) {
    /* block kb has landed (the newest stages - 2 groups may be in flight); every warp is done with
       block kb - 1, whose buffer the copies of block kb + stages - 1 refill */
    tessel_att_wait_group<@STAGES@ - 2>();
    __syncthreads();
@QFRAGS@    const int st = (kb - kb_begin_) % @STAGES@;
    if (kb + @STAGES@ - 1 < kb_end_) load_kv(kb + @STAGES@ - 1, (kb + @STAGES@ - 1 - kb_begin_) % @STAGES@);
    tessel_att_commit();
    float s[@KB@ / 8][4];
    #pragma unroll
    for (int n = 0; n < @KB@ / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
@QFRAG@      #pragma unroll
      for (int n2 = 0; n2 < @KB@ / 16; ++n2) {
        unsigned b[4];
        tessel_att_ldsm4(b, k_addr + ((st * BK + n2 * 16) * QS + kk * 16) * 2);
        tessel_att_mma(s[2 * n2], a, b[0], b[1]);
        tessel_att_mma(s[2 * n2 + 1], a, b[2], b[3]);
      }
    }
    const long long j0 = (long long)kb * BK@KW0@;
    if (i0 + BQ <= S && j0 + @KB@ <= T) {  /* a whole block: no row or key past the end */
      #pragma unroll
      for (int n = 0; n < @KB@ / 8; ++n)
        #pragma unroll
        for (int c = 0; c < 4; ++c) s[n][c] = tessel_logit(s[n][c], i0 + wr + g + (c / 2) * 8, j0 + n * 8 + 2 * t4 + (c % 2));
    } else {
      #pragma unroll
      for (int n = 0; n < @KB@ / 8; ++n)
        #pragma unroll
        for (int c = 0; c < 4; ++c) {
          const long long r_i_ = i0 + wr + g + (c / 2) * 8, r_j_ = j0 + n * 8 + 2 * t4 + (c % 2);
          s[n][c] = (r_i_ < S && r_j_ < T) ? tessel_logit(s[n][c], r_i_, r_j_) : -TESSEL_INF;
        }
    }
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -TESSEL_INF;
      #pragma unroll
      for (int n = 0; n < @KB@ / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(mrow[h], mx);
      const float mu = mn == -TESSEL_INF ? 0.0f : mn;  /* a row masked so far: no -inf - -inf */
      const float corr = __expf(mrow[h] - mu);
      mrow[h] = mn;
      lrow[h] *= corr;
      #pragma unroll
      for (int n = 0; n < E / 8; ++n) {
        o[n][2 * h] *= corr;
        o[n][2 * h + 1] *= corr;
      }
      #pragma unroll
      for (int n = 0; n < @KB@ / 8; ++n) {
        const float p0 = @PROB0@, p1 = @PROB1@;
        lrow[h] += p0 + p1;
        s[n][2 * h] = p0;
        s[n][2 * h + 1] = p1;
      }
    }
    #pragma unroll
    for (int k2 = 0; k2 < @KB@ / 16; ++k2) {
      unsigned pa[4] = {tessel_att_pack(s[2 * k2][0], s[2 * k2][1]), tessel_att_pack(s[2 * k2][2], s[2 * k2][3]),
                        tessel_att_pack(s[2 * k2 + 1][0], s[2 * k2 + 1][1]), tessel_att_pack(s[2 * k2 + 1][2], s[2 * k2 + 1][3])};
      #pragma unroll
      for (int e2 = 0; e2 < E / 16; ++e2) {
        unsigned b[4];
        tessel_att_ldsm4t(b, v_addr + ((st * BK + k2 * 16) * VS + e2 * 16) * 2);
        tessel_att_mma(o[2 * e2], pa, b[0], b[1]);
        tessel_att_mma(o[2 * e2 + 1], pa, b[2], b[3]);
      }
    }
  }
  tessel_att_wait_group<0>();  /* no copy left in flight (an empty key range issued Q's) */
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 1);
    lrow[h] += __shfl_xor_sync(0xffffffffu, lrow[h], 2);
  }
@TAIL@}
)";

// The end of a row: the output elements, or the partial state of this key split.
std::string finish(const kernel::Attention& a, const AttentionPlan& plan) {
  const std::string pad = "    ";
  if (plan.key_splits == 1)
    return pad + "#pragma unroll\n" + pad + "for (int n = 0; n < E / 8; ++n)\n" + pad + "  #pragma unroll\n" + pad +
           "  for (int c = 0; c < 2; ++c) tessel_store(o[n][2 * h + c], lrow[h], r_i_, n * 8 + 2 * t4 + c);\n";
  const int64_t E = a.value[0].extent, rows = a.size_batch() * a.query.extent, K = plan.key_splits;
  const std::string R = "(flat_ * S + r_i_)";
  std::string s = pad + "float* part_ = (float*)scratch;\n";
  s += pad + "if (t4 == 0) {\n" + pad + "  part_[(" + R + " * " + N(K) + " + split_) * 2] = mrow[h];\n" + pad + "  part_[(" + R + " * " +
       N(K) + " + split_) * 2 + 1] = lrow[h];\n" + pad + "}\n";
  s += pad + "float* acc_ = part_ + " + N(rows * K * 2) + "LL + (" + R + " * " + N(K) + " + split_) * " + N(E) + "LL;\n";
  s += pad + "#pragma unroll\n" + pad + "for (int n = 0; n < E / 8; ++n) {\n" + pad + "  acc_[n * 8 + 2 * t4] = o[n][2 * h];\n" + pad +
       "  acc_[n * 8 + 2 * t4 + 1] = o[n][2 * h + 1];\n" + pad + "}\n";
  return s;
}

// After the key loop, each warp's rows' (m, l, acc) are final. Query-parallel warps: each warp
// finishes its own 16 rows. Key-parallel warps (plan.key_warps): every warp holds a partial state of
// the same 16 rows over its own quarter of each key block; they meet in shared memory (the K / V
// buffers, free once every warp is past the loop) and one thread per valid row element merges them
// as the combine launch merges key splits (M = max m, weights exp(m - M)), then finishes it.
std::string tail(const kernel::Attention& a, const AttentionPlan& plan) {
  if (!plan.key_warps)
    return "  #pragma unroll\n  for (int h = 0; h < 2; ++h) {\n    const long long r_i_ = i0 + wr + g + h * 8;\n    if (r_i_ >= S) continue;\n" +
           finish(a, plan) + "  }\n";
  const int64_t E = a.value[0].extent, rows = a.size_batch() * a.query.extent, K = plan.key_splits;
  std::string s = R"(  __syncthreads();  /* every warp is past the loop: the K / V buffers take the warps' states */
  constexpr int W = NT / 32;
  float* red_ = (float*)sK;
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + h * 8;
    if (t4 == 0) {
      red_[warp * 16 + r] = mrow[h];
      red_[(W + warp) * 16 + r] = lrow[h];
    }
    #pragma unroll
    for (int n = 0; n < E / 8; ++n) {
      red_[2 * W * 16 + (warp * 16 + r) * E + n * 8 + 2 * t4] = o[n][2 * h];
      red_[2 * W * 16 + (warp * 16 + r) * E + n * 8 + 2 * t4 + 1] = o[n][2 * h + 1];
    }
  }
  __syncthreads();
  const int rows_ = (int)(S - i0 < BQ ? S - i0 : BQ);
  for (int c = tid; c < rows_ * E; c += NT) {
    const int r = c / E, e_ = c % E;
    float M_ = -TESSEL_INF;
    #pragma unroll
    for (int w = 0; w < W; ++w) M_ = fmaxf(M_, red_[w * 16 + r]);
    const float mu_ = M_ == -TESSEL_INF ? 0.0f : M_;
    float L_ = 0.0f, A_ = 0.0f;
    #pragma unroll
    for (int w = 0; w < W; ++w) {
      const float x_ = __expf(red_[w * 16 + r] - mu_);
      L_ += x_ * red_[(W + w) * 16 + r];
      A_ += x_ * red_[2 * W * 16 + (w * 16 + r) * E + e_];
    }
    const long long r_i_ = i0 + r;
)";
  if (K == 1) {
    s += "    tessel_store(A_, L_, r_i_, e_);\n";
  } else {
    const std::string at = "((flat_ * S + r_i_) * " + N(K) + " + split_)";
    s += "    float* part_ = (float*)scratch;\n";
    s += "    if (e_ == 0) {\n      part_[" + at + " * 2] = M_;\n      part_[" + at + " * 2 + 1] = L_;\n    }\n";
    s += "    part_[" + N(rows * K * 2) + "LL + " + at + " * " + N(E) + "LL + e_] = A_;\n";
  }
  return s + "  }\n";
}

}  // namespace

std::string attention_mma_obstacle(const kernel::Attention& a, const isa::GpuMachine& m) {
  if (!m.mma_sync || m.mma_sync->m != 16 || m.mma_sync->n != 8 || m.mma_sync->k != 16)
    return "no mma.sync m16n8k16 on " + m.arch + " (its WMMA form of the kernel is not written yet)";
  const DType t = a.q.dtype;
  if (!(t == DType::F16 || t == DType::BF16) || a.k.dtype != t || a.v.dtype != t) return "Q, K, V are not all f16 or all bf16";
  if (a.head.size() != 1 || a.value.size() != 1) return "the head or the value dimension is several indices";
  for (const auto* d : {&a.head[0], &a.value[0]})
    if (d->extent % 16 || d->extent > kMaxHead)
      return "head / value dimension " + d->var + " = " + N(d->extent) + " is not a multiple of 16 up to " + N(kMaxHead);
  const std::string dv = a.head[0].var, ev = a.value[0].var;
  if (a.q.stride(dv) != 1 || a.k.stride(dv) != 1 || a.v.stride(ev) != 1)
    return "the head / value index is not the unit-stride dimension of Q, K and V";
  for (const auto* o : {&a.q, &a.k, &a.v}) {
    if (o->base % 8) return o->tensor + "'s first element is not 16-byte aligned";
    for (const auto& [v, c] : o->coeff)
      if (c != 1 && c % 8) return "stride " + N(c) + " of " + o->tensor + " along " + v + " is not a multiple of 8 elements (16-byte copies)";
  }
  if (a.score_type != DType::F32) return "scores stored as " + std::string(dtype_name(a.score_type)) + " (the MMA sums in f32)";
  return "";
}

AttentionPlan attention_mma_plan(const kernel::Attention& a, const isa::GpuMachine& m) {
  AttentionPlan p;
  p.shape = AttentionShape::MmaFlash;
  const int64_t D = a.head[0].extent, E = a.value[0].extent;
  p.key_block = std::max(D, E) > kWideHead ? kKeyBlockWide : kKeyBlock;
  p.stages = 2;
  p.q_in_registers = D <= kWideHead;
  // 8 warps (128 rows) where the query blocks still fill the SMs, else 4
  const int64_t blocks128 = (a.query.extent + 127) / 128 * a.size_batch();
  p.query_block = a.query.extent >= 128 && blocks128 >= int64_t(m.sm_count) ? 128 : 64;
  p.warps = p.query_block / kRowsPerWarp;
  if (a.query.extent <= kRowsPerWarp) {
    // decode: one m16 tile of query rows; the warps share it and split each key block instead, so
    // a block streams kDecodeWarps times the keys per step (the bound is the K / V bytes)
    p.query_block = kRowsPerWarp;
    p.key_warps = true;
    p.warps = std::max(D, E) > kWideHead ? kDecodeWarps / 2 : kDecodeWarps;
    p.key_block = kRowsPerWarp * p.warps;
    p.stages = kDecodeStages;
    return p;
  }
  if (p.query_block == 128 && attention_mma_shared_bytes(a, p) > int64_t(m.shared_bytes_per_block_optin)) {
    p.query_block = 64;
    p.warps = 4;
  }
  return p;
}

int64_t attention_mma_shared_bytes(const kernel::Attention& a, const AttentionPlan& plan) {
  const int64_t D = a.head[0].extent + kRowPadElements, E = a.value[0].extent + kRowPadElements;
  int64_t kv = 2 * plan.stages * plan.key_block * (D + E);
  if (plan.key_warps)  // the warps' states meet in the K / V buffers: m, l and acc of 16 rows each
    kv = std::max<int64_t>(kv, 4 * int64_t(plan.warps) * kRowsPerWarp * (a.value[0].extent + 2));
  return 2 * plan.query_block * D + kv;
}

Launch emit_attention_mma(const kernel::Kernel& k, const kernel::Attention& a, const AttentionPlan& plan, const std::string& name,
                          std::ostringstream& os) {
  const int64_t D = a.head[0].extent, E = a.value[0].extent, S = a.query.extent, T = a.key.extent;
  const int64_t nq = (S + plan.query_block - 1) / plan.query_block;
  const bool bf = a.q.dtype == DType::BF16;
  os << replace_all(kHelpers, {{"AB", bf ? "bf16" : "f16"},
                               {"PAIR", bf ? "__nv_bfloat162" : "__half2"},
                               {"PAIR_MAKE", bf ? "__floats2bfloat162_rn" : "__floats2half2_rn"}});
  const std::vector<std::string> batch = attention::batch_roles(a);
  std::string causal;
  if (a.causal_offset)  // the last key any row of the block keeps is i0 + BQ - 1 + offset
    causal = "  kb_end_ = (int)tessel_imin(kb_end_, (i0 + BQ - 1 + " + N(*a.causal_offset) + "LL) / BK + 1);\n";
  std::string qfrags, qfrag;
  if (plan.q_in_registers) {
    qfrags = "    if (kb == kb_begin_) {\n      #pragma unroll\n      for (int kk = 0; kk < D / 16; ++kk) tessel_att_ldsm4(qf[kk], q_addr + kk * 32);\n    }\n";
    qfrag = "      const unsigned* a = qf[kk];\n";
  } else {
    qfrags = "";
    qfrag = "      unsigned a[4];\n      tessel_att_ldsm4(a, q_addr + kk * 32);\n";
  }
  const std::string p0 = attention::rounded(a.prob_type, "__expf(s[n][2 * h] - mu)");
  const std::string p1 = attention::rounded(a.prob_type, "__expf(s[n][2 * h + 1] - mu)");
  os << replace_all(kKernel, {{"THREADS", N(plan.warps * 32)},
                              {"NAME", name},
                              {"PARAMS", attention::kernel_parameters(k)},
                              {"BQ", N(plan.query_block)},
                              {"BK", N(plan.key_block)},
                              {"D", N(D)},
                              {"E", N(E)},
                              {"PAD", N(kRowPadElements)},
                              {"S", N(S)},
                              {"T", N(T)},
                              {"STAGES", N(plan.stages)},
                              {"ET", attention::elem_type(a.q.dtype)},
                              // causal: the heaviest query blocks first
                              {"QB", a.causal_offset ? "(int)(" + N(nq - 1) + "LL - bid_ % " + N(nq) + "LL)" : "(int)(bid_ % " + N(nq) + "LL)"},
                              {"NQ", N(nq)},
                              {"SPLITS", N(plan.key_splits)},
                              {"BATCH", attention::batch_indices(a, "flat_", "  ")},
                              {"QT", a.q.tensor},
                              {"KT", a.k.tensor},
                              {"VT", a.v.tensor},
                              {"QOFF", attention::operand_offset(a.q, batch)},
                              {"KOFF", attention::operand_offset(a.k, batch)},
                              {"VOFF", attention::operand_offset(a.v, batch)},
                              {"QSI", N(a.q.stride(a.query.var))},
                              {"KSJ", N(a.k.stride(a.key.var))},
                              {"VSJ", N(a.v.stride(a.key.var))},
                              {"CAUSAL", causal},
                              {"LOGIT", attention::logit_lambda(k, a, "  ")},
                              {"STORE", plan.key_splits == 1 ? attention::store_lambda(k, a, "  ") : ""},
                              {"QFRAGS", qfrags},
                              {"QDECL", plan.q_in_registers ? "  unsigned qf[D / 16][4];\n" : ""},
                              {"QFRAG", qfrag},
                              {"PROB0", p0},
                              {"PROB1", p1},
                              {"BKWDECL", plan.key_warps ? "  constexpr int BKW = BK / (NT / 32);  /* each warp's keys of a block */\n" : ""},
                              {"WR", plan.key_warps ? "0" : "warp * 16"},
                              {"KW0", plan.key_warps ? " + warp * BKW" : ""},
                              {"KB", plan.key_warps ? "BKW" : "BK"},
                              {"TAIL", tail(a, plan)}});
  Launch l;
  l.kernel = name;
  l.grid[0] = unsigned(nq * a.size_batch() * plan.key_splits);
  l.block = unsigned(plan.warps * 32);
  l.dynamic_shared_bytes = uint32_t(attention_mma_shared_bytes(a, plan));
  return l;
}

}  // namespace tessel::emit_cuda
