// The GPU roofline (compiler/kernel/gpu_roofline.h): each bound computed here by hand from the
// descriptions (every SM of the chip, cycles of clock_mhz):
//   sm90: 132 SMs at 1,830 MHz; tensor_core 4 per SM, 16x16x16 f16 in 8 cycles (2,048 MACs/cycle/SM),
//     start-up 32; cuda_core 512 B per cycle per SM (128 FP32 lanes), start-up 4; global 1,830 B/cycle,
//     read and write latency 480.
//   sm75: 40 SMs; tensor_core 8 per SM, 16x16x16 f16 in 64 cycles (512 MACs/cycle/SM); global 201
//     B/cycle, latency 430 each way.
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/kernel/gpu_roofline.h"
#include "compiler/pipeline.h"

using namespace tessel;

namespace {

kernel::GpuRoofline gpu_roofline_of(const frontend::Module& module, const std::map<std::string, int64_t>& sizes,
                                    const std::string& target = "isa/targets/sm90.yaml", bool tf32 = false,
                                    const std::string& def = "") {
  CompileOptions o;
  o.target = target;
  o.sizes = sizes;
  const auto c = compile(def.empty() ? module.functions[0] : frontend::select_function(module, def), o);
  return kernel::gpu_roofline(c->kernel, c->hierarchy, tf32);
}
kernel::GpuRoofline gpu_roofline_of(const std::string& source, const std::map<std::string, int64_t>& sizes,
                                    const std::string& target = "isa/targets/sm90.yaml", bool tf32 = false) {
  return gpu_roofline_of(frontend::parse_module(source, "gpu_roofline.tsl"), sizes, target, tf32);
}

const char* kMatmul = "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n";
const char* kMatmulF32 = "def mm(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n";
const std::map<std::string, int64_t> k4096 = {{"M", 4096}, {"N", 4096}, {"K", 4096}};

}  // namespace

TEST_CASE("GPU roofline of a 4096^3 f16 GEMM on sm90: tensor-core bound") {
  const kernel::GpuRoofline r = gpu_roofline_of(kMatmul, k4096);
  // 4096^3 = 68,719,476,736 MACs, all on the f16 tensor-core shape
  CHECK(r.tensor_core_macs == 68719476736ull);
  CHECK(r.cuda_core_macs == 0);
  // tensor-core: 68,719,476,736 / (132 x 2,048) = 254,200.24 cycles
  CHECK(r.tensor_core_cycles == doctest::Approx(68719476736.0 / (132 * 2048)));
  CHECK(r.cuda_core_cycles == 0);
  // DRAM: A and B 33,554,432 B each read, C 67,108,864 B written: 134,217,728 / 1,830 = 73,343.0
  CHECK(r.dram_cycles == doctest::Approx(134217728.0 / 1830));
  // latency: 480 in + tensor-core start-up 32 + 480 out
  CHECK(r.latency_cycles == doctest::Approx(992));
  // roofline: 254,200.24 + 992 = 255,192.24 cycles = 139.45 us at 1,830 MHz (989 TFLOPS dense)
  CHECK(r.cycles == doctest::Approx(255192.24));
  CHECK(r.microseconds() == doctest::Approx(139.449).epsilon(0.0001));
  CHECK(r.binds == kernel::GpuRooflineBound::TensorCore);
  CHECK(r.fraction_of_microseconds(2 * r.microseconds()) == doctest::Approx(0.5));
  CHECK(kernel::gpu_roofline_bound_name(r.binds) == std::string("tensor-core"));
}

TEST_CASE("the same GEMM on sm75 runs at Turing's tensor-core rate and latencies") {
  const kernel::GpuRoofline r = gpu_roofline_of(kMatmul, k4096, "isa/targets/sm75.yaml");
  // 68,719,476,736 / (40 x 512) = 3,355,443.2; latency 430 + 32 + 430 = 892
  CHECK(r.tensor_core_cycles == doctest::Approx(3355443.2));
  CHECK(r.dram_cycles == doctest::Approx(134217728.0 / 201));
  CHECK(r.cycles == doctest::Approx(3355443.2 + 892));
  CHECK(r.binds == kernel::GpuRooflineBound::TensorCore);
}

