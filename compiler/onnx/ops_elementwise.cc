// Element-wise operators with numpy broadcasting: arithmetic, activations, comparisons and logic
// (bool held as i8 0/1, read as `B(..) != 0`), Cast, Where, Clip, variadic Max/Min/Sum/Mean.
// Each is one statement `Y(i0, ..) = f(A(..), B(..))`; a node whose inputs are all constants is
// folded at import time (shape arithmetic: Add/Mul/Cast/Equal... of Shape results).
#include <cmath>

#include "compiler/onnx/tensor_proto.h"
#include "compiler/onnx/translate.h"

namespace tessel::onnx_import {
namespace {

using TP = onnx::TensorProto;
using Args = std::vector<std::string>;

std::vector<int64_t> broadcast_shape(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes)
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[rank - s.size() + k];
      if (s[k] != 1) o = s[k];
    }
  return out;
}

// Element `flat` of the broadcast output read from a tensor of shape `s`.
int64_t broadcast_offset(const std::vector<int64_t>& out, const std::vector<int64_t>& s, int64_t flat) {
  int64_t off = 0, stride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t i = flat % out[k];
    flat /= out[k];
    const size_t ks = k + s.size();
    if (ks < out.size()) continue;
    const int64_t d = s[ks - out.size()];
    if (d != 1) off += i * stride;
    stride *= d;
  }
  return off;
}

bool all_constant(const Context& c) {
  for (int i = 0; i < c.node().input_size(); ++i)
    if (c.has_input(i) && !foldable(c.input(i))) return false;
  return c.node().input_size() > 0;
}

double cast_value(double x, int to) {
  switch (to) {
    case TP::BOOL: return x != 0;
    case TP::FLOAT: return double(float(x));
    case TP::INT8: case TP::UINT8: case TP::INT16: case TP::UINT16: case TP::INT32: case TP::INT64: case TP::UINT32:
    case TP::UINT64: return std::isnan(x) ? 0 : std::trunc(x);
    default: return x;
  }
}

using Fold = std::function<double(const std::vector<double>&)>;

// Folds the node over its constant inputs with numpy broadcasting; false when some input is not constant.
bool try_fold(Context& c, const Fold& f, int elem_type) {
  if (!all_constant(c) || !f) return false;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<const Value*> ins;
  for (int i = 0; i < c.node().input_size(); ++i)
    if (c.has_input(i)) {
      ins.push_back(&c.input(i));
      shapes.push_back(ins.back()->shape);
    }
  const std::vector<int64_t> out = broadcast_shape(shapes);
  const int64_t n = element_count(out);
  if (n > (1 << 22)) return false;
  std::vector<double> data(static_cast<size_t>(n)), args(ins.size());
  for (int64_t e = 0; e < n; ++e) {
    for (size_t k = 0; k < ins.size(); ++k) args[k] = (*ins[k]->data)[size_t(broadcast_offset(out, ins[k]->shape, e))];
    data[size_t(e)] = cast_value(f(args), elem_type);
  }
  c.set_constant(0, std::move(data), out, elem_type);
  return true;
}

// Whether `v` broadcasts against `out` by numpy's rules (aligned right).
bool broadcasts(const std::vector<int64_t>& v, const std::vector<int64_t>& out) {
  if (v.size() > out.size()) return false;
  for (size_t k = 0; k < v.size(); ++k)
    if (v[k] != 1 && v[k] != out[out.size() - v.size() + k]) return false;
  return true;
}

// Operand i read against the output: numpy broadcasting; before opset 7 a `broadcast` attribute
// aligns the second operand at `axis`, and PRelu's slope of one value per channel (older exporters)
// aligns at dimension 1.
std::string read_operand(Context& c, int i, const std::vector<int64_t>& out) {
  const Value& v = c.input(i);
  int64_t axis = -1;
  if (i > 0 && c.opset() < 7 && c.attr_int("broadcast", 0) != 0 && c.has_attr("axis")) axis = c.attr_int("axis", 0);
  if (i == 1 && c.node().op_type() == "PRelu" && v.shape.size() == 1 && out.size() > 1 && !broadcasts(v.shape, out) &&
      v.shape[0] == out[1])
    axis = 1;
  if (axis < 0) {
    if (!broadcasts(v.shape, out)) c.malformed("'" + v.onnx + "' does not broadcast to the output's shape");
    return c.read_broadcast(v, out);
  }
  if (axis + int64_t(v.shape.size()) > int64_t(out.size())) c.malformed("broadcast axis out of range");
  std::vector<std::string> idx;
  for (size_t k = 0; k < v.shape.size(); ++k) {
    const size_t o = size_t(axis) + k;
    if (v.shape[k] != 1 && v.shape[k] != out[o]) c.malformed("'" + v.onnx + "' does not broadcast at axis " + std::to_string(axis));
    idx.push_back(v.shape[k] == 1 && out[o] != 1 ? "0" : index(int(o)));
  }
  return c.read(v, idx);
}

