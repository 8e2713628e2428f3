#include "compiler/emit_cuda/simt_gemm.h"

#include <algorithm>

#include "compiler/emit_cuda/cuda_expr.h"
#include "compiler/emit_cuda/emit_simt.h"
#include "compiler/emit_cuda/epilogue.h"
#include "compiler/emit_cuda/simt_gemm_policy.h"
#include "compiler/emit_cuda/tc_kernel.h"
#include "compiler/emit_cuda/tile_scheduler.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

namespace {

// The TensorCore configuration the shared pieces (preamble, loaders) read: the plan's block tile
// and a warp layout with as many warps as the plan has threads (simt: warps stacked along M).
TcConfig shared_pieces_view(const SimtGemmPlan& g, const isa::GpuMachine& m) {
  TcConfig cfg;
  cfg.bm = g.bm, cfg.bn = g.bn, cfg.bk = g.bk, cfg.stages = g.stages, cfg.k_split = 1;
  if (g.tf32) {
    cfg.wm = g.tm, cfg.wn = g.tn;
  } else {
    const int warps = g.threads(int(m.warp_size)) / int(m.warp_size);
    cfg.wm = g.bm / warps, cfg.wn = g.bn;
  }
  return cfg;
}

std::string dims_text(const std::vector<ContractionDim>& ds) {
  std::string s;
  for (const auto& d : ds) s += (s.empty() ? "" : ",") + d.var + "=" + S(d.extent);
  return s.empty() ? std::string("-") : s;
}

struct Ctx {
  const TcKernel& t;
  const SimtGemmPlan& g;
  std::string acct;        // accumulator C type
  bool vec4 = false;       // float operands: 16-byte shared reads
  int tmt = 0, tnt = 0;    // simt: threads along M / N
  // shared element of A at (row, k) / B at (k, col), as stored
  std::string a_at(const std::string& row, const std::string& k) const {
    return t.pa.k_inner ? "as_[(" + row + ") * " + S(t.pa.ld()) + " + (" + k + ")]" : "as_[(" + k + ") * " + S(t.pa.ld()) + " + (" + row + ")]";
  }
  std::string b_at(const std::string& k, const std::string& col) const {
    return t.pb.k_inner ? "bs_[(" + col + ") * " + S(t.pb.ld()) + " + (" + k + ")]" : "bs_[(" + k + ") * " + S(t.pb.ld()) + " + (" + col + ")]";
  }
  // simt: the tile row of register row i (K-inner A: interleaved, conflict-free strided rows;
  // outer-inner A: groups of 4 adjacent rows, one 16-byte read each), likewise columns
  std::string row(const std::string& i) const {
    return t.pa.k_inner ? "(" + i + ") * " + S(tmt) + " + ty_" : "((" + i + ") >> 2) * " + S(4 * tmt) + " + ty_ * 4 + ((" + i + ") & 3)";
  }
  std::string col(const std::string& j) const {
    return t.pb.k_inner ? "(" + j + ") * " + S(tnt) + " + tx_" : "((" + j + ") >> 2) * " + S(4 * tnt) + " + tx_ * 4 + ((" + j + ") & 3)";
  }
  std::string value(DType dt, const std::string& stored) const { return "(" + acct + ")(" + load_value(dt, stored) + ")"; }
};

void tf32_helpers(std::ostringstream& os) {
  os << "static __device__ __forceinline__ unsigned tessel_tf32(float x) {\n"
        "  unsigned r;\n  asm(\"cvt.rna.tf32.f32 %0, %1;\\n\" : \"=r\"(r) : \"f\"(x));\n  return r;\n}\n"
        "static __device__ __forceinline__ void tessel_mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {\n"
        "  asm(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\\n\"\n"
        "      : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
        "      : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n}\n";
}

// simt: one K slice, 4 K steps per round of 16-byte shared reads
void simt_slice(const Ctx& x) {
  auto& os = x.t.os;
  const auto& g = x.g;
  const std::string p = "      ";
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << g.bk << "; kq += 4) {\n";
  os << p << x.acct << " a_[" << g.tm << "][4], b_[4][" << g.tn << "];\n";
  if (x.vec4 && x.t.pa.k_inner)
    os << p << "#pragma unroll\n" << p << "for (int i = 0; i < " << g.tm << "; ++i) { const float4 v = *(const float4*)&" << x.a_at(x.row("i"), "kq")
       << "; a_[i][0] = v.x; a_[i][1] = v.y; a_[i][2] = v.z; a_[i][3] = v.w; }\n";
  else if (x.vec4)
    os << p << "#pragma unroll\n" << p << "for (int kk = 0; kk < 4; ++kk)\n" << p << "  #pragma unroll\n" << p << "  for (int i = 0; i < " << g.tm
       << "; i += 4) { const float4 v = *(const float4*)&" << x.a_at(x.row("i"), "kq + kk")
       << "; a_[i][kk] = v.x; a_[i + 1][kk] = v.y; a_[i + 2][kk] = v.z; a_[i + 3][kk] = v.w; }\n";
  else
    os << p << "#pragma unroll\n" << p << "for (int kk = 0; kk < 4; ++kk)\n" << p << "  #pragma unroll\n" << p << "  for (int i = 0; i < " << g.tm
       << "; ++i) a_[i][kk] = " << x.value(x.t.c.a.dtype, x.a_at(x.row("i"), "kq + kk")) << ";\n";
  if (x.vec4 && x.t.pb.k_inner)
    os << p << "#pragma unroll\n" << p << "for (int j = 0; j < " << g.tn << "; ++j) { const float4 v = *(const float4*)&" << x.b_at("kq", x.col("j"))
       << "; b_[0][j] = v.x; b_[1][j] = v.y; b_[2][j] = v.z; b_[3][j] = v.w; }\n";
  else if (x.vec4)
    os << p << "#pragma unroll\n" << p << "for (int kk = 0; kk < 4; ++kk)\n" << p << "  #pragma unroll\n" << p << "  for (int j = 0; j < " << g.tn
       << "; j += 4) { const float4 v = *(const float4*)&" << x.b_at("kq + kk", x.col("j"))
       << "; b_[kk][j] = v.x; b_[kk][j + 1] = v.y; b_[kk][j + 2] = v.z; b_[kk][j + 3] = v.w; }\n";
  else
    os << p << "#pragma unroll\n" << p << "for (int kk = 0; kk < 4; ++kk)\n" << p << "  #pragma unroll\n" << p << "  for (int j = 0; j < " << g.tn
       << "; ++j) b_[kk][j] = " << x.value(x.t.c.b.dtype, x.b_at("kq + kk", x.col("j"))) << ";\n";
  const std::string fma = x.acct == "float" ? "fmaf(a_[i][kk], b_[kk][j], acc_[i][j])" : "acc_[i][j] + a_[i][kk] * b_[kk][j]";
  os << p << "#pragma unroll\n" << p << "for (int kk = 0; kk < 4; ++kk)\n" << p << "  #pragma unroll\n" << p << "  for (int i = 0; i < " << g.tm << "; ++i)\n"
     << p << "    #pragma unroll\n" << p << "    for (int j = 0; j < " << g.tn << "; ++j) acc_[i][j] = " << fma << ";\n";
  os << "    }\n";
}

// tf32: one K slice of m16n8k8 steps; fragment element (row g / g + 8, K lane q / q + 4)
void tf32_slice(const Ctx& x) {
  auto& os = x.t.os;
  const auto& g = x.g;
  const int fm = g.tm / 16, fn = g.tn / 8;
  const std::string p = "      ";
  os << "    #pragma unroll\n    for (int kq = 0; kq < " << g.bk << "; kq += 8) {\n";
  os << p << "unsigned af_[" << fm << "][4], bf_[" << fn << "][2];\n";
  os << p << "#pragma unroll\n" << p << "for (int i = 0; i < " << fm << "; ++i) {\n";
  if (x.t.pa.k_inner) {
    // K-inner rows: one ldmatrix.x4 gives the whole A fragment (a 32-bit element is two b16 columns,
    // so lane l receives row l/4, element l%4 of each 8x4 quarter: the m16n8k8 TF32 layout)
    os << p << "  unsigned r0_, r1_, r2_, r3_;\n";
    os << p << "  tessel_ldsm_x4(r0_, r1_, r2_, r3_, &" << x.a_at("wm_ + i * 16 + (lane_ & 7) + ((lane_ >> 3) & 1) * 8", "kq + (lane_ >> 4) * 4") << ");\n";
    os << p << "  af_[i][0] = tessel_tf32(__uint_as_float(r0_)); af_[i][1] = tessel_tf32(__uint_as_float(r1_));\n";
    os << p << "  af_[i][2] = tessel_tf32(__uint_as_float(r2_)); af_[i][3] = tessel_tf32(__uint_as_float(r3_));\n" << p << "}\n";
  } else {
    os << p << "  const int r_ = wm_ + i * 16 + g_;\n";
    os << p << "  af_[i][0] = tessel_tf32(" << x.a_at("r_", "kq + q_") << ");\n";
    os << p << "  af_[i][1] = tessel_tf32(" << x.a_at("r_ + 8", "kq + q_") << ");\n";
    os << p << "  af_[i][2] = tessel_tf32(" << x.a_at("r_", "kq + q_ + 4") << ");\n";
    os << p << "  af_[i][3] = tessel_tf32(" << x.a_at("r_ + 8", "kq + q_ + 4") << ");\n" << p << "}\n";
  }
  os << p << "#pragma unroll\n" << p << "for (int j = 0; j < " << fn << "; ++j) {\n";
  os << p << "  const int c_ = wn_ + j * 8 + g_;\n";
  os << p << "  bf_[j][0] = tessel_tf32(" << x.b_at("kq + q_", "c_") << ");\n";
  os << p << "  bf_[j][1] = tessel_tf32(" << x.b_at("kq + q_ + 4", "c_") << ");\n" << p << "}\n";
  os << p << "#pragma unroll\n" << p << "for (int i = 0; i < " << fm << "; ++i)\n" << p << "  #pragma unroll\n" << p << "  for (int j = 0; j < " << fn
     << "; ++j) tessel_mma_tf32(acc_[i][j], af_[i], bf_[j][0], bf_[j][1]);\n";
  os << "    }\n";
}

// stages - 1 K slices in flight (cp.async groups; synchronous loads where there is none), one
// barrier per slice: the slot refilled at slice kt was last read at slice kt - 1, which every
// thread has finished when it passes the barrier
void pipeline(const Ctx& x) {
  auto& os = x.t.os;
  const auto& g = x.g;
  const int64_t kt_total = (x.t.K + g.bk - 1) / g.bk;
  os << "  const int kt_total_ = " << kt_total << ";\n";
  os << "  #pragma unroll\n  for (int s = 0; s < " << g.stages - 1 << "; ++s) {\n    if (s < kt_total_) { load_a(s, s); load_b(s, s); }\n    tessel_cp_commit();\n  }\n";
  os << "  for (int kt = 0; kt < kt_total_; ++kt) {\n";
  os << "    tessel_cp_wait<" << g.stages - 2 << ">();\n    __syncthreads();\n";
  os << "    { const int nt = kt + " << g.stages - 1 << "; if (nt < kt_total_) { load_a(nt % " << g.stages << ", nt); load_b(nt % " << g.stages
     << ", nt); } tessel_cp_commit(); }\n";
  os << "    const " << x.t.ft << "* as_ = As_ + (kt % " << g.stages << ") * " << x.t.a_stage << ";\n";
  os << "    const " << x.t.ft << "* bs_ = Bs_ + (kt % " << g.stages << ") * " << x.t.b_stage << ";\n";
  if (g.tf32) tf32_slice(x);
  else simt_slice(x);
  os << "  }\n";
}

// one output element at (gm_, gn_) with value `v`: plain dense output stored directly, else the
// fused statements through emit_element
void element(const Ctx& x, const std::string& pad, const std::string& v) {
  const TcKernel& t = x.t;
  auto& os = t.os;
  os << pad << "if (gm_ < " << t.M << " && gn_ < " << t.N << ") {\n";
  if (t.c.plain_output) {
    const DType dt = t.anchor.acc_type;
    os << pad << "  t_" << t.anchor.output << "[((long long)blockIdx.z * " << t.M << "LL + gm_) * " << t.N << "LL + gn_] = " << store_value(dt, v) << ";\n";
  } else {
    os << pad << "  const " << x.acct << " v_ = " << v << ";\n";
    std::string decl;
    for (const auto* dims : {&t.c.m, &t.c.n})
      for (const auto& d : *dims) decl += (decl.empty() ? "int " : ", ") + std::string("ov_") + d.var;
    os << pad << "  " << decl << ";\n";
    t.decompose(pad + "  ", "gm_", t.c.m, "ov_");
    t.decompose(pad + "  ", "gn_", t.c.n, "ov_");
    emit_element(t, pad + "  ", false);
  }
  os << pad << "}\n";
}

void epilogue(const Ctx& x) {
  const TcKernel& t = x.t;
  auto& os = t.os;
  const auto& g = x.g;
  const bool f32_out = t.c.plain_output && t.anchor.acc_type == DType::F32;
  if (g.tf32) {
    const int fm = g.tm / 16, fn = g.tn / 8;
    os << "  #pragma unroll\n  for (int i = 0; i < " << fm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << fn
       << "; ++j)\n      #pragma unroll\n      for (int h = 0; h < 2; ++h) {\n";
    os << "        const int gm_ = m0_ + wm_ + i * 16 + g_ + h * 8, gn_ = n0_ + wn_ + j * 8 + q_ * 2;\n";
    if (f32_out && t.N % 2 == 0) {
      os << "        if (gm_ < " << t.M << " && gn_ < " << t.N << ") *(float2*)&t_" << t.anchor.output << "[((long long)blockIdx.z * " << t.M
         << "LL + gm_) * " << t.N << "LL + gn_] = make_float2(acc_[i][j][h * 2], acc_[i][j][h * 2 + 1]);\n";
    } else {
      os << "        #pragma unroll\n        for (int e = 0; e < 2; ++e) {\n          const int gn0_ = gn_;\n";
      os << "          { const int gn_ = gn0_ + e;\n";
      element(x, "            ", "acc_[i][j][h * 2 + e]");
      os << "          }\n        }\n";
    }
    os << "      }\n";
    return;
  }
  const bool vec_store = f32_out && !t.pb.k_inner && t.N % 4 == 0;
  os << "  #pragma unroll\n  for (int i = 0; i < " << g.tm << "; ++i) {\n    const int gm_ = m0_ + " << x.row("i") << ";\n";
  if (vec_store) {
    os << "    #pragma unroll\n    for (int j = 0; j < " << g.tn << "; j += 4) {\n      const int gn_ = n0_ + " << x.col("j") << ";\n";
    os << "      if (gm_ < " << t.M << " && gn_ < " << t.N << ") *(float4*)&t_" << t.anchor.output << "[((long long)blockIdx.z * " << t.M
       << "LL + gm_) * " << t.N << "LL + gn_] = make_float4(acc_[i][j], acc_[i][j + 1], acc_[i][j + 2], acc_[i][j + 3]);\n    }\n";
  } else {
    os << "    #pragma unroll\n    for (int j = 0; j < " << g.tn << "; ++j) {\n      const int gn_ = n0_ + " << x.col("j") << ";\n";
    element(x, "      ", "acc_[i][j]");
    os << "    }\n";
  }
  os << "  }\n";
}

void explain_mapping(const Ctx& x, const isa::GpuMachine& m) {
  const TcKernel& t = x.t;
  const auto& g = x.g;
  auto operand = [&](const OperandPlan& p, const char* outer) {
    return p.op->tensor + " (" + (p.k_inner ? std::string("K-inner") : std::string(outer) + "-inner") + " shared rows, " +
           (p.vec > 1 ? S(int64_t(p.vec) * elem_bytes(p.op->dtype) * 8) + "-bit copies" : std::string("scalar copies")) + ")";
  };
  t.explain.push_back(std::string(g.tf32 ? "TF32 contraction: " : "SIMT contraction: ") + t.anchor.name + " is a contraction M(" + dims_text(t.c.m) + ")=" +
                      S(t.M) + " N(" + dims_text(t.c.n) + ")=" + S(t.N) + " K(" + dims_text(t.c.k) + ")=" + S(t.K) + " batch(" +
                      dims_text(t.c.batch) + "); A = " + operand(t.pa, "M") + ", B = " + operand(t.pb, "N"));
  const int threads = g.threads(int(m.warp_size));
  t.explain.push_back("  plan " + g.to_string() + ": block " + S(g.bm) + "x" + S(g.bn) + " (stage level), " + S(threads) + " threads, " +
                      (g.tf32 ? "each warp " + S(g.tm) + "x" + S(g.tn) + " = " + S(int64_t(g.tm / 16) * (g.tn / 8)) + " mma.sync m16n8k8 TF32 fragments"
                              : "each thread a " + S(g.tm) + "x" + S(g.tn) + " register tile of " + std::string(x.acct == "float" ? "fmaf" : "multiply-adds") +
                                    (x.vec4 ? " fed by 16-byte shared reads" : "")) +
                      "; grid " + S(t.tiles_m * t.tiles_n) + " x 1 x " + S(t.c.size_batch()) + " (batch indices on grid z)");
  t.explain.push_back("  shared memory: K in slices of " + S(g.bk) + " through " + S(g.stages) + " stages (" +
                      (t.async ? "cp.async, sm_80+" : "synchronous loads, no cp.async on " + m.arch) + "), " + S(t.smem) + " B; tails zero-filled by the loads");
  if (g.tf32)
    t.explain.push_back("  TF32 (--tf32, asked for): A and B rounded to TF32 (10-bit mantissa, round to nearest, cvt.rna.tf32.f32) and multiplied "
                        "on the TensorCores, f32 accumulate: products carry about 1e-3 relative error");
  if (!t.c.epilogue.empty()) {
    std::string s;
    for (int i : t.c.epilogue) s += (s.empty() ? "" : ", ") + t.k.function->statements.at(i).name;
    t.explain.push_back("  fused epilogue on the accumulators before the global store: " + s);
  }
}

}  // namespace

