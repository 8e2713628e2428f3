// Vector-unit and integer-cube semantics, element by element against plain C++: transcendental
// f32 and f16 (rounded once), casts, reductions, masks, vsel, vdup, block strides; i8 x i8 -> i32.
#include <doctest/doctest.h>

#include <cmath>

#include "isa/base/error.h"
#include "sim_test_util.h"

using namespace tessel;
using namespace tessel::npu_sim;
using namespace tessel::npu_sim::testing;

namespace {

NpyArray random_f32(std::vector<int64_t> shape, uint32_t seed) {
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = std::move(shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  a.data.resize(a.element_count() * 4);
  for (int64_t i = 0; i < a.element_count(); ++i) {
    const float v = dist(rng);
    std::memcpy(a.data.data() + 4 * i, &v, 4);
  }
  return a;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST_CASE("vector instructions: each lane equals the C++ computation, masks and strides respected") {
  const npu::Program p = npu::assemble_program(R"(
.tensor X f32 [64] at GM+0 in
.tensor Y f32 [64] at GM+256 in
.tensor O f32 [8, 64] at GM+512 out
dma_in UB[0], GM[0], 1, 512, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vexp f32, UB[1024], UB[0], 1, 1, 1, 8, 8                    # row 0: exp(X)
vconv f16, f32, UB[1280], UB[0], 1, 1, 1, 8, 8              # row 1: X as f16 (first 128 bytes)
vcadd f32, UB[1536], UB[0], 1, 1, 8                         # row 2 [0]: sum X
vcmax f32, UB[1568], UB[0], 1, 1, 8                         # row 2 [8]: max X
set_vector_mask 0, 0x5555555555555555                       # even lanes only
vsel f32, UB[1792], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8     # row 3: even lanes X, odd lanes Y
vmuls f32, UB[2048], UB[0], 2.5, 1, 1, 1, 8, 8              # row 4: even lanes 2.5 X, odd lanes untouched (0)
set_vector_mask -1, -1
vdup f32, UB[2304], 3.25, 1, 1, 8                           # row 5: 3.25
vadd f32, UB[2560], UB[0], UB[256], 1, 1, 2, 1, 8, 16, 8    # row 6: src0 every other block of X|Y
vexp f16, UB[2816], UB[1280], 1, 1, 1, 8, 8                 # row 7: exp in f16 over row 1 (+ zeros)
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[512], UB[1024], 1, 2048, 0, 0
pipe_barrier ALL
)",
                                               "vector.npu");
  const NpyArray x = random_f32({64}, 21), y = random_f32({64}, 22);
  const SimResult r = simulate(p, davinci(), {{"X", x}, {"Y", y}});
  CHECK(r.record.races.empty());
  const NpyArray o = r.tensor(p, "O");
  auto out = [&](int row, int lane) { return f32_at(o, row * 64 + lane); };
  auto out_f16 = [&](int row, int lane) {  // row holds f16 lanes
    uint16_t h;
    std::memcpy(&h, o.data.data() + row * 256 + lane * 2, 2);
    return h;
  };
  float sum = 0.0f, mx = -INFINITY;
  int bad = 0;
  for (int l = 0; l < 64; ++l) {
    const float xv = f32_at(x, l), yv = f32_at(y, l);
    sum += xv;
    mx = std::max(mx, xv);
    bad += bits(out(0, l)) != bits(std::exp(xv));
    bad += out_f16(1, l) != f32_to_f16_bits(xv);
    bad += bits(out(3, l)) != bits(l % 2 == 0 ? xv : yv);
    bad += bits(out(4, l)) != bits(l % 2 == 0 ? xv * 2.5f : 0.0f);
    bad += out(5, l) != 3.25f;
    const int b = l / 8, e = l % 8;
    const int src0 = b * 16 + e;  // block stride 2 over X then Y
    const float s0 = src0 < 64 ? f32_at(x, src0) : f32_at(y, src0 - 64);
    bad += bits(out(6, l)) != bits(s0 + yv);
    bad += out_f16(7, l) != f32_to_f16_bits(std::exp(f16_bits_to_f32(f32_to_f16_bits(xv))));
  }
  for (int l = 64; l < 128; ++l) bad += out_f16(7, l) != f32_to_f16_bits(1.0f);  // exp(0)
  CHECK(bad == 0);
  CHECK(bits(out(2, 0)) == bits(sum));
  CHECK(bits(out(2, 8)) == bits(mx));
}

TEST_CASE("vbrcb: every lane of repeat r is src[r], masked lanes untouched, f32 and f16, timing like a vector repeat") {
  const npu::Program p = npu::assemble_program(R"(
.tensor X f32 [64] at GM+0 in
.tensor O f32 [6, 64] at GM+256 out
dma_in UB[0], GM[0], 1, 256, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vdup f32, UB[1024], 0, 6, 1, 8
vbrcb f32, UB[1024], UB[0], 3, 1, 8                         # rows 0-2: X[0], X[1], X[2] in every lane
vconv f16, f32, UB[512], UB[0], 1, 1, 1, 4, 8               # X as f16
vbrcb f16, UB[1792], UB[512], 1, 1, 8                       # row 3: f16 X[0] in 128 lanes
set_vector_mask 0, 0xff                                     # lanes 0-7 only
vbrcb f32, UB[2304], UB[32], 1, 1, 8                        # row 5: X[8] in lanes 0-7, 0 elsewhere
set_vector_mask -1, -1
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[256], UB[1024], 1, 1536, 0, 0
pipe_barrier ALL
)",
                                               "vbrcb.npu");
  const NpyArray x = random_f32({64}, 31);
  const SimResult r = simulate(p, davinci(), {{"X", x}});
  CHECK(r.record.races.empty());
  const NpyArray o = r.tensor(p, "O");
  auto out = [&](int row, int lane) { return f32_at(o, row * 64 + lane); };
  int bad = 0;
  for (int l = 0; l < 64; ++l) {
    for (int row = 0; row < 3; ++row) bad += bits(out(row, l)) != bits(f32_at(x, row));
    bad += bits(out(5, l)) != bits(l < 8 ? f32_at(x, 8) : 0.0f);
  }
  for (int l = 0; l < 128; ++l) {
    uint16_t h;
    std::memcpy(&h, o.data.data() + 3 * 256 + l * 2, 2);
    bad += h != f32_to_f16_bits(f32_at(x, 0));
  }
  CHECK(bad == 0);
  // Assembly round trip.
  const npu::Program q = npu::assemble_program(npu::print_program(p), "vbrcb2.npu");
  CHECK(npu::print_program(q) == npu::print_program(p));
}

TEST_CASE("vmod: the remainder truncated toward zero (fmod on f32 and f16, % on i32), an integer divisor 0 faults") {
  const npu::Program p = npu::assemble_program(R"(
.tensor X f32 [64] at GM+0 in
.tensor Y f32 [64] at GM+256 in
.tensor I i32 [2, 64] at GM+512 in
.tensor O f32 [4, 64] at GM+1024 out
dma_in UB[0], GM[0], 1, 1024, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vmod f32, UB[1024], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8     # row 0: fmod(X, Y)
vmod i32, UB[1280], UB[512], UB[768], 1, 1, 1, 1, 8, 8, 8   # row 1: I[0] % I[1]
vconv f16, f32, UB[1536], UB[0], 1, 1, 1, 4, 8              # X, Y as f16
vconv f16, f32, UB[1664], UB[256], 1, 1, 1, 4, 8
vmod f16, UB[1792], UB[1536], UB[1664], 1, 1, 1, 1, 4, 4, 4 # row 3 (first 128 bytes): f16 fmod
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[1024], UB[1024], 1, 1024, 0, 0
pipe_barrier ALL
)",
                                               "vmod.npu");
  const NpyArray x = random_f32({64}, 41), y = random_f32({64}, 42);
  NpyArray ints;
  ints.dtype = DType::I32;
  ints.shape = {2, 64};
  ints.data.resize(2 * 64 * 4);
  for (int l = 0; l < 64; ++l) {
    const int32_t a = (l % 2 ? -1 : 1) * (l * 37 + 5), b = (l % 3 ? 1 : -1) * (l % 7 + 1);
    std::memcpy(ints.data.data() + 4 * l, &a, 4);
    std::memcpy(ints.data.data() + 4 * (64 + l), &b, 4);
  }
  const SimResult r = simulate(p, davinci(), {{"X", x}, {"Y", y}, {"I", ints}});
  CHECK(r.record.races.empty());
  const NpyArray o = r.tensor(p, "O");
  int bad = 0;
  for (int l = 0; l < 64; ++l) {
    const float xv = f32_at(x, l), yv = f32_at(y, l);
    bad += bits(f32_at(o, l)) != bits(std::fmod(xv, yv));
    int32_t a, b, got;
    std::memcpy(&a, ints.data.data() + 4 * l, 4);
    std::memcpy(&b, ints.data.data() + 4 * (64 + l), 4);
    std::memcpy(&got, o.data.data() + 256 + 4 * l, 4);
    bad += got != a % b;
    uint16_t h;
    std::memcpy(&h, o.data.data() + 3 * 256 + 2 * l, 2);
    const float xh = f16_bits_to_f32(f32_to_f16_bits(xv)), yh = f16_bits_to_f32(f32_to_f16_bits(yv));
    bad += h != f32_to_f16_bits(std::fmod(xh, yh));  // exact: fmod never rounds
  }
  CHECK(bad == 0);
  const std::string e = [] {
    try {
      simulate(npu::assemble_program("vdup i32, UB[0], 0, 1, 1, 8\nvmod i32, UB[256], UB[0], UB[0], 1, 1, 1, 1, 8, 8, 8\n"
                                     "pipe_barrier ALL\n",
                                     "mod0.npu"),
               davinci(), {});
    } catch (const UserError& err) {
      return std::string(err.what());
    }
    return std::string();
  }();
  CHECK(e.find("integer division by zero") != std::string::npos);
}

