// The CUDA emitter's fused attention program (Kernel::attention, compiler/kernel/attention.h): a
// softmax fused into its context contraction, computed in one pass over key blocks with a running
// maximum, sum and rescaled context per query row (online softmax); no S x T value is stored.
//
// Input: a kernel whose `attention` record is set (poly/online_softmax built it; `body` empty, no
// buffers, `tensors` = the def's inputs then outputs). Output: the program's source, launches,
// `--explain` lines, flops (the record's effective flops: causal blocks above the diagonal are not
// computed) and the NVRTC architecture.
//
// The code shapes, tried in this order:
//   0. the warpgroup MMA kernel (attention_wgmma.h), sm_90a, where attention_wgmma_obstacle allows
//      it (f16 / bf16, head dims 64 / 128, at least 64 query rows): emitted as it is, no plan here;
// then one plan (AttentionPlan) chosen from the record and the machine model:
//   1. mma.sync flash kernel (attention_mma.h), sm_80+: Q, K, V all f16 or all bf16, one head and
//      one value index (multiples of 16, at most 256) of unit stride, 16-byte aligned rows;
//   2. the SIMT online kernel (attention_simt.h) for everything else (any dtype, strides, head
//      dims; sm_75, which has no mma.sync kernel here yet: a WMMA form is not written);
//   either splits the keys over several blocks for decode shapes (too few blocks for the SMs and
//   a long key range): each block writes its rows' partial (m, l, acc) to scratch and a second
//   launch merges them (attention_pieces.h).
// `--explain` says which shape ran and why the ones before it could not.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/kernel/attention.h"
#include "compiler/kernel/kernel_ir.h"
#include "isa/gpu_machine.h"

namespace tessel::emit_cuda {

enum class AttentionShape : uint8_t { MmaFlash, Simt };

// One fused attention kernel's plan. MmaFlash: blocks of `query_block` rows (16 a warp) over key
// blocks of `key_block`, K / V in `stages` shared buffers. Simt: one warp a query row, `warps` a
// block, the keys in blocks of one per lane. key_splits > 1: the keys of a query block are cut into
// that many contiguous ranges, one block each, merged by a combine launch.
struct AttentionPlan {
  AttentionShape shape = AttentionShape::Simt;
  int query_block = 1, key_block = 32, warps = 4, stages = 1;
  int key_splits = 1;
  bool q_in_registers = false;  // MmaFlash: Q's A fragments loaded once (else ldmatrix per block)
  // MmaFlash, query_block 16: the warps share the 16 query rows and take key_block / warps keys of
  // each key block each (decode shapes); their states are merged at the end
  bool key_warps = false;
  std::string to_string() const;  // "attention/mma/128x64/w8/st2", "attention/simt/w4" (+ "/kw", "/ks8")
  // to_string's form back (q_in_registers false); UserError naming the bad field
  static AttentionPlan parse(const std::string& text);
  static bool is_plan_text(const std::string& text);  // starts with "attention/"
};

// Appends the fused attention program of k.attention: source, launches, explain, flops.
void emit_attention_program(const kernel::Kernel& k, const kernel::Attention& a, const CudaOptions& options, const isa::GpuMachine& m,
                            std::ostringstream& os, CudaProgram& p);

// The plan emit_attention_program uses, and why the shapes before it could not be used.
AttentionPlan plan_attention(const kernel::Attention& a, const isa::GpuMachine& m, std::string* why_not_tensor_cores = nullptr);

}  // namespace tessel::emit_cuda
