// CUDA sources and helpers shared by the tests of tessel_gpu. The kernels are written by hand
// here: they test the runtime, not the (future) CUDA emitter.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gpu_backend/device_query.h"
#include "isa/base/f16.h"

namespace tessel::gpu::test {

// One warp per 16x16 tile of C; row-major A[M,K], B[K,N] f16, C[M,N] f32; M, N, K multiples of 16.
inline const char* kWmmaGemmSource = R"(
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void wmma_gemm(const half* A, const half* B, float* C, int M, int N, int K) {
  const int tm = blockIdx.y, tn = blockIdx.x;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(c, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(a, A + tm * 16 * K + k, K);
    wmma::load_matrix_sync(b, B + k * N + tn * 16, N);
    wmma::mma_sync(c, a, b, c);
  }
  wmma::store_matrix_sync(C + tm * 16 * N + tn * 16, c, N, wmma::mem_row_major);
}
)";

// s8 x s8 -> s32 on the integer tensor-core path (IMMA).
inline const char* kWmmaS8Source = R"(
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void wmma_s8(const signed char* A, const signed char* B, int* C) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> c;
  wmma::fill_fragment(c, 0);
  wmma::load_matrix_sync(a, A, 16);
  wmma::load_matrix_sync(b, B, 16);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(C, c, 16, wmma::mem_row_major);
}
)";

// Plain SIMT code: no tensor-core instruction may appear.
inline const char* kSimtSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void empty_kernel() {}
// Reverses n floats through dynamic shared memory (n * 4 bytes of it).
extern "C" __global__ void reverse_in_shared(const float* in, float* out, int n) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
}
)";

// The repository root: $TESSEL_SOURCE_DIR when set (a build carried to another machine), else the
// one the tests were configured from.
inline std::string source_dir() {
  const char* env = std::getenv("TESSEL_SOURCE_DIR");
  return env && *env ? env : TESSEL_SOURCE_DIR;
}

// A fresh, empty NVRTC cache for this process (so cache tests do not see earlier runs).
inline std::string use_fresh_cache_dir() {
  static std::string dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessel-gpu-test-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    REQUIRE(made != nullptr);
    return std::string(made);
  }();
  setenv("TESSEL_CACHE_DIR", dir.c_str(), 1);
  return dir;
}

// f16 bit patterns of values with few mantissa bits, so f32 sums of products are exact.
inline std::vector<uint16_t> random_f16(size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = f32_to_f16_bits(float(dist(gen)) / 8.0f);
  return v;
}

// Row-major C[M,N] = A[M,K] . B[K,N] in double.
inline std::vector<double> reference_gemm(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int m, int n,
                                          int k) {
  std::vector<double> c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) {
      const double av = f16_bits_to_f32(a[size_t(i) * k + p]);
      for (int j = 0; j < n; ++j) c[size_t(i) * n + j] += av * f16_bits_to_f32(b[size_t(p) * n + j]);
    }
  return c;
}

// True when a GPU is present; otherwise reports the skip and returns false.
inline bool have_gpu() {
  std::string why;
  if (device_count(&why) > 0) return true;
  MESSAGE("skipped: no GPU (" << why << ")");
  return false;
}

}  // namespace tessel::gpu::test