TEST_CASE("vcmp_lt / vcmp_le / vcmp_eq give 1 or 0 in the operand type, vselv picks by a value condition, masked lanes kept") {
  const npu::Program p = npu::assemble_program(R"(
.tensor X f32 [64] at GM+0 in
.tensor Y f32 [64] at GM+256 in
.tensor O f32 [5, 64] at GM+512 out
dma_in UB[0], GM[0], 1, 512, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vcmp_lt f32, UB[512], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8
vcmp_le f32, UB[768], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8
vcmp_eq f32, UB[1024], UB[0], UB[0], 1, 1, 1, 1, 8, 8, 8
vselv f32, UB[1280], UB[512], UB[0], UB[256], 1, 1, 1, 1, 1, 8, 8, 8, 8
vdup f32, UB[1536], 7, 1, 1, 8
set_vector_mask 0, 1
vselv f32, UB[1536], UB[512], UB[0], UB[256], 1, 1, 1, 1, 1, 8, 8, 8, 8
set_vector_mask -1, -1
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[512], UB[512], 1, 1280, 0, 0
pipe_barrier ALL
)",
                                               "vcmp.npu");
  NpyArray x = random_f32({64}, 43), y = random_f32({64}, 44);
  std::memcpy(y.data.data() + 4 * 5, x.data.data() + 4 * 5, 4);  // one equal pair: lt 0, le 1
  const SimResult r = simulate(p, davinci(), {{"X", x}, {"Y", y}});
  CHECK(r.record.races.empty());
  const NpyArray o = r.tensor(p, "O");
  int bad = 0;
  for (int l = 0; l < 64; ++l) {
    const float xv = f32_at(x, l), yv = f32_at(y, l);
    bad += f32_at(o, l) != (xv < yv ? 1.0f : 0.0f);
    bad += f32_at(o, 64 + l) != (xv <= yv ? 1.0f : 0.0f);
    bad += f32_at(o, 128 + l) != 1.0f;
    bad += bits(f32_at(o, 192 + l)) != bits(xv < yv ? xv : yv);  // min by select
    bad += bits(f32_at(o, 256 + l)) != bits(l == 0 ? (xv < yv ? xv : yv) : 7.0f);  // lane 0 only
  }
  CHECK(f32_at(o, 5) == 0.0f);
  CHECK(f32_at(o, 64 + 5) == 1.0f);
  CHECK(bad == 0);
  const npu::Program q = npu::assemble_program(npu::print_program(p), "vcmp2.npu");
  CHECK(npu::print_program(q) == npu::print_program(p));
}

