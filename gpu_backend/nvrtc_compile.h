// NVRTC: CUDA C++ source text -> CUBIN for one real architecture, with an on-disk cache.
//
// The cache key hashes the source, the architecture, the options and the NVRTC version, so a
// changed toolkit or flag never returns a stale binary. The cache lives in $TESSEL_CACHE_DIR, else
// $XDG_CACHE_HOME/tessel, else ~/.cache/tessel (one file per key under nvrtc/). Kernels must be
// declared extern "C" so their names are the ones given to Module::function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel::gpu {

struct CompileOptions {
  std::string arch;                      // "sm_75", "sm_90": the hierarchy description's gpu.arch
  std::vector<std::string> options;      // extra NVRTC options ("-DTILE=64", "--use_fast_math")
  std::string program_name = "tessel_kernel.cu";  // shown in the compile log
  bool use_cache = true;
};

struct CompiledCubin {
  std::vector<uint8_t> cubin;
  std::string log;          // NVRTC's log (warnings), empty when none; kept beside the cached cubin
  bool from_cache = false;
  std::string cache_key;    // hex digest
};

// Throws CompileError (with NVRTC's log in the message) when the source does not compile, UserError
// for an architecture NVRTC does not know, GpuError when NVRTC itself fails.
CompiledCubin compile_to_cubin(const std::string& source, const CompileOptions& options);

// The options compile_to_cubin passes to NVRTC before options.options (architecture, C++ standard,
// the CUDA include directory so that <mma.h> and <cuda_fp16.h> resolve).
std::vector<std::string> default_nvrtc_options(const std::string& arch);

// "sm_90" -> 90; throws UserError naming the expected form for anything else.
int parse_sm_arch(const std::string& arch);

// Where compiled CUBINs are cached (created on first use).
std::string cache_directory();

// The directory given to NVRTC as -I: $TESSEL_CUDA_INCLUDE_DIR, else the toolkit's include
// directory found at configure time.
std::string cuda_include_directory();

}  // namespace tessel::gpu
