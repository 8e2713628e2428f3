#include "compiler/emit_npu/compositions.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/emit_npu/operands.h"
#include "compiler/emit_npu/pointwise.h"
#include "isa/base/error.h"

// Polynomial coefficients: least-squares fits on Chebyshev nodes of the function's reduced form
// (weighted for relative error), rounded to f32, each checked by evaluating the composition in f32
// over its range (Horner's scheme, one rounding per step, as the vector unit does). Techniques:
// Cody and Waite, "Software Manual for the Elementary Functions" (1980) for the three-part
// reduction by pi/2; Goldberg, "What every computer scientist should know about floating-point
// arithmetic" (1991), Theorem 4, for log1p(z) = log(1 + z) * z / ((1 + z) - 1); erf as
// 1 - exp(P(|x|)) beyond 1, P fitted to log(erfc).

namespace tessel::emit_npu {

using npu::Opcode;
using Reg = Composer::Reg;

Composer::Composer(VectorCode& v, DType type, int64_t n, int scratch_limit, Reg dst)
    : v_(v), type_(type), n_(n), scratch_limit_(scratch_limit), dst_(dst) {}

Reg Composer::tmp() {
  TESSEL_CHECK(++scratch_used_ <= scratch_limit_, "NPU composition takes more scratch regions than its table row reserves");
  return v_.fresh_region();
}

void Composer::emitted(Reg written) {
  TESSEL_CHECK(!dst_written_, "NPU composition emits after writing its destination (its last instruction must)");
  if (written == dst_) dst_written_ = true;
}

void Composer::finish() const { TESSEL_CHECK(dst_written_, "NPU composition never writes its destination"); }

void Composer::vv(Opcode o, Reg d, Reg a, Reg b) {
  const VectorCode::Value D{false, 0, d, type_}, A{false, 0, a, type_}, B{false, 0, b, type_};
  v_.binary(o, D, A, B, n_);
  emitted(d);
}

void Composer::vs(Opcode o, Reg d, Reg a, double s) {
  v_.with_scalar(o, VectorCode::Value{false, 0, d, type_}, VectorCode::Value{false, 0, a, type_}, s, n_);
  emitted(d);
}

void Composer::v1(Opcode o, Reg d, Reg a) {
  v_.unary(o, VectorCode::Value{false, 0, d, type_}, VectorCode::Value{false, 0, a, type_}, n_);
  emitted(d);
}

void Composer::dup(Reg d, double c) {
  v_.op(Opcode::Vdup, {emit_npu::type(type_), at(npu::Buffer::UB, d), npu::Operand::float_(c), imm(v_.repeats(n_, type_)), imm(1),
                       imm(v_.repeat_blocks_)});
  emitted(d);
}

void Composer::sel(Reg d, Reg cond, Reg a, Reg b) {
  const int64_t rb = v_.repeat_blocks_;
  v_.op(Opcode::Vselv, {emit_npu::type(type_), at(npu::Buffer::UB, d), at(npu::Buffer::UB, cond), at(npu::Buffer::UB, a),
                        at(npu::Buffer::UB, b), imm(v_.repeats(n_, type_)), imm(1), imm(1), imm(1), imm(1), imm(rb), imm(rb),
                        imm(rb), imm(rb)});
  emitted(d);
}

void Composer::rint(Reg d, Reg a) {
  v_.convert(VectorCode::Value{false, 0, d, DType::I32}, VectorCode::Value{false, 0, a, DType::F32}, n_);
  emitted(d);
  v_.convert(VectorCode::Value{false, 0, d, DType::F32}, VectorCode::Value{false, 0, d, DType::I32}, n_);
  emitted(d);
}

void Composer::horner(Reg d, Reg t, std::initializer_list<double> c) {
  TESSEL_CHECK(d != t && c.size() >= 2, "Composer::horner: a destination apart from its variable, two coefficients or more");
  const double* hi = c.end() - 1;
  vs(Opcode::Vmuls, d, t, *hi);
  vs(Opcode::Vadds, d, d, *(hi - 1));
  for (const double* p = hi - 2; p >= c.begin(); --p) {
    vv(Opcode::Vmul, d, d, t);
    vs(Opcode::Vadds, d, d, *p);
  }
}

void Composer::copy_sign_of(Reg d, Reg x, Reg p) {
  const Reg z = tmp(), m = tmp();
  dup(z, 0);
  vv(Opcode::Vcmplt, z, x, z);
  vs(Opcode::Vmuls, m, p, -1);
  sel(d, z, m, p);
}

void Composer::round(Reg d, Reg a) {
  const Reg t = tmp(), c = tmp();
  rint(t, a);
  v1(Opcode::Vabs, c, a);
  const Reg lim = tmp();
  dup(lim, 8388608.0);  // 2^23: every f32 of this magnitude or more is an integer
  vv(Opcode::Vcmplt, c, c, lim);
  sel(d, c, t, a);
}

namespace {

constexpr double kTwoOverPi = 0.6366197466850281, kPiOver4 = 0.7853981852531433, kPiOver2 = 1.5707963705062866;
constexpr double kTanPiOver8 = 0.4142135679721832, kLn2 = 0.6931471824645996;
// pi/2 in three parts: C1 and C2 have 11 significant bits, so k * C1 and k * C2 are exact for |k| < 2^13.
constexpr double kHalfPi1 = 1.5703125, kHalfPi2 = 0.0004837512969970703, kHalfPi3 = 7.549790126404332e-08;
constexpr double kBigArgument = 4096;  // asinh / acosh: log(2x) beyond (relative error below 2^-25)

// ---- rounding and sign (exact) --------------------------------------------------------------

void emit_round(Composer& k, Reg d, const std::vector<Reg>& a) { k.round(d, a[0]); }

// floor: rint(x) - (x < rint(x)), x itself from 2^23 on (its zeros keep their signs: -0 - 0 is -0).
void floor_of(Composer& k, Reg d, Reg x) {
  const Reg t = k.tmp(), c = k.tmp(), lim = k.tmp();
  k.rint(t, x);
  k.vv(Opcode::Vcmplt, c, x, t);
  k.vv(Opcode::Vsub, t, t, c);
  k.v1(Opcode::Vabs, c, x);
  k.dup(lim, 8388608.0);
  k.vv(Opcode::Vcmplt, c, c, lim);
  k.sel(d, c, t, x);
}
void emit_floor(Composer& k, Reg d, const std::vector<Reg>& a) { floor_of(k, d, a[0]); }
// ceil(x) = -floor(-x): the rint-and-correct form adds the correction 0 to a -0 (ceil(-0.3)) and
// gives +0, where the interpreter's ceil keeps the sign (1 / ceil(-0.3) is -inf); floor's zeros
// have the right signs, and negation is exact.
void emit_ceil(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg n = k.tmp(), f = k.tmp();
  k.vs(Opcode::Vmuls, n, a[0], -1);
  floor_of(k, f, n);
  k.vs(Opcode::Vmuls, d, f, -1);
}

// (0 < x) - (x < 0), and x itself where x != x (NaN).
void emit_sign(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0], z = k.tmp(), p = k.tmp(), q = k.tmp();
  k.dup(z, 0);
  k.vv(Opcode::Vcmplt, p, z, x);
  k.vv(Opcode::Vcmplt, q, x, z);
  k.vv(Opcode::Vsub, p, p, q);
  k.vv(Opcode::Vcmpeq, q, x, x);
  k.sel(d, q, p, x);
}

// ---- exponential family ---------------------------------------------------------------------

// 1 / (1 + exp(-x)): the interpreter's own f32 steps, so bit-exact with it.
void emit_sigmoid(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg t = k.tmp();
  k.vs(Opcode::Vmuls, t, a[0], -1);
  k.v1(Opcode::Vexp, t, t);
  k.vs(Opcode::Vadds, t, t, 1);
  k.v1(Opcode::Vrec, d, t);
}

// |x| < 1: x * P(x^2); beyond: sign(x) * (1 - exp(Q(min(|x|, 4)))) with Q ~ log(erfc).
void emit_erf(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0], ax = k.tmp(), s = k.tmp(), p = k.tmp(), q = k.tmp(), c = k.tmp();
  k.v1(Opcode::Vabs, ax, x);
  k.vv(Opcode::Vmul, s, x, x);
  k.horner(p, s, {1.128379225730896, -0.3761262893676758, 0.11283612251281738, -0.026854809373617172,
                  0.00519005348905921, -0.0008024353883229196, 7.898209878476337e-05});
  k.vv(Opcode::Vmul, p, p, x);
  k.vs(Opcode::Vmuls, s, ax, -1);  // min(|x|, 4) = -max(-|x|, -4)
  k.vs(Opcode::Vmaxs, s, s, -4);
  k.vs(Opcode::Vmuls, s, s, -1);
  k.horner(q, s, {0.00030321296071633697, -1.1301666498184204, -0.6319370865821838, -0.10997824370861053,
                  0.02636471763253212, -0.004740222357213497, 0.0005927695310674608, -4.559062290354632e-05,
                  1.6140616025950294e-06});
  k.v1(Opcode::Vexp, q, q);
  k.vs(Opcode::Vmuls, q, q, -1);
  k.vs(Opcode::Vadds, q, q, 1);
  k.copy_sign_of(q, x, q);
  k.dup(c, 1);
  k.vv(Opcode::Vcmplt, c, ax, c);
  k.sel(d, c, p, q);
}

