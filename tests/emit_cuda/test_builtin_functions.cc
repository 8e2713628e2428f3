// CUDA code of the built-in functions (compiler/README.md; issue 34): every def of
// workloads/activations.tsl, emitted for the sm90, sm75 and sm70 descriptions, calls CUDA's f32
// math function of each built-in (erff, powf, rintf for round's halves-to-even, ...), f16 results
// rounded by tessel_r16, and compiles with NVRTC (no GPU needed; the lowest architecture NVRTC
// offers stands in for one it lacks, as cli.conformance_nvrtc does).
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "gpu_backend/nvrtc_compile.h"
#include "isa/base/error.h"

using namespace tessel;

namespace {

struct Expected {
  const char* def;
  std::vector<const char*> calls;
};

const std::vector<Expected> kDefs = {
    {"gelu_erf", {"erff("}},
    {"silu", {"tessel_sigmoid(", "tessel_r16("}},
    {"mish", {"tanhf(", "logf(", "expf("}},
    {"rounding", {"floorf(", "ceilf(", "rintf(", "tessel_fsign("}},
    {"trig", {"sinf(", "cosf(", "tanf(", "asinf(", "acosf(", "atanf("}},
    {"hyperbolic", {"sinhf(", "coshf(", "asinhf(", "acoshf(", "atanhf("}},
    {"pow_rms_norm", {"powf("}},
};

// The CUDA of a compilation for its own description's architecture and machine model.
emit_cuda::CudaProgram emit_for(const Compilation& c) {
  emit_cuda::CudaOptions co;
  co.arch = c.hierarchy.gpu->arch;
  co.machine = isa::GpuMachine::from(c.hierarchy);
  return emit_cuda::emit_cuda(c.kernel, co);
}

}  // namespace

TEST_CASE("CUDA source of each built-in calls the matching CUDA math function and compiles with NVRTC (sm90, sm75, sm70)") {
  const frontend::Module m = frontend::load_module("workloads/activations.tsl");
  for (const char* arch : {"sm90", "sm75", "sm70"}) {
    for (const Expected& e : kDefs) {
      CAPTURE(arch);
      CAPTURE(e.def);
      CompileOptions o;
      o.target = std::string("isa/targets/") + arch + ".yaml";
      o.sizes = {{"M", 16}, {"N", 64}};
      auto c = compile(frontend::select_function(m, e.def), o);
      const auto p = emit_for(*c);
      for (const char* call : e.calls) {
        CAPTURE(call);
        CHECK(p.source.find(call) != std::string::npos);
      }
      try {
        const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
        CHECK(!cubin.cubin.empty());
      } catch (const UserError& err) {  // an architecture this NVRTC does not offer (CUDA 13: no sm_70)
        MESSAGE("NVRTC has no " << p.arch << ": " << err.what());
        const auto cubin = gpu::compile_to_cubin(p.source, {.arch = "sm_75"});
        CHECK(!cubin.cubin.empty());
      }
    }
  }
}

TEST_CASE("a bf16 cast inside a GPU expression rounds to bf16 (tessel_rbf16) and compiles with NVRTC") {
  // The program fuzzer's seed 8803 program 231: tanh's bf16 result left unrounded truncated to 0
  // instead of -1 after the i32 cast.
  const frontend::Module m = frontend::parse_module(
      "def bf16_in_expr(i32[M] X) -> (i32[M] Y) {\n  Y(i) = sign(i32(tanh(bf16(X(i)))))\n}\n", "bf16_in_expr.tsl");
  for (const char* arch : {"sm90", "sm75"}) {
    CAPTURE(arch);
    CompileOptions o;
    o.target = std::string("isa/targets/") + arch + ".yaml";
    o.sizes = {{"M", 6}};
    auto c = compile(frontend::select_function(m, "bf16_in_expr"), o);
    const auto p = emit_for(*c);
    CHECK(p.source.find("tessel_rbf16(tanhf(((float)tessel_rbf16(") != std::string::npos);
    const auto cubin = gpu::compile_to_cubin(p.source, {.arch = "sm_75"});
    CHECK(!cubin.cubin.empty());
  }
}

TEST_CASE("bf16 tensors are stored as __nv_bfloat16 on the GPU, converted on load and store, and compile with NVRTC") {
  // element-wise, a row sum and max, and a contraction (no bf16 TensorCore shape in the
  // descriptions: the register-blocked SIMT kernel) on sm90 and sm75
  const frontend::Module m = frontend::parse_module(
      "def bf(bf16[M, N] X, bf16[N] b) -> (bf16[M, N] Y, bf16[M] S, f32[M] T) {\n"
      "  Y(m, n) = max(X(m, n) * 2 + b(n), 0)\n  S(m) +=! X(m, n)\n  T(m) max=! f32(X(m, n))\n}\n"
      "def bfmm(bf16[M, K] A, bf16[K, N] B) -> (f32[M, N] C, bf16[M, N] D) {\n"
      "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n  D(m, n) = bf16(C(m, n))\n}\n",
      "bf.tsl");
  for (const char* arch : {"sm90", "sm75"})
    for (const char* def : {"bf", "bfmm"}) {
      CAPTURE(arch);
      CAPTURE(def);
      CompileOptions o;
      o.target = std::string("isa/targets/") + arch + ".yaml";
      o.sizes = {{"M", 64}, {"N", 200}};
      if (std::string(def) == "bfmm") o.sizes["K"] = 64;
      auto c = compile(frontend::select_function(m, def), o);
      const auto p = emit_for(*c);
      CHECK(p.source.find("__nv_bfloat16* __restrict__ t_") != std::string::npos);
      if (std::string(def) == "bf") CHECK(p.source.find("__bfloat162float(") != std::string::npos);
      CHECK(p.source.find("__float2bfloat16_rn(") != std::string::npos);
      const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
      CHECK(!cubin.cubin.empty());
    }
}

TEST_CASE("a bf16 contraction takes WMMA bf16 fragments from sm_80 (the description's bf16 -> f32 shape) and the SIMT kernel on sm_75") {
  const frontend::Module m = frontend::parse_module(
      "def bfmm(bf16[M, K] A, bf16[K, N] B, f32[N] bias) -> (bf16[M, N] D) {\n"
      "  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))\n  D(m, n) = bf16(max(C(m, n) + bias(n), 0))\n}\n",
      "bfmm.tsl");
  for (const char* arch : {"sm90", "sm80", "sm75"}) {
    CAPTURE(arch);
    CompileOptions o;
    o.target = std::string("isa/targets/") + arch + ".yaml";
    o.sizes = {{"M", 256}, {"N", 192}, {"K", 128}};
    auto c = compile(frontend::select_function(m, "bfmm"), o);
    const auto p = emit_for(*c);
    const bool tensor_cores = std::string(arch) != "sm75";
    CHECK((p.source.find("wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16") != std::string::npos) == tensor_cores);
    if (!tensor_cores) {
      std::string explain;
      for (const auto& line : p.explain) explain += line + "\n";
      CHECK(explain.find("dtypes bf16 -> f32 have no WMMA shape on sm_75") != std::string::npos);
    }
    const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
    CHECK(!cubin.cubin.empty());
  }
}
