// Shared set-up of the tuner tests: a small GEMM on a DaVinci-like description with small levels
// (tests/tune/small-npu.yaml), and a deterministic fake measurer that records what it measured.
#pragma once

#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "compiler/frontend/frontend.h"
#include "compiler/tune/tuner.h"

namespace tessel::tune::testing {

inline const char* kMatmul =
    "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n"
    "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n"
    "}\n";

inline std::string small_target() { return std::string(TESSEL_SOURCE_DIR) + "/tests/tune/small-npu.yaml"; }

struct SmallGemm {
  frontend::Module module = frontend::parse_module(kMatmul, "matmul.tsl");
  const ir::Function& f = module.functions.at(0);
  CompileOptions options;
  explicit SmallGemm(int64_t size = 128, std::string target = small_target()) {
    options.target = std::move(target);
    options.sizes = {{"M", size}, {"N", size}, {"K", size}};
  }
};

// Costs from a fixed function of the tile sizes; remembers every key it measured.
class FakeMeasurer : public Measurer {
 public:
  std::string name() const override { return "fake"; }
  std::string unit() const override { return "cycles"; }
  std::vector<Measurement> measure(const std::vector<tile::TileSpec>& specs) override {
    std::vector<Measurement> out;
    for (const auto& s : specs) {
      Measurement m;
      m.key = s.axes.empty() ? "default" : s.to_string();
      m.ok = !fail.count(m.key);
      m.unit = unit();
      m.cost = m.ok ? (s.axes.empty() ? default_cost : cost(s)) : 0;
      if (!m.ok) m.error = "fake failure";
      keys.push_back(m.key);
      landed(out.size(), m);
      out.push_back(m);
    }
    return out;
  }
  static double cost(const tile::TileSpec& s) {
    double c = 1000;
    for (const auto& a : s.axes) c += std::abs(std::log2(double(a.outer)) - 6) * 100 + std::abs(std::log2(double(a.inner)) - 5) * 37;
    return c + double(std::hash<std::string>{}(s.to_string()) % 50);
  }
  std::vector<std::string> keys;
  double default_cost = 1e9;        // the target's own plan (an empty spec)
  std::set<std::string> fail;       // keys whose measurement fails
};

}  // namespace tessel::tune::testing
