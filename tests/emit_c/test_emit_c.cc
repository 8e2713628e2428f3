// The C emitter's text: buffers are local arrays standing for the levels, copies are executed,
// matched fragments become loops over operand buffers.
#include <doctest/doctest.h>

#include "compiler/emit_c/emit_c.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

using namespace tessel;

TEST_CASE("C source declares one array per buffer, named after its level, and calls no runtime") {
  frontend::Module m = frontend::parse_module(
      "def matmul(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {\n  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n}\n", "mm.tsl");
  CompileOptions o;
  o.sizes = {{"M", 64}, {"N", 64}, {"K", 64}};
  o.tile = "m=32/16,n=32/16,k=32/16";
  auto c = compile(m.functions[0], o);
  std::string src = emit_c::emit_c(c->kernel);
  CHECK(src.find("static tessel_f16 A_L0A_g0[") != std::string::npos);
  CHECK(src.find("static tessel_f16 B_L0B_g0[") != std::string::npos);
  CHECK(src.find("static float C_L0C_g0[") != std::string::npos);
  CHECK(src.find("static tessel_f16 A_L1_g0[") != std::string::npos);
  CHECK(src.find("matmul fragment 16x16x16") != std::string::npos);
  CHECK(src.find("void tessel_kernel(void** args)") != std::string::npos);
}
