#include "compiler/cli/inputs.h"

#include <filesystem>
#include <iostream>

#include "isa/base/error.h"
#include "isa/base/npy.h"

namespace tessel::cli {

std::pair<std::string, std::string> name_path(const std::string& text, const char* flag) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw UserError(std::string(flag) + ": expected NAME=FILE.npy, got '" + text + "'");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

interp::Tensors operator_inputs(const ir::Function& f, const interp::Sizes& sizes, const std::vector<std::string>& given,
                                uint64_t seed, const std::string& command) {
  interp::Tensors inputs;
  for (const std::string& item : given) {
    auto [name, path] = name_path(item, "--input");
    const ir::Tensor* t = f.find_tensor(name);
    if (!t || t->kind != ir::TensorKind::Input) throw UserError("--input: '" + name + "' is not an input of '" + f.name + "'");
    if (inputs.count(name)) throw UserError("--input: '" + name + "' is given twice");
    const std::vector<int64_t> want = interp::tensor_shape(*t, sizes);
    // checked from the header, before the data is allocated
    NpyArray a = read_npy(path, [&](const NpyArray& header) {
      if (header.dtype != t->dtype)
        throw UserError(path + ": has dtype " + std::string(dtype_name(header.dtype)) + " but input '" + name + "' is " +
                        std::string(dtype_name(t->dtype)));
      if (header.shape != want) {
        NpyArray w;
        w.shape = want;
        throw UserError(path + ": has shape " + header.shape_string() + " but input '" + name + "' needs " + w.shape_string() +
                        " for the given sizes");
      }
    });
    inputs[name] = std::move(a);
  }
  const interp::Tensors random = interp::random_inputs(f, sizes, seed);
  for (const auto& [name, a] : random)
    if (!inputs.count(name)) {
      if (!given.empty()) std::cerr << command << ": input '" << name << "' is random (seed " << seed << ")\n";
      inputs[name] = a;
    }
  return inputs;
}

void save_tensors(const std::string& dir, const interp::Tensors& tensors, const char* flag) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(std::string(flag) + " " + dir + ": cannot create the directory (" + ec.message() + ")");
  for (const auto& [name, a] : tensors) write_npy(dir + "/" + name + ".npy", a);
}

}  // namespace tessel::cli