// Y(i..) = formula(reads of the inputs `which`, broadcast against Y).
void emit_elementwise(Context& c, const std::vector<int>& which, const std::function<std::string(const Args&)>& formula) {
  const Value& y = c.output(0);
  Args a;
  for (int i : which) a.push_back(read_operand(c, i, y.shape));
  c.emit({c.output_name(0), indices(y.shape.size()), "=", formula(a), ranges_of(y.shape)});
}

std::vector<int> present_inputs(const Context& c) {
  std::vector<int> v;
  for (int i = 0; i < c.node().input_size(); ++i)
    if (c.has_input(i)) v.push_back(i);
  return v;
}

// A number in a formula, written for the output's dtype (weak literals adapt to it).
std::string num(const Context& c, double x) {
  const DType t = c.dtype(const_cast<Context&>(c).output(0));
  if (!dtype_is_float(t)) return std::to_string(int64_t(x));
  std::string s = literal(x, DType::F32);
  s = s.substr(4, s.size() - 5);  // drop "f32(" ")"
  return s;
}

bool is_bool(const Value& v) { return v.elem_type == TP::BOOL; }

// Unary float-or-any formula registered with its fold.
struct Unary {
  const char* op;
  std::function<std::string(Context&, const std::string&)> formula;
  std::function<double(Context&, double)> fold;
  const char* builtin = nullptr;  // needs this built-in of the language
};

void add_unary(std::map<std::string, Translator>& t, const Unary& u) {
  t[u.op] = [u](Context& c) {
    if (u.builtin && !c.has_builtin(u.builtin))
      c.unsupported(std::string("the language has no '") + u.builtin + "' built-in yet");
    const int et = c.output_type(0);
    if (u.fold && try_fold(c, [&](const std::vector<double>& a) { return u.fold(c, a[0]); }, et)) return;
    c.dtype(c.input(0));
    c.dtype(c.output(0));
    emit_elementwise(c, {0}, [&](const Args& a) { return u.formula(c, a[0]); });
  };
}

struct Binary {
  const char* op;
  std::function<std::string(Context&, const Args&)> formula;
  std::function<double(const std::vector<double>&)> fold;
  const char* builtin = nullptr;
};

void add_nary(std::map<std::string, Translator>& t, const Binary& b) {
  t[b.op] = [b](Context& c) {
    if (b.builtin && !c.has_builtin(b.builtin)) c.unsupported(std::string("the language has no '") + b.builtin + "' built-in yet");
    const int et = c.output_type(0);
    if (try_fold(c, b.fold, et)) return;
    const std::vector<int> ins = present_inputs(c);
    for (int i : ins) c.dtype(c.input(i));
    c.dtype(c.output(0));
    emit_elementwise(c, ins, [&](const Args& a) { return b.formula(c, a); });
  };
}

std::string chain(const Args& a, const std::string& fn) {
  std::string s = a[0];
  for (size_t k = 1; k < a.size(); ++k) s = fn + "(" + s + ", " + a[k] + ")";
  return s;
}

std::string sum(const Args& a) { return join(a, " + "); }