// e^|x| / 2 as E * (E / 2) with E = exp(|x| / 2): finite as far as sinh and cosh are.
void half_exp_abs(Composer& k, Reg P, Reg x) {
  const Reg e = k.tmp();
  k.v1(Opcode::Vabs, P, x);
  k.vs(Opcode::Vmuls, P, P, 0.5);
  k.v1(Opcode::Vexp, e, P);
  k.vs(Opcode::Vmuls, P, e, 0.5);
  k.vv(Opcode::Vmul, P, P, e);
}

// cosh = P + 1 / (4 P), P = e^|x| / 2.
void emit_cosh(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg P = k.tmp(), q = k.tmp();
  half_exp_abs(k, P, a[0]);
  k.v1(Opcode::Vrec, q, P);
  k.vs(Opcode::Vmuls, q, q, 0.25);
  k.vv(Opcode::Vadd, d, P, q);
}

// |x| < 1: the odd Taylor polynomial to x^11; beyond: sign(x) * (P - 1 / (4 P)).
void emit_sinh(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0], P = k.tmp(), q = k.tmp(), s = k.tmp(), p = k.tmp(), c = k.tmp();
  half_exp_abs(k, P, x);
  k.v1(Opcode::Vrec, q, P);
  k.vs(Opcode::Vmuls, q, q, 0.25);
  k.vv(Opcode::Vsub, P, P, q);
  k.copy_sign_of(P, x, P);
  k.vv(Opcode::Vmul, s, x, x);
  k.horner(p, s, {0.1666666716337204, 0.008333333767950535, 0.00019841270113829523, 2.7557318844628753e-06,
                  2.5052107943679403e-08});
  k.vv(Opcode::Vmul, s, s, x);
  k.vv(Opcode::Vmul, p, p, s);
  k.vv(Opcode::Vadd, p, p, x);
  k.v1(Opcode::Vabs, c, x);
  k.dup(q, 1);
  k.vv(Opcode::Vcmplt, c, c, q);
  k.sel(d, c, p, P);
}

