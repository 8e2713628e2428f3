// The operator inputs a command runs on: given .npy files (`--input NAME=FILE.npy`, checked against
// the operator's dtype and shape at the given sizes), the others random and deterministic in the
// seed; `--save-inputs DIR` writes them all so a run can be reproduced (`--save-outputs DIR` the
// results). Shared by `eval`, `run` and `sim`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/interp/interpreter.h"

namespace tessel::cli {

// "NAME=FILE" split at the first '='; UserError naming `flag` otherwise.
std::pair<std::string, std::string> name_path(const std::string& text, const char* flag);

// Inputs of `f` at `sizes`: each `given` item read and checked (UserError naming the file and what
// differs), every other input random from `seed`; `command` prefixes the note that says which
// inputs are random when some were given.
interp::Tensors operator_inputs(const ir::Function& f, const interp::Sizes& sizes, const std::vector<std::string>& given,
                                uint64_t seed, const std::string& command);

// Writes every tensor as DIR/NAME.npy (`--save-inputs`, `--save-outputs`: `flag` names the option
// in a UserError when the directory cannot be made or a write fails).
void save_tensors(const std::string& dir, const interp::Tensors& tensors, const char* flag);

}  // namespace tessel::cli
