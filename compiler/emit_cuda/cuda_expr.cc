#include "compiler/emit_cuda/cuda_expr.h"

#include "compiler/kernel/c_value.h"
#include "isa/base/error.h"

namespace tessel::emit_cuda {

std::string storage_type(DType t) {
  switch (t) {
    case DType::F16: return "__half";
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I8: return "signed char";
    case DType::U8: return "unsigned char";
    case DType::I32: return "int";
    case DType::BF16: return "__nv_bfloat16";
  }
  throw UserError("dtype " + std::string(dtype_name(t)) + " is not supported by the CUDA emitter");
}

std::string value_type(DType t) { return dtype_is_float(t) && t != DType::F64 ? "float" : storage_type(t); }

std::string load_value(DType t, const std::string& stored) {
  if (t == DType::F16) return "__half2float(" + stored + ")";
  if (t == DType::BF16) return "__bfloat162float(" + stored + ")";
  return stored;
}

std::string store_value(DType t, const std::string& value) {
  if (t == DType::F16) return "__float2half_rn(" + value + ")";
  if (t == DType::BF16) return "__float2bfloat16_rn(" + value + ")";
  return "((" + storage_type(t) + ")(" + value + "))";
}

std::string int_expr(const kernel::Expr& e) {
  static constexpr auto literal = [](int64_t v) { return "(" + std::to_string(v) + "LL)"; };
  return kernel::to_c(e, {+literal, "tessel_imin", "tessel_imax"});
}

namespace {

// A float computation whose result has dtype t: rounded when t is f16 or bf16.
std::string fres(DType t, const std::string& v) {
  if (t == DType::F16) return "tessel_r16(" + v + ")";
  if (t == DType::BF16) return "tessel_rbf16(" + v + ")";
  return "(" + v + ")";
}

std::string cuda_float_result(DType t, const std::string& v, bool) { return fres(t, v); }

// Floats travel as `float` (f16 and bf16 results rounded by tessel_r16, tessel_rbf16); integers widen to long long.
const kernel::CValueDialect kDialect = {
    .value_type = value_type, .float_result = cuda_float_result, .inf = "TESSEL_INF", .neg_inf = "(-TESSEL_INF)",
    .nan = "TESSEL_NAN", .to_float = "(float)", .widen = "(long long)", .helper_arg = "(long long)",
    .long_suffix = "LL", .int_constant = "(long long)", .int_size_suffix = "LL", .int_helpers = true,
    .float_negate = true};

}  // namespace

std::string value_expr(const ir::Expr& e, const ValueContext& ctx) {
  return kernel::c_value(e, {kDialect, ctx.affine, [&](const ir::Expr& a) { return load_value(a.type, ctx.access(a)); },
                             ctx.sizes, ctx.replace});
}

std::string reduction_identity(ir::Reduction r, DType t) {
  const std::string VT = value_type(t);
  if (r == ir::Reduction::Sum || r == ir::Reduction::None) return "((" + VT + ")0)";
  if (r == ir::Reduction::Prod) return "((" + VT + ")1)";
  const bool mx = r == ir::Reduction::Max;
  if (dtype_is_float(t)) return mx ? "(-TESSEL_INF)" : "TESSEL_INF";
  switch (t) {
    case DType::I8: return mx ? "((signed char)-128)" : "((signed char)127)";
    case DType::U8: return mx ? "((unsigned char)0)" : "((unsigned char)255)";
    default: return mx ? "((int)(-2147483647 - 1))" : "((int)2147483647)";
  }
}

std::string reduce_values(ir::Reduction r, DType t, const std::string& cur, const std::string& v) {
  const bool fl = dtype_is_float(t);
  const std::string VT = value_type(t);
  switch (r) {
    case ir::Reduction::None: return v;
    case ir::Reduction::Sum:
      return fl ? fres(t, "(" + VT + ")" + cur + " + (" + VT + ")" + v) : "((" + VT + ")((long long)" + cur + " + (long long)" + v + "))";
    case ir::Reduction::Prod:  // integers wrap, as the language's integer arithmetic does
      return fl ? fres(t, "(" + VT + ")" + cur + " * (" + VT + ")" + v)
                : "((" + VT + ")((unsigned long long)" + cur + " * (unsigned long long)" + v + "))";
    case ir::Reduction::Max:
      return fl ? fres(t, std::string(t == DType::F64 ? "tessel_dmax(" : "tessel_fmax(") + cur + ", " + v + ")") : "((" + VT + ")tessel_imax(" + cur + ", " + v + "))";
    case ir::Reduction::Min:
      return fl ? fres(t, std::string(t == DType::F64 ? "tessel_dmin(" : "tessel_fmin(") + cur + ", " + v + ")") : "((" + VT + ")tessel_imin(" + cur + ", " + v + "))";
  }
  return v;
}

std::string cuda_prelude() {
  return R"(#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define TESSEL_INF __int_as_float(0x7f800000)
#define TESSEL_NAN __int_as_float(0x7fffffff)
/* the interpreter's semantics (compiler/README.md): f16 results rounded, NaN-propagating min/max,
   saturating float->int casts with NaN -> 0, integer division and remainder by zero give 0 */
static __device__ __forceinline__ float tessel_r16(float x) { return __half2float(__float2half_rn(x)); }
/* bf16: round to nearest even on the bits (NaN kept, quieted), as the interpreter does */
static __device__ __forceinline__ float tessel_rbf16(float x) { unsigned b = __float_as_uint(x); if ((b & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(b | 0x00400000u); b += 0x7fffu + ((b >> 16) & 1u); return __uint_as_float(b & 0xffff0000u); }
static __device__ __forceinline__ long long tessel_floordiv(long long a, long long b) { long long q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) --q; return q; }
static __device__ __forceinline__ long long tessel_mod(long long a, long long b) { return a - b * tessel_floordiv(a, b); }
static __device__ __forceinline__ long long tessel_imin(long long a, long long b) { return a < b ? a : b; }
static __device__ __forceinline__ long long tessel_imax(long long a, long long b) { return a > b ? a : b; }
static __device__ __forceinline__ long long tessel_iabs(long long a) { return a < 0 ? -a : a; }
static __device__ __forceinline__ float tessel_fmax(float a, float b) { return (a != a || b != b) ? TESSEL_NAN : (a < b ? b : a); }
static __device__ __forceinline__ float tessel_fmin(float a, float b) { return (a != a || b != b) ? TESSEL_NAN : (b < a ? b : a); }
static __device__ __forceinline__ long long tessel_f2i(float v, long long lo, long long hi) { if (v != v) return 0; if (v <= (float)lo) return lo; if (v >= (float)hi) return hi; return (long long)v; }
static __device__ __forceinline__ long long tessel_idiv(long long a, long long b) { return b == 0 ? 0 : a / b; }
static __device__ __forceinline__ long long tessel_irem(long long a, long long b) { return b == 0 ? 0 : a % b; }
/* sign keeps -0 and NaN; sigmoid is 1 / (1 + exp(-x)) in f32 (compiler/ir/builtin_math.h) */
static __device__ __forceinline__ float tessel_fsign(float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : x; }
static __device__ __forceinline__ long long tessel_isign(long long x) { return (x > 0) - (x < 0); }
static __device__ __forceinline__ float tessel_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* f64 computes in double: the same helpers */
static __device__ __forceinline__ double tessel_dmax(double a, double b) { return (a != a || b != b) ? __longlong_as_double(0x7fffffffffffffffLL) : (a < b ? b : a); }
static __device__ __forceinline__ double tessel_dmin(double a, double b) { return (a != a || b != b) ? __longlong_as_double(0x7fffffffffffffffLL) : (b < a ? b : a); }
static __device__ __forceinline__ long long tessel_d2i(double v, long long lo, long long hi) { if (v != v) return 0; if (v <= (double)lo) return lo; if (v >= (double)hi) return hi; return (long long)v; }
static __device__ __forceinline__ double tessel_dsign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }
static __device__ __forceinline__ double tessel_dsigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
)";
}

}  // namespace tessel::emit_cuda
