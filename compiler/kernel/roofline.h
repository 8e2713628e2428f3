// Roofline of a kernel (analysis; rewrites nothing): the fewest cycles the machine model allows
// for the operator, whatever the mapping, and which bound sets them. DESIGN.md "Who decides what":
// a mapping is judged against it; `tessel run`, `bench npu` and the reports print the % reached.
//
// Input: a Kernel (its tensor-IR function at the kernel's sizes, its global tensors and its matched
// contraction) — run after the pipeline built the kernel IR; nothing reads the loop tree. Output:
// KernelWork (target-neutral counts) and, with an isa::NpuMachine, NpuRoofline. Two steps:
//
// 1. count_work — what the operator must do at least, counted from the tensor IR:
//    - MACs: a statement `C(..) +=! a * b` whose two factors are each a tensor read (through casts)
//      of one dtype is a contraction; it does one multiply-accumulate per point of its iteration
//      domain (the box of its indices, reductions included, so a padded convolution counts its
//      taps on the zero border). They are cube MACs of that operand dtype.
//    - vector element operations: every other statement does, per domain point, one operation per
//      operator node of its right-hand side (casts, compares and select included; reads,
//      constants and size parameters are none; a built-in the target composes of several
//      instructions counts those, VectorOpCost) plus one for the accumulation of a reduction. An
//      operation's width is the widest dtype among its result and operands (a condition counts its
//      operands'), so `f16(x / y)` with f32 x costs two 4-byte operations per point. An operation
//      the same text computes over the same domain in an earlier statement is not counted again
//      (softmax's `f32(X(m, n))` is converted once). Padding producers the contraction inlined
//      into its loads (Contraction::inlined) cost nothing: the copies do that work.
//    - GM bytes: each input read once and each output written once (global temporaries between
//      fused groups are the mapping's cost, not the operator's).
//    - a one-hot gather (gather_form.h) does no element operations: it reads its indices and the
//      rows they select (at most the table's rows) and writes its output.
// 2. npu_roofline — bounds in cycles, each over every core of the chip (the roofline is the
//    chip's, so a mapping on fewer cores shows a low fraction):
//    - cube  = sum over operand dtypes of MACs / (cores x m0 n0 k0 / cycles of that cube shape);
//      a contraction whose dtype has no cube shape is vector work (a multiply and an add per point);
//    - vector = operation bytes / (cores x vector bytes_per_repeat): one repeat per cycle;
//    - scalar = the fewest vector instructions (max_repeat repeats each) per core x scalar_cycles
//      (the issue cost of the vector work; the cube's instructions are few and are not counted);
//    - GM = max(read + write bytes / shared GM bandwidth, read bytes / (cores x fastest path out of
//      GM), write bytes / (cores x fastest path into GM));
//    - latency = the shortest path latency out of GM + the start-up of each unit the work uses
//      (cube, vector) + the shortest path latency into GM: the first byte in, the last byte out.
//    roofline cycles = max(cube, vector, scalar, GM) + latency. The bound that binds is the largest
//    of the four, or `latency` when the latency is larger than all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compiler/kernel/kernel_ir.h"
#include "isa/npu_machine.h"

namespace tessel::kernel {

struct KernelWork {
  std::map<DType, uint64_t> contraction_macs;  // per operand dtype (f16, i8, f32, ...)
  uint64_t vector_ops = 0;                     // element operations outside contractions
  double vector_op_bytes = 0;                  // sum of their widths in bytes
  uint64_t gm_read_bytes = 0, gm_write_bytes = 0;
  uint64_t macs() const;
};
// Element operations a target spends on one operator node (default: 1 per node). A target that
// composes a built-in function from several instructions passes its count (the NPU:
// emit_npu::vector_instructions, erf 44), so the vector bound counts the work it must do.
using VectorOpCost = std::function<int(const ir::Expr&)>;
KernelWork count_work(const Kernel& k, const VectorOpCost& cost = {});

// X(enumerator, name)
#define TESSEL_ROOFLINE_BOUNDS(X) \
  X(Cube, "cube")                 \
  X(Vector, "vector")             \
  X(Scalar, "scalar")             \
  X(GM, "GM")                     \
  X(Latency, "latency")

enum class RooflineBound : uint8_t {
#define TESSEL_X(e, s) e,
  TESSEL_ROOFLINE_BOUNDS(TESSEL_X)
#undef TESSEL_X
};
const char* roofline_bound_name(RooflineBound b);
std::optional<RooflineBound> parse_roofline_bound(const std::string& name);

struct NpuRoofline {
  KernelWork work;
  uint64_t cube_macs = 0;          // MACs the cube's shapes take (the rest is in the vector work)
  uint64_t vector_ops = 0;         // the kernel's vector operations, contractions without a cube shape included
  double vector_op_bytes = 0;
  int cores = 0;                   // the chip's
  double cube_cycles = 0, vector_cycles = 0, scalar_cycles = 0, gm_cycles = 0, latency_cycles = 0;
  double cycles = 0;               // max(cube, vector, scalar, GM) + latency
  RooflineBound binds = RooflineBound::Latency;
  // roofline cycles / measured cycles: 1 is the roofline, 0.5 twice as slow
  double fraction_of(uint64_t measured_cycles) const;
};
NpuRoofline npu_roofline(const KernelWork& work, const isa::NpuMachine& m);
inline NpuRoofline npu_roofline(const Kernel& k, const isa::NpuMachine& m, const VectorOpCost& cost = {}) {
  return npu_roofline(count_work(k, cost), m);
}

}  // namespace tessel::kernel
