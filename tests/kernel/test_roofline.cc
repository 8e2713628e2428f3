// The roofline (compiler/kernel/roofline.h): the work counted from the tensor IR and each bound on
// davinci-910, computed here by hand from isa/targets/davinci-910.yaml:
//   cores 32; cube f16 16x16x16 in 1 cycle (4,096 MACs/cycle/core), start-up 2; vector 256 B per
//   repeat, one repeat per cycle, max_repeat 255, start-up 15; scalar_cycles 1; GM shared 2,784
//   B/cycle, every GM path 87 B/cycle per core; shortest path latency out of GM 300 (GM->L1/UB/L0A/
//   L0B), into GM 150 (UB->GM).
#include <doctest/doctest.h>

#include "compiler/frontend/frontend.h"
#include "compiler/kernel/roofline.h"
#include "compiler/pipeline.h"
#include "isa/npu_machine.h"

using namespace tessel;

namespace {

const char* kTarget = "isa/targets/davinci-910.yaml";

struct Compiled {
  frontend::Module module;
  std::unique_ptr<Compilation> compilation;
  kernel::NpuRoofline roofline;
};

Compiled roofline_of(const std::string& source, const std::map<std::string, int64_t>& sizes, const std::string& def = "") {
  Compiled c;
  c.module = frontend::parse_module(source, "roofline.tsl");
  CompileOptions o;
  o.target = kTarget;
  o.sizes = sizes;
  c.compilation = compile(def.empty() ? c.module.functions[0] : frontend::select_function(c.module, def), o);
  c.roofline = kernel::npu_roofline(c.compilation->kernel, isa::npu_machine(c.compilation->hierarchy));
  return c;
}

const char* kMatmul = "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n";
const char* kRelu = "def relu(f16[N, C, H, W] X) -> (f16[N, C, H, W] Y) {\n  Y(n, c, h, w) = max(X(n, c, h, w), 0)\n}\n";
const char* kSoftmax =
    "def softmax(f16[M, N] X) -> (f16[M, N] Y) {\n"
    "  Mx(m) max=! f32(X(m, n))\n"
    "  E(m, n) = exp(f32(X(m, n)) - Mx(m))\n"
    "  Den(m) +=! E(m, n)\n"
    "  Y(m, n) = f16(E(m, n) / Den(m))\n"
    "}\n";

}  // namespace

TEST_CASE("roofline of a 512^3 f16 GEMM on davinci-910: cube bound") {
  const kernel::NpuRoofline r = roofline_of(kMatmul, {{"M", 512}, {"N", 512}, {"K", 512}}).roofline;
  // MACs: every point of the (m, n, k) domain, 512^3 = 134,217,728, all on the f16 cube
  CHECK(r.work.macs() == 134217728);
  CHECK(r.cube_macs == 134217728);
  CHECK(r.vector_ops == 0);
  // cube: 134,217,728 / (32 cores x 4,096) = 1,024 cycles
  CHECK(r.cube_cycles == doctest::Approx(1024));
  // GM: A and B 512 x 512 x 2 B = 524,288 each read, C 512 x 512 x 4 B = 1,048,576 written;
  // (1,048,576 + 1,048,576) / 2,784 = 753.29 (per-core paths: 1,048,576 / (32 x 87) = 376.6 each way)
  CHECK(r.work.gm_read_bytes == 1048576);
  CHECK(r.work.gm_write_bytes == 1048576);
  CHECK(r.gm_cycles == doctest::Approx(2097152.0 / 2784));
  // latency: 300 in + cube start-up 2 + 150 out = 452 (no vector operation)
  CHECK(r.latency_cycles == doctest::Approx(452));
  CHECK(r.vector_cycles == 0);
  CHECK(r.scalar_cycles == 0);
  // roofline: max(1,024, 753.29) + 452 = 1,476
  CHECK(r.cycles == doctest::Approx(1476));
  CHECK(r.binds == kernel::RooflineBound::Cube);
  CHECK(r.fraction_of(2952) == doctest::Approx(0.5));
}

TEST_CASE("roofline of an f16 relu on davinci-910: GM bound") {
  const kernel::NpuRoofline r = roofline_of(kRelu, {{"N", 32}, {"C", 64}, {"H", 56}, {"W", 56}}).roofline;
  // 32 x 64 x 56 x 56 = 6,422,528 points, one f16 max each: 6,422,528 operations x 2 B
  CHECK(r.work.macs() == 0);
  CHECK(r.vector_ops == 6422528);
  CHECK(r.vector_op_bytes == doctest::Approx(12845056));
  // vector: 12,845,056 B / (32 x 256 B) = 1,568 cycles; scalar: ceil(1,568 / 255) = 7 instructions x 1
  CHECK(r.vector_cycles == doctest::Approx(1568));
  CHECK(r.scalar_cycles == doctest::Approx(7));
  // GM: 12,845,056 B read + 12,845,056 B written = 25,690,112 / 2,784 = 9,227.77 cycles
  CHECK(r.gm_cycles == doctest::Approx(25690112.0 / 2784));
  // latency: 300 + vector start-up 15 + 150 = 465; roofline 9,227.77 + 465 = 9,692.77
  CHECK(r.latency_cycles == doctest::Approx(465));
  CHECK(r.cycles == doctest::Approx(25690112.0 / 2784 + 465));
  CHECK(r.binds == kernel::RooflineBound::GM);
}