void translate_cast(Context& c) {
  const int to = c.node().op_type() == "CastLike" ? c.input(1).elem_type : int(c.attr_int("to", TP::FLOAT));
  if (try_fold(c, [](const std::vector<double>& a) { return a[0]; }, to)) return;
  const Value& x = c.input(0);
  c.dtype(x);
  const Value& y = c.output(0);
  if (!c.held_dtype(to)) c.unsupported("cast to " + elem_type_name(to));
  if (x.elem_type == to && c.alias(0, x)) return;
  const std::string target(dtype_name(*c.held_dtype(to)));
  emit_elementwise(c, {0}, [&](const Args& a) {
    if (to == TP::BOOL) return "i8(" + a[0] + " != 0)";
    if (is_bool(x)) return target + "(" + a[0] + ")";
    return c.dtype(x) == c.dtype(y) ? a[0] : target + "(" + a[0] + ")";
  });
}

void translate_clip(Context& c) {
  const Value& x = c.input(0);
  const DType t = c.dtype(x);
  std::string lo, hi;
  if (c.opset() < 11) {
    if (c.has_attr("min")) lo = num(c, c.attr_float("min", 0));
    if (c.has_attr("max")) hi = num(c, c.attr_float("max", 0));
  } else {
    const Value& y = c.output(0);
    if (c.has_input(1)) lo = c.read(c.input(1), std::vector<std::string>(c.input(1).shape.size(), "0"));
    if (c.has_input(2)) hi = c.read(c.input(2), std::vector<std::string>(c.input(2).shape.size(), "0"));
    (void)y;
  }
  (void)t;
  emit_elementwise(c, {0}, [&](const Args& a) {
    std::string s = a[0];
    if (!lo.empty()) s = "max(" + s + ", " + lo + ")";
    if (!hi.empty()) s = "min(" + s + ", " + hi + ")";
    return s;
  });
}

void translate_eye_like(Context& c) {
  const Value& y = c.output(0);
  if (y.shape.size() != 2) c.malformed("EyeLike needs a 2-d input");
  const int64_t k = c.attr_int("k", 0);
  const DType t = c.dtype(y);
  const std::string diag = k == 0 ? "i1 == i0" : k > 0 ? "i1 == i0 + " + std::to_string(k) : "i0 == i1 + " + std::to_string(-k);
  c.emit({c.output_name(0), indices(2), "=", "select(" + diag + ", " + literal(1, t) + ", " + literal(0, t) + ")", ranges_of(y.shape)});
}

// Trilu: keep the elements on or above (upper) / below (lower) the k-th diagonal of the last two dimensions.
void translate_trilu(Context& c) {
  const Value& x = c.input(0);
  const Value& y = c.output(0);
  const size_t rank = x.shape.size();
  if (rank < 2) c.malformed("Trilu needs at least 2 dimensions");
  const int64_t k = c.has_input(1) ? c.constant_ints(1, "Trilu's k").at(0) : 0;
  const bool upper = c.attr_int("upper", 1) != 0;
  const std::string i = index(int(rank - 2)), j = index(int(rank - 1));
  const std::string cond = upper ? j + " >= " + i + (k >= 0 ? " + " + std::to_string(k) : " - " + std::to_string(-k))
                                 : j + " <= " + i + (k >= 0 ? " + " + std::to_string(k) : " - " + std::to_string(-k));
  const std::string r = c.read(x, indices(rank));
  c.emit({c.output_name(0), indices(rank), "=", "select(" + cond + ", " + r + ", 0)", ranges_of(y.shape)});
}

// Mod: fmod=1 is the language's `%` (the sign of the dividend); fmod=0 (integers) takes the sign of the divisor.
void translate_mod(Context& c) {
  const bool fmod = c.attr_int("fmod", 0) != 0;
  const int et = c.output_type(0);
  if (try_fold(c, [fmod](const std::vector<double>& a) {
        if (a[1] == 0) return 0.0;
        const double r = std::fmod(a[0], a[1]);
        return !fmod && r != 0 && ((r < 0) != (a[1] < 0)) ? r + a[1] : r;
      }, et))
    return;
  c.dtype(c.input(0));
  c.dtype(c.input(1));
  if (!fmod && dtype_is_float(c.dtype(c.input(0)))) c.malformed("Mod of floats needs fmod=1");
  emit_elementwise(c, {0, 1}, [&](const Args& a) {
    const std::string r = a[0] + " % " + a[1];
    if (fmod) return r;
    return "select((" + r + " < 0 && " + a[1] + " > 0) || (" + r + " > 0 && " + a[1] + " < 0), " + r + " + " + a[1] + ", " + r + ")";
  });
}