TEST_CASE("vtranspose turns each 16x16 block of 2-byte elements, rows placed by the block stride, an odd repeat faults") {
  // A 16 x 32 f16 matrix (row pitch 64 bytes = 2 blocks): its two 16 x 16 blocks transposed into a
  // 32 x 16 result (row pitch 32 bytes); the second block read at a 32-byte offset.
  const npu::Program p = npu::assemble_program(R"(
.tensor X f16 [16, 32] at GM+0 in
.tensor Y f16 [32, 16] at GM+1024 out
dma_in UB[0], GM[0], 1, 1024, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vtranspose f16, UB[1024], UB[0], 2, 1, 2, 8, 16
vtranspose f16, UB[1536], UB[32], 2, 1, 2, 8, 16
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[1024], UB[1024], 1, 1024, 0, 0
pipe_barrier ALL
)",
                                               "vtranspose.npu");
  const NpyArray x = random_f16({16, 32}, 45);
  const SimResult r = simulate(p, davinci(), {{"X", x}});
  CHECK(r.record.races.empty());
  const NpyArray y = r.tensor(p, "Y");
  int bad = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 32; ++j) {
      uint16_t a, b;
      std::memcpy(&a, x.data.data() + 2 * (i * 32 + j), 2);
      std::memcpy(&b, y.data.data() + 2 * (j * 16 + i), 2);  // Y[j][i] = X[i][j]
      bad += a != b;
    }
  CHECK(bad == 0);
  const std::string e = [] {
    try {
      simulate(npu::assemble_program("vtranspose f16, UB[512], UB[0], 1, 1, 1, 8, 8\npipe_barrier ALL\n", "odd.npu"), davinci(), {});
    } catch (const UserError& err) {
      return std::string(err.what());
    }
    return std::string();
  }();
  CHECK(e.find("vtranspose takes two repeats per 16x16 block") != std::string::npos);
}