// log(1 + z) accurate for small z: log(u) * z / (u - 1) with u = 1 + z, and z itself where u == 1.
void log1p(Composer& k, Reg d, Reg z) {
  const Reg u = k.tmp(), w = k.tmp(), r = k.tmp();
  k.vs(Opcode::Vadds, u, z, 1);
  k.vs(Opcode::Vadds, w, u, -1);
  k.vv(Opcode::Vdiv, w, z, w);
  k.v1(Opcode::Vln, r, u);
  k.vv(Opcode::Vmul, r, r, w);
  k.dup(w, 1);
  k.vv(Opcode::Vcmpeq, w, u, w);
  k.sel(d, w, z, r);
}

// log(x) + log 2 where x > kBigArgument, else `r`; into d.
void big_log(Composer& k, Reg d, Reg x, Reg r) {
  const Reg b = k.tmp(), c = k.tmp();
  k.v1(Opcode::Vln, b, x);
  k.vs(Opcode::Vadds, b, b, kLn2);
  k.dup(c, kBigArgument);
  k.vv(Opcode::Vcmplt, c, c, x);
  k.sel(d, c, b, r);
}

// sign(x) * log1p(|x| + x^2 / (1 + sqrt(1 + x^2))).
void emit_asinh(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0], ax = k.tmp(), s = k.tmp(), t = k.tmp();
  k.v1(Opcode::Vabs, ax, x);
  k.vv(Opcode::Vmul, s, ax, ax);
  k.vs(Opcode::Vadds, t, s, 1);
  k.v1(Opcode::Vsqrt, t, t);
  k.vs(Opcode::Vadds, t, t, 1);
  k.vv(Opcode::Vdiv, t, s, t);
  k.vv(Opcode::Vadd, t, ax, t);
  log1p(k, s, t);
  big_log(k, s, ax, s);
  k.copy_sign_of(d, x, s);
}

