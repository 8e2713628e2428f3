// The layer suites of issue 18 (workloads/resnet50_layers.yaml, workloads/bert_base_layers.yaml):
// every entry loads and binds its def's parameters, and the layers with their multiplicities
// (tag times_N) add up to the networks' published multiply-accumulate counts.
#include <doctest/doctest.h>

#include <string>

#include "compiler/frontend/suite.h"

using namespace tessel;

namespace {

int64_t times(const frontend::SuiteEntry& e) {
  int64_t n = 0;
  for (const auto& t : e.tags)
    if (t.rfind("times_", 0) == 0) {
      CHECK(n == 0);  // one multiplicity per entry
      n = std::stoll(t.substr(6));
    }
  return n;
}

bool tagged(const frontend::SuiteEntry& e, const std::string& tag) {
  for (const auto& t : e.tags)
    if (t == tag) return true;
  return false;
}

// multiply-accumulates of one entry (GEMM, batched GEMM, NHWC convolution)
int64_t macs(const frontend::SuiteEntry& e) {
  const auto& s = e.shape;
  if (e.def == "matmul" || e.def == "matmul_bias_gelu") return s.at("M") * s.at("N") * s.at("K");
  if (e.def == "batch_matmul") return s.at("B") * s.at("M") * s.at("N") * s.at("K");
  const int64_t P = s.count("P") ? s.at("P") : s.at("H"), Q = s.count("Q") ? s.at("Q") : s.at("W");
  return s.at("N") * P * Q * s.at("K") * s.at("C") * s.at("R") * s.at("S");
}

}  // namespace

TEST_CASE("ResNet-50 layer suite: 23 distinct convolutions per batch, 4.087 G MACs at batch 1") {
  const frontend::Suite s = frontend::load_suite("workloads/resnet50_layers.yaml");
  frontend::check_suite(s);
  int64_t b1 = 0, b32 = 0, n1 = 0, n32 = 0;
  for (const auto& e : s.entries) {
    REQUIRE(times(e) > 0);
    if (tagged(e, "b1")) b1 += macs(e) * times(e), ++n1;
    if (tagged(e, "b32")) b32 += macs(e) * times(e), ++n32;
  }
  CHECK(n1 == 23);
  CHECK(n32 == 23);
  // torchvision's ResNet-50 v1.5: 4.089 G MACs with the 2048 x 1000 classifier (2,048,000), which is no convolution
  CHECK(b1 == 4089184256 - 2048000);
  CHECK(b32 == 32 * b1);
}

TEST_CASE("BERT-base layer suite: the GEMMs of one encoder layer at 4 (sequence, batch) points") {
  const frontend::Suite s = frontend::load_suite("workloads/bert_base_layers.yaml");
  frontend::check_suite(s);
  CHECK(s.entries.size() == 20);
  for (const auto& e : s.entries) {
    REQUIRE(times(e) > 0);
  }
  // sequence 128, batch 1: projections 4 x 128 x 768 x 768, scores and context 12 x 128 x 128 x 64
  // each, FFN 2 x 128 x 768 x 3072
  int64_t total = 0;
  for (const auto& e : s.entries)
    if (tagged(e, "s128") && tagged(e, "b1")) total += macs(e) * times(e);
  CHECK(total == 4 * 128 * 768 * 768 + 2 * 12 * 128 * 128 * 64 + 2 * 128 * 768 * 3072);
}
