// The operator inputs a command runs on: given .npy files (`--input NAME=FILE.npy`, checked against
// the operator's dtype and shape at the given sizes), the others random and deterministic in the
// seed; `--save-inputs DIR` writes them all so a run can be reproduced. Shared by `eval` and `run`.
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

// Writes every input as DIR/NAME.npy (UserError naming the path when a write fails).
void save_inputs(const std::string& dir, const interp::Tensors& inputs);

}  // namespace tessel::cli