TEST_CASE("mmad i8 x i8 -> i32: one 16x32x16 fractal, B given as ZN (n rows of 32 k)") {
  const npu::Program p = npu::assemble_program(R"(
.tensor A i8 [16, 32] at GM+0 in
.tensor BT i8 [16, 32] at GM+512 in
.tensor C i32 [16, 16] at GM+1024 out
dma_in L0A[0], GM[0], 1, 512, 0, 0
dma_in L0B[0], GM[512], 1, 512, 0, 0
set_flag MTE2, M, 0
wait_flag MTE2, M, 0
mmad i8, L0C[0], L0A[0], L0B[0], 16, 32, 16, 1
set_flag M, V, 0
wait_flag M, V, 0
mov_l0c i32, UB[0], L0C[0], 1, 0
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[1024], UB[0], 1, 1024, 0, 0
pipe_barrier ALL
)",
                                               "i8.npu");
  NpyArray a, bt;
  a.dtype = bt.dtype = DType::I8;
  a.shape = bt.shape = {16, 32};
  std::mt19937 rng(5);
  for (NpyArray* t : {&a, &bt}) {
    t->data.resize(512);
    for (auto& v : t->data) v = static_cast<uint8_t>(rng());
  }
  const SimResult r = simulate(p, davinci(), {{"A", a}, {"BT", bt}});
  const NpyArray c = r.tensor(p, "C");
  int bad = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      int32_t acc = 0;
      for (int q = 0; q < 32; ++q) acc += int32_t(int8_t(a.data[i * 32 + q])) * int32_t(int8_t(bt.data[j * 32 + q]));
      int32_t got;
      std::memcpy(&got, c.data.data() + 4 * (i * 16 + j), 4);
      bad += got != acc;
    }
  CHECK(bad == 0);
}

