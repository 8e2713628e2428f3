// BitShift (unsigned integers; direction LEFT or RIGHT) without a shift in the language: the NPU's
// vector unit has no shift instruction, and x << y = x * 2^y, x >> y = x / 2^y (truncating, the
// operands non-negative) are exact in the held integer type. 2^y is one local over the output's
// shape, the product of one factor per bit of y,
//   P(i..) = select(y > L, 0, select(y % 2 != 0, 2, 1) * select(y / 2 % 2 != 0, 4, 1) * ...)
// with L the largest shift computed: u8 7 (held as u8), u16 15 and u32/u64 30 (held as i32). A
// larger shift gives P = 0, so x >> y = x / 0 = 0 (the language's x / 0) and x << y = 0; the values
// where that differs from ONNX (u32/u64 x << 31 with x odd, results of 2^31 and above) do not fit
// in the i32 tessel holds them in and are refused where the expected data is read. Then
//   Z(i..) = X(i..) * P(i..)           (u16: % 2^16 after, the modulus from the element's width; u8 and
//                                       i32 products wrap by themselves)
//   Z(i..) = X(i..) / P(i..)
// A node whose inputs are constants is folded.
#include <cmath>

#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using TP = onnx::TensorProto;

// The width of an unsigned ONNX element type in bits (0 for any other type).
int element_bits(int elem_type) {
  switch (elem_type) {
    case TP::UINT8: return 8;
    case TP::UINT16: return 16;
    case TP::UINT32: return 32;
    case TP::UINT64: return 64;
    default: return 0;
  }
}

int64_t largest_shift(const Context& c, int elem_type) {
  switch (elem_type) {
    case TP::UINT8: return 7;
    case TP::UINT16: return 15;
    case TP::UINT32: case TP::UINT64: return 30;
    default: break;
  }
  c.unsupported("BitShift of " + std::to_string(elem_type) + " data (ONNX defines it for uint8, uint16, uint32, uint64)");
  return -1;  // not reached (unsupported throws)
}

bool fold(Context& c, bool left, int elem_type) {
  const Value &x = c.input(0), &y = c.input(1);
  if (!foldable(x) || !foldable(y) || x.shape != y.shape) return false;
  const int bits = element_bits(elem_type);
  std::vector<double> z;
  for (size_t k = 0; k < x.data->size(); ++k) {
    const uint64_t a = uint64_t((*x.data)[k]), s = uint64_t((*y.data)[k]);
    uint64_t r = s >= uint64_t(bits) ? 0 : left ? a << s : a >> s;
    if (bits < 64) r &= (uint64_t(1) << bits) - 1;
    z.push_back(double(r));
  }
  c.set_constant(0, std::move(z), x.shape, elem_type);
  return true;
}

void translate_bitshift(Context& c) {
  const std::string direction = c.attr_string("direction", "");
  if (direction != "LEFT" && direction != "RIGHT") c.malformed("direction must be \"LEFT\" or \"RIGHT\", not \"" + direction + "\"");
  const bool left = direction == "LEFT";
  const int et = c.input(0).elem_type;
  if (c.input(1).elem_type != et) c.malformed("X and Y have different element types");
  const int64_t l = largest_shift(c, et);
  if (fold(c, left, et)) return;
  const Value z = output_value(c, 0);
  const DType t = c.dtype(z);
  const std::string y = c.read_broadcast(c.input(1), z.shape);
  std::vector<std::string> factors;
  for (int64_t b = 0; (int64_t(1) << b) <= l; ++b) {
    const std::string bit = b == 0 ? y : y + " / " + literal(double(int64_t(1) << b), t);
    factors.push_back("select(" + bit + " % " + literal(2, t) + " != " + literal(0, t) + ", " +
                      literal(std::ldexp(1.0, int(int64_t(1) << b)), t) + ", " + literal(1, t) + ")");
  }
  Value p = local(c, z, z.shape, "pow2");
  c.emit({p.tsl, indices(z.shape.size()), "=",
          "select(" + y + " > " + literal(double(l), t) + ", " + literal(0, t) + ", " + join(factors, " * ") + ")",
          ranges_of(z.shape)});
  const std::string x = c.read_broadcast(c.input(0), z.shape), pr = c.read(p, indices(z.shape.size()));
  std::string rhs = left ? x + " * " + pr : x + " / " + pr;
  if (left && et == TP::UINT16) rhs = "(" + rhs + ") % " + literal(std::ldexp(1.0, element_bits(et)), t);
  c.emit({z.tsl, indices(z.shape.size()), "=", rhs, ranges_of(z.shape)});
}

}  // namespace

void add_bitshift_ops(std::map<std::string, Translator>& t) { t["BitShift"] = translate_bitshift; }

}  // namespace tessel::onnx_import
