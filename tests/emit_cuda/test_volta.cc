// The Volta description (isa/targets/sm70.yaml, issue 35 item 6), CI side: the emitter honours its
// limits — f16 contractions on WMMA without ldmatrix, cp.async or mma.sync; i8 contractions (no
// integer WMMA before sm_72) on the SIMT contraction kernel, while sm75 keeps i8 WMMA.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"
#include "isa/gpu_machine.h"

using namespace tessel;

namespace {

constexpr const char* kOps = R"(
def hmm(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
}
def imm(i8[M, K] A, i8[K, N] B) -> (i32[M, N] C) {
  C(m, n) +=! i32(A(m, k)) * i32(B(k, n))
}
)";

struct Emitted {
  frontend::Module module;
  std::unique_ptr<Compilation> c;
  std::string source;
};

Emitted emit(const std::string& def, const std::string& arch) {
  Emitted e;
  e.module = frontend::parse_module(kOps, "volta.tsl");
  CompileOptions o;
  o.target = "isa/targets/" + arch + ".yaml";
  o.sizes = {{"M", 256}, {"N", 256}, {"K", 256}};
  e.c = compile(frontend::select_function(e.module, def), o);
  emit_cuda::CudaOptions co;
  co.arch = e.c->hierarchy.gpu->arch;
  e.source = emit_cuda::emit_cuda(e.c->kernel, co).source;
  return e;
}

bool contains(const std::string& s, const std::string& x) { return s.find(x) != std::string::npos; }

}  // namespace

TEST_CASE("sm70: f16 contractions run on WMMA without ldmatrix, cp.async or mma.sync") {
  const Emitted e = emit("hmm", "sm70");
  CHECK(contains(e.source, "wmma::mma_sync"));
  CHECK_FALSE(contains(e.source, "ldmatrix"));
  CHECK_FALSE(contains(e.source, "cp.async"));
  CHECK_FALSE(contains(e.source, "mma.sync.aligned"));
}

TEST_CASE("sm70 has no integer WMMA: i8 contractions take the SIMT contraction kernel, sm75 keeps WMMA") {
  const Emitted v = emit("imm", "sm70");
  CHECK_FALSE(contains(v.source, "wmma::"));
  const isa::GpuMachine m70 = isa::GpuMachine::from(v.c->hierarchy);
  REQUIRE(v.c->kernel.contraction);
  CHECK_FALSE(emit_cuda::dtype_has_tensor_core_shape(*v.c->kernel.contraction, m70));
  CHECK(emit_cuda::tensor_core_obstacle(*v.c->kernel.contraction, m70).find("no WMMA shape on sm_70") != std::string::npos);
  const Emitted t = emit("imm", "sm75");
  CHECK(contains(t.source, "wmma::mma_sync"));
  CHECK(emit_cuda::dtype_has_tensor_core_shape(*t.c->kernel.contraction, isa::GpuMachine::from(t.c->hierarchy)));
}
