// Shared by the tests of the NPU's specialised vector mappings (window maxima and sums, group
// statistics): the forms a mapping takes, each compiled for davinci-910 and davinci-310 and
// verified against the reference interpreter, and a form it refuses, which the general lowering
// then runs (verified as well).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "npu_case.h"

namespace tessel::npu_test {

// A def of a workload file at a shape.
struct Form {
  const char* def;
  const char* shape;
};

// Each form of workloads/FILE on davinci-910 and davinci-310: a kernel note contains `note(def)`
// (the mapping took it) and naive and pruned syncs verify, exactly when `exact`.
inline void check_forms(const std::string& file, const std::vector<Form>& forms, bool exact,
                        const std::function<std::string(const std::string&)>& note) {
  for (const std::string& target : {kTarget, kTarget310})
    for (const Form& w : forms) {
      const std::string def = w.def, shape = w.shape;
      CAPTURE(target);
      CAPTURE(def);
      CAPTURE(shape);
      auto c = compile_case(file, def, shape, "", true, target);
      CHECK(notes_contain(c->kernel, note(def)));
      verified_cycles(*c, exact);
    }
}

// workloads/FILE's DEF at SHAPE on davinci-910, which the mapping whose notes contain `note` does
// not take: no such note, and the general lowering's program verifies (exactly when `exact`).
inline std::unique_ptr<Case> refused_case(const std::string& file, const std::string& def, const std::string& shape,
                                          const std::string& note, bool exact) {
  auto c = compile_case(file, def, shape);
  CHECK_FALSE(notes_contain(c->kernel, note));
  verified_cycles(*c, exact);
  return c;
}

}  // namespace tessel::npu_test
