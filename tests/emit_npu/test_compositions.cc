// The NPU compositions of the built-in functions (compiler/emit_npu/compositions.h): every
// composed function, in f32 and f16, on davinci-910 and davinci-310, simulated over its sampled
// range and compared element by element with the reference interpreter; the measured largest
// errors are printed and held to the bounds compiler/emit_npu/README.md states. Also: a table row
// per composed operator, and a composition's cycles are its instructions' (more than one vexp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/emit_npu/compositions.h"
#include "compiler/kernel/roofline.h"
#include "isa/npu_machine.h"
#include "isa/base/f16.h"
#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

// One composed function's sampling: values from [lo, hi] (uniform, plus magnitudes spread
// geometrically from 1e-6, for the relative accuracy near 0), and what an error is measured
// against: max(|expected|, floor) (floor 1: absolute error, for the periodic functions).
struct Sample {
  std::string fn;
  double lo, hi;
  double floor = 0;
  double bound = 1e-6;  // largest error allowed, relative to max(|expected|, floor)
  std::vector<double> extra = {};
};

const std::vector<Sample> kSamples = {
    {"erf", -6, 6},
    {"floor", -3e9, 3e9, 0, 0, {0.5, -0.5, 1.5, -2.5, 8388607.5, -8388608.5, 1e10, -0.0}},
    {"ceil", -3e9, 3e9, 0, 0, {0.5, -0.5, 1.5, -2.5, 8388607.5, -8388608.5, 1e10, -0.0}},
    {"round", -3e9, 3e9, 0, 0, {0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 8388607.5, -8388608.5, 1e10, -0.0}},
    {"sign", -1e6, 1e6, 0, 0, {0.0, -0.0, 1e-30}},
    {"sin", -8192, 8192, 1},
    {"cos", -8192, 8192, 1},
    {"tan", -10, 10, 1},
    {"asin", -1, 1, 0, 1e-6, {1.0, -1.0}},
    {"acos", -1, 1, 0, 1e-6, {1.0, -1.0, 0.99999994}},
    {"atan", -1e6, 1e6},
    {"sinh", -89, 89},
    {"cosh", -89, 89},
    {"asinh", -1e5, 1e5},
    {"acosh", 1, 1e5, 0, 1e-6, {1.0, 1.0000001}},
    {"atanh", -1, 1, 0, 1e-6, {1.0, -1.0, 0.99999994}},
    {"sigmoid", -100, 100, 0, 0},
};

std::vector<double> sample_values(const Sample& s, int n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(s.lo, s.hi), e(std::log(1e-6), std::log(std::max(std::abs(s.lo), std::abs(s.hi))));
  std::vector<double> v = s.extra;
  while (int(v.size()) < n) {
    if (v.size() % 2 == 0) {
      v.push_back(u(rng));
    } else {
      const double m = std::exp(e(rng)), x = rng() % 2 ? m : -m;
      if (x >= s.lo && x <= s.hi) v.push_back(x);
    }
  }
  return v;
}

NpyArray array_of(DType t, const std::vector<double>& v) {
  NpyArray a;
  a.dtype = t;
  a.shape = {int64_t(v.size())};
  a.data.resize(v.size() * dtype_bytes(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F16) {
      const uint16_t h = f32_to_f16_bits(float(v[i]));
      std::memcpy(&a.data[i * 2], &h, 2);
    } else {
      const float f = float(v[i]);
      std::memcpy(&a.data[i * 4], &f, 4);
    }
  }
  return a;
}

std::unique_ptr<Case> case_of(const std::string& source, const std::string& target, const interp::Tensors& inputs, int64_t n) {
  auto c = std::make_unique<Case>();
  c->module = frontend::parse_module(source, "builtins.tsl");
  const ir::Function& f = c->module.functions[0];
  CompileOptions o;
  o.target = target;
  o.sizes = {{"N", n}};
  c->compilation = compile(f, o);
  c->kernel = emit_npu::emit_npu(c->compilation->kernel, c->compilation->hierarchy);
  c->inputs = inputs;
  c->expected = interp::evaluate(f, o.sizes, inputs);
  return c;
}

struct Errors {
  double worst = 0;  // largest |expected - actual| / max(|expected|, floor)
  int64_t nan_mismatches = 0;
};

