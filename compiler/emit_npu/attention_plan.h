// The NPU fused attention's plan, which compiler/emit_npu/attention.cc carries out: query blocks
// (bq rows) and key blocks (bk keys), the work units and their cores, causal sections (the key
// blocks each query block sees), where K, V and P sit in L1 / L0A / L0B / L0C (two slots, one, or
// one region or two halves K and V take in turn), groups of key blocks that share one row maximum,
// whether the scores' scale is folded into Q, and the byte offset of every UB region.
//
// Takes the fused attention record (compiler/kernel/attention.h) and the NPU machine model, whose
// capacities, alignments and vector geometry bound every choice; gives the plan, or the reason no
// blocks fit (which the emitter's why_not() reports as its refusal). It decides from sizes only:
// no instruction is emitted, the record's expressions are not read (scale_foldable: the emitter
// found the first step's score * c, see attention.cc).
// Part of compiler/emit_npu.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/kernel/attention.h"
#include "isa/npu_machine.h"

namespace tessel::emit_npu {

// The plan: blocks, slots and UB placement (bytes).
struct AttentionPlan {
  int64_t S = 0, T = 0, D = 0, Dp = 0, E = 0, Ep = 0, batch = 1;
  // V's columns in L1 / L0B and the context's in L0C / UB: Ep, then one block of ones, so the cube's
  // P·V also gives each row's sum of p (in f32, across all 16 columns of that block: l broadcast)
  int64_t Ev = 0;
  int64_t bq = 0, bk = 0, nqb = 0, nkb = 0, units = 0, cores = 1;
  // Causal: one section per query block, each a loop over the batch points with the key blocks
  // that block sees (the diagonal's skipped blocks), where that is sooner than every block for
  // every unit. Unit (qb, b) goes to core (qb * batch + b) % cores, so every core has a share of
  // the heavy and the light query blocks; a core may have no batch point in a section (a loop of
  // no trip, which the sync pass judges as such).
  bool sections = false;
  std::vector<int64_t> blocks_seen;  // per query block: key blocks up to its last row's diagonal
  // L0B: K and V blocks in two slots each, in one slot each, or one region they take in turn
  // (the cube reads Kᵀ of block kb + 1 before V of block kb is loaded over it); L0A: P's slots
  // Pieces: two halves K and V take in turn piece by piece (pk keys each), the cube on one half
  // while MTE1 fills the other: each block's Q·Kᵀ and P·V are an mmad per piece.
  enum class L0b { TwoSlots, OneSlot, Pieces, Shared } l0b = L0b::TwoSlots;
  int64_t pk = 0;  // keys per piece (bk where the blocks are not cut in pieces)
  int64_t l0a_p_slots = 2;
  // L1, L0A, L0B, L0C
  // Key blocks per group (1 or 2): a group's score tiles share one row maximum, and the cube
  // accumulates their P·V in one L0C region, so the context is rescaled once per group.
  int64_t group = 1;
  int64_t l1_q = 0, l1_k[4]{}, l1_v[4]{}, l1_p[4]{};  // 2 x group slots (a group in flight, the next loading)
  int64_t l0a_q = 0, l0a_p[2]{};
  int64_t l0b_k[2]{}, l0b_v[2]{};
  int64_t l0c_s[2]{}, l0c_o[2]{};
  // UB
  int64_t ub_s = 0, ub_s2 = 0, ub_diag = 0, ub_p[2]{}, ub_acc = 0, ub_pv = 0, ub_tmp = 0, ub_bc = 0, ub_out = 0;
  int64_t ub_stage_q = -1, ub_stage_k = -1, ub_stage_v = -1;
  bool fold_scale = false;  // the first step's score * c computed as c Q (find_scale)
  int64_t ub_ones = 0, ub_m[2]{}, ub_bm = 0, ub_c[2]{}, ub_bcc = 0, ub_steps = 0, ub_steps_bytes = 0;
};

// "" with `plan` filled, or why the record's blocks do not fit the machine's buffers.
std::string plan_attention(const kernel::Attention& a, const isa::NpuMachine& m, bool scale_foldable, AttentionPlan& plan);

}  // namespace tessel::emit_npu