// log1p((x - 1) + sqrt(x - 1) sqrt(x + 1)): NaN below 1 (sqrt of a negative), no overflow of the
// product for huge x.
void emit_acosh(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0], m = k.tmp(), t = k.tmp(), w = k.tmp();
  k.vs(Opcode::Vadds, m, x, -1);
  k.v1(Opcode::Vsqrt, t, m);
  k.vs(Opcode::Vadds, w, x, 1);
  k.v1(Opcode::Vsqrt, w, w);
  k.vv(Opcode::Vmul, t, t, w);
  k.vv(Opcode::Vadd, t, m, t);
  log1p(k, m, t);
  big_log(k, d, x, m);
}

// (log1p(x) - log1p(-x)) / 2.
void emit_atanh(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg p = k.tmp(), m = k.tmp();
  log1p(k, p, a[0]);
  k.vs(Opcode::Vmuls, m, a[0], -1);
  log1p(k, m, m);
  k.vv(Opcode::Vsub, p, p, m);
  k.vs(Opcode::Vmuls, d, p, 0.5);
}

// ---- trigonometric --------------------------------------------------------------------------

// x = k pi/2 + r with |r| <= pi/4: k = rint(x 2/pi), r by the three-part Cody-Waite subtraction;
// sin r and cos r by their polynomials.
struct Reduced {
  Reg k, s, c;
};
Reduced reduce_half_pi(Composer& k, Reg x) {
  const Reduced q{k.tmp(), k.tmp(), k.tmp()};
  const Reg r = k.tmp(), t = k.tmp();
  k.vs(Opcode::Vmuls, q.k, x, kTwoOverPi);
  k.rint(q.k, q.k);
  k.vs(Opcode::Vmuls, t, q.k, -kHalfPi1);
  k.vv(Opcode::Vadd, r, x, t);
  k.vs(Opcode::Vmuls, t, q.k, -kHalfPi2);
  k.vv(Opcode::Vadd, r, r, t);
  k.vs(Opcode::Vmuls, t, q.k, -kHalfPi3);
  k.vv(Opcode::Vadd, r, r, t);
  k.vv(Opcode::Vmul, t, r, r);  // r^2
  // sin r = r + r^3 S(r^2)
  k.horner(q.s, t, {-0.1666666716337204, 0.008333331905305386, -0.00019840164168272167, 2.7257481178821763e-06});
  k.vv(Opcode::Vmul, q.s, q.s, t);
  k.vv(Opcode::Vmul, q.s, q.s, r);
  k.vv(Opcode::Vadd, q.s, q.s, r);
  // cos r = (1 - r^2 / 2) + r^4 C(r^2)
  k.horner(q.c, t, {0.0416666679084301, -0.00138888880610466, 2.4800583560136147e-05, -2.7299702765049005e-07});
  k.vv(Opcode::Vmul, r, t, t);
  k.vv(Opcode::Vmul, q.c, q.c, r);
  k.vs(Opcode::Vmuls, t, t, -0.5);
  k.vs(Opcode::Vadds, t, t, 1);
  k.vv(Opcode::Vadd, q.c, t, q.c);
  return q;
}