Errors measure(const NpyArray& expected, const NpyArray& actual, double floor) {
  Errors r;
  for (int64_t i = 0; i < expected.element_count(); ++i) {
    const double e = interp::element_as_double(expected, i), a = interp::element_as_double(actual, i);
    if (std::isnan(e) || std::isnan(a)) {
      r.nan_mismatches += std::isnan(e) != std::isnan(a);
      continue;
    }
    if (e == a) continue;
    r.worst = std::max(r.worst, std::abs(e - a) / std::max(std::abs(e), floor));
  }
  return r;
}

// Simulates `c` (pruned syncs) and returns its output Y.
NpyArray simulated_output(const Case& c, int64_t* cycles) {
  const Run r = run(c, npu_sync::SyncMode::Pruned);
  CHECK(r.sim.record.races.empty());
  CHECK_FALSE(r.sim.record.deadlock);
  *cycles = int64_t(r.sim.record.total_cycles);
  return r.sim.tensor(r.sync.program, "Y");
}

}  // namespace

TEST_CASE("every composed built-in has a table row with its range and measured accuracy") {
  for (const char* fn : {"erf", "pow", "floor", "ceil", "round", "sign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                         "cosh", "asinh", "acosh", "atanh", "sigmoid"}) {
    CAPTURE(fn);
    bool found = false;
    for (const auto& c : emit_npu::compositions())
      if (std::string(ir::op_spelling(c.op)) == fn) {
        found = true;
        CHECK(std::string(c.accuracy).size() > 0);
        CHECK(std::string(c.range).size() > 0);
        CHECK(emit_npu::composition_regions(c.op) > c.scratch_regions);
      }
    CHECK(found);
  }
  CHECK(emit_npu::composition_for(ir::Op::Exp) == nullptr);  // an instruction of its own (vexp)
}

TEST_CASE("composed unary built-ins on the NPU simulator match the interpreter element by element (f32 and f16, 910 and 310)") {
  const int64_t n = 4096;
  for (const Sample& s : kSamples) {
    const std::vector<double> values = sample_values(s, n);
    for (DType t : {DType::F32, DType::F16}) {
      const std::string dt(dtype_name(t));
      const std::string src = "def f(" + dt + "[N] X) -> (" + dt + "[N] Y) {\n  Y(i) = " + s.fn + "(X(i))\n}\n";
      for (const std::string& target : {kTarget, kTarget310}) {
        CAPTURE(s.fn);
        CAPTURE(dt);
        CAPTURE(target);
        auto c = case_of(src, target, {{"X", array_of(t, values)}}, n);
        int64_t cycles = 0;
        const NpyArray y = simulated_output(*c, &cycles);
        const Errors err = measure(c->expected.at("Y"), y, s.floor);
        const emit_c::Verification v = emit_c::verify(c->expected, {{"Y", y}}, 0);
        MESSAGE(s.fn << " " << dt << " on " << target.substr(target.rfind('/') + 1) << ": max error " << err.worst
                     << (s.floor > 0 ? " (absolute)" : " (relative)") << " over [" << s.lo << ", " << s.hi << "], " << cycles
                     << " cycles");
        CHECK(v.verified);
        CHECK(err.nan_mismatches == 0);
        // f16: the interpreter rounds the exact value, the NPU its f32 approximation: one f16 step apart at most.
        CHECK(err.worst <= (t == DType::F16 ? std::max(s.bound, 1.0 / 1024) : s.bound));
      }
    }
  }
}

TEST_CASE("pow on the NPU simulator matches the interpreter: general exponents, negative bases with integer exponents, constant exponents") {
  const int64_t n = 4096;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> xb(1.0 / 64, 8), yb(-8, 8);
  std::vector<double> xs, ys;
  for (int64_t i = 0; i < n; ++i) {
    double x = xb(rng), y = yb(rng);
    if (i % 4 == 1) x = -x, y = std::round(y);                 // negative base, integer exponent
    if (i % 4 == 2) x = -x;                                      // negative base, fractional exponent: NaN
    if (i % 64 == 3) y = 0;                                      // x^0 = 1
    if (i % 64 == 5) x = 0;                                      // 0^y
    if (i % 64 == 7) x = 1, y = std::nan("");                    // 1^NaN = 1
    xs.push_back(x);
    ys.push_back(y);
  }
  for (DType t : {DType::F32, DType::F16}) {
    const std::string dt(dtype_name(t));
    for (const std::string& target : {kTarget, kTarget310}) {
      CAPTURE(dt);
      CAPTURE(target);
      auto c = case_of("def f(" + dt + "[N] X, " + dt + "[N] P) -> (" + dt + "[N] Y) {\n  Y(i) = pow(X(i), P(i))\n}\n", target,
                       {{"X", array_of(t, xs)}, {"P", array_of(t, ys)}}, n);
      int64_t cycles = 0;
      const NpyArray y = simulated_output(*c, &cycles);
      const Errors err = measure(c->expected.at("Y"), y, 0);
      MESSAGE("pow " << dt << ": max relative error " << err.worst << ", " << cycles << " cycles");
      CHECK(emit_c::verify(c->expected, {{"Y", y}}, 0).verified);
      CHECK(err.nan_mismatches == 0);
      CHECK(err.worst <= (t == DType::F16 ? 1.0 / 1024 : 5e-6));
    }
  }
  for (const char* e : {"2", "3", "1", "0.5", "-1.5"}) {
    CAPTURE(e);
    std::vector<double> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = xb(rng) * (i % 2 ? 1 : -1);
    auto c = case_of(std::string("def f(f32[N] X) -> (f32[N] Y) {\n  Y(i) = pow(X(i), ") + e + ")\n}\n", kTarget,
                     {{"X", array_of(DType::F32, pos)}}, n);
    int64_t cycles = 0;
    const NpyArray y = simulated_output(*c, &cycles);
    const Errors err = measure(c->expected.at("Y"), y, 0);
    CHECK(err.nan_mismatches == 0);
    CHECK(err.worst <= 5e-6);
  }
}

TEST_CASE("sign of i32 and compositions inside fused chains (GELU via erf, SiLU, Mish) verify on the NPU") {
  const int64_t n = 2048;
  std::vector<double> v = sample_values({"", -6, 6}, n);
  auto c = case_of(
      "def f(f32[N] X) -> (f32[N] Y) {\n"
      "  Y(i) = 0.5 * X(i) * (1 + erf(X(i) * 0.70710678)) + X(i) * sigmoid(X(i)) + X(i) * tanh(log(1 + exp(X(i))))\n}\n",
      kTarget, {{"X", array_of(DType::F32, v)}}, n);
  int64_t cycles = 0;
  const NpyArray y = simulated_output(*c, &cycles);
  CHECK(emit_c::verify(c->expected, {{"Y", y}}, 0).verified);
  CHECK(measure(c->expected.at("Y"), y, 1).worst <= 2e-6);
}

TEST_CASE("a composition's cycles are its instructions': erf costs more than exp, both counted by the simulator") {
  const int64_t n = 4096;
  const std::vector<double> v = sample_values({"", -2, 2}, n);
  int64_t exp_cycles = 0, erf_cycles = 0;
  for (const char* fn : {"exp", "erf"}) {
    auto c = case_of(std::string("def f(f32[N] X) -> (f32[N] Y) {\n  Y(i) = ") + fn + "(X(i))\n}\n", kTarget,
                     {{"X", array_of(DType::F32, v)}}, n);
    int64_t cycles = 0;
    simulated_output(*c, &cycles);
    (std::string(fn) == "exp" ? exp_cycles : erf_cycles) = cycles;
  }
  MESSAGE("4096 f32 elements: exp " << exp_cycles << " cycles, erf " << erf_cycles << " cycles");
  CHECK(erf_cycles > exp_cycles);
}

TEST_CASE("special values through every composition on the NPU: NaN, infinities, signed zeros, denormals, huge values") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<double> specials = {nan, inf, -inf, 0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, 1.0, -1.0, 88.5, -88.5, 3e9, -3e9, 0.5};
  const int64_t n = 64;
  std::vector<double> values;
  while (int64_t(values.size()) < n) values.insert(values.end(), specials.begin(), specials.end());
  values.resize(size_t(n));
  for (const Sample& s : kSamples) {
    CAPTURE(s.fn);
    std::vector<double> v = values;
    if (s.fn == "sin" || s.fn == "cos" || s.fn == "tan")  // the documented range (README)
      for (double& x : v)
        if (std::isfinite(x) && std::abs(x) > emit_npu::kTrigAccurateRange) x = std::copysign(1000.0, x);
    auto c = case_of("def f(f32[N] X) -> (f32[N] Y) {\n  Y(i) = " + s.fn + "(X(i))\n}\n", kTarget, {{"X", array_of(DType::F32, v)}}, n);
    int64_t cycles = 0;
    const NpyArray y = simulated_output(*c, &cycles);
    const Errors err = measure(c->expected.at("Y"), y, s.floor);
    CHECK(err.nan_mismatches == 0);
    CHECK(err.worst <= s.bound);
    CHECK(emit_c::verify(c->expected, {{"Y", y}}, 0).verified);
  }
}

