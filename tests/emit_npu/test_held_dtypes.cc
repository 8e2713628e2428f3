// An NPU description holds only the dtypes its units list (compiler/emit_npu/held_dtypes.h): an f64
// tensor, which no DaVinci unit takes, is refused before anything is compiled, the message naming
// the tensor, its place, the description and the dtypes its units take; the dtypes they do list
// (and u8, computed in i32; bf16, converted) are not refused; c compiles the same f64 program.
#include <doctest/doctest.h>

#include <string>

#include "npu_case.h"

using namespace tessel;
using namespace tessel::npu_test;

namespace {

// The UserError message compiling `src` for `target` throws, or "" when it compiles.
std::string refusal(const std::string& src, const std::string& target) {
  const frontend::Module m = frontend::parse_module(src, "held.tsl");
  CompileOptions o;
  o.target = target;
  o.sizes = {{"N", 64}};
  try {
    compile(m.functions.at(0), o);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("NPU targets refuse an f64 tensor naming it, from the description's units") {
  const std::string src = "def f(f32[N] A, f64[N] X) -> (f64[N] Y) {\n  Y(n) = X(n) + f64(A(n))\n}\n";
  for (const std::string& target : {kTarget, kTarget310}) {
    CAPTURE(target);
    const std::string why = refusal(src, target);
    const std::string name = target == kTarget ? "davinci-910" : "davinci-310";
    CHECK(why == "tensor 'X' (held.tsl:1:24) is f64: no unit of the NPU description " + name +
                     " takes f64 (its units take i32, f16, f32, i8, bf16); compile it for c or a GPU target");
  }
  CHECK(refusal(src, "c").empty());
}

TEST_CASE("NPU targets: a local f64 tensor is refused too, and the dtypes the units list are not") {
  const std::string local = "def g(f32[N] A) -> (f32[N] Y) {\n  T(n) = f64(A(n)) * 2\n  Y(n) = f32(T(n))\n}\n";
  CHECK(refusal(local, kTarget).find("tensor 'T' (held.tsl:2:3) is f64: no unit of the NPU description davinci-910 takes f64") == 0);
  // f16, f32, i32, i8 (listed), u8 (computed in i32) and bf16 (converted to f32) are held
  const std::string held = "def h(f16[N] A, f32[N] B, i32[N] C, i8[N] D, u8[N] E, bf16[N] F) -> (f32[N] Y) {\n"
                           "  Y(n) = f32(A(n)) + B(n) + f32(C(n)) + f32(D(n)) + f32(E(n)) + f32(F(n))\n}\n";
  const std::string why = refusal(held, kTarget);
  CHECK(why.find("no unit of the NPU description") == std::string::npos);
}
