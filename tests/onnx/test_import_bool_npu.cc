// ONNX bool is held as i8 0/1 (compiler/onnx/tensor_proto.cc dtype_of): an imported comparison,
// its Not / And and a Where reading it compile for davinci-910 and davinci-310 (the NPU computes
// i8, not u8) and the simulated outputs equal the reference interpreter's, element by element,
// with naive and pruned sync, race-free.
#include <doctest/doctest.h>

#include "compiler/onnx/importer.h"
#include "tests/emit_npu/npu_case.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

// less = x < y, keep = not(less) and (x > 0) (bool outputs), z = where(less, x, y).
Graph bool_graph() {
  Graph g;
  g.input("x", {4, 32});
  g.input("y", {4, 32});
  g.output("less", {4, 32}, TP::BOOL);
  g.output("keep", {4, 32}, TP::BOOL);
  g.output("z", {4, 32});
  g.initializer("zero", {1}, {0});
  g.node("Less", {"x", "y"}, {"less"});
  g.node("Not", {"less"}, {"ge"});
  g.node("Greater", {"x", "zero"}, {"pos"});
  g.node("And", {"ge", "pos"}, {"keep"});
  g.node("Where", {"less", "x", "y"}, {"z"});
  return g;
}

void check_on(const std::string& target) {
  const ImportResult r = import_model(bool_graph().m, "bool.onnx");
  CHECK(r.tsl.find("i8(") != std::string::npos);
  CHECK(r.tsl.find("u8") == std::string::npos);
  auto c = npu_test::source_case(r.tsl, target);
  const ir::Function& f = c->module.functions.at(0);
  c->inputs = interp::random_inputs(f, {}, 3);
  c->expected = interp::evaluate(f, {}, c->inputs);
  for (const auto& [name, t] : c->expected)
    if (name != "z") CHECK(t.dtype == DType::I8);
  // the random inputs give both outcomes of each comparison
  const NpyArray& less = c->expected.at("less");
  int ones = 0;
  for (uint8_t b : less.data) {
    CHECK(b <= 1);
    ones += b;
  }
  CHECK(ones > 0);
  CHECK(ones < int(less.data.size()));
  npu_test::verified_cycles(*c, true);
}

TEST_CASE("onnx import: bool outputs are i8 0/1 and an imported comparison, Not, And and Where run on davinci-910") {
  check_on(npu_test::kTarget);
}

TEST_CASE("onnx import: bool outputs are i8 0/1 and an imported comparison, Not, And and Where run on davinci-310") {
  check_on(npu_test::kTarget310);
}

}  // namespace
}  // namespace tessel::onnx_import