void translate_where(Context& c) {
  const int et = c.output_type(0);
  if (try_fold(c, [](const std::vector<double>& a) { return a[0] != 0 ? a[1] : a[2]; }, et)) return;
  const Value& cv = c.input(0);
  c.dtype(cv);
  c.dtype(c.input(1));
  c.dtype(c.input(2));
  emit_elementwise(c, {0, 1, 2}, [&](const Args& a) { return "select(" + a[0] + " != 0, " + a[1] + ", " + a[2] + ")"; });
}

void translate_copy(Context& c) {  // Identity, Dropout (inference, or training with ratio 0)
  if (c.node().op_type() == "Dropout" && c.has_input(2)) {
    const auto training = c.input(2).data;
    const bool on = !training || (training->size() == 1 && (*training)[0] != 0);
    // in training mode a ratio of 0 drops nothing (the scale 1 / (1 - 0) is 1, the mask all true); any other ratio is random
    const auto ratio = c.has_input(1) ? c.input(1).data : std::optional<std::vector<double>>(std::vector<double>{0.5});
    if (on && !(ratio && ratio->size() == 1 && (*ratio)[0] == 0)) c.unsupported("Dropout in training mode with a ratio other than 0 (random)");
  }
  const Value& x = c.input(0);
  if (foldable(x)) {
    c.set_constant(0, *x.data, x.shape, x.elem_type);
  } else if (!c.alias(0, x)) {
    emit_elementwise(c, {0}, [](const Args& a) { return a[0]; });
  }
  if (c.has_output(1)) {  // Dropout's mask: all true
    const Value& m = c.output(1);
    c.emit({c.output_name(1), indices(m.shape.size()), "=", "i8(1)", ranges_of(m.shape)});
  }
}

// Comparison giving bool (i8 0/1).
Binary compare(const char* op, const char* cmp, std::function<bool(double, double)> f) {
  return {op, [cmp](Context&, const Args& a) { return "i8(" + a[0] + " " + cmp + " " + a[1] + ")"; },
          [f](const std::vector<double>& a) { return double(f(a[0], a[1])); }};
}

