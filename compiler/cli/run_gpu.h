// The GPU half of `tessel compile`, `tessel run` and `tessel bench gpu` (issue 7): the CUDA
// emitter's text for a compiled kernel, and its execution through tessel_gpu (NVRTC, driver API,
// timing harnesses, cuBLAS / cuDNN side by side). Built without CUDA, the run functions throw a
// UserError saying so; the emitter itself never needs CUDA.
#pragma once

#include "isa/base/error.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "compiler/emit_cuda/emit_cuda.h"
#include "compiler/pipeline.h"
#include "compiler/program/program.h"
#include "isa/base/npy.h"

namespace tessel::cli {

bool is_gpu_target(const Compilation& c);

// `--gpu-tiles` and `--pdl` of `tessel compile` / `tessel run` (GPU targets): a tile configuration
// instead of the emitter's first candidate (TcConfig::parse, the form --explain prints) and
// programmatic dependent launch (sm_90+). A value owned by the command that parses it.
// No GPU (or no GPU backend) where a command needs one: the CLI exits with status 2, at once.
class NoGpu : public UserError {
 public:
  using UserError::UserError;
};
// Whether a GPU can be used here; `why` says why not.
bool gpu_present(std::string* why);

struct GpuFlags {
  std::string tiles;
  bool pdl = false;
  std::vector<std::string> pdl_prefetch;  // CudaOptions::pdl_prefetch
  bool no_timing = false;                 // `tessel run --no-timing`: verify only
  bool library_output = false;            // `tessel run --verify library`: keep the library's output
  bool no_row_kernels = false;            // --no-row-kernels: row programs through the SIMT walk
  bool tf32 = false;                      // --tf32: f32 contractions on the TensorCores as TF32 (CudaOptions::tf32)
  int autotune = 0;                       // --autotune N: programs time each kernel's N best-ranked plans, run the fastest
};
// Adds the flags to `cmd`, filling `flags` (which must outlive the command's callback).
void add_gpu_flags(CLI::App* cmd, GpuFlags& flags);

// Emitter options for a compilation: the description's arch and machine model
// (isa::GpuMachine::from), tiles from the kernel IR when the user gave --tile, then `flags`.
emit_cuda::CudaOptions gpu_options(const Compilation& c, bool tile_given, const GpuFlags& flags = {});

// `tessel compile --target <gpu>.yaml -o k.cu`: the CUDA text; `explain` lines go to `explain_out`.
std::string compile_gpu_source(const Compilation& c, bool tile_given, const GpuFlags& flags, std::string* explain_out);

// The GPU plan space of a compilation: the tile policy's legal TensorCore plans, ranked (its best
// guess first, emit_cuda/tile_policy.h), as --tile texts; empty when the kernel runs as SIMT code.
// `flags` choose the kernel as the run does (--tf32: an f32 contraction's TF32 plans); its tiles are
// not read.
std::vector<std::string> gpu_plan_space(const Compilation& c, const GpuFlags& flags = {});

struct GpuRunResult {
  std::map<std::string, NpyArray> outputs;
  nlohmann::json report;  // device, kernel time in both harnesses, TFLOP/s, baseline and ratio
  std::string summary;    // lines printed by `tessel run`
  // The library's result for the same inputs (cuBLAS f32 [M, N] / cuDNN f16 NHWC) when the kernel
  // is a plain GEMM or NHWC convolution with no epilogue and timing ran or flags.library_output
  // asked for it: `library` names it, `library_tensor` is the output it stands for.
  std::optional<NpyArray> library_output;
  std::string library, library_tensor;
};

// Compiles, launches, downloads the outputs, times ours and the library baseline (when the kernel
// is a plain GEMM or an NHWC convolution).
GpuRunResult run_on_gpu(const Compilation& c, const std::map<std::string, NpyArray>& inputs, bool tile_given,
                        bool timing = true, const GpuFlags& flags = {});

// A program of several kernels (compiler/program/program.h) on the GPU: every kernel loaded, the
// tensors passed between kernels at their memory-plan offsets in one device arena, all kernels
// launched in order on one stream; timed as one CUDA graph (and on a stream), and each kernel
// alone in a graph for the per-kernel table. Outputs are the def's.
GpuRunResult run_program_on_gpu(const program::ProgramCompilation& p, const std::map<std::string, NpyArray>& inputs, bool timing,
                                const GpuFlags& flags);

// `tessel bench gpu`: seed GEMM table, 1024^3, 4096^3 and the seed convolution, ours (best of the
// tile policy's shortlist, emit_cuda::tc_shortlist, measured; `exhaustive`: of every candidate up
// to 40) vs cuBLAS / cuDNN in both harnesses. `source_dir` holds workloads/ and isa/ ("": the
// build's source tree when present, else the working directory).
nlohmann::json bench_gpu(const std::string& source_dir, bool exhaustive = false);

}  // namespace tessel::cli