TEST_CASE("each composition's instruction count in the table is what it emits, and the roofline's vector work counts it") {
  const int64_t n = 1024;
  const std::vector<double> v = sample_values({"", -0.9, 0.9}, n);
  for (const auto& row : emit_npu::compositions()) {
    for (DType t : {DType::F32, DType::F16}) {
      const std::string fn = ir::op_spelling(row.op), dt(dtype_name(t));
      CAPTURE(fn);
      CAPTURE(dt);
      const std::string call = row.op == ir::Op::Pow ? "pow(X(i), X(i))" : fn + "(X(i))";
      auto c = case_of("def f(" + dt + "[N] X) -> (" + dt + "[N] Y) {\n  Y(i) = " + call + "\n}\n", kTarget, {{"X", array_of(t, v)}}, n);
      int vector = 0;
      for (const auto& in : c->kernel.program.code)
        if (npu::opcode_info(in.opcode).pipe_rule == npu::PipeRule::V) ++vector;
      const ir::Expr& e = *c->module.functions[0].statements[0].rhs;
      CHECK(vector == emit_npu::vector_instructions(e));
      CHECK(emit_npu::vector_instructions(e) == row.instructions + (t == DType::F16 ? 1 + ir::op_arity(row.op) : 0));
      const kernel::NpuRoofline r =
          kernel::npu_roofline(c->compilation->kernel, isa::npu_machine(c->compilation->hierarchy), emit_npu::vector_instructions);
      CHECK(r.vector_ops == uint64_t(n) * uint64_t(vector));
    }
  }
}