TEST_CASE("load2d i8 with transpose: pairs of 16x32 fractals transposed as 32x32 bytes, odd inner is a fault") {
  // B (32 k x 32 n, i8) as NZ in L1 (two fractals: k rows 0..15 and 16..31) -> ZN in L0B: fractal ni
  // holds 16 columns n of 32 contiguous k; then C = A x B checks the result against the plain sums.
  const npu::Program p = npu::assemble_program(R"(
.tensor A i8 [16, 32] at GM+0 in
.tensor B i8 [32, 32] at GM+512 in
.tensor C i32 [16, 32] at GM+1536 out
dma_in L0A[0], GM[0], 1, 512, 0, 0
dma_in_nz i8, L1[0], GM[512], 32, 32, 32
set_flag MTE2, MTE1, 0
wait_flag MTE2, MTE1, 0
load2d i8, L0B[0], L1[0], 1, 2, 0, 1, 1
set_flag MTE1, M, 0
set_flag MTE2, M, 0
wait_flag MTE1, M, 0
wait_flag MTE2, M, 0
mmad i8, L0C[0], L0A[0], L0B[0], 16, 32, 32, 1
set_flag M, V, 0
wait_flag M, V, 0
mov_l0c i32, UB[0], L0C[0], 2, 0
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[1536], UB[0], 16, 64, 0, 64
dma_out GM[1600], UB[1024], 16, 64, 0, 64
pipe_barrier ALL
)",
                                               "i8_transpose.npu");
  NpyArray a, b;
  a.dtype = b.dtype = DType::I8;
  a.shape = {16, 32};
  b.shape = {32, 32};
  std::mt19937 rng(7);
  a.data.resize(512);
  b.data.resize(1024);
  for (NpyArray* t : {&a, &b})
    for (auto& v : t->data) v = static_cast<uint8_t>(rng());
  const SimResult r = simulate(p, davinci(), {{"A", a}, {"B", b}});
  CHECK(r.record.races.empty());
  const NpyArray c = r.tensor(p, "C");
  int bad = 0;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 32; ++j) {
      int32_t acc = 0;
      for (int q = 0; q < 32; ++q) acc += int32_t(int8_t(a.data[i * 32 + q])) * int32_t(int8_t(b.data[q * 32 + j]));
      int32_t got;
      std::memcpy(&got, c.data.data() + 4 * (i * 32 + j), 4);
      bad += got != acc;
    }
  CHECK(bad == 0);
  const std::string odd = [] {
    try {
      simulate(npu::assemble_program("load2d i8, L0B[0], L1[0], 1, 3, 0, 1, 1\npipe_barrier ALL\n", "odd.npu"), davinci(), {});
    } catch (const UserError& err) {
      return std::string(err.what());
    }
    return std::string();
  }();
  CHECK(odd.find("inner must be even") != std::string::npos);
}

TEST_CASE("NaN propagates through vmax, vmin, vmaxs, vrelu and vcmax (compiler/README.md: IEEE maximum/minimum)") {
  const npu::Program p = npu::assemble_program(R"(
.tensor X f32 [64] at GM+0 in
.tensor O f32 [5, 64] at GM+256 out
dma_in UB[0], GM[0], 1, 256, 0, 0
set_flag MTE2, V, 0
wait_flag MTE2, V, 0
vdup f32, UB[256], 0.0, 1, 1, 8
vmax f32, UB[512], UB[0], UB[256], 1, 1, 1, 1, 8, 8, 8      # row 0: max(X, 0)
vmin f32, UB[768], UB[256], UB[0], 1, 1, 1, 1, 8, 8, 8      # row 1: min(0, X)
vmaxs f32, UB[1024], UB[0], 0.0, 1, 1, 1, 8, 8              # row 2: max(X, 0) with a scalar
vrelu f32, UB[1280], UB[0], 1, 1, 1, 8, 8                   # row 3: relu(X)
vcmax f32, UB[1536], UB[0], 1, 1, 8                         # row 4 [0]: max over X
vcmax f32, UB[1568], UB[32], 1, 1, 8                        # row 4 [8]: max over X[8..64) and eight zeros
set_flag V, MTE3, 0
wait_flag V, MTE3, 0
dma_out GM[256], UB[512], 1, 1280, 0, 0
pipe_barrier ALL
)",
                                               "nan.npu");
  NpyArray x;
  x.dtype = DType::F32;
  x.shape = {64};
  x.data.resize(256);
  for (int l = 0; l < 64; ++l) {
    const float v = l == 3 ? NAN : l == 4 ? -INFINITY : float(l) - 20.0f;
    std::memcpy(x.data.data() + 4 * l, &v, 4);
  }
  const SimResult r = simulate(p, davinci(), {{"X", x}});
  const NpyArray o = r.tensor(p, "O");
  auto out = [&](int row, int lane) { return f32_at(o, row * 64 + lane); };
  for (int row = 0; row < 4; ++row) {
    CAPTURE(row);
    CHECK(std::isnan(out(row, 3)));       // NaN in, NaN out, whichever operand it is
    CHECK(out(row, 0) == (row == 1 ? -20.0f : 0.0f));
    CHECK(out(row, 30) == (row == 1 ? 0.0f : 10.0f));
    CHECK(out(row, 4) == (row == 1 ? -INFINITY : 0.0f));
  }
  CHECK(std::isnan(out(4, 0)));  // a NaN lane makes the reduction NaN, not the largest number (43)
  CHECK(out(4, 8) == 43.0f);     // without the NaN lane: the largest
}