// The element-wise operators of one input: the language's formula of the operand's text, and where
// the value is exact in double, a constant-folding rule.
std::vector<Unary> unary_ops() {
  return {
      {"Neg", [](Context&, const std::string& x) { return "-" + x; }, [](Context&, double x) { return -x; }},
      {"Abs", [](Context&, const std::string& x) { return "abs(" + x + ")"; }, [](Context&, double x) { return std::fabs(x); }},
      {"Exp", [](Context&, const std::string& x) { return "exp(" + x + ")"; }, nullptr},
      {"Log", [](Context&, const std::string& x) { return "log(" + x + ")"; }, nullptr},
      {"Sqrt", [](Context&, const std::string& x) { return "sqrt(" + x + ")"; }, [](Context&, double x) { return std::sqrt(x); }},
      {"Tanh", [](Context&, const std::string& x) { return "tanh(" + x + ")"; }, nullptr},
      {"Reciprocal", [](Context&, const std::string& x) { return "1.0 / " + x; }, nullptr},
      {"Relu", [](Context& c, const std::string& x) { return "max(" + x + ", " + num(c, 0) + ")"; },
       [](Context&, double x) { return x < 0 ? 0.0 : x; }},
      {"LeakyRelu",
       [](Context& c, const std::string& x) { return "select(" + x + " < 0, " + x + " * " + num(c, c.attr_float("alpha", 0.01)) + ", " + x + ")"; },
       nullptr},
      {"PRelu", nullptr, nullptr},
      {"ThresholdedRelu",
       [](Context& c, const std::string& x) { return "select(" + x + " > " + num(c, c.attr_float("alpha", 1.0)) + ", " + x + ", 0.0)"; }, nullptr},
      {"Elu",
       [](Context& c, const std::string& x) {
         return "select(" + x + " < 0, " + num(c, c.attr_float("alpha", 1.0)) + " * (exp(" + x + ") - 1.0), " + x + ")";
       },
       nullptr},
      {"Celu",
       [](Context& c, const std::string& x) {
         const std::string a = num(c, c.attr_float("alpha", 1.0));
         return "max(" + x + ", 0.0) + min(0.0, " + a + " * (exp(" + x + " / " + a + ") - 1.0))";
       },
       nullptr},
      {"Selu",
       [](Context& c, const std::string& x) {
         return num(c, c.attr_float("gamma", 1.05070102214813232421875)) + " * select(" + x + " <= 0, " +
                num(c, c.attr_float("alpha", 1.67326319217681884765625)) + " * (exp(" + x + ") - 1.0), " + x + ")";
       },
       nullptr},
      {"Sigmoid", [](Context&, const std::string& x) { return "1.0 / (1.0 + exp(-" + x + "))"; }, nullptr},
      {"HardSigmoid",
       [](Context& c, const std::string& x) {
         return "max(min(" + num(c, c.attr_float("alpha", 0.2)) + " * " + x + " + " + num(c, c.attr_float("beta", 0.5)) + ", 1.0), 0.0)";
       },
       nullptr},
      {"HardSwish", [](Context&, const std::string& x) { return x + " * max(min(" + x + " / 6.0 + 0.5, 1.0), 0.0)"; }, nullptr},
      {"Softplus", [](Context&, const std::string& x) { return "log(exp(" + x + ") + 1.0)"; }, nullptr},
      {"Softsign", [](Context&, const std::string& x) { return x + " / (1.0 + abs(" + x + "))"; }, nullptr},
      {"Mish", [](Context&, const std::string& x) { return x + " * tanh(log(exp(" + x + ") + 1.0))"; }, nullptr},
      {"Shrink",
       [](Context& c, const std::string& x) {
         const std::string l = num(c, c.attr_float("lambd", 0.5)), b = num(c, c.attr_float("bias", 0.0));
         return "select(" + x + " < -" + l + ", " + x + " + " + b + ", select(" + x + " > " + l + ", " + x + " - " + b + ", 0.0))";
       },
       nullptr},
      {"IsNaN", [](Context&, const std::string& x) { return "i8(" + x + " != " + x + ")"; }, nullptr},
      {"IsInf",
       [](Context& c, const std::string& x) {
         const bool pos = c.attr_int("detect_positive", 1) != 0, neg = c.attr_int("detect_negative", 1) != 0;
         if (pos && neg) return "i8(abs(" + x + ") == 1.0 / 0.0)";
         if (pos) return "i8(" + x + " == 1.0 / 0.0)";
         if (neg) return "i8(" + x + " == -1.0 / 0.0)";
         return "i8(" + x + " != " + x + " && " + x + " == " + x + ")";
       },
       nullptr},
      {"Not", [](Context&, const std::string& x) { return "i8(" + x + " == 0)"; }, [](Context&, double x) { return double(x == 0); }},
      {"Erf", [](Context&, const std::string& x) { return "erf(" + x + ")"; }, nullptr, "erf"},
      {"Floor", [](Context&, const std::string& x) { return "floor(" + x + ")"; }, [](Context&, double x) { return std::floor(x); }, "floor"},
      {"Ceil", [](Context&, const std::string& x) { return "ceil(" + x + ")"; }, [](Context&, double x) { return std::ceil(x); }, "ceil"},
      {"Round", [](Context&, const std::string& x) { return "round(" + x + ")"; }, nullptr, "round"},
      {"Sign", [](Context&, const std::string& x) { return "sign(" + x + ")"; }, nullptr, "sign"},
      {"Sin", [](Context&, const std::string& x) { return "sin(" + x + ")"; }, nullptr, "sin"},
      {"Cos", [](Context&, const std::string& x) { return "cos(" + x + ")"; }, nullptr, "cos"},
      {"Tan", [](Context&, const std::string& x) { return "tan(" + x + ")"; }, nullptr, "tan"},
      {"Asin", [](Context&, const std::string& x) { return "asin(" + x + ")"; }, nullptr, "asin"},
      {"Acos", [](Context&, const std::string& x) { return "acos(" + x + ")"; }, nullptr, "acos"},
      {"Atan", [](Context&, const std::string& x) { return "atan(" + x + ")"; }, nullptr, "atan"},
      {"Sinh", [](Context&, const std::string& x) { return "sinh(" + x + ")"; }, nullptr, "sinh"},
      {"Cosh", [](Context&, const std::string& x) { return "cosh(" + x + ")"; }, nullptr, "cosh"},
      {"Asinh", [](Context&, const std::string& x) { return "asinh(" + x + ")"; }, nullptr, "asinh"},
      {"Acosh", [](Context&, const std::string& x) { return "acosh(" + x + ")"; }, nullptr, "acosh"},
      {"Atanh", [](Context&, const std::string& x) { return "atanh(" + x + ")"; }, nullptr, "atanh"},
  };
}

