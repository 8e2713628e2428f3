// The NPU fused attention's blocks, slots and buffer placement: see attention_plan.h.
#include "compiler/emit_npu/attention_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/emit_npu/operands.h"

namespace tessel::emit_npu {
namespace {

using npu::Buffer;
using Plan = AttentionPlan;

class AttentionPlanner {
 public:
  AttentionPlanner(const kernel::Attention& a, const isa::NpuMachine& m, bool scale_foldable, AttentionPlan& plan)
      : a_(a), m_(m), scale_foldable_(scale_foldable), p_plan_(plan),
        bytes_per_repeat_(m.vector_bytes_per_repeat), max_repeat_(m.vector_max_repeat) {}

  // ---- blocks, slots, placement ----
  std::string plan() {
    Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.m0;
    P.S = a_.query.extent, P.T = a_.key.extent, P.D = a_.head[0].extent, P.E = a_.value[0].extent;
    P.Dp = round_up(P.D, f);
    P.Ep = round_up(P.E, f);
    P.Ev = P.Ep + f;
    P.batch = a_.size_batch();
    // Query blocks: 4 fractals of rows, halved while half of them still covers S or the units do
    // not cover the cores (a unit's fixed costs, GM latency and pipeline fill, favour long blocks).
    P.bq = 4 * f;
    auto units_of = [&](int64_t bq) { return P.batch * ((P.S + bq - 1) / bq); };
    while (P.bq > f && (P.bq / 2 >= round_up(P.S, f) || units_of(P.bq) < m_.cores)) P.bq /= 2;
    P.nqb = (P.S + P.bq - 1) / P.bq;
    P.units = P.batch * P.nqb;
    P.cores = std::min<int64_t>(m_.cores, P.units);
    // Key blocks: as few as fit (the row-wise work per block is per row, not per key), of balanced
    // length; a score tile is one vector instruction (max_repeat repeats of f32).
    const int64_t longest = std::min(round_up(P.T, f), max_repeat_ * bytes_per_repeat_ / (P.bq * 4) / f * f);
    // K and V in L0B side by side where blocks of 8 fractals or more fit so (taking turns in one
    // region stalls the cube and MTE1 on each other), else the longest blocks any way fits: in
    // pieces over two halves where they fit, else in one region.
    std::string why;
    for (const bool shared : {false, true}) {
      for (int64_t nkb = (P.T + longest - 1) / longest;; ++nkb) {
        const int64_t bk = round_up((P.T + nkb - 1) / nkb, f);
        if (!shared && bk < std::min(8 * f, round_up(P.T, f))) {
          why = "no block of 8 fractals with K and V side by side";
          break;
        }
        if ((why = place(bk, shared)).empty() || bk == f) break;
      }
      if (why.empty()) break;
    }
    if (!why.empty()) return why;
    P.blocks_seen.assign(P.nqb, P.nkb);
    if (a_.causal_offset) {
      int64_t seen = 0;
      for (int64_t qb = 0; qb < P.nqb; ++qb) {
        P.blocks_seen[qb] = std::min(P.nkb, (qb * P.bq + P.bq + *a_.causal_offset + P.bk - 1) / P.bk);
        seen += P.blocks_seen[qb];
      }
      // blocks on the busiest core: every unit's blocks over all cores, or the sections' units
      // dealt round-robin over min(cores, units) cores
      const int64_t section_cores = std::min<int64_t>(m_.cores, P.units);
      std::vector<int64_t> per_core(size_t(section_cores), 0);
      for (int64_t u = 0; u < P.units; ++u) per_core[size_t(u % section_cores)] += P.blocks_seen[u / P.batch];
      const int64_t all = (P.units + P.cores - 1) / P.cores * P.nkb;
      const int64_t skipping = *std::max_element(per_core.begin(), per_core.end());
      (void)seen;
      if (skipping < all) P.sections = true, P.cores = section_cores;
    }
    return "";
  }