TEST_CASE("roofline of an f16 softmax on davinci-910: vector bound, the shared cast counted once") {
  const kernel::NpuRoofline r = roofline_of(kSoftmax, {{"M", 4096}, {"N", 1024}}).roofline;
  // per point of [4096, 1024] (4,194,304), each 4 B wide (f32 result or operand):
  //   S0 Mx max=! f32(X): cast + max accumulation          2
  //   S1 exp(f32(X) - Mx): the same cast over the same domain is not counted again; sub + exp  2
  //   S2 Den +=! E: accumulation                            1
  //   S3 f16(E / Den): div + cast                           2      -> 7 operations per point
  CHECK(r.vector_ops == 7 * 4194304ull);
  CHECK(r.vector_op_bytes == doctest::Approx(7.0 * 4194304 * 4));
  // vector: 117,440,512 B / 8,192 B/cycle = 14,336 cycles
  CHECK(r.vector_cycles == doctest::Approx(14336));
  // GM: X and Y 4,194,304 x 2 B each: 16,777,216 / 2,784 = 6,026.3
  CHECK(r.gm_cycles == doctest::Approx(16777216.0 / 2784));
  // roofline: 14,336 + 465 = 14,801
  CHECK(r.cycles == doctest::Approx(14801));
  CHECK(r.binds == kernel::RooflineBound::Vector);
}

TEST_CASE("an f32 contraction has no cube shape on davinci-910: a multiply and an add per MAC on the vector unit") {
  const char* f32_matmul = "def mm(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! A(m, k) * B(k, n)\n}\n";
  const kernel::NpuRoofline r = roofline_of(f32_matmul, {{"M", 64}, {"N", 64}, {"K", 64}}).roofline;
  CHECK(r.work.macs() == 262144);
  CHECK(r.cube_macs == 0);
  CHECK(r.cube_cycles == 0);
  // 2 x 262,144 operations x 4 B = 2,097,152 B / 8,192 = 256 cycles
  CHECK(r.vector_ops == 2 * 262144);
  CHECK(r.vector_cycles == doctest::Approx(256));
}

TEST_CASE("a tiny kernel is latency bound, a padding producer folded into the contraction's loads costs no vector work") {
  const kernel::NpuRoofline tiny = roofline_of(kRelu, {{"N", 1}, {"C", 1}, {"H", 4}, {"W", 4}}).roofline;
  CHECK(tiny.binds == kernel::RooflineBound::Latency);
  // 16 f16 elements: GM 64 B / 2,784, vector 32 B / 8,192, but one vector instruction to issue:
  // scalar 1 cycle; latency 465 > 1, roofline 465 + 1
  CHECK(tiny.scalar_cycles == doctest::Approx(1));
  CHECK(tiny.cycles == doctest::Approx(466));
  const char* padded =
      "def conv(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H, W, K] Y) {\n"
      "  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0) where h in 0:H+2, w in 0:W+2\n"
      "  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k))\n"
      "}\n";
  const Compiled c = roofline_of(padded, {{"N", 1}, {"H", 8}, {"W", 8}, {"C", 16}, {"K", 16}, {"R", 3}, {"S", 3}});
  REQUIRE(c.compilation->kernel.contraction);  // Xp folded (fold_padding) or inlined into the loads
  // 1 x 8 x 8 x 16 outputs x 3 x 3 x 16 taps = 147,456 MACs (the border's zero taps included), no vector work
  CHECK(c.roofline.cube_macs == 147456);
  CHECK(c.roofline.vector_ops == 0);
}

TEST_CASE("an i8 contraction takes the cube's 16x16x32 i8 shape") {
  const char* i8_matmul = "def mm(i8[M, K] A, i8[K, N] B) -> (i32[M, N] C) {\n  C(m, n) +=! i32(A(m, k)) * i32(B(k, n))\n}\n";
  const kernel::NpuRoofline r = roofline_of(i8_matmul, {{"M", 256}, {"N", 256}, {"K", 512}}).roofline;
  // 256 x 256 x 512 = 33,554,432 MACs / (32 cores x 16 x 16 x 32 = 262,144 per cycle) = 128 cycles
  CHECK(r.work.contraction_macs.at(DType::I8) == 33554432);
  CHECK(r.cube_cycles == doctest::Approx(128));
  // GM: A 131,072 + B 131,072 read, C 262,144 written: 524,288 / 2,784 = 188.3 < latency 452
  CHECK(r.gm_cycles == doctest::Approx(524288.0 / 2784));
  CHECK(r.binds == kernel::RooflineBound::Latency);
  CHECK(r.cycles == doctest::Approx(188.3 + 452).epsilon(0.001));
}
