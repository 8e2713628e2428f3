#include "compiler/cli/inputs.h"

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>
#include <iostream>

#include "compiler/interp/compare.h"
#include "isa/base/error.h"
#include "isa/base/npy.h"
#ifdef TESSEL_HAVE_ONNX
#include "compiler/onnx/tensor_proto.h"
#endif

namespace tessel::cli {

std::pair<std::string, std::string> name_path(const std::string& text, const char* flag) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw UserError(std::string(flag) + ": expected NAME=FILE, got '" + text + "'");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

namespace {

bool is_tensor_proto(const std::string& path) { return path.size() > 3 && path.compare(path.size() - 3, 3, ".pb") == 0; }

}  // namespace

NpyArray read_tensor(const std::string& path, std::optional<DType> want) {
  if (!is_tensor_proto(path)) return read_npy(path);
#ifdef TESSEL_HAVE_ONNX
  return onnx_import::read_tensor_file(path, want);
#else
  (void)want;
  throw UserError(path + ": ONNX tensors (.pb) need tessel built with ONNX (apt install libonnx-dev libprotobuf-dev)");
#endif
}

std::vector<std::string> input_dir_items(const ir::Function& f, const std::string& dir, const std::vector<std::string>& given) {
  if (!std::filesystem::is_directory(dir)) throw UserError("--input-dir " + dir + ": not a directory");
  std::set<std::string> named;
  for (const auto& g : given) named.insert(name_path(g, "--input").first);
  std::vector<std::string> items;
  for (const auto& t : f.tensors) {
    if (t.kind != ir::TensorKind::Input || named.count(t.name)) continue;
    const std::string path = dir + "/" + t.name + ".npy";
    if (std::filesystem::exists(path)) items.push_back(t.name + "=" + path);
  }
  return items;
}

ExpectCheck check_expected(const std::string& name, const std::string& file, const NpyArray& actual, double abs_tol, double rel_tol) {
  ExpectCheck c{name, file};
  c.abs_tol = abs_tol;
  c.rel_tol = rel_tol;
  const NpyArray e = read_tensor(file, actual.dtype);
  c.elements = e.element_count();
  if (e.shape != actual.shape) {
    c.ok = false;
    c.mismatches = c.elements;
    c.worst = name + ": expected shape " + e.shape_string() + ", got " + actual.shape_string();
    return c;
  }
  double worst_excess = -1;
  int64_t worst = -1;
  for (int64_t i = 0; i < c.elements; ++i) {
    const double x = interp::element_as_double(e, i), y = interp::element_as_double(actual, i);
    if (std::isnan(x) && std::isnan(y)) continue;
    const double err = x == y ? 0 : std::fabs(x - y);
    const bool bad = std::isnan(err) || err > abs_tol + rel_tol * std::fabs(x);
    if (!std::isnan(err)) c.max_abs_err = std::max(c.max_abs_err, err);
    const double excess = std::isnan(err) ? INFINITY : err - (abs_tol + rel_tol * std::fabs(x));
    if (bad) ++c.mismatches;
    if (excess > worst_excess || worst < 0) {
      worst_excess = excess;
      worst = i;
    }
  }
  c.ok = c.mismatches == 0;
  if (worst >= 0) {
    std::string pos;
    int64_t r = worst;
    std::vector<int64_t> idx(e.shape.size());
    for (size_t k = e.shape.size(); k-- > 0;) {
      idx[k] = r % e.shape[k];
      r /= e.shape[k];
    }
    for (size_t k = 0; k < idx.size(); ++k) pos += (k ? ", " : "") + std::to_string(idx[k]);
    const double x = interp::element_as_double(e, worst), y = interp::element_as_double(actual, worst);
    std::ostringstream os;
    os.precision(9);
    os << name << "[" << pos << "]: expected " << x << ", got " << y << " (abs err " << std::fabs(x - y) << ")";
    c.worst = os.str();
  }
  return c;
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
    auto check = [&](const NpyArray& header) {
      if (header.dtype != t->dtype)
        throw UserError(path + ": has dtype " + std::string(dtype_name(header.dtype)) + " but input '" + name + "' is " +
                        std::string(dtype_name(t->dtype)));
      if (header.shape != want) {
        NpyArray w;
        w.shape = want;
        throw UserError(path + ": has shape " + header.shape_string() + " but input '" + name + "' needs " + w.shape_string() +
                        " for the given sizes");
      }
    };
    NpyArray a = is_tensor_proto(path) ? read_tensor(path, t->dtype) : read_npy(path, check);
    check(a);
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
