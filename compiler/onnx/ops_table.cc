// The op-type table: ONNX op type -> translator, filled once from each family's registration. An
// operator of the training domain is keyed "ai.onnx.preview.training.OP".
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {

const Translator* find_translator(const std::string& op_type) {
  static const std::map<std::string, Translator> table = [] {
    std::map<std::string, Translator> t;
    add_elementwise_ops(t);
    add_shape_ops(t);
    add_contraction_ops(t);
    add_pool_norm_ops(t);
    add_index_ops(t);
    add_resize_ops(t);
    add_quantize_ops(t);
    add_einsum_ops(t);
    add_window_ops(t);
    add_bitshift_ops(t);
    add_topk_ops(t);
    add_recurrent_ops(t);
    add_stft_ops(t);
    add_nms_ops(t);
    add_det_ops(t);
    add_optimizer_ops(t);
    return t;
  }();
  const auto it = table.find(op_type);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace tessel::onnx_import