TEST_CASE("GPU roofline of an f32 copy on sm90: DRAM bound, no unit's start-up") {
  const char* copy = "def copy(f32[M, N] X) -> (f32[M, N] Y) {\n  Y(m, n) = X(m, n)\n}\n";
  const kernel::GpuRoofline r = gpu_roofline_of(copy, {{"M", 4096}, {"N", 4096}});
  // no operator node: no element operation; X read and Y written, 67,108,864 B each
  CHECK(r.work.vector_ops == 0);
  CHECK(r.cuda_core_cycles == 0);
  CHECK(r.tensor_core_cycles == 0);
  CHECK(r.dram_cycles == doctest::Approx(134217728.0 / 1830));
  // latency 480 + 480: 73,343.02 + 960 = 74,303.02 cycles = 40.60 us
  CHECK(r.latency_cycles == doctest::Approx(960));
  CHECK(r.cycles == doctest::Approx(74303.02));
  CHECK(r.microseconds() == doctest::Approx(40.603).epsilon(0.0001));
  CHECK(r.binds == kernel::GpuRooflineBound::Dram);
}

TEST_CASE("an f32 GEMM without --tf32 on sm90 runs on the CUDA cores: one FMA per MAC per FP32 lane") {
  const kernel::GpuRoofline r = gpu_roofline_of(kMatmulF32, {{"M", 1024}, {"N", 1024}, {"K", 1024}});
  // no f32 tensor-core shape: 1,073,741,824 FMAs x 4 B / (132 x 512 B) = 63,550.06 cycles
  // (1,073,741,824 / (132 SMs x 128 lanes)), 61.8 TFLOPS at 1,830 MHz
  CHECK(r.tensor_core_macs == 0);
  CHECK(r.cuda_core_macs == 1073741824ull);
  CHECK(r.cuda_core_cycles == doctest::Approx(1073741824.0 / (132 * 128)));
  // DRAM: A, B and C 4,194,304 B each: 12,582,912 / 1,830 = 6,875.9; latency 480 + 4 + 480
  CHECK(r.dram_cycles == doctest::Approx(12582912.0 / 1830));
  CHECK(r.latency_cycles == doctest::Approx(964));
  CHECK(r.cycles == doctest::Approx(63550.06 + 964));
  CHECK(r.binds == kernel::GpuRooflineBound::CudaCore);
}

TEST_CASE("with --tf32 the f32 MACs are not priced where the description has no TF32 rate") {
  const kernel::GpuRoofline r = gpu_roofline_of(kMatmulF32, {{"M", 1024}, {"N", 1024}, {"K", 1024}}, "isa/targets/sm90.yaml", true);
  CHECK(r.unpriced_macs == 1073741824ull);
  CHECK(r.cuda_core_macs == 0);
  CHECK(r.cuda_core_cycles == 0);
  CHECK(r.tensor_core_cycles == 0);
  // what is left: DRAM 6,875.9 + latency 960 (no unit priced)
  CHECK(r.cycles == doctest::Approx(12582912.0 / 1830 + 960));
  CHECK(r.binds == kernel::GpuRooflineBound::Dram);
}

TEST_CASE("GPU roofline of an f16 softmax on sm90: DRAM bound, the element operations on the CUDA cores") {
  // workloads/bert.tsl's softmax: the one test_roofline.cc counts on davinci-910
  const kernel::GpuRoofline r =
      gpu_roofline_of(frontend::load_module("workloads/bert.tsl"), {{"M", 4096}, {"N", 1024}}, "isa/targets/sm90.yaml", false, "softmax");
  // 7 four-byte operations per point of [4096, 1024]:
  // 117,440,512 B / (132 x 512 B) = 1,737.7 cycles
  CHECK(r.work.vector_ops == 7 * 4194304ull);
  CHECK(r.cuda_core_cycles == doctest::Approx(7.0 * 4194304 * 4 / (132 * 512)));
  // DRAM: X and Y 8,388,608 B each: 16,777,216 / 1,830 = 9,167.9; latency 480 + 4 + 480
  CHECK(r.dram_cycles == doctest::Approx(16777216.0 / 1830));
  CHECK(r.cycles == doctest::Approx(16777216.0 / 1830 + 964));
  CHECK(r.binds == kernel::GpuRooflineBound::Dram);
  CHECK(kernel::parse_gpu_roofline_bound("DRAM") == kernel::GpuRooflineBound::Dram);
  CHECK_FALSE(kernel::parse_gpu_roofline_bound("GM").has_value());
}

TEST_CASE("gpu_roofline refuses an NPU description") {
  const frontend::Module module = frontend::parse_module(kMatmul, "gpu_roofline.tsl");
  CompileOptions o;
  o.target = "isa/targets/davinci-910.yaml";
  o.sizes = {{"M", 64}, {"N", 64}, {"K", 64}};
  const auto c = compile(module.functions[0], o);
  CHECK_THROWS_WITH_AS(kernel::gpu_roofline(c->kernel, c->hierarchy), doctest::Contains("not a GPU description"), InternalError);
}
