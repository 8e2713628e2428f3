// tessel import of the whole networks kept under workloads/models/ (exported from PyTorch with
// export_params=False, so the files hold the graphs and the weights are def inputs): ResNet-50
// (torchvision, 1x3x64x64) and BERT-base (transformers, 12 layers, 1x16 tokens). Each imports, its
// program parses, and the def has the inputs and statements the graph implies. Their end-to-end runs
// on c and davinci-910 (with scripts/onnx_model_inputs.py's weights) are in workloads/README.md.
#include <doctest/doctest.h>

#include <string>

#include "compiler/frontend/frontend.h"
#include "compiler/onnx/importer.h"

namespace tessel::onnx_import {

namespace {
const std::string kModels = std::string(TESSEL_SOURCE_DIR) + "/workloads/models/";

int count_reductions_of(const ir::Function& f, ir::Reduction r) {
  int n = 0;
  for (const auto& s : f.statements) n += s.reduction == r;
  return n;
}
}  // namespace

TEST_CASE("onnx models: ResNet-50 from torchvision imports whole, 53 convolutions and the classifier as sums") {
  const ImportResult r = import_file(kModels + "resnet50_f32_1x3x64x64.onnx");
  const frontend::Module m = frontend::parse_module(r.tsl, "resnet50.tsl");
  REQUIRE(m.functions.size() == 1);
  const ir::Function& f = m.functions[0];
  CHECK(r.inputs.size() == 62);  // the image, 53 convolution weights (batch norm folded) and biases, fc
  CHECK(count_reductions_of(f, ir::Reduction::Sum) >= 54);  // 53 convolutions, the global pool, the fc
  CHECK(count_reductions_of(f, ir::Reduction::Max) == 1);   // the 3x3/2 max pool
  REQUIRE(r.outputs.size() == 1);
  CHECK(r.outputs[0]["shape"] == std::vector<int64_t>{1, 1000});
}

TEST_CASE("onnx models: BERT-base from transformers imports whole, token ids as i32, one output of 16 x 768") {
  const ImportResult r = import_file(kModels + "bert_base_f32_1x16.onnx");
  const frontend::Module m = frontend::parse_module(r.tsl, "bert.tsl");
  REQUIRE(m.functions.size() == 1);
  const ir::Function& f = m.functions[0];
  CHECK(f.find_tensor("input_ids"));
  CHECK(f.find_tensor("input_ids")->dtype == DType::I32);  // int64 held as i32
  CHECK(f.statements.size() > 600);
  REQUIRE(r.outputs.size() == 1);
  CHECK(r.outputs[0]["shape"] == std::vector<int64_t>{1, 16, 768});
}

}  // namespace tessel::onnx_import