  // The placement of key blocks of bk keys: "" or why they do not fit.
  std::string place(int64_t bk, bool shared_l0b) {
    Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.m0;
    P.bk = bk;
    P.nkb = (P.T + P.bk - 1) / P.bk;
    using L0b = Plan::L0b;
    auto l0b_bytes = [&](L0b b) {
      const int64_t k = P.Dp * bk * 2, v = bk * P.Ev * 2, piece = round_up((bk + 1) / 2, f);
      return b == L0b::TwoSlots ? 2 * (k + v) : b == L0b::OneSlot ? k + v : b == L0b::Pieces ? 2 * std::max(P.Dp, P.Ev) * piece * 2 : std::max(k, v);
    };
    auto fits = [&](L0b b, int64_t p_slots) {
      const int64_t l0a = P.bq * P.Dp * 2 + p_slots * P.bq * bk * 2;
      const int64_t l0c = 2 * (P.bq * bk + P.bq * P.Ev) * 4;
      return l0b_bytes(b) <= m_.capacity(Buffer::L0B) && l0a <= m_.capacity(Buffer::L0A) && l0c <= m_.capacity(Buffer::L0C);
    };
    const std::pair<L0b, int64_t> choices[] = {{L0b::TwoSlots, 2}, {L0b::OneSlot, 2}, {L0b::Pieces, 2}, {L0b::Shared, 2},
                                               {L0b::OneSlot, 1}, {L0b::Pieces, 1}, {L0b::Shared, 1}};
    bool found = false;
    for (const auto& [b, p_slots] : choices)
      if (!found && (shared_l0b || (b != L0b::Shared && b != L0b::Pieces)) && fits(b, p_slots)) P.l0b = b, P.l0a_p_slots = p_slots, found = true;
    if (!found) return fmt::format("head and value dimensions {} x {} whose blocks do not fit L0A / L0B / L0C", P.D, P.E);
    // L1
    auto take = [](int64_t& at_, int64_t bytes, int64_t align) {
      const int64_t r = round_up(at_, align);
      at_ = r + bytes;
      return r;
    };
    int64_t l0a = 0, l0b = 0, l0c = 0;
    const int64_t fa = m_.alignment(Buffer::L0A), fb = m_.alignment(Buffer::L0B), fc = m_.alignment(Buffer::L0C);
    P.l0a_q = take(l0a, P.bq * P.Dp * 2, fa);
    for (int s = 0; s < P.l0a_p_slots; ++s) P.l0a_p[s] = take(l0a, P.bq * P.bk * 2, fa);
    if (P.l0a_p_slots == 1) P.l0a_p[1] = P.l0a_p[0];
    P.pk = P.l0b == Plan::L0b::Pieces ? round_up((bk + 1) / 2, f) : bk;
    if (P.l0b == Plan::L0b::Pieces) {
      for (int s = 0; s < 2; ++s) P.l0b_k[s] = P.l0b_v[s] = take(l0b, std::max(P.Dp, P.Ev) * P.pk * 2, fb);
    } else if (P.l0b == Plan::L0b::Shared) {
      P.l0b_k[0] = P.l0b_k[1] = P.l0b_v[0] = P.l0b_v[1] = take(l0b, std::max(P.Dp, P.Ev) * P.bk * 2, fb);
    } else {
      const int slots = P.l0b == Plan::L0b::TwoSlots ? 2 : 1;
      for (int s = 0; s < slots; ++s) {
        P.l0b_k[s] = take(l0b, P.Dp * P.bk * 2, fb);
        P.l0b_v[s] = take(l0b, P.bk * P.Ev * 2, fb);
      }
      if (slots == 1) P.l0b_k[1] = P.l0b_k[0], P.l0b_v[1] = P.l0b_v[0];
    }
    for (int s = 0; s < 2; ++s) {
      P.l0c_s[s] = take(l0c, P.bq * P.bk * 4, fc);
      P.l0c_o[s] = take(l0c, P.bq * P.Ev * 4, fc);
    }
    // groups of two key blocks where L1 and UB take them, a unit walks four blocks or more and a
    // core two units or more (measured: a group's longer pipeline fill and drain cost more than
    // the rescales it saves when the cores run one unit each, or on 3 blocks), else one
    std::string why = "blocks that do not fit L1";
    for (const int64_t group : {2, 1})
      if ((group == 1 || (P.nkb >= 4 && P.units >= 2 * P.cores)) && (why = place_group(group)).empty()) return "";
    return why;
  }
  // L1 and UB for groups of `group` key blocks: "" or why they do not fit.
  std::string place_group(int64_t group) {
    Plan& P = p_plan_;
    const int64_t f = m_.cube_f16.m0;
    P.group = group;
    auto take = [](int64_t& at_, int64_t bytes, int64_t align) {
      const int64_t r = round_up(at_, align);
      at_ = r + bytes;
      return r;
    };
    int64_t l1 = 0;
    const int64_t a1 = m_.alignment(Buffer::L1);
    P.l1_q = take(l1, P.bq * P.Dp * 2, a1);
    for (int s = 0; s < 2 * group; ++s) {
      P.l1_k[s] = take(l1, P.bk * P.Dp * 2, a1);
      P.l1_v[s] = take(l1, P.bk * P.Ev * 2, a1);
      P.l1_p[s] = take(l1, P.bq * P.bk * 2, a1);
    }
    if (l1 > m_.capacity(Buffer::L1)) return "blocks that do not fit L1";
    // UB: every region whole repeats, a repeat of slack after the row-wise ones (their masked
    // repeats' footprints reach past the region). A group of two has two score tiles, each
    // block's P written (f16) over its own tile.
    int64_t ub = 0;
    const int64_t rb = bytes_per_repeat_;
    auto region = [&](int64_t bytes) { return take(ub, round_up(bytes, rb), rb); };
    P.ub_s = P.ub_s2 = region(P.bq * P.bk * 4);
    if (group == 2) P.ub_s2 = region(P.bq * P.bk * 4), P.ub_p[0] = P.ub_s, P.ub_p[1] = P.ub_s2;
    if (a_.causal_offset) P.ub_diag = region(P.bq * P.bk * 4);
    if (group == 1)
      for (int s = 0; s < 2; ++s) P.ub_p[s] = region(P.bq * P.bk * 2);
    P.ub_acc = region(P.bq * P.Ev * 4);
    P.ub_pv = region(P.bq * P.Ev * 4);
    P.ub_ones = region(P.bk * f * 2);
    P.ub_tmp = region(P.bq * f * 4 + rb);
    P.ub_bc = region(P.bq * f * 4 + rb);
    P.ub_bcc = region(P.bq * f * 4 + rb);
    P.ub_out = region(P.bq * P.Ep * dtype_bytes(a_.out.dtype));
    for (int s = 0; s < 2; ++s) P.ub_m[s] = region(P.bq * 4 + rb);
    P.ub_bm = region(P.bq * 4 + rb);
    for (int s = 0; s < 2; ++s) P.ub_c[s] = region(P.bq * 4 + rb);
    // the folded scale's work sits at each unit's start, before its first scores (measured on
    // davinci-910, d128: 6 % faster at 19 key blocks, 3 % slower at 10, 12 % slower at 5)
    P.fold_scale = scale_foldable_ && P.nkb >= 16;
    if (P.fold_scale || staged(P.D, a_.q.stride(a_.query.var), true)) P.ub_stage_q = region(P.bq * P.Dp * 2);
    if (staged(P.D, a_.k.stride(a_.key.var))) P.ub_stage_k = region(P.bk * P.Dp * 2);
    if (staged(P.E, a_.v.stride(a_.key.var))) P.ub_stage_v = region(P.bk * P.Ep * 2);
    P.ub_steps = round_up(ub, rb);
    P.ub_steps_bytes = m_.capacity(Buffer::UB) - P.ub_steps;
    if (P.ub_steps_bytes < 4 * P.bq * f * 4) return "blocks whose vector regions do not fit UB";
    return "";
  }

 private:
  // Whether GM rows of `cols` f16 columns (row stride `stride` elements) go to L1 through a UB
  // stage: columns that are not whole fractals, where the padding must be zero (Q's) or the rows
  // are closer than the padded width.
  bool staged(int64_t cols, int64_t stride, bool zero_padding = false) const {
    return cols % m_.cube_f16.k0 != 0 && (zero_padding || stride < round_up(cols, m_.cube_f16.k0));
  }

  const kernel::Attention& a_;
  const isa::NpuMachine& m_;
  const bool scale_foldable_;
  AttentionPlan& p_plan_;
  const int64_t bytes_per_repeat_, max_repeat_;
};

}  // namespace

std::string plan_attention(const kernel::Attention& a, const isa::NpuMachine& m, bool scale_foldable, AttentionPlan& plan) {
  plan = AttentionPlan{};
  return AttentionPlanner(a, m, scale_foldable, plan).plan();
}

}  // namespace tessel::emit_npu
