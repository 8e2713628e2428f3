// libFuzzer target for the memory-hierarchy loader (issue 17): any byte string either loads as a
// valid description or raises a UserError naming the place; what loads is described, compared with
// itself, and (NPU) turned into the simulator's machine model, so the derived figures are exercised
// too. A crash, an ASan report, an InternalError or a hang is a bug. Built by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "isa/base/error.h"
#include "isa/hierarchy.h"
#include "isa/hierarchy_report.h"
#include "isa/npu_machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessel;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const isa::Hierarchy h = isa::parse_hierarchy(text, "fuzz.yaml");
    (void)isa::describe_hierarchy(h);
    (void)isa::format_comparison(h, h, isa::compare_hierarchies(h, h));
    if (h.kind == isa::TargetKind::Npu) (void)isa::npu_machine(h);
  } catch (const UserError&) {
  }
  return 0;
}
