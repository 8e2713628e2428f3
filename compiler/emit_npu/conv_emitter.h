// Internal to the NPU convolution path (conv.h): carries out a ConvPlan (compiler/tile/
// npu_conv_plan.h) for one matched convolution (conv_match.h): GM tensors, scratch layout copies,
// the per-core weights, the image loop with its channel slices, the write-back.
#pragma once

#include <string>

#include "compiler/emit_npu/conv_epilogue.h"
#include "compiler/emit_npu/conv_match.h"
#include "compiler/emit_npu/emit_npu.h"

namespace tessel::emit_npu::conv_detail {

// Emits the convolution `cv` (`orig`: as matched, its channels before padding) into `out`;
// `refusal` non-null: a dry run recording the first refusal instead of throwing it.
void emit_planned(const kernel::Kernel& k, const isa::NpuMachine& m, const Conv& orig, const Conv& cv, const tile::ConvPlan& plan,
                  ConvEpilogue* epi, NpuKernel& out, std::string* refusal = nullptr);

}  // namespace tessel::emit_npu::conv_detail
