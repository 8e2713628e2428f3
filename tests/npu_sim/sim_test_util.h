// Helpers shared by the simulator tests: deterministic inputs, running an example, references.
#pragma once

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "isa/base/f16.h"
#include "isa/base/npy.h"
#include "isa/hierarchy.h"
#include "isa/npu_program.h"
#include "npu_sim/simulator.h"

namespace tessel::npu_sim::testing {

inline const isa::Hierarchy& davinci() {
  static const isa::Hierarchy h = isa::load_hierarchy(std::string(TESSEL_SOURCE_DIR) + "/isa/targets/davinci-910.yaml");
  return h;
}

inline npu::Program example(const std::string& name) {
  return npu::load_program(std::string(TESSEL_SOURCE_DIR) + "/npu_sim/examples/" + name);
}

// f16 values with a few significant bits spread over several binades (exercises rounding).
inline NpyArray random_f16(std::vector<int64_t> shape, uint32_t seed) {
  NpyArray a;
  a.dtype = DType::F16;
  a.shape = std::move(shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  a.data.resize(a.element_count() * 2);
  for (int64_t i = 0; i < a.element_count(); ++i) {
    const uint16_t h = f32_to_f16_bits(dist(rng));
    std::memcpy(a.data.data() + 2 * i, &h, 2);
  }
  return a;
}

inline float f16_at(const NpyArray& a, int64_t i) {
  uint16_t h;
  std::memcpy(&h, a.data.data() + 2 * i, 2);
  return f16_bits_to_f32(h);
}

inline float f32_at(const NpyArray& a, int64_t i) {
  float f;
  std::memcpy(&f, a.data.data() + 4 * i, 4);
  return f;
}

// C[m][n] = sum over k in ascending order of A[m][k] * B[k][n], in f32 (the cube's order).
inline std::vector<float> reference_gemm(const NpyArray& a, const NpyArray& b, int64_t M, int64_t N, int64_t K) {
  std::vector<float> c(M * N, 0.0f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += f16_at(a, i * K + k) * f16_at(b, k * N + j);
      c[i * N + j] = acc;
    }
  return c;
}

}  // namespace tessel::npu_sim::testing
