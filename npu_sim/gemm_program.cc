#include "npu_sim/gemm_program.h"

#include <fmt/format.h>

#include "isa/base/error.h"

namespace tessel::npu_sim {
namespace {

using npu::Buffer;
using npu::Opcode;
using npu::Operand;
using npu::Pipe;

// Register names of the generated program (the printed program reads better with them fixed).
enum Reg : uint8_t {
  kTile = 1, kTileM, kTileN, kCBuf, kLocalTiles, kChunks, kBuf, kKc, kGmA, kGmB, kL1A, kL1B, kL0, kL0C, kInit,
  kTmp, kBlock, kGmC, kUbC
};

Operand r(uint8_t reg) { return Operand::reg_(reg); }
Operand imm(int64_t v) { return Operand::imm_(v); }
Operand at(Buffer b, uint8_t reg, int64_t offset = 0) { return Operand::addr(b, offset, reg); }
Operand at_offset(Buffer b, int64_t offset) { return Operand::addr(b, offset); }
Operand pipe(Pipe p) { return Operand::pipe_(p); }
Operand f16() { return Operand::type(DType::F16); }

class Emitter {
 public:
  explicit Emitter(npu::Program& p) : p_(p) {}
  void op(Opcode o, std::vector<Operand> operands) { p_.add(o, std::move(operands)); }
  void set(Pipe src, Pipe dst, Operand id) { op(Opcode::SetFlag, {pipe(src), pipe(dst), id}); }
  void wait(Pipe src, Pipe dst, Operand id) { op(Opcode::WaitFlag, {pipe(src), pipe(dst), id}); }
  // dst = x % 2 (x >= 0): the buffer index of a double-buffered stage
  void parity(uint8_t dst, uint8_t x) {
    op(Opcode::Div, {r(kTmp), r(x), imm(2)});
    op(Opcode::Mul, {r(kTmp), r(kTmp), imm(2)});
    op(Opcode::Sub, {r(dst), r(x), r(kTmp)});
  }
  // dst = a * x + b * y + c
  void affine(uint8_t dst, uint8_t x, int64_t a, int64_t c) {
    op(Opcode::Mul, {r(dst), r(x), imm(a)});
    if (c) op(Opcode::Add, {r(dst), r(dst), imm(c)});
  }
  void add_scaled(uint8_t dst, uint8_t x, int64_t a) {
    op(Opcode::Mul, {r(kTmp), r(x), imm(a)});
    op(Opcode::Add, {r(dst), r(dst), r(kTmp)});
  }