// The element-wise operators of two or more (broadcast) inputs.
std::vector<Binary> nary_ops() {
  return {
      {"Add", [](Context&, const Args& a) { return a[0] + " + " + a[1]; }, [](const std::vector<double>& a) { return a[0] + a[1]; }},
      {"Sub", [](Context&, const Args& a) { return a[0] + " - " + a[1]; }, [](const std::vector<double>& a) { return a[0] - a[1]; }},
      {"Mul", [](Context&, const Args& a) { return a[0] + " * " + a[1]; }, [](const std::vector<double>& a) { return a[0] * a[1]; }},
      {"Div", [](Context&, const Args& a) { return a[0] + " / " + a[1]; },
       [](const std::vector<double>& a) { return a[1] == 0 ? 0 : a[0] / a[1]; }},
      {"Pow",
       [](Context& c, const Args& a) {  // the result has X's dtype; integers are raised in f32
         const DType tx = c.dtype(c.input(0)), ty = c.dtype(c.input(1));
         const std::string x(dtype_name(tx));
         if (!dtype_is_float(tx)) return x + "(pow(f32(" + a[0] + "), f32(" + a[1] + ")))";
         return "pow(" + a[0] + ", " + (tx == ty ? a[1] : x + "(" + a[1] + ")") + ")";
       },
       nullptr, "pow"},
      {"Max", [](Context&, const Args& a) { return chain(a, "max"); }, nullptr},
      {"Min", [](Context&, const Args& a) { return chain(a, "min"); }, nullptr},
      {"Sum", [](Context&, const Args& a) { return sum(a); }, nullptr},
      {"Mean", [](Context&, const Args& a) { return "(" + sum(a) + ") / " + std::to_string(a.size()) + ".0"; }, nullptr},
      {"PRelu", [](Context&, const Args& a) { return "select(" + a[0] + " < 0, " + a[1] + " * " + a[0] + ", " + a[0] + ")"; }, nullptr},
      {"And", [](Context&, const Args& a) { return "i8(" + a[0] + " != 0 && " + a[1] + " != 0)"; },
       [](const std::vector<double>& a) { return double(a[0] != 0 && a[1] != 0); }},
      {"Or", [](Context&, const Args& a) { return "i8(" + a[0] + " != 0 || " + a[1] + " != 0)"; },
       [](const std::vector<double>& a) { return double(a[0] != 0 || a[1] != 0); }},
      {"Xor", [](Context&, const Args& a) { return "i8(" + a[0] + " != " + a[1] + ")"; },
       [](const std::vector<double>& a) { return double((a[0] != 0) != (a[1] != 0)); }},
      compare("Equal", "==", [](double a, double b) { return a == b; }),
      compare("Less", "<", [](double a, double b) { return a < b; }),
      compare("Greater", ">", [](double a, double b) { return a > b; }),
      compare("LessOrEqual", "<=", [](double a, double b) { return a <= b; }),
      compare("GreaterOrEqual", ">=", [](double a, double b) { return a >= b; }),
  };
}

}  // namespace

void add_elementwise_ops(std::map<std::string, Translator>& t) {
  for (const Unary& u : unary_ops())
    if (u.formula) add_unary(t, u);
  for (const Binary& b : nary_ops()) add_nary(t, b);
  t["Cast"] = translate_cast;
  t["CastLike"] = translate_cast;
  t["EyeLike"] = translate_eye_like;
  t["Clip"] = translate_clip;
  t["Where"] = translate_where;
  t["Trilu"] = translate_trilu;
  t["Mod"] = translate_mod;
  t["Identity"] = translate_copy;
  t["Dropout"] = translate_copy;
}

}  // namespace tessel::onnx_import
