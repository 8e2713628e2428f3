// Shared by the CUDA emitter tests: a workload's def compiled for a GPU description (paths relative
// to the repository root, where ctest runs, so the binaries also run on a GPU machine), and the
// text checks the tests make of the generated program and its --explain lines.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/frontend/frontend.h"
#include "compiler/pipeline.h"

namespace tessel::cuda_test {

inline std::string target(const std::string& arch) { return "isa/targets/" + arch + ".yaml"; }

struct Compiled {
  frontend::Module module;
  std::unique_ptr<Compilation> c;
};

// def `def` of workloads/`file` at `sizes` for the description of `arch`
inline Compiled compile_for(const std::string& file, const std::string& def, const std::map<std::string, int64_t>& sizes,
                            const std::string& arch = "sm90") {
  Compiled r;
  r.module = frontend::load_module("workloads/" + file);
  CompileOptions o;
  o.target = target(arch);
  o.sizes = sizes;
  r.c = compile(frontend::select_function(r.module, def), o);
  return r;
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace tessel::cuda_test