 private:
  npu::Program& p_;
};

}  // namespace

npu::Program make_gemm_program(const GemmTiling& t, const isa::NpuMachine& m) {
  const isa::CubeShape& cube = m.cube_f16;
  const int64_t in = dtype_bytes(cube.a), acc = dtype_bytes(cube.acc), n0 = cube.n0;
  for (int64_t v : {t.tm, t.tn, t.tk})
    if (v <= 0 || v % cube.m0 || v % cube.k0 || v % n0)
      throw UserError(fmt::format("GEMM tile sizes must be positive multiples of {}, got {}", cube.m0, v));
  if (t.m % t.tm || t.n % t.tn || t.k % t.tk)
    throw UserError(fmt::format("GEMM {}x{}x{} does not divide into {}x{}x{} tiles", t.m, t.n, t.k, t.tm, t.tn, t.tk));
  if (t.cores < 1) throw UserError("a GEMM program needs at least one core");
  npu::Program p;
  p.source_name = fmt::format("gemm_{}x{}x{}_tile{}x{}x{}.npu", t.m, t.n, t.k, t.tm, t.tn, t.tk);
  p.cores = t.cores;
  const int64_t a_bytes = t.m * t.k * in, b_bytes = t.k * t.n * in;
  p.tensors.push_back({"A", DType::F16, {t.m, t.k}, 0, npu::TensorRole::In, {}});
  p.tensors.push_back({"B", DType::F16, {t.k, t.n}, a_bytes, npu::TensorRole::In, {}});
  p.tensors.push_back({"C", DType::F32, {t.m, t.n}, a_bytes + b_bytes, npu::TensorRole::Out, {}});
  const int64_t tiles_n = t.n / t.tn, tiles = (t.m / t.tm) * tiles_n, chunks = t.k / t.tk;
  const int64_t mf = t.tm / cube.m0, kf = t.tk / cube.k0, nf = t.tn / n0;
  const int64_t l1_a = t.tm * t.tk * in, l1_stage = l1_a + t.tk * t.tn * in;
  const int64_t l0_stage = std::max(t.tm * t.tk, t.tk * t.tn) * in, l0c_stage = t.tm * t.tn * acc;
  const int64_t c_base = a_bytes + b_bytes;

  Emitter e(p);
  for (int64_t id : {0, 1}) {  // every double-buffered stage starts free
    e.set(Pipe::MTE1, Pipe::MTE2, imm(id));
    e.set(Pipe::M, Pipe::MTE1, imm(id));
    e.set(Pipe::V, Pipe::M, imm(id));
  }
  e.set(Pipe::MTE3, Pipe::V, imm(0));
  e.op(Opcode::Loop, {r(kTile), Operand::reg_(npu::kRegCoreId), imm(tiles), Operand::reg_(npu::kRegCoreCount)});
  {
    e.op(Opcode::Div, {r(kTileM), r(kTile), imm(tiles_n)});
    e.op(Opcode::Mul, {r(kTmp), r(kTileM), imm(tiles_n)});
    e.op(Opcode::Sub, {r(kTileN), r(kTile), r(kTmp)});
    e.parity(kCBuf, kLocalTiles);
    e.affine(kL0C, kCBuf, l0c_stage, 0);
    e.wait(Pipe::V, Pipe::M, r(kCBuf));  // this L0C buffer was moved out
    e.op(Opcode::Loop, {r(kKc), imm(0), imm(chunks), imm(1)});
    {
      e.parity(kBuf, kChunks);
      e.affine(kL1A, kBuf, l1_stage, 0);
      e.op(Opcode::Add, {r(kL1B), r(kL1A), imm(l1_a)});
      e.affine(kL0, kBuf, l0_stage, 0);
      e.affine(kGmA, kTileM, t.tm * t.k * in, 0);  // A[tm * mt, tk * kc]
      e.add_scaled(kGmA, kKc, t.tk * in);
      e.affine(kGmB, kKc, t.tk * t.n * in, a_bytes);  // B[tk * kc, tn * nt]
      e.add_scaled(kGmB, kTileN, t.tn * in);
      e.op(Opcode::Seq, {r(kInit), r(kKc), imm(0)});
      e.wait(Pipe::MTE1, Pipe::MTE2, r(kBuf));
      e.op(Opcode::DmaInNz, {f16(), at(Buffer::L1, kL1A), at(Buffer::GM, kGmA), imm(t.tm), imm(t.tk), imm(t.k)});
      e.op(Opcode::DmaInNz, {f16(), at(Buffer::L1, kL1B), at(Buffer::GM, kGmB), imm(t.tk), imm(t.tn), imm(t.n)});
      e.set(Pipe::MTE2, Pipe::MTE1, r(kBuf));
      e.wait(Pipe::MTE2, Pipe::MTE1, r(kBuf));
      e.wait(Pipe::M, Pipe::MTE1, r(kBuf));
      // L1 holds NZ (column blocks of 16); L0A wants ZZ (fractal rows), L0B ZN (transposed fractals).
      e.op(Opcode::Load2d, {f16(), at(Buffer::L0A, kL0), at(Buffer::L1, kL1A), imm(mf), imm(kf), imm(1), imm(mf), imm(0)});
      e.op(Opcode::Load2d, {f16(), at(Buffer::L0B, kL0), at(Buffer::L1, kL1B), imm(kf), imm(nf), imm(1), imm(kf), imm(1)});
      e.set(Pipe::MTE1, Pipe::MTE2, r(kBuf));
      e.set(Pipe::MTE1, Pipe::M, r(kBuf));
      e.wait(Pipe::MTE1, Pipe::M, r(kBuf));
      e.op(Opcode::Mmad, {f16(), at(Buffer::L0C, kL0C), at(Buffer::L0A, kL0), at(Buffer::L0B, kL0), imm(t.tm), imm(t.tk),
                          imm(t.tn), r(kInit)});
      e.set(Pipe::M, Pipe::MTE1, r(kBuf));
      e.op(Opcode::Add, {r(kChunks), r(kChunks), imm(1)});
    }
    e.op(Opcode::EndLoop, {});
    e.set(Pipe::M, Pipe::V, r(kCBuf));
    e.wait(Pipe::M, Pipe::V, r(kCBuf));
    e.wait(Pipe::MTE3, Pipe::V, imm(0));  // UB free
    e.op(Opcode::MovL0c, {Operand::type(cube.acc), at_offset(Buffer::UB, 0), at(Buffer::L0C, kL0C), imm(mf * nf), imm(0)});
    e.set(Pipe::V, Pipe::M, r(kCBuf));
    e.set(Pipe::V, Pipe::MTE3, imm(0));
    e.wait(Pipe::V, Pipe::MTE3, imm(0));
    // UB holds C NZ: column block j is tm rows of n0 f32, written to C[tm * mt.., tn * nt + n0 j..].
    e.affine(kGmC, kTileM, t.tm * t.n * acc, c_base);
    e.add_scaled(kGmC, kTileN, t.tn * acc);
    e.op(Opcode::Loop, {r(kBlock), imm(0), imm(nf), imm(1)});
    {
      e.affine(kUbC, kBlock, t.tm * n0 * acc, 0);
      e.op(Opcode::DmaOut, {at(Buffer::GM, kGmC), at(Buffer::UB, kUbC), imm(t.tm), imm(n0 * acc), imm(0), imm((t.n - n0) * acc)});
      e.op(Opcode::Add, {r(kGmC), r(kGmC), imm(n0 * acc)});
    }
    e.op(Opcode::EndLoop, {});
    e.set(Pipe::MTE3, Pipe::V, imm(0));
    e.op(Opcode::Add, {r(kLocalTiles), r(kLocalTiles), imm(1)});
  }
  e.op(Opcode::EndLoop, {});
  for (int64_t id : {0, 1}) {
    e.wait(Pipe::MTE1, Pipe::MTE2, imm(id));
    e.wait(Pipe::M, Pipe::MTE1, imm(id));
    e.wait(Pipe::V, Pipe::M, imm(id));
  }
  e.wait(Pipe::MTE3, Pipe::V, imm(0));
  e.op(Opcode::PipeBarrier, {pipe(Pipe::All)});
  npu::validate_program(p);
  return p;
}

}  // namespace tessel::npu_sim