// sin x = (sin r, cos r, -sin r, -cos r) by quadrant (k + shift) mod 4; + (x - x) makes an
// infinite x NaN.
void sin_or_cos(Composer& k, Reg d, Reg x, int shift) {
  const Reduced q = reduce_half_pi(k, x);
  const Reg f = k.tmp(), m = k.tmp(), nan = k.tmp();
  if (shift != 0) k.vs(Opcode::Vadds, q.k, q.k, shift);
  k.dup(f, 4);
  k.vv(Opcode::Vmod, q.k, q.k, f);
  k.vs(Opcode::Vadds, q.k, q.k, 4);
  k.vv(Opcode::Vmod, q.k, q.k, f);  // quadrant in 0..3
  k.dup(f, 2);
  k.vv(Opcode::Vmod, m, q.k, f);
  k.sel(q.s, m, q.c, q.s);
  k.vv(Opcode::Vcmple, m, f, q.k);  // 1 in quadrants 2 and 3
  k.vs(Opcode::Vmuls, m, m, -2);
  k.vs(Opcode::Vadds, m, m, 1);
  k.vv(Opcode::Vsub, nan, x, x);
  k.vv(Opcode::Vmul, q.s, q.s, m);
  k.vv(Opcode::Vadd, d, q.s, nan);
}
void emit_sin(Composer& k, Reg d, const std::vector<Reg>& a) { sin_or_cos(k, d, a[0], 0); }
void emit_cos(Composer& k, Reg d, const std::vector<Reg>& a) { sin_or_cos(k, d, a[0], 1); }

// tan x = sin r / cos r for even k, -cos r / sin r for odd k.
void emit_tan(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0];
  const Reduced q = reduce_half_pi(k, x);
  const Reg o = k.tmp(), num = k.tmp(), den = k.tmp();
  k.dup(o, 2);
  k.vv(Opcode::Vmod, o, q.k, o);
  k.v1(Opcode::Vabs, o, o);  // k odd
  k.sel(num, o, q.c, q.s);
  k.sel(den, o, q.s, q.c);
  k.vs(Opcode::Vmuls, o, o, -2);
  k.vs(Opcode::Vadds, o, o, 1);
  k.vv(Opcode::Vmul, den, den, o);
  k.vv(Opcode::Vsub, o, x, x);
  k.vv(Opcode::Vadd, num, num, o);
  k.vv(Opcode::Vdiv, d, num, den);
}

// atan of a >= 0 (or NaN): t = min(a, 1/a); u = (t - 1) / (t + 1) above tan(pi/8), with pi/4 added
// back; an odd polynomial; pi/2 - that where a > 1.
void atan_abs(Composer& k, Reg d, Reg a) {
  const Reg t = k.tmp(), m = k.tmp(), u = k.tmp(), p = k.tmp(), s = k.tmp();
  k.v1(Opcode::Vrec, t, a);
  k.vv(Opcode::Vmin, t, a, t);
  k.dup(m, kTanPiOver8);
  k.vv(Opcode::Vcmplt, m, m, t);
  k.vs(Opcode::Vadds, u, t, -1);
  k.vs(Opcode::Vadds, p, t, 1);
  k.vv(Opcode::Vdiv, u, u, p);
  k.sel(u, m, u, t);
  k.vv(Opcode::Vmul, s, u, u);
  k.horner(p, s, {-0.3333333134651184, 0.1999961882829666, -0.14265817403793335, 0.10759253054857254,
                  -0.06493964046239853});
  k.vv(Opcode::Vmul, s, s, u);
  k.vv(Opcode::Vmul, p, p, s);
  k.vv(Opcode::Vadd, p, p, u);
  k.vs(Opcode::Vmuls, m, m, kPiOver4);
  k.vv(Opcode::Vadd, p, p, m);
  k.dup(m, 1);
  k.vv(Opcode::Vcmplt, m, m, a);
  k.vs(Opcode::Vmuls, s, p, -1);
  k.vs(Opcode::Vadds, s, s, kPiOver2);
  k.sel(d, m, s, p);
}

