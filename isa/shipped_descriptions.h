// The hardware descriptions tessel ships (isa/targets/*.yaml) and what a target name means.
//
// `--target` takes "c", a path to a description, or the name of a shipped one: `--target sm90` is
// isa/targets/sm90.yaml, as a TVM or Triton user names a target rather than a file. The shipped
// files are found where tessel's tree is: under $TESSEL_SOURCE_DIR, the current directory or one of
// its parents, the executable's directory or one of its parents, or the source tree tessel was built
// from (TESSEL_SOURCE_DIR at build time), in that order.
#pragma once

#include <string>
#include <vector>

namespace tessel::isa {

// The path of `rel` (a path relative to tessel's source tree, e.g. "isa/targets/davinci-910.yaml")
// in the first of the places above that has it; "" when none does.
std::string find_shipped_file(const std::string& rel);

// The path of the shipped description `name` ("davinci-910"): find_shipped_file's answer, else the
// path in the source tree tessel was built from (the loader then says it cannot open that path).
// For defaults, which must not throw while the command line is being set up.
std::string shipped_description_path(const std::string& name);

// The names of the shipped descriptions (file stems of isa/targets/*.yaml, sorted); empty when the
// tree is not found.
std::vector<std::string> shipped_description_names();

// A --target value as the loader takes it: "c" (when `allow_c`) and any existing regular file
// unchanged; a bare name (no '/', no .yaml or .yml ending) of a shipped description becomes its path
// (a directory of that name does not hide it). A bare name that is neither is a UserError that
// begins with `option` (the flag given: "--target", "--run-on") and names the shipped descriptions
// ("c" among them only when `allow_c`); anything else is returned as given (the loader then says why
// it cannot open it).
std::string resolve_target(const std::string& target, const std::string& option = "--target", bool allow_c = true);

}  // namespace tessel::isa
