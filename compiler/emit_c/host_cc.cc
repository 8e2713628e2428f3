#include "compiler/emit_c/host_cc.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "isa/base/error.h"

namespace tessel::emit_c {

SharedObject::SharedObject(const std::string& source) {
  char tmpl[] = "/tmp/tessel-c-XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (!d) throw UserError("--target c: cannot create a temporary directory under /tmp");
  dir_ = d;
  const std::string c = dir_ + "/kernel.c", so = dir_ + "/kernel.so", log = dir_ + "/cc.log";
  std::ofstream(c) << source;
  const char* env = std::getenv("TESSEL_CC");
  std::string cc = env && *env ? env : "cc";
  std::string cmd = cc + " -O1 -ffp-contract=off -fwrapv -shared -fPIC -o " + so + " " + c + " -lm > " + log + " 2>&1";
  auto t0 = std::chrono::steady_clock::now();
  int rc = std::system(cmd.c_str());
  compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0) {
    std::stringstream ss;
    ss << std::ifstream(log).rdbuf();
    throw UserError("--target c: the host C compiler failed (" + cmd + "); source kept in " + c + ":\n" +
                    ss.str().substr(0, 4000));
  }
  handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) throw UserError(std::string("--target c: dlopen failed: ") + dlerror());
}

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
  std::error_code ec;
  if (!std::getenv("TESSEL_KEEP_C")) std::filesystem::remove_all(dir_, ec);
}

SharedObject::KernelFn SharedObject::symbol(const std::string& name) const {
  void* p = dlsym(handle_, name.c_str());
  TESSEL_CHECK(p, "emit_c: symbol " + name + " missing from the compiled kernel");
  return reinterpret_cast<KernelFn>(p);
}

std::map<std::string, NpyArray> run_kernel(SharedObject::KernelFn fn, const kernel::Kernel& k,
                                           const std::map<std::string, NpyArray>& inputs) {
  std::map<std::string, NpyArray> outputs;
  std::vector<NpyArray> inputs_copy;
  std::vector<void*> args;
  inputs_copy.reserve(k.tensors.size());
  for (const auto& t : k.tensors) {
    if (t.temporary) continue;
    if (t.kind == ir::TensorKind::Input) {
      auto it = inputs.find(t.name);
      if (it == inputs.end()) throw UserError("missing input tensor " + t.name);
      if ((it->second.shape != t.shape && it->second.shape != t.user_shape()) || it->second.dtype != t.dtype)
        throw UserError("input " + t.name + " has shape " + it->second.shape_string() + " but the kernel expects another shape or dtype");
      inputs_copy.push_back(it->second);
      args.push_back(inputs_copy.back().data.data());
    } else {
      NpyArray a;
      a.dtype = t.dtype;
      a.shape = t.user_shape();
      a.data.assign(size_t(a.element_count()) * dtype_bytes(t.dtype), 0);
      outputs[t.name] = std::move(a);
      args.push_back(nullptr);
    }
  }
  size_t i = 0;
  for (const auto& t : k.tensors) {
    if (t.temporary) continue;
    if (t.kind != ir::TensorKind::Input) args[i] = outputs[t.name].data.data();
    ++i;
  }
  fn(args.data());
  return outputs;
}

}  // namespace tessel::emit_c
