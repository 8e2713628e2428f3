// Shape suites (workloads/*.yaml): named lists of (operator file, def, size bindings) that tests,
// benchmarks and sweeps iterate over. Schema in workloads/README.md:
//
//   suite: seed_gemm                 # required, the suite's name
//   description: ...                 # optional
//   entries:                         # required, non-empty
//     - name: gemm_512x16x512        # required, unique in the suite
//       file: matmul.tsl             # required, relative to the YAML file's directory
//       def: matmul                  # optional when the file has one def
//       shape: {M: 512, N: 16, K: 512}   # required: every size parameter of the def that is not
//                                        # inferred (ir::InferredSize), nothing else
//       tags: [small]                # optional free-form labels
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessel::frontend {

struct SuiteEntry {
  std::string name;
  std::string file;  // path as resolved against the suite's directory
  std::string def;   // may be empty
  std::map<std::string, int64_t> shape;
  std::vector<std::string> tags;
};

struct Suite {
  std::string name;
  std::string description;
  std::vector<SuiteEntry> entries;
};

// Reads and validates the YAML structure (UserError naming the file, entry and key). It does not
// parse the .tsl files; check_suite does.
Suite load_suite(const std::string& path);
// Parses every entry's operator and checks that its shape binds exactly the def's size
// parameters, inferred ones optional and equal to their inferred value when given (UserError
// naming the entry otherwise).
void check_suite(const Suite& suite);

}  // namespace tessel::frontend
