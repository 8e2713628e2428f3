// The operator inputs a command runs on: given .npy files (`--input NAME=FILE.npy`, checked against
// the operator's dtype and shape at the given sizes), the others random and deterministic in the
// seed; `--save-inputs DIR` writes them all so a run can be reproduced (`--save-outputs DIR` the
// results). Shared by `eval`, `run` and `sim`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/interp/interpreter.h"
#include "isa/base/npy.h"

namespace tessel::cli {

// "NAME=FILE" split at the first '='; UserError naming `flag` otherwise.
std::pair<std::string, std::string> name_path(const std::string& text, const char* flag);

// `--input-dir DIR`: "NAME=DIR/NAME.npy" for every input NAME of `f` with such a file that `given` does
// not name (an explicit --input wins); UserError when DIR is not a directory.
std::vector<std::string> input_dir_items(const ir::Function& f, const std::string& dir, const std::vector<std::string>& given);

// A tensor file: .npy, or an ONNX TensorProto (.pb, where tessel is built with ONNX); `want` the
// dtype the caller holds it in (a .pb's uint16 elements are an f16/bf16 `want`'s bit patterns).
NpyArray read_tensor(const std::string& path, std::optional<DType> want = std::nullopt);

// `--expect NAME=FILE`: element-by-element comparison of an output with an expected tensor; an
// element matches when |expected - actual| <= abs_tol + rel_tol * |expected| (NaN matches NaN).
struct ExpectCheck {
  std::string tensor, file;
  bool ok = true;
  int64_t mismatches = 0, elements = 0;
  double max_abs_err = 0, abs_tol = 0, rel_tol = 0;
  std::string worst;  // "Y[1, 2]: expected 0.5, got 0.75 (abs err 0.25)" or a shape difference
};
ExpectCheck check_expected(const std::string& name, const std::string& file, const NpyArray& actual, double abs_tol, double rel_tol);

// Inputs of `f` at `sizes`: each `given` item read and checked (UserError naming the file and what
// differs), every other input random from `seed`; `command` prefixes the note that says which
// inputs are random when some were given.
interp::Tensors operator_inputs(const ir::Function& f, const interp::Sizes& sizes, const std::vector<std::string>& given,
                                uint64_t seed, const std::string& command);

// Writes every tensor as DIR/NAME.npy (`--save-inputs`, `--save-outputs`: `flag` names the option
// in a UserError when the directory cannot be made or a write fails).
void save_tensors(const std::string& dir, const interp::Tensors& tensors, const char* flag);

}  // namespace tessel::cli