void emit_atan(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg ax = k.tmp();
  k.v1(Opcode::Vabs, ax, a[0]);
  atan_abs(k, ax, ax);
  k.copy_sign_of(d, a[0], ax);
}

// asin x = sign(x) atan(|x| / sqrt((1 - |x|)(1 + |x|))).
void emit_asin(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg ax = k.tmp(), t = k.tmp(), w = k.tmp();
  k.v1(Opcode::Vabs, ax, a[0]);
  k.vs(Opcode::Vmuls, t, ax, -1);
  k.vs(Opcode::Vadds, t, t, 1);
  k.vs(Opcode::Vadds, w, ax, 1);
  k.vv(Opcode::Vmul, t, t, w);
  k.v1(Opcode::Vsqrt, t, t);
  k.vv(Opcode::Vdiv, t, ax, t);
  atan_abs(k, t, t);
  k.copy_sign_of(d, a[0], t);
}

// acos x = 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near 1 or -1.
void emit_acos(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg t = k.tmp(), w = k.tmp();
  k.vs(Opcode::Vmuls, t, a[0], -1);
  k.vs(Opcode::Vadds, t, t, 1);
  k.vs(Opcode::Vadds, w, a[0], 1);
  k.vv(Opcode::Vdiv, t, t, w);
  k.v1(Opcode::Vsqrt, t, t);
  atan_abs(k, t, t);
  k.vs(Opcode::Vmuls, d, t, 2);
}

// ---- pow ------------------------------------------------------------------------------------

// pow by a constant 1, 2 or 3 multiplied out into d; false for any other exponent.
bool pow_by_small_integer(Composer& k, Reg d, Reg x) {
  if (k.constant_operand == 1.0) {
    k.vs(Opcode::Vmuls, d, x, 1);
  } else if (k.constant_operand == 2.0) {
    k.vv(Opcode::Vmul, d, x, x);
  } else if (k.constant_operand == 3.0) {
    const Reg s = k.tmp();
    k.vv(Opcode::Vmul, s, x, x);
    k.vv(Opcode::Vmul, d, s, x);
  } else {
    return false;
  }
  return true;
}

// r (= |x|^y) negated where x < 0 and y is an odd integer, NaN (log(-1)) where x < 0 and y is not
// an integer (an infinite y counts as an even integer). `f` is scratch.
void pow_negative_base(Composer& k, Reg r, Reg x, Reg y, Reg f) {
  const Reg w = k.tmp(), integer = k.tmp(), negative = k.tmp();
  k.round(w, y);
  k.vv(Opcode::Vcmpeq, integer, w, y);
  k.dup(f, 2);
  k.vv(Opcode::Vmod, w, y, f);
  k.v1(Opcode::Vabs, w, w);
  k.dup(f, 1);
  k.vv(Opcode::Vcmpeq, w, w, f);  // y odd
  k.dup(f, 0);
  k.vv(Opcode::Vcmplt, negative, x, f);
  k.vv(Opcode::Vmul, w, w, negative);
  k.vs(Opcode::Vmuls, w, w, -2);
  k.vs(Opcode::Vadds, w, w, 1);
  k.vv(Opcode::Vmul, r, r, w);
  k.vs(Opcode::Vmuls, integer, integer, -1);
  k.vs(Opcode::Vadds, integer, integer, 1);
  k.vv(Opcode::Vmul, negative, negative, integer);
  k.vs(Opcode::Vmuls, w, negative, -1);
  k.v1(Opcode::Vln, w, w);
  k.sel(r, negative, w, r);
}

// exp(y log|x|), with the negative-base rules, and 1 where y == 0 or x == 1 (C99 F.9.4.4, also for
// a NaN operand).
void emit_pow(Composer& k, Reg d, const std::vector<Reg>& a) {
  const Reg x = a[0], y = a[1];
  if (pow_by_small_integer(k, d, x)) return;
  const Reg r = k.tmp(), f = k.tmp(), c = k.tmp();
  k.v1(Opcode::Vabs, r, x);
  k.v1(Opcode::Vln, r, r);
  k.vv(Opcode::Vmul, r, r, y);
  k.v1(Opcode::Vexp, r, r);
  pow_negative_base(k, r, x, y, f);  // leaves f = 0
  k.vv(Opcode::Vcmpeq, c, y, f);
  k.dup(f, 1);
  k.vv(Opcode::Vcmpeq, f, x, f);
  k.vv(Opcode::Vmax, c, c, f);
  k.dup(f, 1);
  k.sel(d, c, f, r);
}

