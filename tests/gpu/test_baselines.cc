// cuBLAS and cuDNN baselines (gpu_backend/cublas_gemm.h, cudnn_conv.h) against CPU references, on
// small shapes; each case skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "gpu_backend/cublas_gemm.h"
#include "gpu_backend/cudnn_conv.h"
#include "gpu_backend/runtime.h"
#include "gpu_backend/timing.h"
#include "isa/base/error.h"
#include "tests/gpu/gpu_test_kernels.h"

using namespace tessel;
using namespace tessel::gpu;

TEST_CASE("cublas: row-major C = A.B (f16 in, f32 out) matches the CPU exactly, also non-square and odd sizes") {
  if (!test::have_gpu()) return;
  Context::get();
  CublasHandle handle;
  Stream s;
  for (auto [m, n, k] : {std::tuple{512, 16, 512}, {33, 70, 17}, {1, 5, 3}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const auto a = test::random_f16(size_t(m) * k, 11), b = test::random_f16(size_t(k) * n, 12);
    DeviceBuffer da = DeviceBuffer::from_vector(a), db = DeviceBuffer::from_vector(b);
    DeviceBuffer dc(size_t(m) * n * 4);
    dc.fill_bytes(0xff);
    cublas_gemm_f16(handle, s, {m, n, k}, da.ptr(), db.ptr(), dc.ptr());
    s.synchronize();
    const auto got = dc.download_as<float>();
    const auto want = test::reference_gemm(a, b, m, n, k);
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += double(got[i]) != want[i];
    CHECK(wrong == 0);
  }
  // f16 output: rounded once.
  const int m = 64, n = 32, k = 48;
  const auto a = test::random_f16(size_t(m) * k, 21), b = test::random_f16(size_t(k) * n, 22);
  DeviceBuffer da = DeviceBuffer::from_vector(a), db = DeviceBuffer::from_vector(b), dc(size_t(m) * n * 2);
  cublas_gemm_f16(handle, s, {m, n, k}, da.ptr(), db.ptr(), dc.ptr(), DType::F16);
  s.synchronize();
  const auto got = dc.download_as<uint16_t>();
  const auto want = test::reference_gemm(a, b, m, n, k);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(f16_bits_to_f32(got[i]) == round_to_f16(float(want[i])));
  CHECK_THROWS_AS(cublas_gemm_f16(handle, s, {0, 1, 1}, da.ptr(), db.ptr(), dc.ptr()), UserError);
  CHECK_THROWS_AS(cublas_gemm_f16(handle, s, {1, 1, 1}, da.ptr(), db.ptr(), dc.ptr(), DType::I8), UserError);
}

TEST_CASE("cublas: timed in both harnesses") {
  if (!test::have_gpu()) return;
  Context::get();
  CublasHandle handle;
  Stream s;
  const GemmShape shape{512, 16, 512};
  DeviceBuffer da(shape.m * shape.k * 2), db(shape.k * shape.n * 2), dc(shape.m * shape.n * 4);
  da.fill_bytes(0x3c), db.fill_bytes(0x3c);  // 0x3c3c: about 1.06 in f16
  const TimedCall call = [&](CUstream st) { cublas_gemm_f16(handle, st, shape, da.ptr(), db.ptr(), dc.ptr()); };
  const Timing t1 = time_on_stream(call, s), t2 = time_in_graph(call, s);
  MESSAGE("cuBLAS 512x16x512: " << t1.median_us << " us/call on a stream, " << t2.median_us << " us/call in a graph");
  CHECK(t1.median_us > 0);
  CHECK(t2.median_us > 0);
}

TEST_CASE("cudnn: NHWC convolution (padding 1, 3x3) matches the CPU reference") {
  if (!test::have_gpu()) return;
  Context::get();
  const ConvShape sh{.n = 2, .h = 6, .w = 5, .c = 16, .k = 32, .r = 3, .s = 3, .pad_h = 1, .pad_w = 1};
  const auto x = test::random_f16(size_t(sh.n) * sh.h * sh.w * sh.c, 31);
  const auto w_rsck = test::random_f16(size_t(sh.r) * sh.s * sh.c * sh.k, 32);
  std::vector<uint8_t> w_bytes(w_rsck.size() * 2);
  std::memcpy(w_bytes.data(), w_rsck.data(), w_bytes.size());
  const auto w_krsc = filter_rsck_to_krsc(w_bytes, sh, 2);
  CudnnConv conv(sh);
  MESSAGE("cuDNN picked " << conv.algorithm_name() << ", workspace " << conv.workspace_bytes() << " bytes");
  const int p = sh.out_h(), q = sh.out_w();
  CHECK(p == sh.h);
  CHECK(q == sh.w);
  DeviceBuffer dx = DeviceBuffer::from_vector(x), dw = DeviceBuffer::from_host(w_krsc);
  DeviceBuffer dy(size_t(sh.n) * p * q * sh.k * 2);
  dy.fill_bytes(0xff);
  Stream s;
  conv.run(s, dx.ptr(), dw.ptr(), dy.ptr());
  s.synchronize();
  const auto y = dy.download_as<uint16_t>();
  size_t wrong = 0;
  for (int n = 0; n < sh.n; ++n)
    for (int i = 0; i < p; ++i)
      for (int j = 0; j < q; ++j)
        for (int k = 0; k < sh.k; ++k) {
          double acc = 0;
          for (int r = 0; r < sh.r; ++r)
            for (int t = 0; t < sh.s; ++t)
              for (int c = 0; c < sh.c; ++c) {
                const int h = i + r - sh.pad_h, ww = j + t - sh.pad_w;
                if (h < 0 || h >= sh.h || ww < 0 || ww >= sh.w) continue;
                acc += double(f16_bits_to_f32(x[((size_t(n) * sh.h + h) * sh.w + ww) * sh.c + c])) *
                       f16_bits_to_f32(w_rsck[((size_t(r) * sh.s + t) * sh.c + c) * sh.k + k]);
              }
          const float got = f16_bits_to_f32(y[((size_t(n) * p + i) * q + j) * sh.k + k]);
          wrong += got != round_to_f16(float(acc));
        }
  CHECK(wrong == 0);
  const Timing t = time_in_graph([&](CUstream st) { conv.run(st, dx.ptr(), dw.ptr(), dy.ptr()); }, s);
  CHECK(t.median_us > 0);
  CHECK_THROWS_AS(CudnnConv(ConvShape{.n = 1, .h = 2, .w = 2, .c = 4, .k = 4, .r = 3, .s = 3}), UserError);
}

TEST_CASE("cudnn: RSCK -> KRSC filter reordering (no GPU needed)") {
  const ConvShape sh{.n = 1, .h = 1, .w = 1, .c = 2, .k = 3, .r = 1, .s = 2};
  std::vector<uint8_t> rsck(12);
  for (int i = 0; i < 12; ++i) rsck[i] = uint8_t(i);  // index ((r*S+s)*C+c)*K+k
  const auto krsc = filter_rsck_to_krsc(rsck, sh, 1);
  // KRSC index ((k*R+r)*S+s)*C+c holds RSCK element (s*C+c)*K+k.
  CHECK(krsc == std::vector<uint8_t>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11});
}
