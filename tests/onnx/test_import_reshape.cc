// tessel import's Reshape family (compiler/onnx/ops_shape.cc): a reshape keeps the row-major
// element order (checked element by element on the interpreter), and every statement it writes
// reads each index with one division constant at most — a group of three or more merged input
// dimensions goes through pairwise merges, the form the NPU's vector lowering maps. Shapes whose
// groups need no merge stay one statement.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <sstream>

#include "compiler/onnx/importer.h"
#include "compiler/onnx/translate.h"
#include "tests/onnx/onnx_graph.h"

namespace tessel::onnx_import {
namespace {

using namespace testing;

// The distinct constants each statement line divides or takes a modulo by, the largest count.
size_t most_divisors_per_statement(const std::string& tsl) {
  static const std::regex divisor(R"([/%] (\d+))");
  std::istringstream lines(tsl);
  size_t most = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find('=') == std::string::npos || line.rfind("  #", 0) == 0) continue;
    std::set<std::string> constants;
    for (std::sregex_iterator m(line.begin(), line.end(), divisor), end; m != end; ++m) constants.insert((*m)[1]);
    most = std::max(most, constants.size());
  }
  return most;
}

size_t statements(const std::string& tsl) {
  size_t n = 0;
  std::istringstream lines(tsl);
  for (std::string line; std::getline(lines, line);)
    if (line.find(") = ") != std::string::npos) ++n;
  return n;
}

// Reshapes x (a ramp of its element count) from `in` to `out` with a constant shape input.
ImportResult check_reshape(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  Graph g;
  g.input("x", in);
  std::vector<double> shape(out.begin(), out.end());
  g.initializer("shape", {int64_t(out.size())}, shape, TP::INT64);
  g.output("y", out);
  g.node("Reshape", {"x", "shape"}, {"y"});
  const auto x = ramp(element_count(in));
  ImportResult r;
  const auto got = run(g, {{"x", f32(in, x)}}, &r);
  INFO(r.tsl);
  CHECK(got.at("y").shape == out);
  check_close(got.at("y"), x);  // row-major order kept: the same flat data
  CHECK(most_divisors_per_statement(r.tsl) <= 1);
  return r;
}

}  // namespace

TEST_CASE("onnx import: Reshape merging four dimensions into one reads with one divisor per statement") {
  const ImportResult r = check_reshape({2, 3, 4, 5}, {2, 60});
  CHECK(statements(r.tsl) == 2);  // 4x5 -> 20, then the output reads (k / 20, k % 20)
}

TEST_CASE("onnx import: Reshape regrouping dimensions (two into two) goes through a merged dimension") {
  check_reshape({2, 3, 4}, {4, 2, 3});
  check_reshape({4, 6}, {3, 8});
}

TEST_CASE("onnx import: Reshape with size-1 dimensions inside a merged group keeps the element order") {
  check_reshape({2, 1, 3, 1, 4}, {24});
  check_reshape({1, 6, 1, 5}, {5, 6});
}

TEST_CASE("onnx import: a Reshape whose groups need one divisor at most stays one statement") {
  CHECK(statements(check_reshape({6, 4}, {24}).tsl) == 1);   // two into one: j / 4, j % 4
  CHECK(statements(check_reshape({24}, {2, 3, 4}).tsl) == 1);  // a split: affine
  CHECK(statements(check_reshape({2, 3, 4}, {6, 4}).tsl) == 1);
}

TEST_CASE("onnx import: ONNX node tests of Flatten and Reshape that merge several dimensions") {
  check_node_test("test_flatten_axis0", 1e-6);
  check_node_test("test_flatten_negative_axis4", 1e-6);
  check_node_test("test_reshape_reordered_all_dims", 1e-6);
  check_node_test("test_reshape_one_dim", 1e-6);
}

}  // namespace tessel::onnx_import
