#include "gpu_backend/nvrtc_compile.h"

#include <nvrtc.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpu_backend/error.h"
#include "gpu_backend/nvrtc_info.h"
#include "isa/base/error.h"

#ifndef TESSEL_CUDA_INCLUDE_DIR
#error "TESSEL_CUDA_INCLUDE_DIR must be set by gpu_backend/CMakeLists.txt"
#endif

namespace tessel::gpu {
namespace fs = std::filesystem;
namespace {

// Two independent 64-bit FNV-1a streams: a 128-bit key, plenty against accidental collisions.
struct Hasher {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void add(const std::string& s) {
    for (unsigned char c : s) {
      a = (a ^ c) * 0x100000001b3ull;
      b = (b ^ c ^ 0x5a) * 0x100000001b3ull;
    }
    // A length marker keeps ("ab","c") and ("a","bc") apart.
    const std::string len = "|" + std::to_string(s.size()) + "|";
    for (unsigned char c : len) {
      a = (a ^ c) * 0x100000001b3ull;
      b = (b ^ c ^ 0x5a) * 0x100000001b3ull;
    }
  }
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
    return buf;
  }
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool read_file(const fs::path& path, std::vector<uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !out.empty();
}

// Write then rename, so a concurrent reader never sees half a file. Failures only cost a cache miss.
void write_file_atomically(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) return;
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

std::string program_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

struct ProgramGuard {
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

}  // namespace

int parse_sm_arch(const std::string& arch) {
  const auto bad = [&] {
    return UserError("GPU architecture '" + arch + "' is not of the form sm_XX (e.g. sm_75, sm_90): set gpu.arch in the hierarchy description");
  };
  if (arch.size() < 5 || arch.rfind("sm_", 0) != 0) throw bad();
  int value = 0;
  for (size_t i = 3; i < arch.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(arch[i]))) {
      if (i == arch.size() - 1 && (arch[i] == 'a' || arch[i] == 'f') && i > 3) break;  // sm_90a
      throw bad();
    }
    value = value * 10 + (arch[i] - '0');
  }
  return value;
}

std::string cuda_include_directory() {
  const std::string override_dir = env("TESSEL_CUDA_INCLUDE_DIR");
  return override_dir.empty() ? std::string(TESSEL_CUDA_INCLUDE_DIR) : override_dir;
}

std::string cache_directory() {
  fs::path base;
  if (!env("TESSEL_CACHE_DIR").empty()) {
    base = env("TESSEL_CACHE_DIR");
  } else if (!env("XDG_CACHE_HOME").empty()) {
    base = fs::path(env("XDG_CACHE_HOME")) / "tessel";
  } else if (!env("HOME").empty()) {
    base = fs::path(env("HOME")) / ".cache" / "tessel";
  } else {
    base = fs::temp_directory_path() / "tessel-cache";
  }
  return base.string();
}

std::vector<std::string> default_nvrtc_options(const std::string& arch) {
  parse_sm_arch(arch);
  return {"--gpu-architecture=" + arch, "--std=c++17", "-I" + cuda_include_directory()};
}

CompiledCubin compile_to_cubin(const std::string& source, const CompileOptions& options) {
  std::vector<std::string> all = default_nvrtc_options(options.arch);
  all.insert(all.end(), options.options.begin(), options.options.end());

  Hasher h;
  h.add(source);
  h.add(options.arch);
  for (const std::string& o : all) h.add(o);
  h.add(nvrtc_version());
  CompiledCubin result;
  result.cache_key = h.hex();
  const fs::path cached = fs::path(cache_directory()) / "nvrtc" / (result.cache_key + "." + options.arch + ".cubin");
  fs::path cached_log = cached;
  cached_log.replace_extension(".log");
  if (options.use_cache && read_file(cached, result.cubin)) {
    result.from_cache = true;
    std::vector<uint8_t> log;  // the warnings of the compile that filled the cache (ptxas serialisation notes)
    if (read_file(cached_log, log)) result.log.assign(log.begin(), log.end());
    return result;
  }

  ProgramGuard guard;
  TESSEL_NVRTC(nvrtcCreateProgram(&guard.prog, source.c_str(), options.program_name.c_str(), 0, nullptr, nullptr));
  std::vector<const char*> argv;
  for (const std::string& o : all) argv.push_back(o.c_str());
  const nvrtcResult compiled = nvrtcCompileProgram(guard.prog, int(argv.size()), argv.data());
  result.log = program_log(guard.prog);
  if (compiled == NVRTC_ERROR_INVALID_OPTION) {
    std::ostringstream msg;
    msg << "NVRTC " << nvrtc_version() << " rejected the options for " << options.program_name << ":";
    for (const std::string& o : all) msg << " " << o;
    if (!result.log.empty()) msg << "\n" << result.log;
    throw UserError(msg.str());
  }
  if (compiled != NVRTC_SUCCESS) {
    throw CompileError("NVRTC " + nvrtc_version() + " could not compile " + options.program_name + " for " +
                           options.arch + " (" + nvrtcGetErrorString(compiled) + "):\n" + result.log,
                       result.log);
  }
  size_t size = 0;
  TESSEL_NVRTC(nvrtcGetCUBINSize(guard.prog, &size));
  TESSEL_CHECK(size > 0, "NVRTC produced an empty CUBIN for --gpu-architecture=" + options.arch);
  result.cubin.resize(size);
  TESSEL_NVRTC(nvrtcGetCUBIN(guard.prog, reinterpret_cast<char*>(result.cubin.data())));
  if (options.use_cache) {  // the log first: a cached cubin always has its log beside it
    write_file_atomically(cached_log, std::vector<uint8_t>(result.log.begin(), result.log.end()));
    write_file_atomically(cached, result.cubin);
  }
  return result;
}

}  // namespace tessel::gpu
