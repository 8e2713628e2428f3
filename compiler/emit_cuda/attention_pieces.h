// What the CUDA emitter's fused attention kernels share (attention_kernel.h): the text pieces that
// depend only on the record (kernel::Attention), not on the code shape.
//
//   - element types and conversions of the operands, bf16 included (the rest of the emitter has no
//     bf16: cuda_expr.h's storage types stop at f16);
//   - the kernel's parameters (Kernel::tensors in order, then the scratch pointer);
//   - a batch point from a flat index, and an operand's element offset over the role indices;
//   - the record's expressions as device lambdas: `tessel_logit(score, r_i, r_j)` applies the
//     steps in order (each rounded to its dtype), `tessel_store(acc, l, r_i, r_e..)` finishes a
//     context element (O = acc or acc / l, Z = l, the epilogue) and writes it to the output.
// Role indices are C variables `r_<role>` (long long) of the record's role names; a lambda reads
// the batch indices and the tensors from the enclosing kernel.
#pragma once

#include <string>

#include "compiler/kernel/attention.h"
#include "compiler/kernel/kernel_ir.h"

namespace tessel::emit_cuda::attention {

// C type of an element as stored: __half, __nv_bfloat16, float, ...
std::string elem_type(DType t);
// A stored element as a float value (integers as their own type).
std::string load_elem(DType t, const std::string& stored);
// A float value as the stored type (round to nearest).
std::string store_elem(DType t, const std::string& value);
// A float value rounded to a 16-bit float type (f32 and others unchanged).
std::string rounded(DType t, const std::string& value);
// The C variable of a role index ("r_i").
std::string role_var(const std::string& role);

// Device helpers every attention source needs after cuda_prelude() (which has tessel_rbf16): <cuda_bf16.h>.
std::string helpers();
// "T0* __restrict__ t_Q, ..., unsigned char* __restrict__ scratch".
std::string kernel_parameters(const kernel::Kernel& k);
// Declarations of the batch role variables from the flat batch index `flat` (outer -> inner).
std::string batch_indices(const kernel::Attention& a, const std::string& flat, const std::string& pad);
// base + sum coeff * r_var over the roles of `o` that are in `roles` (others left out), as a long long
// expression.
std::string operand_offset(const kernel::AttentionOperand& o, const std::vector<std::string>& roles);
// sum over `dims` of o's stride along the dim times its index in the row-major flat position
// `flat` of `dims` (a long long expression).
std::string flat_offset(const kernel::AttentionOperand& o, const std::vector<kernel::ContractionDim>& dims, const std::string& flat);
// `tessel_store(acc, l, i, ..)` with the value indices of the flat value position `flat`.
std::string store_call(const kernel::Attention& a, const std::string& acc, const std::string& l, const std::string& i,
                       const std::string& flat);
// The role names of the batch indices.
std::vector<std::string> batch_roles(const kernel::Attention& a);

// `auto tessel_logit = [&](float x, long long r_i, long long r_j) -> float {..};` (the score as
// the def stores it, then the steps in order).
std::string logit_lambda(const kernel::Kernel& k, const kernel::Attention& a, const std::string& pad);
// `auto tessel_store = [&](float acc, float l, long long r_i, long long r_e..) {..};` with one
// parameter per value index (Attention::value order).
std::string store_lambda(const kernel::Kernel& k, const kernel::Attention& a, const std::string& pad);

// Key splits (AttentionPlan::key_splits): each split of a query row leaves (m, l) and its context
// row in global scratch; floats, rows = batch x query rows:
//   [rows][splits][2]  m (the running maximum, -inf when every logit was) and l
//   [rows][splits][E]  acc (the unnormalised context, scaled by exp(-m); E = the value elements)
int64_t partial_bytes(const kernel::Attention& a, int splits);
// The combine kernel (named `name`): per row and value element, M = max m, L = sum l exp(m - M),
// O = sum acc exp(m - M), then tessel_store; one thread an element, grid-stride.
std::string combine_kernel(const kernel::Kernel& k, const kernel::Attention& a, int splits, const std::string& name);
int64_t value_elements(const kernel::Attention& a);

}  // namespace tessel::emit_cuda::attention
