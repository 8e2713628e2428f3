#include "compiler/emit_cuda/attention_simt.h"

#include <algorithm>

#include "compiler/emit_cuda/attention_pieces.h"

namespace tessel::emit_cuda {

namespace {

std::string L(int64_t v) { return std::to_string(v) + "LL"; }

}  // namespace

Launch emit_attention_simt(const kernel::Kernel& k, const kernel::Attention& a, const AttentionPlan& plan, const std::string& name,
                           int64_t max_blocks, std::ostringstream& os) {
  using attention::load_elem;
  const int W = plan.warps, K = plan.key_splits;
  const int64_t S = a.query.extent, T = a.key.extent, E = attention::value_elements(a);
  const int64_t D = kernel::extent_product(a.head);
  const int64_t NE = (E + 31) / 32, rows = a.size_batch() * S;
  std::vector<std::string> batch = attention::batch_roles(a);
  os << "extern \"C\" __global__ void __launch_bounds__(" << W * 32 << ") " << name << "(" << attention::kernel_parameters(k) << ") {\n";
  os << "  const int lane_ = threadIdx.x % 32;\n  (void)scratch;\n";
  os << "  for (long long w_ = (long long)blockIdx.x * " << W << " + threadIdx.x / 32; w_ < " << L(rows * K) << "; w_ += (long long)gridDim.x * "
     << W << ") {\n";
  os << "    const long long row_ = w_ / " << L(K) << ";\n    const int split_ = (int)(w_ % " << L(K) << ");\n    (void)split_;\n";
  os << "    const long long qi_ = row_ % " << L(S) << ", flat_ = row_ / " << L(S) << ";\n";
  os << attention::batch_indices(a, "flat_", "    ");
  os << attention::logit_lambda(k, a, "    ");
  if (K == 1) os << attention::store_lambda(k, a, "    ");
  const std::string qrow = "t_" + a.q.tensor + " + " + attention::operand_offset(a.q, batch) + " + qi_ * " + L(a.q.stride(a.query.var));
  os << "    const auto* q_ = " << qrow << ";\n";
  os << "    const auto* k_ = t_" << a.k.tensor << " + " << attention::operand_offset(a.k, batch) << ";\n";
  os << "    const auto* v_ = t_" << a.v.tensor << " + " << attention::operand_offset(a.v, batch) << ";\n";
  os << "    long long kend_ = " << L(T) << ";\n";
  if (a.causal_offset) os << "    kend_ = tessel_imin(kend_, qi_ + " << L(*a.causal_offset + 1) << ");\n";
  os << "    const long long nkb_ = (kend_ + 31) / 32;\n";
  os << "    const long long kb0_ = nkb_ * split_ / " << L(K) << ", kb1_ = nkb_ * (split_ + 1) / " << L(K) << ";\n";
  os << "    float m_ = -TESSEL_INF, l_ = 0.0f, acc_[" << NE << "];\n";
  os << "    #pragma unroll\n    for (int n_ = 0; n_ < " << NE << "; ++n_) acc_[n_] = 0.0f;\n";
  os << "    for (long long kb_ = kb0_; kb_ < kb1_; ++kb_) {\n";
  os << "      const long long j_ = kb_ * 32 + lane_;\n";
  os << "      float x_ = -TESSEL_INF;\n";
  os << "      if (j_ < " << L(T) << ") {\n";
  os << "        const auto* kr_ = k_ + j_ * " << L(a.k.stride(a.key.var)) << ";\n";
  os << "        float sc_ = 0.0f;\n";
  os << "        for (long long d_ = 0; d_ < " << L(D) << "; ++d_)\n";
  os << "          sc_ += " << load_elem(a.q.dtype, "q_[" + attention::flat_offset(a.q, a.head, "d_") + "]") << " * "
     << load_elem(a.k.dtype, "kr_[" + attention::flat_offset(a.k, a.head, "d_") + "]") << ";\n";
  os << "        x_ = tessel_logit(sc_, qi_, j_);\n      }\n";
  os << "      float bm_ = x_;\n";
  os << "      for (int o_ = 16; o_ > 0; o_ >>= 1) bm_ = fmaxf(bm_, __shfl_xor_sync(0xffffffffu, bm_, o_));\n";
  os << "      const float mn_ = fmaxf(m_, bm_);\n";
  os << "      const float mu_ = mn_ == -TESSEL_INF ? 0.0f : mn_;  /* a row masked so far: no -inf - -inf */\n";
  os << "      const float c_ = expf(m_ - mu_);\n";
  os << "      const float p_ = " << attention::rounded(a.prob_type, "expf(x_ - mu_)") << ";\n";
  os << "      float ps_ = p_;\n";
  os << "      for (int o_ = 16; o_ > 0; o_ >>= 1) ps_ += __shfl_xor_sync(0xffffffffu, ps_, o_);\n";
  os << "      l_ = l_ * c_ + ps_;\n";
  os << "      #pragma unroll\n      for (int n_ = 0; n_ < " << NE << "; ++n_) acc_[n_] *= c_;\n";
  os << "      const int jn_ = (int)tessel_imin(32, " << L(T) << " - kb_ * 32);\n";
  os << "      for (int jj_ = 0; jj_ < jn_; ++jj_) {\n";
  os << "        const float pj_ = __shfl_sync(0xffffffffu, p_, jj_);\n";
  os << "        const auto* vr_ = v_ + (kb_ * 32 + jj_) * " << L(a.v.stride(a.key.var)) << ";\n";
  os << "        #pragma unroll\n        for (int n_ = 0; n_ < " << NE << "; ++n_) {\n";
  os << "          const long long ve_ = lane_ + 32 * n_;\n";
  os << "          if (ve_ < " << L(E) << ") acc_[n_] += pj_ * " << load_elem(a.v.dtype, "vr_[" + attention::flat_offset(a.v, a.value, "ve_") + "]")
     << ";\n        }\n      }\n";
  os << "      m_ = mn_;\n    }\n";
  os << "    #pragma unroll\n    for (int n_ = 0; n_ < " << NE << "; ++n_) {\n";
  os << "      const long long ve_ = lane_ + 32 * n_;\n";
  os << "      if (ve_ >= " << L(E) << ") continue;\n";
  if (K == 1) {
    os << "      " << attention::store_call(a, "acc_[n_]", "l_", "qi_", "ve_") << ";\n";
  } else {
    os << "      float* part_ = (float*)scratch;\n";
    os << "      if (ve_ == 0) {\n        part_[(row_ * " << L(K) << " + split_) * 2] = m_;\n        part_[(row_ * " << L(K)
       << " + split_) * 2 + 1] = l_;\n      }\n";
    os << "      part_[" << L(rows * K * 2) << " + (row_ * " << L(K) << " + split_) * " << L(E) << " + ve_] = acc_[n_];\n";
  }
  os << "    }\n  }\n}\n";
  Launch l;
  l.kernel = name;
  l.grid[0] = unsigned(std::max<int64_t>(1, std::min<int64_t>((rows * K + W - 1) / W, max_blocks)));
  l.block = unsigned(W * 32);
  return l;
}

}  // namespace tessel::emit_cuda