Launch emit_simt_gemm(const kernel::Kernel& k, const Contraction& c, const SimtGemmPlan& g, const isa::GpuMachine& m, std::ostringstream& os,
                      std::vector<std::string>& explain) {
  const std::string why = simt_plan_obstacle(c, g, m);
  if (!why.empty()) throw InternalError("CUDA emitter: SIMT contraction plan " + g.to_string() + " reached the emitter: " + why);
  const TcConfig cfg = shared_pieces_view(g, m);
  TcKernel t(k, c, cfg, m, TcLaunchOptions{}, os, explain);
  // the operands' own storage type in shared memory, rows padded for the main loop's reads
  t.ft = storage_type(c.a.dtype);
  t.eb = elem_bytes(c.a.dtype);
  t.pa.pad = simt_operand_pad(g, t.pa.k_inner, t.pa.tile_outer, t.eb);
  t.pb.pad = simt_operand_pad(g, t.pb.k_inner, t.pb.tile_outer, t.eb);
  t.a_stage = t.pa.stage_elems(), t.b_stage = t.pb.stage_elems();
  t.smem = simt_plan_shared_bytes(c, g, m);
  t.name = std::string(g.tf32 ? "tessel_tf32_" : "tessel_sgemm_") + k.name;
  Ctx x{t, g, storage_type(c.acc_type) == "int" ? "int" : "float"};
  x.vec4 = t.ft == "float" && x.acct == "float";
  x.tmt = g.bm / g.tm, x.tnt = g.bn / g.tn;
  explain_mapping(x, m);
  os << "\n/* " << (g.tf32 ? "TF32" : "SIMT") << " contraction kernel for " << t.anchor.name << " (" << g.to_string() << ") */\n";
  if (g.tf32) tf32_helpers(os);
  os << "extern \"C\" __global__ void __launch_bounds__(" << g.threads(int(m.warp_size)) << ", " << simt_min_blocks_per_sm(c, g, m) << ") " << t.name << "(" << kernel_parameters(k) << ") {\n";
  emit_preamble(t);
  emit_operand_loaders(t);
  if (g.tf32) {
    os << "  float acc_[" << g.tm / 16 << "][" << g.tn / 8 << "][4];\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << g.tm / 16 << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << g.tn / 8
       << "; ++j) acc_[i][j][0] = acc_[i][j][1] = acc_[i][j][2] = acc_[i][j][3] = 0.0f;\n";
    os << "  const int lane_ = threadIdx.x % " << m.warp_size << ", g_ = lane_ >> 2, q_ = lane_ & 3;\n";
  } else {
    os << "  " << x.acct << " acc_[" << g.tm << "][" << g.tn << "];\n";
    os << "  #pragma unroll\n  for (int i = 0; i < " << g.tm << "; ++i)\n    #pragma unroll\n    for (int j = 0; j < " << g.tn << "; ++j) acc_[i][j] = 0;\n";
    os << "  const int tx_ = threadIdx.x % " << x.tnt << ", ty_ = threadIdx.x / " << x.tnt << ";\n";
  }
  pipeline(x);
  epilogue(x);
  os << "}\n";
  Launch l;
  l.kernel = t.name;
  const auto grid = tile_schedule(t).grid();  // emit_preamble's grouped tiles (tile_scheduler.h)
  std::copy(grid.begin(), grid.end(), l.grid);
  l.block = unsigned(g.threads(int(m.warp_size)));
  l.dynamic_shared_bytes = uint32_t(t.smem);
  return l;
}

}  // namespace tessel::emit_cuda
