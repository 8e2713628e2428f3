// tessel import of the training domain's optimizer updates (compiler/onnx/ops_optimizer.cc):
// ONNX's node tests of Adagrad, Adam and Momentum (one group and several; standard and nesterov)
// element by element against their expected outputs; Gradient, of the same domain, refused naming
// the node.
#include <doctest/doctest.h>

#include "compiler/onnx/importer.h"
#include "isa/base/error.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

TEST_CASE("onnx node tests: Adagrad, Adam, Momentum and Nesterov momentum updates, element by element") {
  // test_adam_multiple is left out: ONNX's data is made with epsilon 1e-2, its node carries the default 1e-6
  for (const char* name : {"test_adagrad", "test_adagrad_multiple", "test_adam", "test_momentum",
                           "test_momentum_multiple", "test_nesterov_momentum"}) {
    CAPTURE(name);
    check_node_test(name, 1e-5);
  }
}

TEST_CASE("onnx training domain: Gradient is refused naming the node and its domain") {
  Graph g(13);
  auto* op = g.m.add_opset_import();
  op->set_domain("ai.onnx.preview.training");
  op->set_version(1);
  g.input("x", {2});
  auto* n = g.node("Gradient", {"x"}, {"dx"}, "grad");
  n->set_domain("ai.onnx.preview.training");
  g.output("dx", {2});
  CHECK_THROWS_WITH_AS(import_model(g.m, "t.onnx"),
                       doctest::Contains("node 'grad' (Gradient): unsupported: no translation of Gradient (domain 'ai.onnx.preview.training')"),
                       UserError);
}

}  // namespace
}  // namespace tessel::onnx_import
