// Shared by the CUDA emitter's main-loop tests (test_bf16_main_loops, test_tf32_main_loops): one def
// of a source text compiled for a GPU description at sizes M, N, K, with its matched contraction,
// and the tensor-core instructions of a program's cubin (NVRTC for the program's architecture:
// sm_90a for wgmma; only where tessel is built with CUDA).
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <string>

#include "compiler/emit_cuda/contraction.h"
#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

#ifdef TESSEL_HAVE_CUDA
#include "gpu_backend/nvrtc_compile.h"
#include "gpu_backend/sass_scan.h"
#endif

namespace tessel::cuda_test {

struct CompiledDef {
  frontend::Module module;
  std::unique_ptr<Compilation> c;
  const emit_cuda::Contraction& contraction() const { return *c->kernel.contraction; }
};

// `def` of `source` (named `file` in messages) for isa/targets/<target>.yaml; REQUIREs a contraction
inline CompiledDef compile_mnk(const char* source, const std::string& file, const std::string& def, const std::string& target, int64_t M,
                               int64_t N, int64_t K) {
  CompiledDef r;
  r.module = frontend::parse_module(source, file);
  CompileOptions o;
  o.target = "isa/targets/" + target + ".yaml";
  o.sizes = {{"M", M}, {"N", N}, {"K", K}};
  r.c = compile(frontend::select_function(r.module, def), o);
  REQUIRE(r.c->kernel.contraction);
  return r;
}

inline bool contains(const std::string& s, const std::string& x) { return s.find(x) != std::string::npos; }

#ifdef TESSEL_HAVE_CUDA
inline std::map<std::string, uint64_t> tensor_ops(const emit_cuda::CudaProgram& p) {
  const auto cubin = gpu::compile_to_cubin(p.source, {.arch = p.arch});
  return gpu::scan_cubin(cubin.cubin).tensor_ops;
}
#endif

}  // namespace tessel::cuda_test
