#include "compiler/emit_cuda/cuda_expr.h"

#include <cstdio>

#include "isa/base/error.h"

namespace tessel::emit_cuda {

std::string storage_type(DType t) {
  switch (t) {
    case DType::F16: return "__half";
    case DType::F32: return "float";
    case DType::I8: return "signed char";
    case DType::U8: return "unsigned char";
    case DType::I32: return "int";
    case DType::BF16: break;
  }
  throw UserError("CUDA emitter: dtype " + std::string(dtype_name(t)) + " is not supported");
}

std::string value_type(DType t) { return dtype_is_float(t) ? "float" : storage_type(t); }

std::string load_value(DType t, const std::string& stored) {
  return t == DType::F16 ? "__half2float(" + stored + ")" : stored;
}

std::string store_value(DType t, const std::string& value) {
  return t == DType::F16 ? "__float2half_rn(" + value + ")" : "((" + storage_type(t) + ")(" + value + "))";
}

std::string int_expr(const kernel::Expr& e) {
  static constexpr auto literal = [](int64_t v) { return "(" + std::to_string(v) + "LL)"; };
  return kernel::to_c(e, {+literal, "tessel_imin", "tessel_imax"});
}

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s == "inf") return "TESSEL_INF";
  if (s == "-inf") return "(-TESSEL_INF)";
  if (s == "nan" || s == "-nan") return "TESSEL_NAN";
  return s;
}

// A float computation whose result has dtype t: rounded when t is f16.
std::string fres(DType t, const std::string& v) { return t == DType::F16 ? "tessel_r16(" + v + ")" : "(" + v + ")"; }

}  // namespace

std::string value_expr(const ir::Expr& e, const ValueContext& ctx) {
  const DType T = e.type;
  const bool fl = dtype_is_float(T);
  const std::string VT = value_type(T);
  auto arg = [&](int i) { return value_expr(*e.args[i], ctx); };
  auto f = [&](int i) { return "((float)" + arg(i) + ")"; };
  switch (e.kind) {
    case ir::ExprKind::Constant:
      return fl ? fres(T, "(float)" + number(e.value)) : "((" + VT + ")(long long)" + number(e.value) + ")";
    case ir::ExprKind::SizeParam:
      return fl ? fres(T, "(float)" + std::to_string(ctx.sizes->at(e.name))) : "((" + VT + ")" + std::to_string(ctx.sizes->at(e.name)) + "LL)";
    case ir::ExprKind::IndexValue: return fl ? fres(T, "(float)" + ctx.affine(e.affine)) : "((" + VT + ")" + ctx.affine(e.affine) + ")";
    case ir::ExprKind::Access: return load_value(T, ctx.access(e));
    case ir::ExprKind::Apply: break;
  }
  auto bin = [&](const char* op) {
    if (fl) return fres(T, f(0) + " " + op + " " + f(1));
    return "((" + VT + ")((long long)" + arg(0) + " " + op + " (long long)" + arg(1) + "))";
  };
  auto math = [&](const char* fn) { return fres(T, std::string(fn) + "(" + f(0) + ")"); };
  switch (e.op) {
    case ir::Op::Add: return bin("+");
    case ir::Op::Sub: return bin("-");
    case ir::Op::Mul: return bin("*");
    case ir::Op::Div:
      if (fl) return bin("/");
      return "((" + VT + ")tessel_idiv((long long)" + arg(0) + ", (long long)" + arg(1) + "))";
    case ir::Op::Mod:
      if (fl) return fres(T, "fmodf(" + f(0) + ", " + f(1) + ")");
      return "((" + VT + ")tessel_irem((long long)" + arg(0) + ", (long long)" + arg(1) + "))";
    case ir::Op::Neg: return fl ? fres(T, "-" + f(0)) : "((" + VT + ")(-(long long)" + arg(0) + "))";
    case ir::Op::Lt: return "(" + arg(0) + " < " + arg(1) + ")";
    case ir::Op::Le: return "(" + arg(0) + " <= " + arg(1) + ")";
    case ir::Op::Gt: return "(" + arg(0) + " > " + arg(1) + ")";
    case ir::Op::Ge: return "(" + arg(0) + " >= " + arg(1) + ")";
    case ir::Op::Eq: return "(" + arg(0) + " == " + arg(1) + ")";
    case ir::Op::Ne: return "(" + arg(0) + " != " + arg(1) + ")";
    case ir::Op::And: return "(" + arg(0) + " && " + arg(1) + ")";
    case ir::Op::Or: return "(" + arg(0) + " || " + arg(1) + ")";
    case ir::Op::Not: return "(!" + arg(0) + ")";
    case ir::Op::Select: return "((" + VT + ")(" + arg(0) + " ? " + arg(1) + " : " + arg(2) + "))";
    case ir::Op::Min:
      if (fl) return fres(T, "tessel_fmin(" + f(0) + ", " + f(1) + ")");
      return "((" + VT + ")tessel_imin((long long)" + arg(0) + ", (long long)" + arg(1) + "))";
    case ir::Op::Max:
      if (fl) return fres(T, "tessel_fmax(" + f(0) + ", " + f(1) + ")");
      return "((" + VT + ")tessel_imax((long long)" + arg(0) + ", (long long)" + arg(1) + "))";
    case ir::Op::Abs:
      if (fl) return math("fabsf");
      return "((" + VT + ")tessel_iabs((long long)" + arg(0) + "))";
    case ir::Op::Exp: return math("expf");
    case ir::Op::Log: return math("logf");
    case ir::Op::Sqrt: return math("sqrtf");
    case ir::Op::Rsqrt: return fres(T, "1.0f / sqrtf(" + f(0) + ")");
    case ir::Op::Tanh: return math("tanhf");
    case ir::Op::Cast: {
      const bool from_fl = dtype_is_float(e.args[0]->type);
      if (from_fl && !fl) {
        const char* range = T == DType::I8 ? "-128LL, 127LL" : T == DType::U8 ? "0LL, 255LL" : "-2147483648LL, 2147483647LL";
        return "((" + VT + ")tessel_f2i(" + f(0) + ", " + range + "))";
      }
      if (fl) return fres(T, "(float)" + arg(0));
      return "((" + VT + ")(long long)" + arg(0) + ")";
    }
  }
  return "0";
}

std::string reduction_identity(ir::Reduction r, DType t) {
  const std::string VT = value_type(t);
  if (r == ir::Reduction::Sum || r == ir::Reduction::None) return "((" + VT + ")0)";
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
      return fl ? fres(t, "(float)" + cur + " + (float)" + v) : "((" + VT + ")((long long)" + cur + " + (long long)" + v + "))";
    case ir::Reduction::Max:
      return fl ? fres(t, "tessel_fmax(" + cur + ", " + v + ")") : "((" + VT + ")tessel_imax(" + cur + ", " + v + "))";
    case ir::Reduction::Min:
      return fl ? fres(t, "tessel_fmin(" + cur + ", " + v + ")") : "((" + VT + ")tessel_imin(" + cur + ", " + v + "))";
  }
  return v;
}

std::string cuda_prelude() {
  return R"(#include <cuda_fp16.h>
#define TESSEL_INF __int_as_float(0x7f800000)
#define TESSEL_NAN __int_as_float(0x7fffffff)
/* the interpreter's semantics (compiler/README.md): f16 results rounded, NaN-propagating min/max,
   saturating float->int casts with NaN -> 0, integer division and remainder by zero give 0 */
static __device__ __forceinline__ float tessel_r16(float x) { return __half2float(__float2half_rn(x)); }
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
)";
}

}  // namespace tessel::emit_cuda
