// Host-compiler driver for the C emitter: compiles C source into a shared object with the host C
// compiler (`cc -O1 -ffp-contract=off -fwrapv -shared -fPIC`, overridable with TESSEL_CC), loads it with
// dlopen and calls kernels on NpyArrays. Several kernels can share one shared object (one compiler
// run), which keeps tests fast.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/kernel/kernel_ir.h"
#include "isa/base/npy.h"

namespace tessel::emit_c {

class SharedObject {
 public:
  // Compiles `source`; UserError with the compiler's output on failure.
  explicit SharedObject(const std::string& source);
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  using KernelFn = void (*)(void**);
  KernelFn symbol(const std::string& name) const;
  double compile_ms() const { return compile_ms_; }

 private:
  std::string dir_;
  void* handle_ = nullptr;
  double compile_ms_ = 0;
};

// Calls the kernel: inputs by name; returns the kernel's output tensors (zero-initialised before).
std::map<std::string, NpyArray> run_kernel(SharedObject::KernelFn fn, const kernel::Kernel& k,
                                           const std::map<std::string, NpyArray>& inputs);

}  // namespace tessel::emit_c
