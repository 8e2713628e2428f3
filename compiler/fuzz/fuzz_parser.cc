// libFuzzer target: any byte string given to the front end either parses or raises a UserError;
// what parses is printed and, when small, evaluated by the reference interpreter with every size
// parameter set to 2 (bounded so a run never allocates much or loops long). Anything else — a
// crash, an ASan report, an InternalError, a hang — is a bug. Built by scripts/fuzz.sh, not by
// CMake.
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/frontend/frontend.h"
#include "compiler/interp/interpreter.h"
#include "isa/base/error.h"

namespace {

constexpr int64_t kMaxElements = 4096;
constexpr int64_t kMaxPoints = 100000;

// Whether evaluating `f` with these sizes stays small.
bool small_enough(const tessel::ir::Function& f, const tessel::interp::Sizes& sizes) {
  for (const tessel::ir::Tensor& t : f.tensors) {
    int64_t n = 1;
    for (const tessel::ir::AffineExpr& d : t.shape) {
      const int64_t v = d.evaluate({}, sizes);
      if (v < 0 || v > kMaxElements) return false;
      n *= v;
      if (n > kMaxElements) return false;
    }
  }
  for (const tessel::ir::Statement& s : f.statements) {
    int64_t points = 1;
    for (const tessel::ir::IndexVar& v : s.domain) {
      const int64_t extent = v.hi.evaluate({}, sizes) - v.lo.evaluate({}, sizes);
      if (extent > kMaxPoints) return false;
      points *= std::max<int64_t>(extent, 0);
      if (points > kMaxPoints) return false;
    }
  }
  return true;
}

bool small_coefficients(const tessel::ir::AffineExpr& e) {
  auto ok = [](int64_t c) { return c > -(1 << 20) && c < (1 << 20); };
  for (const auto& [n, c] : e.param_coeffs)
    if (!ok(c)) return false;
  for (const tessel::ir::FloorDivTerm& t : e.divs)
    if (!ok(t.coeff) || !small_coefficients(t.numerator)) return false;
  return ok(e.constant);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tessel::frontend::Module m;
  try {
    m = tessel::frontend::parse_module(text, "fuzz.tsl");
  } catch (const tessel::UserError&) {
    return 0;
  }
  tessel::interp::set_thread_count(1);
  for (const tessel::ir::Function& f : m.functions) {
    (void)tessel::ir::to_string(f);
    tessel::interp::Sizes sizes;
    for (const std::string& p : f.params) sizes[p] = 2;
    for (const tessel::ir::InferredSize& inf : f.inferred) sizes.erase(inf.param);  // exercise inference
    bool bounded = true;
    for (const tessel::ir::Tensor& t : f.tensors)
      for (const auto& d : t.shape) bounded &= small_coefficients(d);
    for (const tessel::ir::Statement& s : f.statements)
      for (const auto& v : s.domain) bounded &= small_coefficients(v.lo) && small_coefficients(v.hi);
    if (!bounded) continue;
    try {
      sizes = tessel::ir::bind_sizes(f, sizes);
    } catch (const tessel::UserError&) {
      continue;
    }
    if (!small_enough(f, sizes)) continue;
    try {
      (void)tessel::interp::evaluate(f, sizes, tessel::interp::random_inputs(f, sizes, 1));
    } catch (const tessel::UserError&) {
    }
  }
  return 0;
}
