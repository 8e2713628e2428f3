// NPU lowering of the built-in functions the DaVinci vector unit has no instruction for (erf, pow,
// floor, ceil, round, sign, sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh,
// sigmoid): each is a fixed sequence of the ISA's vector instructions, as the vendors' libraries
// build them — vconv's round-to-nearest-even for integer parts, compares and vselv for branches
// and special values, vexp / vln / vrec / vsqrt / vmod, and Horner polynomials (vmuls, vadds)
// after a range reduction. The sequences work on f32 UB regions of n elements (f16 operands are
// widened first and the result rounded once to f16, as the interpreter rounds); sign also runs on
// i32.
//
// One table, kCompositions in compositions.cc, gives per operator its scratch regions, the
// sampled range and the measured accuracy against the reference interpreter (also listed in
// compiler/emit_npu/README.md, and checked by tests/emit_npu/test_compositions.cc).
// VectorCode::apply emits a composed operator through compose(); VectorCode::count_nodes reserves
// composition_regions() regions for it. Their cycles are those of their instructions, timed by
// the simulator as any other.
//
// Contract of an emitter: it reads its operand regions, writes scratch regions from Composer::tmp()
// (at most the row's scratch_regions) and writes the destination region once, with its last
// instruction (the destination may be an operand's region: element-wise operations run in place).
// The Composer checks both.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "compiler/ir/tensor_ir.h"
#include "isa/npu_isa.h"

namespace tessel::emit_npu {

class VectorCode;

// Emits vector instructions on UB regions of n elements of one type (f32, or i32 for sign) for a
// composition. A region is a UB byte offset.
class Composer {
 public:
  using Reg = int64_t;
  Composer(VectorCode& v, DType type, int64_t n, int scratch_limit, Reg dst);
  ~Composer() = default;

  Reg tmp();
  // d = a OP b (Vadd Vsub Vmul Vdiv Vmax Vmin Vmod Vcmplt Vcmple Vcmpeq), d = a OP s (Vadds Vmuls
  // Vmaxs), d = OP a (Vabs Vexp Vln Vsqrt Vrec).
  void vv(npu::Opcode o, Reg d, Reg a, Reg b);
  void vs(npu::Opcode o, Reg d, Reg a, double s);
  void v1(npu::Opcode o, Reg d, Reg a);
  void dup(Reg d, double c);
  void sel(Reg d, Reg cond, Reg a, Reg b);  // d = cond != 0 ? a : b
  // d = a rounded to an integer, halves to even, for |a| < 2^31 (vconv f32 -> i32 -> f32).
  void rint(Reg d, Reg a);
  // d = c[0] + t * (c[1] + t * (...)); d must differ from t.
  void horner(Reg d, Reg t, std::initializer_list<double> c);
  // d = x < 0 ? -p : p.
  void copy_sign_of(Reg d, Reg x, Reg p);
  // d = round-half-even of a for every f32 (values of magnitude >= 2^23, infinities and NaN as
  // they are).
  void round(Reg d, Reg a);

  Reg dst() const { return dst_; }
  DType type() const { return type_; }
  // A constant second operand (pow(x, 2)), when the operand was one.
  std::optional<double> constant_operand;
  // Checks the contract (called by compose after the emitter).
  void finish() const;

 private:
  void emitted(Reg written);

  VectorCode& v_;
  DType type_;
  int64_t n_;
  int scratch_limit_, scratch_used_ = 0;
  Reg dst_;
  bool dst_written_ = false;
};

// |x| up to which sin, cos and tan keep their stated accuracy: the Cody-Waite reduction by pi/2
// (a three-part constant) stays exact while the quotient has few enough bits; beyond it the error
// grows (a property of the reduction, not of the hardware).
inline constexpr double kTrigAccurateRange = 65536.0;

struct Composition {
  ir::Op op;
  int scratch_regions;    // regions from Composer::tmp() it takes at most
  int instructions;       // vector instructions it emits on f32 operands (pow: a variable exponent)
  const char* range;      // the sampled range its accuracy holds over
  const char* accuracy;   // measured against the interpreter's f32 results (README.md)
  void (*emit)(Composer& k, Composer::Reg d, const std::vector<Composer::Reg>& args);
};

// The row of `op`, or nullptr when the vector unit has an instruction for it (or it is not a function).
const Composition* composition_for(ir::Op op);
// Regions a composed node takes beyond its own: scratch, widened operands, the f32 result.
int composition_regions(ir::Op op);
// Vector instructions per element operation node e costs on the NPU: 1 for an operator with an
// instruction of its own, a composition's count (plus the widening and narrowing vconv of an f16
// node; pow by a constant 1, 2 or 3: its multiplications). The roofline's vector work
// (kernel::VectorOpCost) counts with it.
int vector_instructions(const ir::Expr& e);
// Every row, for the documentation test.
const std::vector<Composition>& compositions();

}  // namespace tessel::emit_npu