// Scratch counts: the most tmp() calls of each emitter, helpers included; instruction counts: those
// emitted for f32 (checked by tests/emit_npu/test_compositions.cc). Accuracy: the largest
// error of the f32 result against the interpreter's over the range, measured on the simulator by
// tests/emit_npu/test_compositions.cc (4096 samples, uniform and geometric towards 0); f16 results
// equal the interpreter's or are one f16 step apart (acosh, pow).
const std::vector<Composition> kCompositions = {
    {ir::Op::Erf, 7, 44, "[-6, 6]", "rel 2.2e-7", emit_erf},
    {ir::Op::Pow, 9, 34, "x in [1/64, 8] (either sign), y in [-8, 8]", "rel 1.4e-6 (grows as |y log x| 2^-24: 5e-6 at |y log x| = 88)", emit_pow},
    {ir::Op::Floor, 3, 8, "all f32", "exact", emit_floor},
    {ir::Op::Ceil, 5, 10, "all f32", "exact", emit_ceil},
    {ir::Op::Round, 3, 6, "all f32", "exact", emit_round},
    {ir::Op::Sign, 3, 6, "all f32, i32", "exact", emit_sign},
    {ir::Op::Sin, 8, 43, "[-8192, 8192]", "abs 6.0e-8 (abs 1e-6 to kTrigAccurateRange = 65536, then growing)", emit_sin},
    {ir::Op::Cos, 8, 44, "[-8192, 8192]", "abs 6.0e-8 (abs 1e-6 to kTrigAccurateRange = 65536, then growing)", emit_cos},
    {ir::Op::Tan, 8, 41, "[-10, 10]", "1.7e-7 of max(|tan x|, 1)", emit_tan},
    {ir::Op::Asin, 10, 38, "[-1, 1]", "rel 2.3e-7", emit_asin},
    {ir::Op::Acos, 7, 33, "[-1, 1]", "rel 2.3e-7", emit_acos},
    {ir::Op::Atan, 8, 32, "[-1e6, 1e6]", "rel 1.4e-7", emit_atan},
    {ir::Op::Sinh, 8, 28, "[-89, 89]", "rel 2.0e-7", emit_sinh},
    {ir::Op::Cosh, 3, 8, "[-89, 89]", "rel 2.0e-7", emit_cosh},
    {ir::Op::Asinh, 10, 24, "[-1e5, 1e5]", "rel 1.6e-7", emit_asinh},
    {ir::Op::Acosh, 8, 19, "[1, 1e5]", "rel 2.0e-7", emit_acosh},
    {ir::Op::Atanh, 8, 19, "[-1, 1]", "rel 2.1e-7", emit_atanh},
    {ir::Op::Sigmoid, 1, 4, "all f32", "exact (the interpreter's own f32 steps)", emit_sigmoid},
};

}  // namespace

const Composition* composition_for(ir::Op op) {
  for (const Composition& c : kCompositions)
    if (c.op == op) return &c;
  return nullptr;
}

int composition_regions(ir::Op op) {
  const Composition* c = composition_for(op);
  return c ? c->scratch_regions + ir::op_arity(op) + 1 : 0;
}

const std::vector<Composition>& compositions() { return kCompositions; }

int vector_instructions(const ir::Expr& e) {
  if (e.kind != ir::ExprKind::Apply) return 1;
  const Composition* c = composition_for(e.op);
  if (!c) return 1;
  if (e.op == ir::Op::Pow && e.args.size() == 2 && e.args[1]->kind == ir::ExprKind::Constant) {
    const double y = e.args[1]->value;
    if (y == 1 || y == 2) return 1;
    if (y == 3) return 2;
  }
  int n = c->instructions;
  if (e.type != DType::F32 && dtype_is_float(e.type)) n += 1 + int(e.args.size());  // vconv in and out
  return n;
}

}  // namespace tessel::emit_npu
