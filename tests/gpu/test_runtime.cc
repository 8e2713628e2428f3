// Driver-API runtime and timing (gpu_backend/runtime.h, timing.h). Each case skips without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "gpu_backend/driver_api.h"
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

// The persistent kernel's blocked-layout operands (compiler/emit_cuda/tma_plan.h
// kNarrowSwizzleBytes) rely on how the TMA unit lays out a box whose inner dim is 16 halves
// (32 B): X[w = 2][cb = 4][ni = 4][ci = 16] (element = its index) read through 4-d maps whose
// strides are not increasing.
//   - 128-byte swizzle, dims {ci, cb, ni, w}: each 32-byte inner row gets a 128-byte row of its own
//     (row j = the inner row's index in box order), its 16-byte chunks moved by the row index
//     (address bits 4-6 ^= bits 7-9): runs of different blocks cannot share a 128-byte row.
//   - 32-byte swizzle, dims {ci, ni, w, cb}: rows of 32 B packed densely, chunk ^= address bit 7.
TEST_CASE("TMA: a 32-byte inner box row takes a whole 128-byte swizzle row, under the 32-byte swizzle rows are packed") {
  if (!test::have_gpu()) return;
  Context& ctx = Context::get();
  if (ctx.device().properties.arch < std::string("sm_90")) return;
  const auto encode = tensor_map_encode_tiled();
  REQUIRE(bool(encode));
  const char* src = R"(
struct __align__(64) tmap { unsigned long long v[16]; };
extern "C" __global__ void tma_box(const __grid_constant__ tmap m, unsigned short* out) {
  __shared__ __align__(1024) unsigned short s[2048];
  __shared__ __align__(8) unsigned long long bar;
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) s[i] = 0xffff;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"((unsigned)__cvta_generic_to_shared(&bar)));
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"((unsigned)__cvta_generic_to_shared(&bar)), "r"(1024) : "memory");
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n"
                 ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(&m), "r"((unsigned)__cvta_generic_to_shared(&bar)), "r"(0), "r"(0), "r"(0), "r"(0) : "memory");
    asm volatile("{\n.reg .pred p;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W_%=;\n}\n" ::"r"((unsigned)__cvta_generic_to_shared(&bar)) : "memory");
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 2048; i += blockDim.x) out[i] = s[i];
}
)";
  Module module(compile_to_cubin(src, {.arch = "sm_90a"}).cubin);
  Kernel k = module.function("tma_box");
  std::vector<uint16_t> host(512);
  for (int i = 0; i < 512; ++i) host[i] = uint16_t(i);
  DeviceBuffer x(1024), out(4096);
  x.upload(host.data(), 1024);
  const uint64_t CB = 128, NI = 32, W = 512;  // byte strides of cb, ni, w
  auto run = [&](bool wide, std::vector<uint16_t>& got) {
    // wide: {ci, cb, ni, w}, 128-byte swizzle; else {ci, ni, w, cb}, 32-byte swizzle
    cuuint64_t dims[4] = {16, wide ? 4u : 4u, wide ? 4u : 2u, wide ? 2u : 4u};
    cuuint64_t strides[3] = {wide ? CB : NI, wide ? NI : W, wide ? W : CB};
    cuuint32_t box[4] = {16, uint32_t(dims[1]), uint32_t(dims[2]), uint32_t(dims[3])}, es[4] = {1, 1, 1, 1};
    CUtensorMap map{};
    check_cu(encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, reinterpret_cast<void*>(x.ptr()), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                    wide ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled");
    Stream s;
    k.launch({.grid = {1, 1, 1}, .block = {128, 1, 1}}, s, map, out.ptr());
    s.synchronize();
    got.resize(2048);
    out.download(got.data(), 4096);
  };
  std::vector<uint16_t> got;
  run(true, got);
  int ok = 0;
  for (int w = 0; w < 2; ++w)
    for (int ni = 0; ni < 4; ++ni)
      for (int cb = 0; cb < 4; ++cb)
        for (int ci = 0; ci < 16; ++ci) {
          const int j = (w * 4 + ni) * 4 + cb, off = j * 128 + ci * 2;  // inner row j at the start of 128-byte row j
          const int swz = (off & ~0x70) | ((((off >> 4) & 7) ^ ((off >> 7) & 7)) << 4);
          ok += got[swz / 2] == uint16_t(((w * 4 + cb) * 4 + ni) * 16 + ci);
        }
  CHECK(ok == 512);
  run(false, got);
  ok = 0;
  for (int cb = 0; cb < 4; ++cb)
    for (int w = 0; w < 2; ++w)
      for (int ni = 0; ni < 4; ++ni)
        for (int ci = 0; ci < 16; ++ci) {
          const int j = (cb * 2 + w) * 4 + ni, off = j * 32 + ci * 2;  // rows of 32 B in box order
          const int swz = off ^ (((off >> 7) & 1) << 4);
          ok += got[swz / 2] == uint16_t(((w * 4 + cb) * 4 + ni) * 16 + ci);
        }
  CHECK(ok == 512);
}