TEST_CASE("integer division and remainder by a zero divisor give 0 on the NPU, as the interpreter defines them (vdiv and vmod would fault)") {
  const int64_t n = 1000;
  NpyArray a, b;
  for (NpyArray* x : {&a, &b}) {
    x->dtype = DType::I32;
    x->shape = {n};
    x->data.resize(size_t(n) * 4);
  }
  const int32_t divisors[] = {0, 3, -2, 0, 7, 1, -1};
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = int32_t(i - n / 2), y = divisors[i % 7];
    std::memcpy(&a.data[size_t(i) * 4], &x, 4);
    std::memcpy(&b.data[size_t(i) * 4], &y, 4);
  }
  const std::string src =
      "def f(i32[N] A, i32[N] B) -> (i32[N] Y) {\n"
      "  Y(i) = A(i) / B(i) + 1000 * (A(i) % B(i)) + 7 * (A(i) / 0) + A(i) % 0\n}\n";
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto c = case_of(src, target, {{"A", a}, {"B", b}}, n);
    // the interpreter's definition: x / 0 == x % 0 == 0 (A(0) = -500 over B(0) = 0 gives 0)
    CHECK(interp::element_as_double(c->expected.at("Y"), 0) == 0);
    CHECK(interp::element_as_double(c->expected.at("Y"), 1) == -499 / 3 + 1000 * (-499 % 3));
    for (auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
      const Run r = run(*c, mode);
      CHECK(r.verification.verified);
      CHECK(r.verification.max_abs_err == 0);
      CHECK(r.sim.record.races.empty());
    }
  }
}

TEST_CASE("a def whose statements are literals only (ONNX's ConstantOfShape) broadcasts them on the NPU") {
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    auto c = case_of("def k() -> (f32[N] Y, i32[N] Z, f16[N] H) {\n  Y(i) = 1.5\n  Z(i) = 7\n  H(i) = -0.1\n}\n", target, {}, 300);
    for (auto mode : {npu_sync::SyncMode::Naive, npu_sync::SyncMode::Pruned}) {
      const Run r = run(*c, mode);
      CHECK(r.verification.verified);
      CHECK(r.verification.max_abs_err == 0);
      CHECK(interp::element_as_double(r.sim.tensor(r.sync.program, "Y"), 299) == 1.5);
      CHECK(interp::element_as_double(r.sim.tensor(r.sync.program, "Z"), 0) == 7);
    }
  }
}
