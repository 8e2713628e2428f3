// Driver-API runtime and timing (gpu_backend/runtime.h, timing.h). Each case skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "gpu_backend/error.h"
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/runtime.h"
#include "gpu_backend/timing.h"
#include "isa/base/error.h"
#include "tests/gpu/gpu_test_kernels.h"

using namespace tessel;
using namespace tessel::gpu;

TEST_CASE("runtime: a WMMA GEMM compiled through NVRTC runs and matches the CPU reference exactly") {
  if (!test::have_gpu()) return;
  Context& ctx = Context::get();
  const CompiledCubin c = compile_to_cubin(test::kWmmaGemmSource, {.arch = ctx.device().properties.arch});
  Module module(c.cubin);
  Kernel k = module.function("wmma_gemm");
  for (auto [m, n, kk] : {std::tuple{16, 16, 16}, {64, 48, 96}, {128, 256, 512}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(kk);
    const auto a = test::random_f16(size_t(m) * kk, 1 + m), b = test::random_f16(size_t(kk) * n, 2 + n);
    DeviceBuffer da = DeviceBuffer::from_vector(a), db = DeviceBuffer::from_vector(b);
    DeviceBuffer dc(size_t(m) * n * sizeof(float));
    dc.fill_bytes(0xff);  // NaN everywhere: an unwritten element cannot pass
    Stream s;
    k.launch({.grid = {unsigned(n / 16), unsigned(m / 16), 1}, .block = {32, 1, 1}}, s, da.ptr(), db.ptr(), dc.ptr(), m,
             n, kk);
    s.synchronize();
    const auto got = dc.download_as<float>();
    const auto want = test::reference_gemm(a, b, m, n, kk);
    size_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += double(got[i]) != want[i];
    CHECK(wrong == 0);
  }
  const KernelAttributes attrs = k.attributes();
  CHECK(attrs.registers_per_thread > 0);
  CHECK(attrs.local_bytes_per_thread == 0);
}

TEST_CASE("runtime: dynamic shared memory above the default limit is raised with cuFuncSetAttribute") {
  if (!test::have_gpu()) return;
  Context& ctx = Context::get();
  const auto& p = ctx.device().properties;
  REQUIRE(p.shared_bytes_per_block_optin > p.shared_bytes_per_block);
  Module module(compile_to_cubin(test::kSimtSource, {.arch = p.arch}).cubin);
  Kernel k = module.function("reverse_in_shared");
  const int n = int(p.shared_bytes_per_block_optin / sizeof(float));  // the whole opt-in amount
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = float(i);
  DeviceBuffer din = DeviceBuffer::from_vector(in), dout(in.size() * sizeof(float));
  Stream s;
  k.launch({.grid = {1, 1, 1}, .block = {256, 1, 1}, .dynamic_shared_bytes = uint32_t(n * sizeof(float))}, s,
           din.ptr(), dout.ptr(), n);
  s.synchronize();
  const auto out = dout.download_as<float>();
  CHECK(out.front() == float(n - 1));
  CHECK(out.back() == 0.0f);
  // Must fail: one byte more than the device allows names the call and the kernel.
  CHECK_THROWS_WITH_AS(k.launch({.grid = {1, 1, 1}, .block = {256, 1, 1},
                                 .dynamic_shared_bytes = uint32_t(p.shared_bytes_per_block_optin + 4)},
                                s, din.ptr(), dout.ptr(), n),
                       doctest::Contains("cuFuncSetAttribute failed"), GpuError);
}

TEST_CASE("runtime: unknown kernel names are user errors, CUDA failures name the call") {
  if (!test::have_gpu()) return;
  Context& ctx = Context::get();
  Module module(compile_to_cubin(test::kSimtSource, {.arch = ctx.device().properties.arch}).cubin);
  CHECK_THROWS_WITH_AS(module.function("no_such_kernel"), doctest::Contains("no kernel named 'no_such_kernel'"),
                       UserError);
  CHECK_THROWS_WITH_AS(DeviceBuffer(size_t(1) << 62), doctest::Contains("cuMemAlloc failed"), GpuError);
}

TEST_CASE("timing: both harnesses give sane per-call times, the graph removes launch overhead") {
  if (!test::have_gpu()) return;
  Context& ctx = Context::get();
  Module module(compile_to_cubin(test::kSimtSource, {.arch = ctx.device().properties.arch}).cubin);
  Kernel empty = module.function("empty_kernel");
  Kernel saxpy = module.function("saxpy");
  Stream s;
  const TimedCall empty_call = [&](CUstream st) { empty.launch({.grid = {1, 1, 1}, .block = {32, 1, 1}}, st); };
  const Timing on_stream = time_on_stream(empty_call, s);
  const Timing in_graph = time_in_graph(empty_call, s);
  MESSAGE("empty kernel: " << on_stream.median_us << " us/call on a stream, " << in_graph.median_us
                           << " us/call in a graph");
  CHECK(on_stream.samples_us.size() == 15);
  CHECK(on_stream.calls_per_sample == 100);
  CHECK(in_graph.harness == "graph");
  CHECK(on_stream.median_us > 0.0);
  CHECK(on_stream.median_us < 100.0);
  CHECK(in_graph.median_us > 0.0);
  CHECK(in_graph.median_us <= on_stream.median_us * 1.5);
  CHECK(on_stream.min_us <= on_stream.median_us);
  CHECK(on_stream.median_us <= on_stream.max_us);

  // 64 Mi floats: saxpy moves 768 MiB, so a call takes far longer than its launch.
  const int n = 64 << 20;
  DeviceBuffer x(size_t(n) * 4), y(size_t(n) * 4);
  x.fill_bytes(0), y.fill_bytes(0);
  const TimedCall saxpy_call = [&](CUstream st) {
    saxpy.launch({.grid = {unsigned(n / 256), 1, 1}, .block = {256, 1, 1}}, st, 2.0f, x.ptr(), y.ptr(), n);
  };
  const Timing big = time_on_stream(saxpy_call, s, {.warmup_calls = 2, .calls_per_sample = 5, .repeats = 5});
  const Timing big_graph = time_in_graph(saxpy_call, s, {.warmup_calls = 2, .calls_per_sample = 5, .repeats = 5});
  const double gbps = 3.0 * 4 * n / (big.median_us * 1e3);
  MESSAGE("saxpy 64 Mi floats: " << big.median_us << " us on a stream, " << big_graph.median_us << " us in a graph, "
                                 << gbps << " GB/s");
  CHECK(big.median_us > 10 * on_stream.median_us);
  CHECK(std::abs(big_graph.median_us - big.median_us) < 0.2 * big.median_us);
  CHECK(gbps > 100.0);

  // interleaved: one Timing per call, in order, each with its own samples; saxpy on half the
  // elements takes about half as long as on all of them
  const TimedCall half_call = [&](CUstream st) {
    saxpy.launch({.grid = {unsigned(n / 512), 1, 1}, .block = {256, 1, 1}}, st, 2.0f, x.ptr(), y.ptr(), n / 2);
  };
  const auto both = time_interleaved_in_graph({saxpy_call, half_call}, s, {.warmup_calls = 2, .calls_per_sample = 5, .repeats = 6});
  REQUIRE(both.size() == 2);
  CHECK(both[0].harness == "graph (interleaved)");
  CHECK(both[0].samples_us.size() == 6);
  CHECK(both[1].samples_us.size() == 6);
  MESSAGE("interleaved: saxpy " << both[0].median_us << " us, half " << both[1].median_us << " us");
  CHECK(std::abs(both[0].median_us - big_graph.median_us) < 0.2 * big_graph.median_us);
  CHECK(both[1].median_us > 0.35 * both[0].median_us);
  CHECK(both[1].median_us < 0.65 * both[0].median_us);
}

TEST_CASE("timing: bad options are user errors") {
  if (!test::have_gpu()) return;
  Context::get();
  Stream s;
  CHECK_THROWS_AS(time_on_stream([](CUstream) {}, s, {.calls_per_sample = 0}), UserError);
  CHECK(median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(median({4.0, 1.0, 2.0, 3.0}) == 2.5);
}

TEST_CASE("runtime: NpyArray bytes go to the device and come back unchanged") {
  if (!test::have_gpu()) return;
  Context::get();
  NpyArray a{.dtype = DType::F16, .shape = {3, 5}, .data = {}};
  const auto values = test::random_f16(15, 7);
  a.data.resize(30);
  std::memcpy(a.data.data(), values.data(), 30);
  DeviceBuffer d = upload_npy(a);
  CHECK(d.size() == 30);
  NpyArray back{.dtype = DType::F16, .shape = {3, 5}, .data = std::vector<uint8_t>(30, 0)};
  download_npy(d, back);
  CHECK(back.data == a.data);
  NpyArray wrong{.dtype = DType::F32, .shape = {3, 5}, .data = std::vector<uint8_t>(30, 0)};
  CHECK_THROWS_AS(download_npy(d, wrong), InternalError);
}
